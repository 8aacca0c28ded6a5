"""Outside oracle: `nsys stats` (the real 2024.2.3 CLI) must agree exactly with tracediff.

- cuda_gpu_kern_sum groups by demangled name only (2024.2 went back to that; the old grid/block
  grouping lives on as cuda_gpu_kern_gb_sum, checked too): instances and total time per group.
- cuda_api_sum: calls and total time per API (nsys strips only 4-digit `_vNNNN` suffixes, we
  strip any; both sides are normalised the same way before comparing).
- cuda_gpu_mem_time_sum: count and total time of all memcpy/memset operations.
Every nsys report and export bundled in tests/data is checked: the H200 reports go through
`nsys export` inside `nsys stats`; the public SQLite exports (schemas 2.9 to 3.25) directly.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from tracediff.parse import load

pytestmark = [pytest.mark.nsys]

DATA = Path(__file__).resolve().parent.parent / "data"
INPUTS = [DATA / "h200" / f"{s}.nsys-rep" for s in ("g_good", "g_bad", "e_good", "e_bad")] + sorted(
    (DATA / "nsys").glob("*/*.sqlite")
)
REPORTS = ["cuda_gpu_kern_sum", "cuda_gpu_kern_gb_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum"]


def _stats(nsys: str, src: Path, tmp: Path) -> dict[str, list[dict[str, str]] | None]:
    """Run nsys stats on a private copy (it writes an .sqlite beside a report); parse the CSVs."""
    copy = tmp / src.name
    shutil.copyfile(src, copy)
    copy.chmod(0o644)
    args = [nsys, "stats", "--format", "csv", "--output", "-"]
    if src.suffix == ".nsys-rep":
        args.append("--force-export=true")
    for r in REPORTS:
        args += ["--report", r]
    out = subprocess.run(
        args + [str(copy)], capture_output=True, text=True, timeout=300, check=True
    ).stdout
    tables: dict[str, list[dict[str, str]] | None] = {}
    for block in re.split(r"^Processing \[.*?\] with \[.*?/reports/", out, flags=re.M)[1:]:
        name, _, body = block.partition(".py]")
        lines = body.splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.startswith("Time (%)")), None)
        if any(ln.startswith("SKIPPED:") for ln in lines):  # e.g. no ENUM tables in schema 2.9
            tables[name] = None
        else:
            rows = [] if start is None else lines[start:]
            tables[name] = list(csv.DictReader(io.StringIO("\n".join(rows))))
    assert set(tables) == set(REPORTS), out[:500]
    return tables


def _xyz(s: str) -> tuple[int, ...]:
    return tuple(int(v) for v in s.split())


def _strip(name: str) -> str:
    return re.sub(r"_v\d+$", "", name)


@pytest.mark.parametrize("src", INPUTS, ids=lambda p: p.name)
def test_nsys_stats_agree(nsys: str, src: Path, tmp_path: Path) -> None:
    st = _stats(nsys, src, tmp_path)
    kern, kern_gb, api, mem = (st[r] for r in REPORTS)
    assert kern is not None and kern_gb is not None and api is not None
    run = load(src)
    k = pl.from_arrow(run.table("kernels"))
    assert isinstance(k, pl.DataFrame)
    k = k.with_columns(pl.col("name").cast(pl.String))

    want = {r["Name"]: (int(r["Instances"]), int(r["Total Time (ns)"])) for r in kern}
    got = k.group_by("name").agg(pl.len(), pl.col("duration_ns").sum())
    assert {n: (c, t) for n, c, t in got.iter_rows()} == want
    assert len(want) == k["name"].n_unique() > 0

    want_gb = {
        (r["Name"], _xyz(r["GridXYZ"]), _xyz(r["BlockXYZ"])): (
            int(r["Instances"]),
            int(r["Total Time (ns)"]),
        )
        for r in kern_gb
    }
    got_gb = k.group_by("name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z").agg(
        pl.len(), pl.col("duration_ns").sum()
    )
    assert {(r[0], r[1:4], r[4:7]): (r[7], r[8]) for r in got_gb.iter_rows()} == want_gb

    api_want: dict[str, tuple[int, int]] = {}
    for r in api:
        c, t = api_want.get(_strip(r["Name"]), (0, 0))
        api_want[_strip(r["Name"])] = (c + int(r["Num Calls"]), t + int(r["Total Time (ns)"]))
    a = pl.from_arrow(run.table("api_calls"))
    assert isinstance(a, pl.DataFrame)
    got_api = a.group_by(pl.col("name").cast(pl.String)).agg(pl.len(), pl.col("duration_ns").sum())
    assert {n: (c, t) for n, c, t in got_api.iter_rows()} == api_want

    if mem is None:
        assert src.name == "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"  # the only one nsys skips
        return
    m = pl.from_arrow(run.table("memops"))
    assert isinstance(m, pl.DataFrame)
    assert m.height == sum(int(r["Count"]) for r in mem)
    assert (m["duration_ns"].sum() or 0) == sum(int(r["Total Time (ns)"]) for r in mem)
