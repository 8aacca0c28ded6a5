"""engine/cycle/correspond.py: `per_cycle_of` (from a file's Sequences, by bincount) is
`per_cycle` (two group-bys of the ops), on runs cut at ranges, by kernel period (one and two
GPUs) and whole."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.engine.cycle import align as al
from tracediff.engine.cycle import correspond, find
from tracediff.engine.ops import gpu_ops_counted
from tracediff.parse import load

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "path",
    [
        "samples/g_good.arrow",  # range
        "tests/data/h200/k_bad.json.gz",  # kernel period
        "tests/data/nsys/nsys-ai/mfu_2gpu_after.sqlite",  # kernel period, 2 GPUs
        "tests/data/kineto/base.json.gz",  # whole
    ],
)
def test_same_as_the_group_bys(path: str) -> None:
    run = load(ROOT / path)
    ops, _ = gpu_ops_counted(run, lean=True)
    seg = find.find(run, ops, None)
    want = correspond.per_cycle(seg.ops)
    seqs = al.sequences(seg.ops.with_columns(pl.lit("base", al.SIDES).alias("side")))
    got = correspond.per_cycle_of(seqs)
    assert got.schema == want.schema
    assert_frame_equal(got.sort("device_id", "name"), want.sort("device_id", "name"))
