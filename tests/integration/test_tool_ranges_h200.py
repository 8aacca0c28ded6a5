"""Cycles never from the ranges capture adds, on real H200 captures with GPU work (issue 30).

tests/data/h200-suspects/nsys: `tracediff capture` runs of the minispec workload with capture's
default function trace (`python:minispec.layers`, `python:minispec.model`) and the workload's
own `cycle` NVTX range. A workload on nvtx 0.2.12+ under nsys 2024.2 loses its own ranges and
keeps capture's (tests/integration/test_capture_nvtx_dropped.py shows it with the real nsys):
here each run is parsed and its own ranges are left out of a copy, as nsys leaves them out.
Before the fix, auto mode cut cycles at `python:minispec.model:minispec.model.forward`.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.compute as pc
import pytest

from tracediff.engine.compare import compare
from tracediff.engine.cycle import ranges as rg
from tracediff.engine.pipeline import rankunit
from tracediff.parse import load
from tracediff.runs.runfile import read_run, write_run

pytestmark = [pytest.mark.nsys]

RUNS = Path(__file__).resolve().parents[1] / "data" / "h200-suspects" / "nsys"
BASE, SIBLING, CULPRIT = "a1f9993dc6e7", "03667d482cc5", "80bd10d7fd0a"  # commits.txt


@pytest.fixture(scope="module")
def runs(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """commit -> run file without the workload's own ranges; commit+"-full" -> as captured."""
    d = tmp_path_factory.mktemp("toolranges")
    out = {}
    for c in (BASE, SIBLING, CULPRIT):
        run = load(RUNS / f"{c}_eager" / "run-01" / "report.nsys-rep")
        write_run(run, d / f"{c}-full.arrow")
        t = run.table("nvtx_ranges")
        tool = pc.fill_null(pc.starts_with(pc.cast(t["domain"], "string"), "python:"), False)
        assert 0 < pc.sum(tool).as_py() < t.num_rows  # both kinds, as captured
        run.tables["nvtx_ranges"] = t.filter(tool)
        write_run(run, d / f"{c}.arrow")
        out[c], out[c + "-full"] = d / f"{c}.arrow", d / f"{c}-full.arrow"
    return out


def test_candidates_are_never_the_tooling_s_ranges(runs: dict[str, Path]) -> None:
    full = rg.read_ranges(read_run(runs[BASE + "-full"]))
    assert full.filter(pl.col("domain").fill_null("").str.starts_with("python:")).height
    keys = [key for key, _, _ in rg.candidates(full)]
    assert keys == [(None, "cycle")]
    assert rg.candidates(rg.read_ranges(read_run(runs[BASE]))) == []


def test_with_the_workload_s_ranges_auto_mode_still_cuts_at_them(runs: dict[str, Path]) -> None:
    c = compare(runs[BASE + "-full"], runs[CULPRIT + "-full"], n_boot=200)
    assert c.base.cycle_method == "nvtx:cycle" and c.significant
    assert not any(rg.NO_OWN_RANGES in w for w in c.warnings)


def test_without_them_the_markerless_rule_cuts_and_says_why(runs: dict[str, Path]) -> None:
    c = compare(runs[BASE], runs[SIBLING], n_boot=200)
    assert c.base.cycle_method.startswith("kernel-period:")
    notes = [w for w in c.warnings if w.startswith(f"base: {rg.NO_OWN_RANGES}")]
    assert len(notes) == 1 and "python:minispec.model" in notes[0], c.warnings
    assert "pin nvtx==0.2.10" in notes[0]


def test_a_real_regression_is_not_called_noise(runs: dict[str, Path]) -> None:
    """The culprit's mlp kernels change: the kernel-period cut of head cannot be checked against
    base's, so the whole runs are compared and nothing is judged (undecided, never noise)."""
    c = compare(runs[BASE], runs[CULPRIT], n_boot=200)
    assert "python:" not in c.base.cycle_method
    assert c.cycle_fallback is not None and not c.significant
    assert c.delta_ms_per_cycle > 0
    assert any(w.startswith(f"base: {rg.NO_OWN_RANGES}") for w in c.warnings), c.warnings


def test_an_explicit_function_range_cuts_with_a_warning(runs: dict[str, Path]) -> None:
    spec = "python:minispec.model:minispec.model.forward"
    c = compare(runs[BASE], runs[CULPRIT], cycle=spec, n_boot=200)
    assert c.base.cycle_method == f"nvtx:{spec}" and c.significant and c.delta_ms_per_cycle > 0
    assert any("a function-trace range that tracediff capture adds" in w for w in c.warnings)


def test_the_rank_unit_path_says_the_same(runs: dict[str, Path]) -> None:
    """The path of rank files read on a cluster's workers (engine/pipeline/rankunit.py), in this process:
    each run planned from its one file's scan, as commands/compare.py plans a rank folder."""
    sides = []
    for i, c in enumerate((BASE, SIBLING)):
        f = str(runs[c])
        sides.append(rankunit.plan_run([f], [rankunit.scan((f, i == 0))], runs[c]))
    c = compare([sides[0]], [sides[1]], n_boot=200)
    assert c.base.cycle_method.startswith("kernel-period:")
    assert any(w.startswith(f"base: {rg.NO_OWN_RANGES}") for w in c.warnings), c.warnings
