"""engine/cycle/launch.py: the binary search of each op's launch in its thread's ranges tags
the same ops with the same cycles and phases as the polars as-of joins it replaces (kept for
null keys and many threads): on the bundled H200 runs (ranges `cycle`, `draft`, `verify`) and
on generated ops over several processes and threads, some launched by a thread without ranges
(other thread), some outside every range, some on a range's last nanosecond."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.engine.cycle import launch
from tracediff.engine.cycle import ranges as rg
from tracediff.engine.ops import gpu_ops_counted
from tracediff.parse import load

SAMPLES = Path(__file__).resolve().parents[3] / "samples"


def _same(ops: pl.DataFrame, cyc: pl.DataFrame, phases: pl.DataFrame) -> None:
    got, want = launch.assign(ops, cyc), launch._assign_joined(ops, cyc)
    assert got.schema == want.schema
    assert_frame_equal(got.sort("_op"), want.sort("_op"))
    tagged = launch.tag_phase(got, phases).sort("_op")
    # no phases: both are "(cycle)" / "(other thread)" before any search
    join = launch._tag_phase_joined if phases.height else launch.tag_phase
    joined = join(want, phases).sort("_op")
    assert_frame_equal(
        tagged.with_columns(pl.col("phase").cast(pl.String)),
        joined.with_columns(pl.col("phase").cast(pl.String)),
    )


@pytest.mark.parametrize("name", ["g_good.arrow", "g_bad.arrow"])
def test_bundled_runs_every_candidate(name: str) -> None:
    run = load(SAMPLES / name)
    ops, _ = gpu_ops_counted(run)
    ranges = rg.read_ranges(run)
    for _, _, cyc in rg.candidates(ranges):
        _same(ops, cyc, rg.phases_in(ranges, cyc))


def test_generated_threads_and_processes() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for pid in (10, 11):
        for tid, shift in ((1, 0), (3, 400)):  # thread 2 marks no cycles
            for c in range(30):
                s = 1_000 * c + shift + pid + rng.integers(0, 50) * 4
                rows.append((pid, tid, c, int(s), int(s + 600 + rng.integers(0, 300))))
    cyc = pl.DataFrame(
        rows, schema=["process_id", "thread_id", "cycle", "start_ns", "end_ns"], orient="row"
    ).with_columns(pl.lit(1).alias("depth"))
    n = 4000
    starts = rng.integers(-500, 31_000, n)
    starts[:30] = cyc["end_ns"].to_numpy()[:30]  # launched on the range's last nanosecond
    ops = pl.DataFrame(
        {
            "process_id": rng.choice([10, 11, 12], n),
            "launch_thread_id": rng.choice([1, 1, 2, 3], n),
            "launch_start_ns": pl.Series(
                [None if i % 97 == 0 else int(v) for i, v in enumerate(starts)], dtype=pl.Int64
            ),
        }
    )
    ph = []
    for pid, tid, c, s, e in rows:
        ph.append((pid, tid, c, "draft", s + 10, s + 200))
        ph.append((pid, tid, c, "verify", s + 300, e - 5))
    phases = pl.DataFrame(
        ph,
        schema=["process_id", "thread_id", "cycle", "phase", "start_ns", "end_ns"],
        orient="row",
    )
    _same(ops, cyc, phases)
    _same(ops, cyc, phases.clear())
    nulls = ops.with_columns(
        pl.when(pl.int_range(n) == 5).then(None).otherwise(pl.col("process_id")).alias("process_id")
    )
    _same(nulls, cyc, phases)  # a null key: the joins themselves


@pytest.mark.parametrize("pid0", [10, 1 << 33])
def test_every_op_on_its_ranges_thread(pid0: int) -> None:
    """No null launch and no op of another thread (no second search: every op in the first),
    threads whose ranges come in start order (a search's hit is the range's row), and process
    ids past 2^31 (the keys' distinct rows not packed in 64 bits): the as-of join's tags."""
    rng = np.random.default_rng(4)
    rows = []
    for p in range(3):
        for c in range(40):
            s = 1_000 * c + 7 * p
            rows.append((pid0 + p, 5 + p, c, s, s + 500 + int(rng.integers(0, 400))))
    cyc = pl.DataFrame(
        rows, schema=["process_id", "thread_id", "cycle", "start_ns", "end_ns"], orient="row"
    ).with_columns(pl.lit(1).alias("depth"))
    n = 3000
    p = rng.integers(0, 3, n)
    ops = pl.DataFrame(
        {
            "process_id": pid0 + p,
            "launch_thread_id": 5 + p,
            "launch_start_ns": rng.integers(0, 41_000, n),
        }
    )
    assert ops["launch_start_ns"].null_count() == 0
    _same(ops, cyc, pl.DataFrame(schema={"process_id": pl.Int64, "thread_id": pl.Int64,
                                         "cycle": pl.Int64, "phase": pl.String,
                                         "start_ns": pl.Int64, "end_ns": pl.Int64}))  # fmt: skip
    got = launch.assign(ops, cyc)
    assert not got["_other_thread"].any() and 0 < got.height < n  # some in no range
    one = ops.filter(pl.col("process_id") == pid0)  # one thread: the lone-key path
    _same(one, cyc.filter(pl.col("process_id") == pid0), pl.DataFrame())
