"""SQLite raw-fetch benchmark: the page decoder against ADBC on the big nsys tables.

    bench/sqlite_fetch.py [REPORT.sqlite ...] [--repeat 3] [--workers 2]

For each report (default: the 1 M-kernel H200 replica bench/ingest.py builds, if present, and
tests/data/h200/g_good.sqlite) and each way of reading (pages: `SqliteSource(pages=True)`,
adbc: `pages=False`), a fresh child process reads the raw kernel, CUDA API, NVTX and string
tables the nsys reader asks for (`nsys.reader`'s column lists) and prints wall and CPU seconds
(all threads) of that read alone, values per CPU-second, and peak RSS. Fastest of --repeat runs;
the load average is printed with each row, the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, resource, sys, time
from tracediff.parse.nsys.source import Read, SqliteSource
from tracediff.parse.nsys.schema import (KERNEL, KERNEL_COLS, NVTX, NVTX_COLS, RUNTIME,
                                         RUNTIME_COLS, STRINGS, I64, STR)
path, pages, workers = sys.argv[1], sys.argv[2] == "pages", int(sys.argv[3])
reads = [Read(KERNEL, KERNEL_COLS), Read(RUNTIME, RUNTIME_COLS), Read(NVTX, NVTX_COLS),
         Read(STRINGS, {"id": I64, "value": STR})]
src = SqliteSource(path, workers=workers, pages=pages)
t0, c0 = time.perf_counter(), time.process_time()
frames = src.read(reads)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
src.close()
print(json.dumps({"wall": wall, "cpu": cpu, "rows": [f.height for f in frames],
                  "values": sum(f.height * f.width for f in frames),
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(path: Path, how: str, workers: int) -> dict:
    from tracediff.cli import ALLOCATOR_ENV  # what the CLI runs with

    env = {**ALLOCATOR_ENV, **os.environ}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), how, str(workers)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    reports = args.reports or [
        p
        for p in (
            Path("/tmp/tdingest/g_good_x567.sqlite"),
            ROOT / "tests" / "data" / "h200" / "g_good.sqlite",
        )
        if p.exists()
    ]
    print(f"machine: {os.cpu_count()} CPUs; workers {args.workers}; best of {args.repeat}\n")
    print(
        "| report | rows (kernels, API, NVTX, strings) | read | wall s | CPU s |"
        " M values / CPU-s | peak RSS MiB | load |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for path in reports:
        for how in ("pages", "adbc"):
            runs = []
            for _ in range(args.repeat):
                runs.append(_run(path, how, args.workers))
            best = min(runs, key=lambda r: r["cpu"])
            rows = ", ".join(f"{n:,}" for n in best["rows"])
            load = os.getloadavg()[0]
            print(
                f"| {path.name} | {rows} | {how} | {min(r['wall'] for r in runs):.3f} |"
                f" {best['cpu']:.3f} | {best['values'] / best['cpu'] / 1e6:.1f} |"
                f" {max(r['rss'] for r in runs):.0f} | {load:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
