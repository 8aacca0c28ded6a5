"""Cross-check `compare`'s cycles and totals against Nsight Systems' own reports (real nsys CLI).

`nsys stats --report nvtx_gpu_proj_trace` projects each NVTX range onto the GPU: the first start and
last end of the GPU ops whose launch call lies inside the range on the same thread. tracediff cuts
cycles by the same rule, so each `cycle` range's projection must equal our cycle's GPU span.

`nsys recipe nvtx_gpu_proj_trace` / `nccl_sum` cannot serve as an oracle on this machine (checked
with nsys 2024.2.3 and the recipe requirements installed by its own install.py into a venv):
nvtx_gpu_proj_trace stops with "ERROR: no such function: rtree_scale" (an SQLite function that
NVIDIA's build registers and the Debian build lacks), and nccl_sum dies in pandas/numpy with
"TypeError: ufunc 'right_shift' not supported for the input types". Without the venv both stop at
"No module named 'psutil'". So the `nsys stats` reports are the oracle here.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from tests.support.gen_nsys import AddedCopy, HostGap, write_report
from tracediff.engine.compare import compare
from tracediff.parse import load

pytestmark = [pytest.mark.nsys]

H200 = Path(__file__).parent.parent / "data" / "h200"


def _stats(nsys: str, rep: Path, report: str) -> list[dict[str, str]]:
    """Rows of one `nsys stats` report (CSV) on a .nsys-rep (exported afresh) or an .sqlite."""
    fresh = ["--force-export=true"] if rep.suffix == ".nsys-rep" else []
    cmd = [nsys, "stats", "--report", report, "--format", "csv", "--output", "-", *fresh, str(rep)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    text = out.stdout[out.stdout.index("\n", out.stdout.index("Processing [")) + 1 :]
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("stem", ["g_good", "g_bad", "e_good", "e_bad"])
def test_cycle_spans_equal_nsys_nvtx_gpu_projection(nsys: str, tmp_path: Path, stem: str) -> None:
    rep = tmp_path / f"{stem}.nsys-rep"
    shutil.copy(H200 / f"{stem}.nsys-rep", rep)  # nsys writes its .sqlite beside the report
    rows = [r for r in _stats(nsys, rep, "nvtx_gpu_proj_trace") if r["Name"] == "cycle"]
    assert rows, "nsys projected no `cycle` ranges"
    proj = pl.DataFrame(
        {
            "start": [int(r["Projected Start (ns)"]) for r in rows],
            "end": [
                int(r["Projected Start (ns)"]) + int(r["Projected Duration (ns)"]) for r in rows
            ],
            "ops": [int(r["NumGPUOps"]) for r in rows],
        }
    ).sort("start")
    run = load(H200 / f"{stem}.sqlite")  # the export of the same report
    ours = compare(run, run, cycle="cycle").cycles.filter(pl.col("side") == "base").sort("cycle")
    assert ours.height == proj.height
    assert (ours["start_ns"] - proj["start"]).abs().max() <= 1_000
    assert (ours["end_ns"] - proj["end"]).abs().max() <= 1_000
    if stem.startswith("e_"):  # graph captures: nsys counts a graph replay's kernels as 2 ops
        ev = compare(run, run, cycle="cycle").events.filter(pl.col("side") == "base")
        assert ev.group_by("cycle").len().sort("cycle")["len"].to_list() == proj["ops"].to_list()


def test_totals_equal_nsys_cuda_gpu_kern_sum(nsys: str, tmp_path: Path) -> None:
    """Per-kernel GPU time of a whole-run compare equals `nsys stats --report cuda_gpu_kern_sum`."""
    rep = tmp_path / "e_bad.nsys-rep"
    shutil.copy(H200 / "e_bad.nsys-rep", rep)
    rows = _stats(nsys, rep, "cuda_gpu_kern_sum")
    ref = (
        pl.DataFrame(
            {
                "name": [r["Name"] for r in rows],
                "ns": [int(r["Total Time (ns)"]) for r in rows],
                "n": [int(r["Instances"]) for r in rows],
            }
        )
        .group_by("name")
        .agg(pl.col("ns").sum(), pl.col("n").sum())
    )
    run = load(H200 / "e_bad.sqlite")
    tot = compare(run, run, cycle="whole").totals.filter(
        pl.col("kind").is_in(["kernel", "collective"])
    )
    j = ref.join(tot, on="name", how="full", coalesce=True)
    assert j.height == ref.height == tot.height  # same kernel names on both sides
    assert (j["n"] == j["base_count"]).all()
    assert ((j["ns"] / 1e6 - j["base_ms"]).abs() < 1e-6).all()


def test_generated_export_reads_in_nsys_like_a_capture(nsys: str, tmp_path: Path) -> None:
    """tests/support/gen_nsys.py writes what nsys itself can report on, and both tools cut the same cycles:
    nsys's projection of every `cycle` range (each rank's thread) equals our per-GPU cycle span."""
    t = write_report(tmp_path / "gen.sqlite", 2, 6, 24, [AddedCopy(3), HostGap(10, 30_000)], seed=7)
    rows = [r for r in _stats(nsys, t.path, "nvtx_gpu_proj_trace") if r["Name"] == "cycle"]
    proj = pl.DataFrame(
        {
            "pid": [int(r["PID"]) for r in rows],
            "start": [int(r["Projected Start (ns)"]) for r in rows],
            "dur": [int(r["Projected Duration (ns)"]) for r in rows],
            "ops": [int(r["NumGPUOps"]) for r in rows],
        }
    ).sort("pid", "start")
    assert proj.height == t.n_gpus * t.n_cycles
    assert (proj["ops"] == t.ops_per_cycle).all()
    run = load(t.path)
    ours = compare(run, run).cycles.filter(pl.col("side") == "base").sort("device_id", "cycle")
    assert ours["start_ns"].to_list() == proj["start"].to_list()
    assert ours["span_ns"].to_list() == proj["dur"].to_list()
    kern = _stats(nsys, t.path, "cuda_gpu_kern_sum")
    assert sum(int(r["Instances"]) for r in kern) == t.kernels
