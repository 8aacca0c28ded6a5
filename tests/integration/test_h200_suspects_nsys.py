"""Commit suspects and launch stacks on real H200 nsys captures (tests/support/h200_suspects.py).

tests/data/h200-suspects/nsys: `tracediff capture` under nsys 2024.2.3 of the minispec repo at
its five commits, eager and CUDA-graph, with capture's own default function trace (NVTX ranges in
domains `python:minispec.layers` / `python:minispec.model`; no line numbers, no library frames);
nsys-again/: a second capture of the base commit. The graph is captured inside the window with
--cuda-graph-trace=node, so replayed kernels take the stack of the launch that created their node
(parse/nsys/graph_nodes.py). The repo is rebuilt by tools/device/suspects_repo.py (same hashes).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from tests.support.h200_suspects import DATA, compare_json, culprit_first
from tracediff.parse import load
from tracediff.runs.runfile import Run

pytestmark = [pytest.mark.nsys, pytest.mark.git]


def _commits() -> dict[str, str]:
    rows = [ln.split()[:2] for ln in (DATA / "commits.txt").read_text().splitlines()]
    return {role: sha for sha, role in rows}


_RUNS: dict[Path, Run] = {}


def _run(role: str, mode: str, nsys: str, again: bool = False) -> Run:
    """The capture's report read as a run (the .nsys-rep through the real nsys export)."""
    sha = _commits()[role][:12]
    path = (
        DATA / "nsys-again" / mode / "run-01" / "report.nsys-rep"
        if again
        else DATA / "nsys" / f"{sha}_{mode}" / "run-01" / "report.nsys-rep"
    )
    if path not in _RUNS:
        _RUNS[path] = load(path)
    return _RUNS[path]


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_culprit_first_by_a_clear_margin_unused_branch_last(
    minispec_repo: tuple[Path, dict[str, str]], nsys: str, mode: str, tmp_path: Path
) -> None:
    """`compare --repo` of the base and unused-branch run sets: the range comes from their
    capture manifests, and capture's own function trace gives the launch stacks. Measured
    2026-12-01, both modes: culprit 0.640, caller 0.384, sibling 0.128, unused branch 0.038.
    The margin is smaller than Kineto's (1.03): function-trace frames have no line and no
    library frame below layers.mlp, so the culprit's body change is a `function` hit (0.5), the
    caller's changed call of mlp a `line` hit one frame out (1.0 x 0.3)."""
    repo, sha = minispec_repo
    runs = []
    for role in ("base", "unused"):
        src = DATA / "nsys" / f"{sha[role][:12]}_{mode}"
        runs.append(tmp_path / src.name)
        shutil.copytree(src, runs[-1])  # the reader writes its run file beside the report
    doc = compare_json(runs, repo, nsys=nsys)
    order = culprit_first(doc, sha, 1.5, "capture manifests")
    assert order[-1] == sha["unused"]
    assert doc["suspects"][0]["functions"] == ["minispec/layers.py:mlp"]


def _innermost(run: Run) -> pl.DataFrame:
    """Kernels in GPU start order with their innermost frame's function (None: no stack)."""
    frames = pl.from_arrow(run.tables["frames"]).with_columns(pl.col("function").cast(pl.String))
    inner = (
        pl.from_arrow(run.tables["stacks"])
        .join(frames, on="frame_id")
        .sort("depth")
        .group_by("stack_id")
        .agg(pl.col("function").first().alias("frame"))
    )
    k = pl.from_arrow(run.tables["kernels"]).sort("start_ns")
    return k.with_columns(pl.col("name").cast(pl.String)).join(
        inner, on="stack_id", how="left", maintain_order="left"
    )


@pytest.mark.parametrize("role", ["base", "culprit", "unused"])
def test_graph_replays_take_their_nodes_capture_time_stacks(role: str, nsys: str) -> None:
    """Every replayed kernel gets a minispec stack, and each replay's (kernel, innermost
    function, stack id) sequence is the eager step's at the same commit: the node match is
    exact (by node id, not by position), and the capture-time call path is the eager one."""
    graph, eager = (_innermost(_run(role, m, nsys)) for m in ("graph", "eager"))
    assert not _run(role, "graph", nsys).warnings
    replayed = graph.filter(pl.col("launch_api").cast(pl.String) == "cudaGraphLaunch")
    assert replayed.height == 12 * (48 if role == "base" else 60)
    assert replayed["stack_id"].null_count() == 0
    step = eager.height // 12
    first = eager.head(step)
    want = list(zip(first["name"], first["frame"], first["stack_id"], strict=True))
    assert {f for _, f, _ in want} == {"norm", "attend", "mlp", "block"}
    for _, rep in replayed.group_by("correlation_id"):
        assert list(zip(rep["name"], rep["frame"], rep["stack_id"], strict=True)) == want


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_stack_ids_are_stable_across_runs_of_one_commit(mode: str, nsys: str) -> None:
    """Two captures of the base commit (separate processes, minutes apart): the same stack ids
    for the same kernels, and the same frames and stacks tables."""
    a, b = _run("base", mode, nsys), _run("base", mode, nsys, again=True)
    ka, kb = (_innermost(r).select("name", "stack_id") for r in (a, b))
    # graph: 2 kernels of bench.py's own (outside any minispec function) have no stack
    assert ka.height == kb.height and ka["stack_id"].null_count() == (2 if mode == "graph" else 0)
    assert ka.equals(kb)
    for t in ("frames", "stacks"):
        ta, tb = (pl.from_arrow(r.tables[t]).sort(pl.all()) for r in (a, b))
        assert ta.equals(tb), t
