"""The pair captured with `tracediff capture` on the H200: import later, manifest, and the diff.

tests/data/capture/*/ hold manifest.json and the report of what capture left on a GPU host without
QdstrmImporter (its .qdstrm, imported here with nsys 2024.2.3's QdstrmImporter and kept as
report.nsys-rep: a quarter of the size). Parsing a report beside its manifest must keep the
manifest, and compare must find the injected change (slow-verify runs the verify MLP twice) in
verify's kernels, not elsewhere. The .qdstrm import itself is tested on tests/data/h200/e_good.qdstrm.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tracediff.engine.compare import compare, env_diffs
from tracediff.parse import load
from tracediff.runs.runfile import read_run

pytestmark = [pytest.mark.nsys]

DATA = Path(__file__).parent.parent / "data" / "capture"


@pytest.fixture(scope="module")
def runs(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    tmp = tmp_path_factory.mktemp("cap")
    for v in ("good", "slow-verify"):
        dst = tmp / f"{v}.arrow"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "tracediff",
                "parse",
                str(DATA / v / "report.nsys-rep"),
                "-o",
                str(dst),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        out[v] = dst
    return out


def test_import_later_keeps_manifest(runs: dict[str, Path]) -> None:
    run = read_run(runs["good"])
    manifest = json.loads((DATA / "good" / "manifest.json").read_text())
    assert run.metadata["manifest"] == manifest
    assert run.metadata["manifest"]["gpus"][0]["name"] == "NVIDIA H200"
    assert run.label == "good"


def test_slow_verify_is_found_in_verify_kernels(runs: dict[str, Path]) -> None:
    c = compare(read_run(runs["good"]), read_run(runs["slow-verify"]))
    assert c.base.cycle_method == "nvtx:cycle" and c.base.cycles == c.head.cycles == 20
    assert abs(c.residual_ms_per_cycle) < 1e-9
    att = c.attribution
    top2 = att.head(2)
    assert top2["kind"].to_list() == ["kernel", "kernel"] and set(top2["phase"]) == {"verify"}
    assert top2["significant"].all()
    # the MLP runs twice: each of its GEMMs doubles (count per cycle and time)
    for r in top2.iter_rows(named=True):
        assert r["head_count_per_cycle"] == 2 * r["base_count_per_cycle"]
        assert 1.9 < r["head_ms_per_cycle"] / r["base_ms_per_cycle"] < 2.1
    # independent check: verify-phase kernel time per cycle straight from the events
    ev = c.events.filter(pl.col("kind") == "kernel")
    per_side = {
        s: ev.filter(pl.col("side") == s)["duration_ns"].sum() / 1e6 for s in ("base", "head")
    }
    k = att.filter(pl.col("kind") == "kernel")
    assert (
        abs(
            (k["head_ms_per_cycle"].sum() - k["base_ms_per_cycle"].sum()) * 20
            - (per_side["head"] - per_side["base"])
        )
        < 1e-6
    )
    # draft kernels are untouched
    draft_k = att.filter((pl.col("kind") == "kernel") & (pl.col("phase") == "draft"))
    assert not draft_k["significant"].any()


def test_same_environment_reports_no_differences() -> None:
    a, b = (
        load(DATA / "good" / "report.nsys-rep"),
        load(DATA / "slow-verify" / "report.nsys-rep"),
    )
    assert env_diffs(a, b) == []
    b.metadata["manifest"]["gpus"][0]["driver_version"] = "575.00"
    b.metadata["manifest"]["env"]["NCCL_ALGO"] = "Tree"
    keys = {d.key for d in env_diffs(a, b)}
    assert keys == {"manifest.gpus.0.driver_version", "manifest.env.NCCL_ALGO"}
