"""What launch-stack resolution (issue 19) adds to a Kineto parse: stacks on vs off, interleaved.

    bench/kineto_stacks.py [--before REV] [--trace PATH ...] [--generated N] [--rounds 7]

Each round parses every trace once per side, each in a fresh child process (a tiny trace read
first, so polars' thread pools are not counted), the order of the sides rotating from round to
round: this VM's speed drifts up to 3x within minutes, so only interleaved runs compare. A side
is timed by the CPU seconds of read_kineto in the child (all its threads: the scanner's second
one and polars' pools), which follow the machine's load less than wall time does. No segment
worker starts (segments.WORKERS = 0: every segment read in the child, as the load gate has it
above load 4 on 2 CPUs): a worker costs ~1.5 CPU-s more, and whether it starts follows the load
average child by child, which made one side's rounds incomparable near load 4. --worker lets
the gate decide (its CPU counted too).

Sides: `off` (this checkout with TRACEDIFF_KINETO_STACKS=0: `python_function` events are not
read), `on` (this checkout), and with --before REV `before` (the package at git revision REV,
extracted into a temp folder, its C modules built there from its own sources with gcc -O2 as
pyproject builds them; its stacks are on). The
table gives min and median CPU seconds per side and what stacks add over `off`: the median and
the range over the rounds of each round's ratio to the same round's `off` (the two ran next to
each other, so the machine's drift between rounds cancels). Goal: at most +25 % on the SGLang
prefill-decode trace and on a generated 1 M-kernel trace with stacks (--generated 1000000:
bench/gen_kineto_stacks.py, written once to /tmp/tracediff-bench/, ~0.9 GB).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from revision import extract  # noqa: E402

DATA = ROOT / "tests" / "data" / "kineto"
DEFAULT = [DATA / "sglang_Qwen3-8B_prefilldecode.json.gz", DATA / "sglang_Qwen3-8B_decode.json.gz"]
WORK = Path("/tmp/tracediff-bench")
CHILD = """
import resource, sys, time
from tracediff.parse.kineto import read_kineto, segments
if sys.argv[3] == "0":
    segments.WORKERS = 0
def children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
read_kineto(sys.argv[2])
t, c = time.process_time(), children()
read_kineto(sys.argv[1])
print(time.process_time() - t + children() - c)
"""


def _time(tree: Path, trace: Path, stacks: bool, worker: bool) -> float:
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
    if not stacks:
        env["TRACEDIFF_KINETO_STACKS"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(trace), str(DATA / "base.json.gz"), str(int(worker))],
        capture_output=True, text=True, check=True, env=env, cwd=tree,
    )  # fmt: skip
    return float(out.stdout.split()[-1])


def _generated(n: int) -> Path:
    out = WORK / f"kineto_stacks_{n}.json"
    if not out.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        sys.path.insert(0, str(ROOT / "bench"))
        from gen_kineto_stacks import write

        part = out.with_suffix(".part")
        write(part, n)
        os.replace(part, out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", help="git revision to compare with (its stacks on)")
    ap.add_argument("--trace", type=Path, action="append")
    ap.add_argument("--generated", type=int, action="append", help="kernels of a generated trace")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--worker", action="store_true", help="let a segment worker start (the load gate decides)"
    )
    a = ap.parse_args()
    traces = [t.resolve() for t in (a.trace or ([] if a.generated else DEFAULT))]
    traces += [_generated(n) for n in a.generated or []]
    with tempfile.TemporaryDirectory(prefix="td-stacks-bench-") as tmp:
        sides: list[tuple[str, Path, bool]] = [("off", ROOT, False), ("on", ROOT, True)]
        if a.before:
            extract(a.before, Path(tmp))
            sides.append(("before", Path(tmp), True))
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(a.rounds):
            for trace in traces:
                k = r % len(sides)
                for side, tree, stacks in sides[k:] + sides[:k]:
                    t = _time(tree, trace, stacks, a.worker)
                    times.setdefault((trace.name, side), []).append(t)
    load = os.getloadavg()[0]
    print(f"{a.rounds} interleaved rounds, CPU s of read_kineto per child (and its worker: "
          f"{'the load gate decides' if a.worker else 'none'}); load (1 min) {load:.1f}")  # fmt: skip
    names = [s[0] for s in sides]
    head = " | ".join(f"{n} min / med s" for n in names)
    adds = " | ".join(f"{n} adds: med (range) of rounds" for n in names[1:])
    print(f"| trace | {head} | {adds} |")
    print("|---" * (1 + 2 * len(names) - 1) + "|")
    for trace in traces:
        t = {n: times[trace.name, n] for n in names}
        row = " | ".join(f"{min(t[n]):.3f} / {statistics.median(t[n]):.3f}" for n in names)
        for n in names[1:]:
            # each round's side against the same round's `off` (run next to it): drift between
            # rounds cancels
            r = [(x / y - 1) * 100 for x, y in zip(t[n], t["off"], strict=True)]
            row += f" | {statistics.median(r):+.1f} % ({min(r):+.1f} .. {max(r):+.1f})"
        print(f"| {trace.name} | {row} |")


if __name__ == "__main__":
    main()
