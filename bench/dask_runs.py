"""`compare --scheduler` benchmark: many multi-GPU files a side on 2 Dask workers with a memory limit.

    bench/dask_runs.py [--work DIR] [--files 8] [--gpus 8] [--cycles 200] [--kernels 40]
                       [--memory-limit 1GiB] [--ranks]

Inputs (built once into --work, not timed): `--files` runs a side, each a generated nsys-schema
report (tests/support/gen_nsys.py) of `--gpus` ranks, parsed to a run file; head injects a straggler
(rank 3 launches every all-reduce STRAGGLE_NS late) and a slower collective (every all-reduce's
transfer SLOWER_NS longer). Measured, each in its own child process (peak RSS = ru_maxrss):
the in-process compare, and the compare on a real `dask scheduler` with two `dask worker`
processes (`--memory-limit` each, one thread, no nanny) started here; each worker's peak RSS is
read from the worker itself after the run. Prints a markdown table, whether the JSON is the
same, and the injected changes as found (cycle time, wait for the last rank, transfer).

`--ranks`: one run a side instead, a 2-node job of `--gpus` per-rank Kineto traces
(tests/support/gen_kineto_nodes.py from the same generated report; node 1's clock 4.1 ms off), compared
with `--layout ranks`: the rank file is the unit a worker reads and reduces (engine/pipeline/rankunit.py).
The issue's 512-rank size is bench/dask_ranks.py's; this shared 2-core machine fits less here:
`--files` and `--gpus` say what was run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from compare import TRACEDIFF, run_child  # noqa: E402

STRAGGLE_NS, SLOWER_NS, STRAGGLER = 30_000, 20_000, 3


def build(work: Path, files: int, gpus: int, cycles: int, kernels: int) -> tuple[Path, Path, int]:
    from tests.support.gen_nsys import SlowerCollective, Straggler, write_report
    from tracediff.parse import load
    from tracediff.runs.runfile import write_run

    n_kernels = 0
    for side in ("base", "head"):
        d = work / side
        d.mkdir(parents=True, exist_ok=True)
        for i in range(files):
            out = d / f"run-{i + 1:03d}.arrow"
            changes = (
                [Straggler(STRAGGLER, STRAGGLE_NS), SlowerCollective(SLOWER_NS)]
                if side == "head"
                else []
            )
            if not out.exists():
                sql = work / "tmp.sqlite"
                write_report(
                    sql, gpus, cycles, kernels, changes, seed=i + (0 if side == "base" else 1000)
                )
                write_run(load(sql), out)
                sql.unlink()
            n_kernels = load(out).table("kernels").num_rows
    return work / "base", work / "head", n_kernels


def build_ranks(work: Path, gpus: int, cycles: int, kernels: int) -> tuple[Path, Path, int]:
    """One job a side of `gpus` per-rank Kineto traces on 2 nodes (module doc)."""
    from tests.support.gen_kineto_nodes import write_kineto_nodes
    from tests.support.gen_nsys import SlowerCollective, Straggler, write_report

    n_kernels = 0
    for side in ("base", "head"):
        d = work / f"ranks-{side}"
        if not d.exists():
            changes = (
                [Straggler(STRAGGLER, STRAGGLE_NS), SlowerCollective(SLOWER_NS)]
                if side == "head"
                else []
            )
            sql = work / "tmp.sqlite"
            write_report(sql, gpus, cycles, kernels, changes, seed=0 if side == "base" else 1000)
            write_kineto_nodes(sql, d, gpus // 2, [0, 4_100_000])
            sql.unlink()
        n_kernels = cycles * kernels
    return work / "ranks-base", work / "ranks-head", n_kernels


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/tracediff-bench-dask"))
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--kernels", type=int, default=40, help="GPU ops per cycle per rank")
    ap.add_argument("--memory-limit", default="1GiB")
    ap.add_argument("--ranks", action="store_true", help="one job a side of per-rank traces")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.ranks:
        base, head, k = build_ranks(args.work, args.gpus, args.cycles, args.kernels)
        args.files = 1
    else:
        base, head, k = build(args.work, args.files, args.gpus, args.cycles, args.kernels)
    cmd = [*TRACEDIFF, "compare", str(base), str(head), "--format", "json", "--bootstrap", "200"]
    if args.ranks:
        cmd += ["--layout", "ranks"]
    inproc = run_child(cmd, 1800)
    port = _port()
    addr = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    log = open(args.work / "cluster.log", "wb")  # noqa: SIM115
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stdout=log, stderr=log, env=env)]  # fmt: skip
    try:
        time.sleep(3)
        for _ in range(2):
            procs.append(subprocess.Popen(
                [dask, "worker", addr, "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1",
                 "--memory-limit", args.memory_limit, "--no-dashboard"],
                stdout=log, stderr=log, env=env))  # fmt: skip
        from distributed import Client

        with Client(addr, timeout="60s") as c:
            c.wait_for_workers(2, timeout=120)
            base_rss = c.run(_maxrss)
        dist = run_child([*cmd, "--scheduler", addr], 1800)
        with Client(addr, timeout="60s") as c:
            peaks = c.run(_maxrss)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:  # a worker that lost its scheduler first
                p.kill()
                p.wait()
        log.close()
    if args.ranks:
        print(f"1 job a side of {args.gpus} rank files (2 nodes), {k} GPU ops a file "
              f"({args.cycles} cycles x {args.kernels} ops); "
              f"2 workers, --memory-limit {args.memory_limit}\n")  # fmt: skip
    else:
        print(f"{args.files} files a side, {args.gpus} GPUs each, {k} kernels a file "
              f"({args.cycles} cycles x {args.kernels} ops x {args.gpus} ranks); "
              f"2 workers, --memory-limit {args.memory_limit}\n")  # fmt: skip
    print("| compare | wall s | driver peak RSS MiB | worker peak RSS MiB | rc |")
    print("|---|---|---|---|---|")
    print(f"| in-process | {inproc.wall_s:.1f} | {inproc.rss_mib:.0f} | - | {inproc.rc} |")
    wk = ", ".join(f"{v / 1024:.0f}" for v in peaks.values())
    print(
        f"| --scheduler (2 workers) | {dist.wall_s:.1f} | {dist.rss_mib:.0f} | {wk} | {dist.rc} |"
    )
    print(f"\nworkers at start: {', '.join(f'{v / 1024:.0f}' for v in base_rss.values())} MiB")
    print(f"same JSON: {inproc.out == dist.out}")
    found(json.loads(dist.out))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    return 0


def _maxrss() -> int:
    """The worker's peak RSS in KiB: VmHWM, this process's own (ru_maxrss keeps the peak of the
    process it was forked from, this script's, which built the inputs)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def found(j: dict) -> None:  # type: ignore[type-arg]
    """The injected changes as the comparison reports them (summed over GPUs)."""
    print(f"\ncycle time change: {j['delta_ms_per_cycle']}")
    rows = j.get("across_gpus") or []
    for r in rows[:6]:
        print(f"  {r['kind']:10} {r['name'][:70]:70} {r['delta_ms_per_cycle']:+.4f} ms/cycle "
              f"(top GPU {r.get('top_device')}) sig={r['significant']}")  # fmt: skip
    print(f"injected: rank {STRAGGLER} {STRAGGLE_NS / 1e6:.3f} ms late to each all-reduce, each "
          f"transfer +{SLOWER_NS / 1e6:.3f} ms")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
