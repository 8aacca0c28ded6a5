"""Ingest benchmark: rows/s and peak RSS of parsing nsys exports (SQLite, parquetdir, .nsys-rep).

    bench/ingest.py [--times 567] [--repeat 3] [--workdir DIR] [--skip-large] [--large-only]
                    [--extra PATH ...] [--tree DIR] [--stages] [--floor]

Inputs: the four real H200 reports as .sqlite, as parquetdir (exported here by the real nsys)
and as .nsys-rep (export + read, end to end); plus g_good replicated x`--times` (>= 1 M kernels
at the default) as SQLite and as parquetdir (bench/replicate.py). Every measurement runs in a
fresh child process: the time is `load()` alone (imports excluded), the peak RSS that child's
ru_maxrss (os.wait4). The table shows the best and the median wall time of `--repeat` runs,
the least CPU time (all threads; less sensitive to other work on the machine), kernel rows
per wall second and per CPU second, and the load average, since other work on a small machine
moves wall times a lot. Children get the allocator settings the `tracediff` CLI sets for itself
(jemalloc huge pages; `--plain-alloc`: without). `--extra` adds any other input (e.g. a generated 5 M-kernel SQLite);
`--tree DIR` imports tracediff from another source tree (e.g. `git archive OLD tracediff | tar
-x -C DIR`) to measure two versions the same way. CPU time is also split into user and system
(on this VM, page faults of fresh memory make system time a large, erratic share). `--stages`
prints, per input, where the CPU goes (each step of the nsys reader, run serially, from the
run with the least CPU); `--floor` adds the least a parquetdir parse can cost: only the kernel
and API Parquet files, the reader's columns, read by polars and pyarrow on all threads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "tests" / "data" / "h200"
sys.path.insert(0, str(ROOT / "bench"))

CHILD = """
import json, os, resource, sys, time
if len(sys.argv) > 2 and sys.argv[2]:  # --tree: this source tree instead of the installed one
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, sys.argv[2])
from tracediff.parse import load, nccl  # imports are not the parse
try:  # the nsys reader's modules: the package, or a tree from before it (flat parse/nsys_*.py)
    from tracediff.parse.nsys import cli as nsys_cli, events as nsys_events, reader as nsys_sqlite
except ImportError:
    from tracediff.parse import nsys_cli, nsys_events, nsys_sqlite
stages = []
if len(sys.argv) > 3 and sys.argv[3] == "stages":
    exec(STAGES)
def ru():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt
t, r0 = time.perf_counter(), ru()
run = load(sys.argv[1])
dt, r1 = time.perf_counter() - t, ru()
user, system, faults = (b - a for a, b in zip(r0, r1))
events = ("kernels", "memops", "api_calls", "nvtx_ranges", "syncs")
rows = sum(run.table(n).num_rows for n in events)
out = {"seconds": dt, "cpu": user + system, "user": user, "sys": system, "faults": faults,
       "kernels": run.table("kernels").num_rows, "rows": rows, "stages": stages}
print(json.dumps(out))
"""

# --stages: each step of the nsys reader timed in the child (process CPU, so the steps run one
# after another here: the two table-building threads are made serial). Steps a tree lacks are
# skipped, so an older tree can be profiled the same way.
STAGES = """
import functools
def _ru():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime, r.ru_stime, r.ru_minflt
def _wrap(mod, name, label):
    f = getattr(mod, name, None)
    if f is None:
        return
    @functools.wraps(f)
    def g(*a, **k):
        t0 = _ru()
        try:
            return f(*a, **k)
        finally:
            stages.append([label, *(b - a for a, b in zip(t0, _ru()))])
    setattr(mod, name, g)
for _cls in (getattr(nsys_sqlite, "SqliteSource", None), getattr(nsys_cli, "ParquetSource", None)):
    if _cls is not None:
        _wrap(_cls, "read", "raw fetch (Source.read)")
for _n in ("Strings", "launch_keys", "kernels_table", "memops_table", "api_calls_table",
           "nvtx_table", "devices_table", "syncs_table"):
    _wrap(nsys_sqlite, _n, _n)
_wrap(nccl, "collectives_from", "collectives_from")
_wrap(nsys_events, "cuda_events_table", "cuda_events_table")
if hasattr(nsys_sqlite, "ThreadPoolExecutor"):
    class _Done:
        def __init__(self, v): self.v = v
        def result(self): return self.v
    class _Serial:
        def __init__(self, *a): pass
        def __enter__(self): return self
        def __exit__(self, *a): return None
        def submit(self, f, *a): return _Done(f(*a))
    nsys_sqlite.ThreadPoolExecutor = _Serial
"""

# --floor: the least a parquetdir parse can cost here: only the kernel and API Parquet files,
# the reader's columns, read by polars (all threads) and by pyarrow (all threads).
FLOOR = """
import json, resource, sys, time
import polars as pl, pyarrow.parquet as pq
try:
    from tracediff.parse.nsys.schema import KERNEL, KERNEL_COLS, RUNTIME, RUNTIME_COLS
except ImportError:  # a tree from before the nsys package
    from tracediff.parse.nsys_schema import KERNEL, KERNEL_COLS, RUNTIME, RUNTIME_COLS
d, how = sys.argv[1], sys.argv[2]
files = [(f"{d}/{KERNEL}.parquet", list(KERNEL_COLS)), (f"{d}/{RUNTIME}.parquet", list(RUNTIME_COLS))]
def ru():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt
t, r0 = time.perf_counter(), ru()
if how == "pl":
    dfs = pl.collect_all([pl.scan_parquet(f).select(c) for f, c in files])
elif how == "pl+1chunk":
    dfs = [df.rechunk() for df in pl.collect_all([pl.scan_parquet(f).select(c) for f, c in files])]
else:
    dfs = [pq.read_table(f, columns=c, use_threads=True) for f, c in files]
dt, r1 = time.perf_counter() - t, ru()
user, system, faults = (b - a for a, b in zip(r0, r1))
print(json.dumps({"seconds": dt, "cpu": user + system, "user": user, "sys": system,
                  "faults": faults, "kernels": len(dfs[0]), "rows": len(dfs[0]) + len(dfs[1]),
                  "stages": []}))
"""


FLOORS = ("pl", "pl+1chunk", "pa")  # polars; polars, then one chunk per column; pyarrow


def measure(
    path: Path,
    tree: Path | None = None,
    env: dict[str, str] | None = None,
    stages: bool = False,
    floor: str | None = None,
) -> dict[str, Any]:
    if floor:
        code, argv = FLOOR, [str(path), floor]
    else:
        code = CHILD.replace("exec(STAGES)", f"exec({STAGES!r})")
        argv = [str(path), str(tree or ""), "stages" if stages else ""]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"ingest: child failed on {path}: {err.strip().splitlines()[-1:]}")
    res = json.loads(out)
    res["rss_mib"] = usage.ru_maxrss / 1024  # KiB on Linux
    return res


def nsys_exe() -> str | None:
    env = os.environ.get("TRACEDIFF_NSYS")
    for c in (env, shutil.which("nsys"), "/opt/nsys-2024.2.3/bin/nsys"):
        if c and Path(c).exists():
            return c
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--times", type=int, default=567, help="copies of g_good (567 -> 1.0 M kernels)"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, help="keep generated inputs here (default: a temp dir)")
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--large-only", action="store_true", help="only the replicated (and --extra)")
    ap.add_argument("--extra", type=Path, action="append", default=[], help="another input")
    ap.add_argument("--tree", type=Path, help="import tracediff from this source tree")
    ap.add_argument(
        "--plain-alloc", action="store_true", help="without the CLI's allocator settings"
    )
    ap.add_argument("--stages", action="store_true", help="per-stage CPU of each input")
    ap.add_argument(
        "--floor", action="store_true", help="parquetdir inputs: the Parquet read alone"
    )
    args = ap.parse_args()
    # what `tracediff parse` runs with: the CLI sets polars' and pyarrow's allocator options
    # (jemalloc, huge pages) before they load
    env = dict(os.environ)  # copied first: importing tracediff.cli sets them here as well
    from tracediff.cli import ALLOCATOR_ENV

    alloc = {} if args.plain_alloc else ALLOCATOR_ENV
    env = {**alloc, **env}
    import replicate

    work = args.workdir or Path(tempfile.mkdtemp(prefix="tracediff-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    nsys = nsys_exe()
    inputs: list[tuple[str, str, Path]] = []
    for stem in ("g_good", "g_bad", "e_good", "e_bad"):
        if args.large_only:
            if nsys and not (work / f"{stem}_pqtdir").exists() and stem == "g_good":
                subprocess.run(
                    [nsys, "export", "--type", "parquetdir", "--quiet=true", "-o",
                     str(work / f"{stem}_pqtdir"), str(H200 / f"{stem}.nsys-rep")],
                    check=True, capture_output=True,
                )  # fmt: skip
            continue
        inputs.append((stem, "sqlite", H200 / f"{stem}.sqlite"))
        if nsys:
            pq = work / f"{stem}_pqtdir"
            if not pq.exists():
                subprocess.run(
                    [
                        nsys,
                        "export",
                        "--type",
                        "parquetdir",
                        "--quiet=true",
                        "-o",
                        str(pq),
                        str(H200 / f"{stem}.nsys-rep"),
                    ],
                    check=True,
                    capture_output=True,
                )
            inputs.append((stem, "parquetdir", pq))
            inputs.append((stem, "nsys-rep", H200 / f"{stem}.nsys-rep"))
    if not args.skip_large:
        big = work / f"g_good_x{args.times}.sqlite"
        if not big.exists():
            replicate.replicate(H200 / "g_good.sqlite", big, args.times)
        inputs.append((f"g_good x{args.times}", "sqlite", big))
        if nsys:
            bigpq = work / f"g_good_x{args.times}_pqtdir"
            if not bigpq.exists():
                replicate.replicate_parquetdir(work / "g_good_pqtdir", bigpq, args.times)
            inputs.append((f"g_good x{args.times}", "parquetdir", bigpq))
    for extra in args.extra:
        kind = "parquetdir" if extra.is_dir() else extra.suffix.lstrip(".")
        inputs.append((extra.stem[:14], kind, extra))
    load0 = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs; load average at start {load0[0]:.2f}; "
        f"best and median of {args.repeat} runs; "
        f"allocators: {alloc or 'plain'}"
    )
    head = f"{'input':<14} {'format':<10} {'kernels':>9} {'all rows':>9} "
    head += f"{'best s':>8} {'median s':>8} {'cpu s':>7} {'user':>6} {'sys':>6} "
    head += f"{'kernel rows/s':>14} {'per CPU-s':>10} {'all rows/s':>12} {'peak RSS MiB':>12}"
    head += f" {'load':>5}"
    print(head)
    print("-" * len(head))
    jobs: list[tuple[str, str, Path, str | None]] = []
    for name, fmt, path in inputs:
        jobs.append((name, fmt, path, None))
        if args.floor and fmt == "parquetdir":
            jobs += [(name, f"floor:{how}", path, how) for how in FLOORS]
    profiles = []
    for name, fmt, path, floor in jobs:
        runs = [
            measure(path, args.tree, env, stages=args.stages, floor=floor)
            for _ in range(args.repeat)
        ]
        secs = [r["seconds"] for r in runs]
        best, med = min(secs), statistics.median(secs)
        least = min(runs, key=lambda r: r["cpu"])
        cpu = least["cpu"]
        r0 = runs[0]
        print(
            f"{name:<14} {fmt:<10} {r0['kernels']:>9,} {r0['rows']:>9,} {best:>8.3f} {med:>8.3f} "
            f"{cpu:>7.3f} {least['user']:>6.3f} {least['sys']:>6.3f} "
            f"{r0['kernels'] / best:>14,.0f} {r0['kernels'] / cpu:>10,.0f} "
            f"{r0['rows'] / best:>12,.0f} "
            f"{max(r['rss_mib'] for r in runs):>12.0f} {os.getloadavg()[0]:>5.1f}"
        )
        if least["stages"]:
            profiles.append((f"{name} {fmt}", least))
    for title, least in profiles:
        print(f"\nstages of {title} (the run with the least CPU; serial here):")
        print(f"  {'stage':<26} {'wall s':>7} {'user':>6} {'sys':>6} {'faults':>7}")
        for label, wall, user, system, faults in least["stages"]:
            print(f"  {label:<26} {wall:>7.3f} {user:>6.3f} {system:>6.3f} {faults:>7}")
        rest = [least[k] - sum(st[i] for st in least["stages"])
                for k, i in (("seconds", 1), ("user", 2), ("sys", 3), ("faults", 4))]  # fmt: skip
        print(f"  {'the rest of load()':<26} {rest[0]:>7.3f} {rest[1]:>6.3f} {rest[2]:>6.3f} "
              f"{rest[3]:>7.0f}")  # fmt: skip
    load1 = os.getloadavg()
    print(f"load average at end {load1[0]:.2f}; inputs in {work}")
    if args.tree:
        print(f"tracediff imported from {args.tree}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    rc = main()
    print(f"({time.perf_counter() - t0:.0f} s)")
    sys.exit(rc)
