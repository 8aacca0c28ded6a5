"""What-if replay speed on a large run: g_bad's cycles replicated to >= 5 M GPU ops.

    .venv/bin/python bench/whatif.py [--ops 5000000] [--selector all] [--gpus 8]

The head side of compare(g_good, g_bad)'s aligned ops is replicated cycle by cycle (new cycle
numbers, times shifted by whole periods), so the replay sees a 5 M-op run with g_bad's real
structure: host-bound eager draft, CUDA-graph verify, launch latencies. Timed: building the
dependency graph, the replay with HEAD's own durations, and the what-if replay (`predict`, which
runs both). Prints a table; peak RSS is the process's (ru_maxrss), which includes the setup.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracediff.engine.compare import compare  # noqa: E402
from tracediff.engine.result import ReplayInputs  # noqa: E402
from tracediff.parse import load  # noqa: E402
from tracediff.replay import predict  # noqa: E402
from tracediff.replay.cache import graph_of  # noqa: E402
from tracediff.replay.simulate import replay  # noqa: E402

DATA = ROOT / "tests" / "data" / "h200"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def small_comparison(gpus: int):  # noqa: ANN201
    """g_good vs g_bad (1 GPU), or a synthetic pair on `gpus` GPUs whose head has a straggler."""
    if gpus <= 1:
        return compare(load(DATA / "g_good.sqlite"), load(DATA / "g_bad.sqlite"), n_boot=50)
    import tempfile

    from tests.support.gen_nsys import Straggler, write_report

    tmp = Path(tempfile.mkdtemp(prefix="whatif-bench-"))
    b = write_report(tmp / "base.sqlite", gpus, 40, 100, seed=1)
    h = write_report(tmp / "head.sqlite", gpus, 40, 100, [Straggler(gpus - 1, 30_000)], seed=2)
    return compare(load(b.path), load(h.path), n_boot=50)


def big_comparison(n_ops: int, gpus: int = 1):  # noqa: ANN201
    c = small_comparison(gpus)
    ops = c.replay_inputs.ops
    head = ops.filter(pl.col("side") == "head")
    ncyc = head["cycle"].n_unique()
    period = int(head["end_ns"].max() - head["start_ns"].min()) + 1_000_000
    copies = -(-n_ops // head.height)
    rep = pl.concat(
        [
            head.with_columns(
                (pl.col("cycle") + k * ncyc).alias("cycle"),
                *(
                    pl.col(x) + k * period
                    for x in ("start_ns", "end_ns", "launch_start_ns", "launch_end_ns")
                ),
            )
            for k in range(copies)
        ]
    )
    cyc = c.cycles.filter(pl.col("side") == "head")
    cycles = pl.concat(
        [c.cycles.filter(pl.col("side") == "base")]
        + [cyc.with_columns((pl.col("cycle") + k * ncyc).alias("cycle")) for k in range(copies)]
    )
    big = dataclasses.replace(
        c,
        cycles=cycles,
        replay_inputs=ReplayInputs(ops=pl.concat([ops.filter(pl.col("side") == "base"), rep])),
    )
    return big, rep.height, ncyc * copies


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--ops", type=int, default=5_000_000)
    ap.add_argument("--selector", default="all")
    ap.add_argument(
        "--gpus",
        type=int,
        default=1,
        help="1: g_bad's real cycles; N > 1: a synthetic N-GPU run with a straggler "
        "(tests/support/gen_nsys.py), whose all-reduces couple the GPUs",
    )
    args = ap.parse_args()
    t = time.perf_counter()
    c, n, ncyc = big_comparison(args.ops, args.gpus)
    setup = time.perf_counter() - t
    rss0 = rss_mib()
    rows = []
    t, cpu = time.perf_counter(), time.process_time()
    g = graph_of(c)  # the graph predict() uses below
    rows.append(("build dependency graph", time.perf_counter() - t, time.process_time() - cpu, ""))
    t, cpu = time.perf_counter(), time.process_time()
    own = replay(g)
    rows.append(
        (
            "replay, HEAD's own durations",
            time.perf_counter() - t,
            time.process_time() - cpu,
            f"{own.sweeps} sweep(s)",
        )
    )
    t, cpu = time.perf_counter(), time.process_time()
    w = predict(c, args.selector)
    rows.append(
        (
            f"predict --take {args.selector} (replay + critical path)",
            time.perf_counter() - t,
            time.process_time() - cpu,
            f"{w.sweeps} sweep(s)",
        )
    )
    total = sum(r[1] for r in rows)
    total_cpu = sum(r[2] for r in rows)
    print(
        f"run: {n:,} HEAD GPU ops in {ncyc:,} cycles on {args.gpus} GPU(s) (replicated; "
        f"setup {setup:.1f} s, RSS before replay {rss0:,.0f} MiB)"
    )
    print(f"{'step':<52} {'wall s':>8} {'CPU s':>8}  note")
    for name, dt, dcpu, note in rows:
        print(f"{name:<52} {dt:8.2f} {dcpu:8.2f}  {note}")
    print(f"{'total (build + own replay + predict)':<52} {total:8.2f} {total_cpu:8.2f}")
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
        "(wall time grows with other load)"
    )
    print(
        f"peak RSS {rss_mib():,.0f} MiB; predicted {w.predicted_ms_per_cycle:.3f} ms/cycle, "
        f"replayed head {w.replayed_head_ms_per_cycle:.3f}, "
        f"measured head {w.head_ms_per_cycle:.3f}, base {w.base_ms_per_cycle:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
