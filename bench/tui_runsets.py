"""The TUI on a big run-set pair: start time and memory, this tree against another (issue 21).

    .venv/bin/python bench/tui_runsets.py [--old DIR] [--repeat 3] [--files 4] [--gpus 8]
                                          [--cycles 300] [--kernels 40] [--size 120x40]

Input (built once into --work, not timed): `--files` generated runs a side (tests/support/gen_nsys.py via
bench/dask_runs.py build: `--gpus` ranks, all-reduces, head with a straggler and a slower
collective), as run files. Each measurement is a fresh child process: it compares the run sets
in-process (timed, the same work in both trees), then starts the app headless (Pilot,
`app.run_test()`, `--size`) and waits until the timeline is drawn with its events (the event
workers done and a frame painted with lanes): "TUI start" is that wait. Then `g` three times
(the GPU filter on GPU 1) and `right` eight times (the next block of cycles), each until drawn.
RSS: the process's resident set after the compare and once the timeline is drawn (VmRSS), and
its peak (ru_maxrss). `--old DIR`: another tree (e.g. `git archive COMMIT | tar -x -C DIR`, the
two C modules copied in) measured the same way, interleaved with this one, `--repeat` rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def vm_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(base: Path, head: Path, size: tuple[int, int]) -> dict[str, float]:
    """One measurement, in this process (the tree is whatever `tracediff` imports)."""
    import asyncio

    from tracediff.engine.compare import compare
    from tracediff.parse import load
    from tracediff.parse.sides import resolve
    from tracediff.tui.app import MainScreen, TracediffApp

    out: dict[str, float] = {}
    t = time.perf_counter()
    sides = [[load(p) for p in resolve(d).runs] for d in (base, head)]
    c = compare(sides[0], sides[1], n_boot=200)
    out["compare_s"] = time.perf_counter() - t
    out["rss_compare_mib"] = vm_rss_mib()

    async def drawn(pilot) -> MainScreen:  # noqa: ANN001
        while True:
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            s = pilot.app.screen
            if (
                isinstance(s, MainScreen)
                and s.model is not None
                and all(w.is_finished for w in pilot.app.workers)  # none started meanwhile
                and s.timeline.last_rows is not None
            ):
                return s

    async def go() -> None:
        app = TracediffApp(c)
        t0 = time.perf_counter()
        async with app.run_test(size=size) as pilot:
            s = await drawn(pilot)
            out["start_s"] = time.perf_counter() - t0
            out["rss_tui_mib"] = vm_rss_mib()
            out["lanes"] = len(s.model.lanes) if s.model else 0
            t = time.perf_counter()
            await pilot.press("g", "g", "g")
            await drawn(pilot)
            out["gpu_s"] = time.perf_counter() - t
            t = time.perf_counter()
            await pilot.press(*["right"] * 8)
            s = await drawn(pilot)
            out["block_s"] = time.perf_counter() - t
            out["cycle"] = s.cycle
        out["events_built"] = float("events" in c.__dict__)

    asyncio.run(go())
    out["rss_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/tracediff-bench-tui-runsets"))
    ap.add_argument("--old", type=Path, help="another tree to measure the same way")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--kernels", type=int, default=40)
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    if args.child:
        print(json.dumps(child(*args.child, (w, h))))
        return 0
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    from dask_runs import build

    base, head, k = build(args.work, args.files, args.gpus, args.cycles, args.kernels)
    trees = {"this": ROOT} | ({"old": args.old.resolve()} if args.old else {})
    got: dict[str, list[dict[str, float]]] = {n: [] for n in trees}
    load0 = os.getloadavg()[0]
    for r in range(args.repeat):
        for name, tree in trees.items() if r % 2 == 0 else reversed(trees.items()):
            env = {**os.environ, "PYTHONPATH": str(tree)}
            cmd = [sys.executable, str(ROOT / "bench" / "tui_runsets.py"), "--size", args.size,
                   "--child", str(base), str(head)]  # fmt: skip
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree, timeout=3600)
            if p.returncode != 0:
                print(p.stderr[-3000:], file=sys.stderr)
                return 1
            got[name].append(json.loads(p.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {name}: {got[name][-1]}", file=sys.stderr)
    print(
        f"{args.files} runs a side x {args.gpus} GPUs x {args.cycles} cycles x {args.kernels} ops "
        f"({k:,} kernels a run file); TUI at {args.size}; {args.repeat} rounds interleaved; "
        f"{os.cpu_count()} CPUs, load average {load0:.1f} -> {os.getloadavg()[0]:.1f}\n"
    )
    rows = [
        ("compare_s", "compare (s)", 2),
        ("start_s", "TUI start: timeline drawn (s)", 2),
        ("gpu_s", "g x3: GPU 1 drawn (s)", 2),
        ("block_s", "right x8: next block drawn (s)", 2),
        ("rss_compare_mib", "RSS after compare (MiB)", 0),
        ("rss_tui_mib", "RSS timeline drawn (MiB)", 0),
        ("rss_peak_mib", "peak RSS (MiB)", 0),
        ("lanes", "lanes drawn", 0),
        ("events_built", "whole events table built", 0),
    ]
    names = list(trees)
    print("| | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for key, label, nd in rows:
        cells = []
        for n in names:
            v = [x[key] for x in got[n]]
            med = statistics.median(v)
            cells.append(f"{med:.{nd}f} ({min(v):.{nd}f}-{max(v):.{nd}f})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
