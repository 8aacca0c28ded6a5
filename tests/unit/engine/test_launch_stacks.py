"""Comparison.launch_stacks (engine/sources.py): every frame of every stack each contributor was
launched from, per side, on the real TraceLens SGLang decode trace (every kernel resolves)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.parse.stacks.library import is_library

DATA = Path(__file__).resolve().parent.parents[1] / "data" / "kineto"


@pytest.fixture(scope="module")
def pair():  # type: ignore[no-untyped-def]
    run = load(DATA / "sglang_Qwen3-8B_decode.json.gz")
    return run, compare(run, run, n_boot=10)


def test_each_stack_is_the_run_s_stack_whole_and_in_order(pair) -> None:  # type: ignore[no-untyped-def]
    run, c = pair
    ls = c.launch_stacks
    assert ls.height and set(ls["side"].unique()) == {"base", "head"}
    want = (
        pl.from_arrow(run.table("stacks"))
        .join(pl.from_arrow(run.table("frames")), on="frame_id")
        .select("stack_id", "depth", "line", pl.col("function").cast(pl.String))
    )
    for (cid, side, sid), g in ls.group_by("contributor_id", "side", "stack_id"):
        w = want.filter(pl.col("stack_id") == sid).sort("depth")
        assert g["depth"].to_list() == list(range(w.height)), (cid, side)
        assert g.sort("depth")["function"].to_list() == w["function"].to_list()


def test_shares_sum_to_one_per_contributor_and_match_sources(pair) -> None:  # type: ignore[no-untyped-def]
    _, c = pair
    per = c.launch_stacks.unique(["contributor_id", "side", "stack_id"])
    sums = per.group_by("contributor_id").agg(pl.col("share").sum())
    assert sums["share"].to_list() == pytest.approx([1.0] * sums.height)
    # the innermost user frame of each stack, weighed by share, is `sources`
    user = (
        c.launch_stacks.filter(~is_library(pl.col("file")))
        .sort("depth")
        .group_by("contributor_id", "side", "stack_id")
        .first()
        .group_by("contributor_id", "file", "line", "function")
        .agg(pl.col("share").sum())
        .sort("contributor_id", "file", "line")
    )
    src = c.sources.sort("contributor_id", "file", "line")
    assert user["function"].to_list() == src["function"].to_list()
    assert user["share"].to_list() == pytest.approx(src["share"].to_list())
