"""Commit suspects on real H200 PyTorch-profiler captures (tests/support/h200_suspects.py: the data).

The repo is rebuilt by tools/device/suspects_repo.py (tests/conftest.py `minispec_repo`; fixed
dates: the hashes must be the captured ones, commits.txt); `compare --repo --commits` of the base
and head traces (with_stack=True) must rank the commit that changed the function launching the
slower kernels (layers.mlp) first, clearly above the caller, the sibling and the unused-branch
commits. Graph: the graph is captured inside the profiler window, so the replayed kernels take
the stacks of their capture-time launches (parse/kineto/graph_stacks.py) and rank the same way.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.support.h200_suspects import DATA, compare_json, culprit_first
from tracediff.parse.kineto.reader import read_kineto

pytestmark = [pytest.mark.git]


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_the_changing_commit_ranks_first_by_a_clear_margin(
    minispec_repo: tuple[Path, dict[str, str]], mode: str
) -> None:
    """Measured 2026-12-01, both modes: culprit 1.03, caller 0.38, sibling 0.13, unused 0.04."""
    repo, c = minispec_repo
    traces = [DATA / "kineto" / f"{name}_{mode}.json.gz" for name in ("c1_base", "c5_unused")]
    doc = compare_json(traces, repo, "--commits", f"{c['base']}..{c['unused']}")
    order = culprit_first(doc, c, 2.0, "--commits")
    if mode == "eager":  # the unused branch below the caller and the sibling
        assert order[-1] == c["unused"] and {c["caller"], c["sibling"]} <= set(order[1:])


def innermost(path: Path) -> pl.DataFrame:
    """Kernels in start order with their innermost minispec frame (None: no user frame)."""
    r = read_kineto(path)
    frames = pl.from_arrow(r.tables["frames"]).with_columns(pl.col("file").cast(pl.String))
    inner = (
        pl.from_arrow(r.tables["stacks"])
        .join(frames, on="frame_id")
        .filter(pl.col("file").str.starts_with("minispec/"))
        .sort("depth")
        .group_by("stack_id")
        .agg(pl.col("function").cast(pl.String).first().alias("frame"))
    )
    k = pl.from_arrow(r.tables["kernels"]).sort("start_ns")
    assert not r.warnings
    return k.join(inner, on="stack_id", how="left", maintain_order="left")


@pytest.mark.parametrize("commit", ["c1_base", "c4_culprit", "c5_unused"])
def test_graph_replays_take_the_capture_launch_stacks(commit: str) -> None:
    """Every replayed kernel gets a minispec launch frame, and each replay's (kernel name,
    innermost user function) sequence is the eager step's at the same commit: the k-th node
    maps to the capture launch of the kernel the eager step launches k-th from that code."""
    graph = innermost(DATA / "kineto" / f"{commit}_graph.json.gz")
    eager = innermost(DATA / "kineto" / f"{commit}_eager.json.gz")
    replayed = graph.filter(pl.col("launch_api") == "cudaGraphLaunch")
    assert replayed.height == 10 * (60 if commit != "c1_base" else 48)
    assert replayed["frame"].null_count() == 0
    step = eager.height // 10
    want = list(zip(eager["name"][:step], eager["frame"][:step], strict=True))
    for _, rep in replayed.group_by("correlation_id"):
        assert list(zip(rep["name"], rep["frame"], strict=True)) == want
