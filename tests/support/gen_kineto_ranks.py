"""A generated multi-node job written as one PyTorch-profiler (Kineto) trace per rank, at the scale
of a large job (512 ranks x 50 k kernels), by column operations.

    from tests.support.gen_kineto_ranks import write_job
    truth = write_job(out_dir, nodes=64, gpus_per_node=8, cycles=500, kernels=100,
                      changes=[Straggler(277, 30_000), SlowerCollective(20_000)], seed=1)

    python -m tests.support.gen_kineto_ranks OUT --nodes 64 --gpus-per-node 8 --cycles 500 --kernels 100

The timeline is tests/support/gen_nsys.py's model (`simulate`: every rank's kernels, all-reduces that end
together after the last rank arrives, launch calls, a `cycle` range per cycle, every number drawn
from `seed` for every rank: no rank's events are copied from another's). Each rank's trace is
written as tests/support/gen_kineto_nodes.py writes one (the same events and fields; kernels also carry
grid, block and registers per thread, as Kineto's do), named as torch.profiler's
`tensorboard_trace_handler(..., use_gzip=True)` names them: `{host}_{pid}.{time_ms}.pt.trace.json.gz`
(`gzip=False`: `.json`). Node n's clock is `clock_error_ns[n]` ahead of the truth (node 0 exact;
by default the others drawn uniformly within +-5 ms from `seed`): its `baseTimeNanoseconds` is
that much late, so its events are placed that much too late until the join's clock estimate
corrects them (parse/ranks/clocks.py).

The text is built per rank with polars string expressions (no Python loop over events) and the
ranks are written by `jobs` threads (polars and zlib work outside the GIL; forked processes can
deadlock on polars' thread pool once the caller has used polars).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tests.support.gen_nsys import (
    NCCL_NAME,
    POOL,
    STREAM,
    UTC_EPOCH_NS,
    Change,
    SlowerCollective,
    Straggler,
    Timeline,
    simulate,
)

RUNTIME = {0: "cudaLaunchKernel", 1: "cuLaunchKernelEx"}  # Kineto's names (no _vNNNN suffix)
CLOCK_SPREAD_NS = 5_000_000


@dataclass
class JobTruth:
    """What was written: enough for a bench or a test to check what a compare finds."""

    paths: list[Path]
    hosts: list[str]
    clock_error_ns: list[int]
    ranks: int
    kernels_per_rank: int
    allreduces_per_cycle: int
    cycle_period_ns: float  # mean start-to-start of consecutive cycles (the session's)
    bytes: int  # on disk, all files


_T: Timeline | None = None  # the job being written (read by the writer threads)
_JOB: dict[str, object] = {}


def _us(col: str) -> pl.Expr:
    """ns -> Kineto's `ts` / `dur` text: µs with the exact ns as three decimals."""
    c = pl.col(col)
    return pl.concat_str(
        (c // 1000).cast(pl.String), pl.lit("."), (c % 1000).cast(pl.String).str.zfill(3)
    )


def _kernel_args() -> tuple[list[str], list[str]]:
    """Per pool code (and the all-reduce, last): the JSON name, and the args after correlation."""
    names, tails = [], []
    for name, _short, _dur, g, b, regs in POOL:
        names.append(json.dumps(name))
        tails.append(
            f',"grid":{list(g)},"block":{list(b)},"registers per thread":{regs}'.replace(" ", "")
        )
    names.append(json.dumps(NCCL_NAME))
    tails.append(',"grid":[2,1,1],"block":[640,1,1],"registers per thread":96')
    return names, tails


def _pick(texts: pl.Series, col: str) -> pl.Expr:
    """`texts[i]` for each row's code `i` in `col`."""
    return pl.col(col).map_batches(texts.gather, return_dtype=pl.String)


def _complete(
    cat: str, name: pl.Expr, where: str, ts_dur: tuple[str, str], *args: pl.Expr
) -> pl.Expr:
    """One Kineto complete ("X") event a row, as text: `name` a JSON string, `where` its pid and
    tid fields, `ts_dur` the columns of its start and duration (ns), `args` its args object."""
    return pl.concat_str(
        pl.lit(f'{{"ph":"X","cat":"{cat}","name":'),
        name,
        pl.lit(f',{where},"ts":'),
        _us(ts_dur[0]),
        pl.lit(',"dur":'),
        _us(ts_dur[1]),
        pl.lit(',"args":'),
        *args,
        pl.lit("}"),
    ).alias("e")


def _rank_text(rank: int) -> bytes:
    t = _T
    assert t is not None
    gpn, pid = int(_JOB["gpn"]), 4000 + 16 * rank  # type: ignore[call-overload]
    dev = rank % gpn
    C, M = t.start.shape[1], t.start.shape[2]
    code = np.where(t.codes >= 0, t.codes, len(POOL))  # the all-reduce: last name
    op = np.tile(np.arange(M), C)
    corr = np.arange(C * M, dtype=np.int64) + 100
    names, tails = _kernel_args()
    start, end = t.start[rank].ravel(), t.end[rank].ravel()
    ops = pl.DataFrame(
        {
            "code": code[op].astype(np.int32),
            "kind": t.kinds[op].astype(np.int32),
            "s": start,
            "d": end - start,
            "a": t.api_start[rank].ravel(),
            "ad": (t.api_end[rank] - t.api_start[rank]).ravel(),
            "corr": corr,
        }
    )
    name_of = pl.Series(names)
    tail_of = pl.Series(tails)
    api_of = pl.Series([json.dumps(RUNTIME[0]), json.dumps(RUNTIME[1])])
    corr_text = pl.col("corr").cast(pl.String)
    kernels = ops.select(
        _complete(
            "kernel",
            _pick(name_of, "code"),
            f'"pid":{dev},"tid":{STREAM}',
            ("s", "d"),
            pl.lit(f'{{"device":{dev},"stream":{STREAM},"correlation":'),
            corr_text,
            _pick(tail_of, "code"),
            pl.lit("}"),
        )
    )
    runtime = ops.select(
        _complete(
            "cuda_runtime",
            _pick(api_of, "kind"),
            f'"pid":{pid},"tid":{pid}',
            ("a", "ad"),
            pl.lit('{"correlation":'),
            corr_text,
            pl.lit("}"),
        )
    )
    steps = pl.DataFrame(
        {"n": np.arange(C), "s": t.rng_start[rank], "d": t.rng_end[rank] - t.rng_start[rank]}
    ).select(
        _complete(
            "user_annotation",
            pl.concat_str(pl.lit('"ProfilerStep#'), pl.col("n").cast(pl.String), pl.lit('"')),
            f'"pid":{pid},"tid":{pid}',
            ("s", "d"),
            pl.lit("{}"),
        )
    )
    body = pl.concat([steps, runtime, kernels])["e"].str.join(",").item()
    node = rank // gpn
    head = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": int(_JOB["ranks"])},  # type: ignore[call-overload]
        "deviceProperties": [{"id": dev, "name": "NVIDIA H200"}],
        "baseTimeNanoseconds": UTC_EPOCH_NS + int(_JOB["errors"][node]),  # type: ignore[index]
    }
    return (json.dumps(head)[:-1] + ',"traceEvents":[' + body + "]}").encode()


def _write_rank(rank: int) -> int:
    path = Path(str(_JOB["paths"][rank]))  # type: ignore[index]
    data = _rank_text(rank)
    if bool(_JOB["gzip"]):
        data = gzip.compress(data, compresslevel=1, mtime=0)
    path.write_bytes(data)
    return len(data)


def write_job(
    out: Path,
    nodes: int,
    gpus_per_node: int,
    cycles: int,
    kernels: int,
    changes: Sequence[Change] = (),
    *,
    seed: int = 0,
    clock_error_ns: Sequence[int] | None = None,
    gzip: bool = True,
    jobs: int = 2,
) -> JobTruth:
    """One trace per rank in `out` (created; the module docstring). Returns what was written."""
    global _T
    ranks = nodes * gpus_per_node
    if clock_error_ns is None:
        draw = np.random.default_rng(seed + 7_919).integers(
            -CLOCK_SPREAD_NS, CLOCK_SPREAD_NS, nodes
        )
        clock_error_ns = [0, *draw[1:].tolist()]
    hosts = [f"node-{n:03d}" for n in range(nodes)]
    out.mkdir(parents=True, exist_ok=True)
    ext = ".pt.trace.json.gz" if gzip else ".pt.trace.json"
    paths = [
        out / f"{hosts[r // gpus_per_node]}_{4000 + 16 * r}.{UTC_EPOCH_NS // 1_000_000}{ext}"
        for r in range(ranks)
    ]
    _T = simulate(ranks, cycles, kernels, changes, seed=seed)
    _JOB.update(
        gpn=gpus_per_node, hosts=hosts, ranks=ranks, errors=list(clock_error_ns), paths=paths,
        gzip=gzip,
    )  # fmt: skip
    try:
        with ThreadPoolExecutor(max(1, jobs)) as pool:  # polars and zlib release the GIL
            sizes = list(pool.map(_write_rank, range(ranks)))
        starts = _T.rng_start[0]
        period = float(np.diff(starts).mean()) if len(starts) > 1 else float("nan")
        return JobTruth(
            paths, hosts, list(clock_error_ns), ranks, cycles * int((_T.kinds != 2).sum()),
            int((_T.kinds == 1).sum()), period, int(sum(sizes)),
        )  # fmt: skip
    finally:
        _T = None
        _JOB.clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=500)
    ap.add_argument("--kernels", type=int, default=100, help="GPU ops per cycle per rank")
    ap.add_argument("--straggler", type=int, help="this rank launches each all-reduce late")
    ap.add_argument("--late-ns", type=int, default=30_000)
    ap.add_argument("--slower-collective-ns", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-gzip", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    changes: list[Change] = []
    if a.straggler is not None:
        changes.append(Straggler(a.straggler, a.late_ns))
    if a.slower_collective_ns:
        changes.append(SlowerCollective(a.slower_collective_ns))
    t0 = time.perf_counter()
    t = write_job(
        a.out, a.nodes, a.gpus_per_node, a.cycles, a.kernels, changes, seed=a.seed,
        gzip=not a.no_gzip, jobs=a.jobs,
    )  # fmt: skip
    print(
        f"{t.ranks} ranks x {t.kernels_per_rank} kernels, {t.bytes / 1e9:.2f} GB, "
        f"{time.perf_counter() - t0:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
