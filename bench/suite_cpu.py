"""Where the test suite's CPU goes: a table from a run with TD_TEST_CALL_LOG set.

    TD_TEST_CALL_LOG=/tmp/calls.jsonl .venv/bin/pytest -n 3 --dist loadfile -p no:cacheprovider tests
    .venv/bin/python bench/suite_cpu.py /tmp/calls.jsonl [--top 30]

Per test module: CPU seconds in the test process itself ("self": in-process engine runs, the TUI,
fixtures), in the processes it waited for ("children": git, fresh CLI processes, Dask clusters,
chromium), and in the forked CLI calls (tests/support/cli.py: each call's own CPU and that of the
processes it waited for, such as nsys's front end and the workload). Not counted there: processes
that no test waits for (nsys's daemon and the workload it runs, ~0.8 CPU-s a capture). With
TD_TEST_CGROUP=/sys/fs/cgroup/cpuacct/NAME as well (root, cgroup v1: tests/conftest.py), "tree" is
all the CPU of each test's processes, those too, and "unseen" what the other columns miss.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    by_mod: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_cmd: dict[str, list[float]] = defaultdict(list)
    fresh: list[str] = []
    for line in args.log.read_text().splitlines():
        e = json.loads(line)
        mod = e["test"].split("::")[0] or "(outside a test)"
        by_mod[mod][e["kind"]] += e["cpu"]
        if e["kind"] == "call":
            by_cmd[e["what"]].append(e["cpu"])
        if e["kind"] == "fresh":  # a call whose load-time environment differs from the server's
            fresh.append(f"{e['test']}: {e['what']}")
    kinds = ("self", "children", "call")
    total = {k: sum(m[k] for m in by_mod.values()) for k in (*kinds, "tree")}
    seen = sum(total[k] for k in kinds)
    print(
        f"suite CPU-s: self {total['self']:.0f}, children {total['children']:.0f}, "
        f"CLI calls {total['call']:.0f}, all {seen:.0f}"
        + (
            f", tree {total['tree']:.0f} (unseen {total['tree'] - seen:.0f})"
            if total["tree"]
            else ""
        )
    )
    print(
        f"\n{'module':<56} {'self':>6} {'kids':>6} {'calls':>6} {'all':>6} {'tree':>6} {'unseen':>6}"
    )

    def weight(k: dict[str, float]) -> float:
        return k["tree"] or sum(k[x] for x in kinds)

    for mod, k in sorted(by_mod.items(), key=lambda kv: -weight(kv[1]))[: args.top]:
        all_ = sum(k[x] for x in kinds)
        tree = f"{k['tree']:6.1f} {k['tree'] - all_:6.1f}" if k["tree"] else f"{'-':>6} {'-':>6}"
        print(
            f"{mod:<56} {k['self']:6.1f} {k['children']:6.1f} {k['call']:6.1f} {all_:6.1f} {tree}"
        )
    print(f"\n{'command':<12} {'calls':>6} {'CPU-s':>8} {'median':>7}")
    for cmd, cpus in sorted(by_cmd.items(), key=lambda kv: -sum(kv[1])):
        med = sorted(cpus)[len(cpus) // 2]
        print(f"{cmd:<12} {len(cpus):6d} {sum(cpus):8.1f} {med:7.2f}")
    print(f"\n{len(fresh)} calls ran as fresh processes (their CPU is in 'kids'):")
    for line in fresh[: args.top]:
        print(f"  {line}")


if __name__ == "__main__":
    main()
