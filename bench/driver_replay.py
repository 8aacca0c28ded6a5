"""Where the Dask driver's memory goes, replayed without the cluster (issue 32).

    bench/driver_replay.py capture OUT.pkl -- compare BASE HEAD --layout ranks --scheduler local:2 ...
    bench/driver_replay.py replay OUT.pkl [--before DIR]

`capture` runs one compare of rank folders on a cluster (minutes at 512 files a side) and
pickles what its driver was handed: each run's scans (the input of `rankunit.plan_run`), each
`reduce_runs` call's tasks and every file's result in the order it came back. `replay` feeds
them to the driver's own code in this process, file by file as they came, and prints a table of
RSS before -> after and the peak (VmHWM, reset at each stage's start) of each stage: the
driver's work alone, in seconds, with no worker or scheduler on the machine. `--before DIR`
replays with an older package (`git archive REV tracediff | tar -x -C DIR`, its .so files
copied in) for an A/B of the same inputs. Linux only (/proc/self/status, clear_refs).
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) // 1024
    return out


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def capture(out: str, argv: list[str]) -> int:
    import tracediff.cli
    from tracediff.engine.pipeline import rankunit

    sink = open(out, "wb")  # noqa: SIM115 (open until the compare ends)
    plan_run, reduce_runs = rankunit.plan_run, rankunit.reduce_runs

    def planned(files: Any, scans: Any, source: Any, **kw: Any) -> Any:
        pickle.dump(("plan", files, scans, source, kw), sink, protocol=5)
        return plan_run(files, scans, source, **kw)

    def reduced(tasks: Any, run_map: Any) -> Any:
        pickle.dump(("tasks", tasks), sink, protocol=5)

        def recorded(fn: Any, items: Any, sides: Any, verb: str, each: Any = None) -> Any:
            def kept(i: int, v: Any) -> Any:
                pickle.dump(("part", i, v), sink, protocol=5)
                return v if each is None else each(i, v)

            return run_map(fn, items, sides, verb, kept)

        return reduce_runs(tasks, recorded)

    rankunit.plan_run, rankunit.reduce_runs = planned, reduced  # type: ignore[assignment]
    with open(os.devnull, "w") as devnull:
        sys.stdout = devnull
        rc = tracediff.cli.main(argv)
        sys.stdout = sys.__stdout__
    sink.close()
    print(f"exit {rc}; {Path(out).stat().st_size / 2**20:.0f} MiB in {out}")
    return rc


def replay(path: str) -> None:
    import tracediff.cli  # noqa: F401 (its allocator settings, before polars loads)
    from tracediff.engine.pipeline import rankunit

    rows: list[tuple[str, int, int, int]] = []
    f = open(path, "rb")  # noqa: SIM115

    def rec() -> Any:
        try:
            return pickle.load(f)
        except EOFError:
            return None

    def stage(name: str, fn: Any) -> Any:
        s = _status()
        _reset_peak()
        got = fn()
        e = _status()
        rows.append((name, s["VmRSS"], e["VmRSS"], e["VmHWM"]))
        return got

    nxt = rec()
    runs = []
    while nxt is not None and nxt[0] == "plan":
        _, files, scans, source, kw = nxt
        plan = partial(rankunit.plan_run, files, scans, source, **kw)
        runs.append(stage(f"plan_run ({len(files)} files)", plan))
        del plan
        del scans
        nxt = rec()
    while nxt is not None and nxt[0] == "tasks":
        tasks = nxt[1]
        nxt = rec()

        def fed(fn: Any, items: Any, sides: Any, verb: str, each: Any = None) -> Any:
            nonlocal nxt
            out: list[Any] = [None] * len(items)
            for _ in items:
                assert nxt is not None and nxt[0] == "part"
                _, i, v = nxt
                out[i] = v if each is None else each(i, v)
                nxt = rec()
            return out

        stage(f"reduce_runs ({len(tasks)} run)", partial(rankunit.reduce_runs, tasks, fed))
    print("| stage | RSS MiB before -> after | peak MiB |")
    print("|---|---|---:|")
    for name, a, b, peak in rows:
        print(f"| {name} | {a} -> {b} | {peak} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["capture", "replay"])
    ap.add_argument("pickle")
    ap.add_argument("--before", help="replay with the package in this folder")
    ap.add_argument("argv", nargs="*", help="capture: the tracediff arguments, after --")
    a = ap.parse_args()
    if a.mode == "capture":
        return capture(a.pickle, a.argv)
    if a.before:  # a child whose path puts the older package first
        env = dict(os.environ, PYTHONPATH=a.before)
        return subprocess.call([sys.executable, str(HERE), "replay", a.pickle], env=env, cwd="/")
    replay(a.pickle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
