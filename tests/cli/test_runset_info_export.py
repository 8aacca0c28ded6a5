"""`tracediff info` and `tracediff export` on a run-set folder (issue 22): the folder stands for
its runs (parse/sides.resolve), read one at a time. Checked against each run read on its own."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from tests.support.cli import cli_run
from tracediff.parse import load
from tracediff.parse.sides import resolve
from tracediff.runs import schema
from tracediff.runs.runfile import Run, write_run

ROOT = Path(__file__).resolve().parent.parent.parent
GOOD = ROOT / "samples" / "runs" / "good"


def td(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return cli_run(args, timeout=300)


def _alone(path: Path) -> tuple[int, int]:
    """(kernels, 'cycle' NVTX ranges) of one run read by itself."""
    run = load(path)
    nvtx = pl.from_arrow(run.table("nvtx_ranges"))
    assert isinstance(nvtx, pl.DataFrame)
    return run.table("kernels").num_rows, int((nvtx["name"].cast(pl.String) == "cycle").sum())


def test_info_lists_each_run_with_its_cycles_and_kernels() -> None:
    runs = resolve(GOOD).runs
    assert len(runs) == 4
    r = td("info", GOOD, "--format", "json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert [Path(x["path"]).resolve() for x in info["runs"]] == [p.resolve() for p in runs]
    assert info["cycle_rule"] == "nvtx:cycle"
    for row, path in zip(info["runs"], runs, strict=True):
        kernels, cycle_ranges = _alone(path)
        assert (row["kernels"], row["cycles"]) == (kernels, cycle_ranges)
        assert row["cycle_error"] is None
    # each run's mean cycle time is the sample compare's run-set verdict takes for that run
    cmp = td("compare", GOOD, GOOD.parent / "bad", "--format", "json")
    assert cmp.returncode == 0, cmp.stderr
    means = json.loads(cmp.stdout)["base"]["run_means_ms"]
    assert [round(x["mean_cycle_ms"], 9) for x in info["runs"]] == [round(m, 9) for m in means]
    assert max(means) - min(means) > 1.0  # the runs differ (host-bound draft swing): not one copy
    table = td("info", GOOD)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("input: 4 runs of one workload (4 processes on GPU-83132acf…")
    assert lines[1].startswith("run set") and "(4 runs)" in lines[1]
    for row in info["runs"]:
        line = next(ln for ln in lines if row["path"] in ln)
        assert line.split()[1:5] == [
            str(row["cycles"]),
            f"{row['mean_cycle_ms']:.3f}",
            "ms",
            str(row["kernels"]),
        ]


def test_info_on_one_capture_folder_is_one_run() -> None:
    r = td("info", GOOD / "run-01")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("input: 1 run (process 545 on GPU-83132acf…")
    assert r.stdout.splitlines()[1].startswith("source ") and "run set" not in r.stdout


def test_info_says_which_run_the_rule_cannot_cut(tmp_path: Path) -> None:
    # a run set of a marked run and a run of the same workload whose NVTX ranges were lost (as
    # an nvtx package nsys drops records none): the second is named, not recut. (A run of
    # another workload is refused outright: tests/cli/test_decided_inputs.py.)
    rs = tmp_path / "mixed"
    rs.mkdir()
    shutil.copy(GOOD / "run-01" / "run.arrow", rs / "a.arrow")
    other = load(GOOD / "run-02" / "run.arrow")
    tables = {n: other.table(n) for n in schema.TABLES}
    tables["nvtx_ranges"] = schema.empty("nvtx_ranges")
    meta = {k: v for k, v in other.metadata.items() if k not in ("identity", "run_file")}
    write_run(Run(tables=tables, metadata=meta), rs / "b.arrow")
    r = td("info", rs, "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["runs"]
    assert rows[0]["cycles"] == 20 and rows[0]["cycle_error"] is None
    assert rows[1]["cycles"] is None and rows[1]["cycle_error"]
    assert "not cut:" in td("info", rs).stdout


def test_export_writes_each_run_of_a_set(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    r = td("export", GOOD, "--parquet", out)
    assert r.returncode == 0, r.stderr
    runs = resolve(GOOD).runs
    parts = sorted(p.name for p in (out / "kernels").iterdir())
    assert parts == [f"run=good-run-0{i}" for i in range(1, 5)]
    for i, path in enumerate(runs, 1):
        kernels, _ = _alone(path)
        got = pq.read_table(out / "kernels" / f"run=good-run-0{i}").num_rows
        assert got == kernels
    marker = json.loads((out / "_tracediff.json").read_text())
    assert marker["tables"]["runs"] == 4
    inputs = pq.read_table(out / "runs" / "part-0.parquet").column("input_path").to_pylist()
    assert [Path(p).resolve() for p in inputs] == [p.resolve() for p in runs]
