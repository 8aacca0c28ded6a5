"""`Comparison.events_slice` (engine/pipeline/eventslices.py): the rows of `events` for one side, GPU and
cycle range, without building `events`, the same rows and values as the whole table.

Real comparisons: the bundled H200 pair (one run a side: a filter of the kept ops), the bundled
run sets (samples/runs: 4 H200 runs a side, each run's file read again for the slice) and a
generated run set of 4 GPUs whose all-reduces wait for a straggler (the wait for the last rank
comes from the other ranks' reduced collective tables, not their ops). Every (side, GPU, block of
cycles) is asked for, blocks crossing from one run into the next included.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.support.eventslices import gen_runsets, open_sets
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load

ROOT = Path(__file__).resolve().parent.parents[2]
SAMPLES = ROOT / "samples"


def every_slice_is_the_table(c: Comparison, block: int) -> int:
    assert c.events_slice is not None
    whole = c.events
    seen = 0
    for side in ("base", "head"):
        cyc = c.cycles.filter(pl.col("side") == side)
        end = int(cyc["cycle"].max()) + 1
        for d in sorted(set(cyc["device_id"].to_list())):
            for lo in range(0, end, block):
                got = c.events_slice(side, d, lo, lo + block)
                want = whole.filter(
                    (pl.col("side") == side)
                    & (pl.col("device_id") == d)
                    & (pl.col("cycle") >= lo)
                    & (pl.col("cycle") < lo + block)
                )
                assert got.schema == want.schema
                assert got.equals(want), (side, d, lo)
                seen += got.height
    assert seen == whole.height  # and together they are every row
    return seen


def test_one_run_a_side_slices_its_kept_ops() -> None:
    c = compare(load(SAMPLES / "g_good.arrow"), load(SAMPLES / "g_bad.arrow"), n_boot=50)
    assert every_slice_is_the_table(c, 5) > 0


@pytest.fixture(scope="module")
def bundled() -> Comparison:
    return open_sets(SAMPLES / "runs" / "good", SAMPLES / "runs" / "bad")


def test_bundled_run_sets_read_each_runs_file_for_a_slice(bundled: Comparison) -> None:
    c = bundled
    assert c.base.runs == 4
    # blocks of 7 cycles straddle the runs' boundaries (each run has 12+ cycles)
    assert every_slice_is_the_table(c, 7) > 0


def test_collectives_of_one_gpu_keep_their_wait_for_the_last_rank(tmp_path: Path) -> None:
    c = open_sets(*gen_runsets(tmp_path))
    ev = c.events_slice("head", 2, 0, 24) if c.events_slice else pl.DataFrame()
    coll = ev.filter(pl.col("kind") == "collective")
    att = c.attribution.filter(pl.col("device_id") == 2)
    rows = att.select("contributor_id", pl.col("name").alias("row"))
    names = set(coll.join(rows, on="contributor_id")["row"].to_list())
    # rank 2 waits for rank 1: its all-reduces are the transfer rows, not an unsplit one
    assert coll.height and coll["contributor_id"].null_count() == 0
    assert names and all(n.endswith(" [transfer]") for n in names), names
    every_slice_is_the_table(c, 5)


@pytest.mark.parametrize("lo,hi", [(30, 40), (5, 5)])
def test_a_range_no_file_holds_is_empty(bundled: Comparison, lo: int, hi: int) -> None:
    c = bundled
    assert c.events_slice is not None
    top = int(c.cycles.filter(pl.col("side") == "head")["cycle"].max())
    got = c.events_slice("head", 0, top + lo, top + hi)
    assert got.height == 0 and got.columns == c.events.columns


def test_a_report_alone_keeps_no_ops_and_still_gives_the_same_events() -> None:
    """compare(keep_ops=False), the CLI's report-only run: no op kept (no replay inputs), the
    same tables, and events built again from the runs on first read equal the kept ones."""
    base, head = load(SAMPLES / "g_good.arrow"), load(SAMPLES / "g_bad.arrow")
    kept = compare(base, head, n_boot=50)
    lean = compare(base, head, n_boot=50, keep_ops=False)
    assert kept.replay_inputs.ops.height > 0 and kept.replay_inputs.head_api is not None
    assert lean.replay_inputs.ops.height == 0 and lean.replay_inputs.head_api is None
    for name in ("attribution", "cycles", "totals", "collectives", "across_gpus", "host"):
        assert getattr(lean, name).equals(getattr(kept, name)), name
    assert lean.delta_ms_per_cycle == kept.delta_ms_per_cycle
    assert lean.delta_ci95 == kept.delta_ci95
    assert lean.events.equals(kept.events)
    assert every_slice_is_the_table(lean, 5) > 0
