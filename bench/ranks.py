"""One run from many files (issue 20): N per-rank reports a side vs the same kernels in one.

    bench/ranks.py [--work DIR] [--gpus 16] [--cycles 3000] [--kernels 100] [--repeat 3]

Builds (not timed) with tests/support/gen_nsys.py one N-GPU nsys SQLite export a side (the head with a
straggler rank), then writes from it N one-rank exports, each holding only its process's rows (as
`nsys profile -o report_rank%q{RANK}` run per rank writes them; built empty and filled from the
attached source, so the disk holds the data twice a side, not N + 1 times). Timed, each in its own
child process, the two kinds interleaved in one window (one-file, N-file, one-file, ... `--repeat`
times each):

- `tracediff compare base.sqlite head.sqlite --format json` (one file a side);
- `tracediff compare base_ranks/ head_ranks/ --format json` (N files a side, read in parallel,
  joined: tracediff/parse/ranks/combine.py).

Per run: wall s; CPU s and the largest single process's peak RSS from os.wait4 (user + system
and ru_maxrss of the child and its waited-for children, the pool's workers); and the process
tree's summed RSS peak, sampled every 50 ms (psutil). The issue's goal: 16 files of 0.3 M
kernels a side within 1.3x of one file a side (the default size: 16 x 3000 cycles x 100 ops =
4.8 M kernels a side). Prints a markdown table, the CPU count, load average and free memory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.gen_nsys import Straggler, write_report  # noqa: E402

BY_PID = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")
BY_TID = ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def split_report(src: Path, out: Path) -> int:
    """One export per process of `src` in `out` (report_rank<i>.sqlite); returns how many.

    Each file starts empty and gets only its own process's rows; the small tables (StringIds,
    TARGET_INFO_*, META_DATA_EXPORT, ENUM_*) go whole to every file, as every per-rank nsys report
    has its own."""
    out.mkdir(parents=True)
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    pids = [r[0] for r in con.execute(f"SELECT DISTINCT globalPid FROM {BY_PID[0]} ORDER BY 1")]
    ddl = con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL"
    ).fetchall()
    con.close()
    for i, gp in enumerate(pids):
        c = sqlite3.connect(out / f"report_rank{i}.sqlite")
        c.execute("PRAGMA journal_mode=OFF")
        c.execute("PRAGMA synchronous=OFF")
        c.execute("ATTACH ? AS src", (f"file:{src}?mode=ro",))
        for name, sql in ddl:
            c.execute(sql)
            if name in BY_PID:
                where = f"WHERE globalPid = {int(gp)}"
            elif (
                name in BY_TID
            ):  # a thread's globalTid carries its process's globalPid above bit 24
                where = f"WHERE (globalTid >> 24) = ({int(gp)} >> 24)"
            else:
                where = ""
            c.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}" {where}')
        c.commit()
        c.execute("DETACH src")
        c.close()
    return len(pids)


def tree_rss(pid: int) -> int:
    """Summed RSS (bytes) of `pid` and its live descendants; 0 once it is gone."""
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.Error:  # a worker that just exited
            pass
    return total


def timed(cmd: list[str]) -> tuple[float, float, float, float]:
    """(wall s, CPU s, largest process's peak RSS GB, summed tree peak RSS GB) of one child."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()

    def sample() -> None:  # wait4 below reaps the child; this thread only reads /proc
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(p.pid))
            done.wait(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    err = p.stderr.read().decode() if p.stderr else ""  # drained before the wait: no pipe stall
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    th.join()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err[-2000:]}")
    # Linux fills wait4's rusage with the child's own plus its waited-for children's (the pool's
    # workers): CPU summed, ru_maxrss (KiB) the largest single process
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024 / 1e9, peak[0] / 1e9


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/tracediff-bench-ranks"))
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--cycles", type=int, default=3000)
    ap.add_argument("--kernels", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    w = a.work / f"g{a.gpus}c{a.cycles}k{a.kernels}"
    if not (w / "head_ranks").is_dir():
        shutil.rmtree(w, ignore_errors=True)
        w.mkdir(parents=True)
        t0 = time.perf_counter()
        write_report(w / "base.sqlite", a.gpus, a.cycles, a.kernels, seed=1)
        write_report(w / "head.sqlite", a.gpus, a.cycles, a.kernels, [Straggler(1, 5_000)], seed=2)
        for s in ("base", "head"):
            split_report(w / f"{s}.sqlite", w / f"{s}_ranks")
        print(f"built in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    one = (w / "base.sqlite").stat().st_size
    many = max(f.stat().st_size for f in (w / "base_ranks").iterdir())
    td = [sys.executable, "-m", "tracediff", "compare"]
    kinds = (
        ("one file a side", w / "base.sqlite", w / "head.sqlite"),
        (f"{a.gpus} files a side", w / "base_ranks", w / "head_ranks"),
    )
    n = a.gpus * a.cycles * a.kernels
    print(f"{n / 1e6:.2f} M kernels a side ({a.gpus} GPUs x {a.cycles} cycles x {a.kernels} ops)")
    print(f"base export {one / 1e9:.2f} GB; largest per-rank export {many / 1e9:.3f} GB")
    print(
        f"start: load {os.getloadavg()}, available {psutil.virtual_memory().available / 2**30:.1f} GiB"
    )
    print("| rep | input | wall s | CPU s | peak RSS GB, largest process | peak RSS GB, tree |")
    print("|---:|---|---:|---:|---:|---:|")
    got: dict[str, list[tuple[float, float, float, float]]] = {k[0]: [] for k in kinds}
    for rep in range(1, a.repeat + 1):
        for what, b, h in kinds:
            r = timed([*td, str(b), str(h), "--format", "json"])
            got[what].append(r)
            print(
                f"| {rep} | {what} | {r[0]:.1f} | {r[1]:.1f} | {r[2]:.2f} | {r[3]:.2f} |",
                flush=True,
            )
    (o, m) = (got[k[0]] for k in kinds)
    for i, label in ((0, "wall"), (1, "CPU")):
        med_o, med_m = statistics.median(x[i] for x in o), statistics.median(x[i] for x in m)
        pair = [y[i] / x[i] for x, y in zip(o, m, strict=True)]
        print(
            f"{label}: median one {med_o:.1f} s, many {med_m:.1f} s, ratio of medians "
            f"{med_m / med_o:.2f}x (per rep {min(pair):.2f}-{max(pair):.2f}x)"
        )
    print(f"end: cpus {os.cpu_count()}, load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
