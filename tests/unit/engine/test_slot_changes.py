"""engine/cycle/align.py `slot_changes` by slot codes (groupsum.group_ids and a bincount) gives
what polars' group-by gives (its fallback): each slot's op count and the names of the ops in
it that are not the template's, slots without an op left out, nulls in the names."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.engine.cycle import align


def _ops(seed: int, n: int = 4000) -> pl.DataFrame:
    g = np.random.default_rng(seed)
    names = [f"k{i}" for i in range(12)]
    con = g.choice(names, n)
    # most ops are their slot's template op; some are another (moved), a few have no name
    other = g.random(n) < 0.15
    name = np.where(other, g.choice(names, n), con).astype(object)
    name[g.random(n) < 0.02] = None
    slot = [
        None if r < 0.1 else int(s) for r, s in zip(g.random(n), g.integers(0, 300, n), strict=True)
    ]
    return pl.DataFrame(
        {
            "device_id": pl.Series(g.integers(0, 3, n), dtype=pl.Int32),
            "slot": pl.Series(slot, dtype=pl.Int32),
            "contributor": pl.Series(con.tolist(), dtype=pl.Categorical),
            "name": pl.Series(name.tolist(), dtype=pl.Categorical),
        }
    )


@pytest.mark.parametrize("seed", range(5))
def test_codes_give_the_group_bys_answer(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ops = _ops(seed)
    order = ["device_id", "slot", "name"]
    fast = align.slot_changes(ops).sort(order, nulls_last=True)
    assert fast["name"].null_count() < fast.height  # some slots hold moved ops
    monkeypatch.setattr(align, "group_ids", lambda *a: None)
    slow = align.slot_changes(ops).sort(order, nulls_last=True)
    assert_frame_equal(fast, slow)


def test_no_op_in_a_slot() -> None:
    ops = _ops(0).with_columns(pl.lit(None, pl.Int32).alias("slot"))
    assert align.slot_changes(ops).height == 0
