"""One run from many files (issue 20): N per-rank reports a side vs the same kernels in one.

    bench/ranks.py [--work DIR] [--gpus 16] [--cycles 3000] [--kernels 100] [--repeat 1]

Builds (not timed) with tests/gen_nsys.py one N-GPU nsys SQLite export a side (the head with a
straggler rank), then splits each into N one-rank exports (each keeps only its process's rows, as
`nsys profile -o report_rank%q{RANK}` run per rank writes them). Timed, each in its own child
process (peak RSS = ru_maxrss of the child, from os.wait4):

- `tracediff compare base.sqlite head.sqlite --format json` (one file a side);
- `tracediff compare base_ranks/ head_ranks/ --format json` (N files a side, read in parallel,
  joined: tracediff/parse/join.py).

The issue's goal: 16 files of 0.3 M kernels a side within 1.3x of one file a side (the default
size: 16 x 3000 cycles x 100 ops = 4.8 M kernels a side). Prints a markdown table, the CPU count
and load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gen_nsys import Straggler, write_report  # noqa: E402

BY_PID = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")
BY_TID = ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def split_report(src: Path, out: Path) -> int:
    """One export per process of `src` in `out` (report_rank<i>.sqlite); returns how many."""
    out.mkdir(parents=True)
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    pids = [r[0] for r in con.execute(f"SELECT DISTINCT globalPid FROM {BY_PID[0]} ORDER BY 1")]
    con.close()
    for i, gp in enumerate(pids):
        dst = out / f"report_rank{i}.sqlite"
        shutil.copy(src, dst)
        c = sqlite3.connect(dst)
        for t in BY_PID:
            c.execute(f"DELETE FROM {t} WHERE globalPid != ?", (gp,))
        for t in BY_TID:  # a thread's globalTid carries its process's globalPid above bit 24
            c.execute(f"DELETE FROM {t} WHERE (globalTid >> 24) != (? >> 24)", (gp,))
        c.commit()
        c.execute("VACUUM")
        c.close()
    return len(pids)


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS GB) of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err[-2000:]}")
    # the pool's workers are the child's children: ru_maxrss of the child covers only itself
    return wall, ru.ru_maxrss / 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/tracediff-bench-ranks"))
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--cycles", type=int, default=3000)
    ap.add_argument("--kernels", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    w = a.work / f"g{a.gpus}c{a.cycles}k{a.kernels}"
    if not (w / "head_ranks").is_dir():
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir(parents=True)
        write_report(w / "base.sqlite", a.gpus, a.cycles, a.kernels, seed=1)
        write_report(w / "head.sqlite", a.gpus, a.cycles, a.kernels, [Straggler(1, 5_000)], seed=2)
        for s in ("base", "head"):
            split_report(w / f"{s}.sqlite", w / f"{s}_ranks")
    td = [sys.executable, "-m", "tracediff", "compare"]
    rows = []
    for what, b, h in (
        ("one file a side", w / "base.sqlite", w / "head.sqlite"),
        (f"{a.gpus} files a side", w / "base_ranks", w / "head_ranks"),
    ):
        best = min(timed([*td, str(b), str(h), "--format", "json"]) for _ in range(a.repeat))
        rows.append((what, *best))
    n = a.gpus * a.cycles * a.kernels
    print(f"{n / 1e6:.2f} M kernels a side ({a.gpus} GPUs x {a.cycles} cycles x {a.kernels} ops)")
    print("| input | wall s | peak RSS GB (main process) |\n|---|---|---|")
    for what, wall, rss in rows:
        print(f"| {what} | {wall:.1f} | {rss:.2f} |")
    print(f"ratio many/one: {rows[1][1] / rows[0][1]:.2f}x wall")
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
