"""`info --layout runs|ranks|auto` reads a folder of files as compare and parse do (issue 20):
nsys-style names by host are one run's ranks only with `--layout ranks`; rank-named files are
each a run with `--layout runs`. Input: HTA's two-rank `trace_filter` job."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson

from tests.support.cli import cli_run

KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto"
FILES = [KINETO / f"sampled_rank-{r}.json.gz" for r in (0, 1)]


def info(path: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    r = cli_run(["info", str(path), "--format", "json", *extra], timeout=300, text=False)
    assert r.returncode == 0, r.stderr
    return orjson.loads(r.stdout)  # type: ignore[no-any-return]


def test_info_layout_ranks_lists_a_folder_named_by_host_as_one_run(tmp_path: Path) -> None:
    for f, host in zip(FILES, ("node-a", "node-b"), strict=True):
        shutil.copy(f, tmp_path / f"{host}.json.gz")
    # by default: no rank in the names, but the data says one job (windows overlap, ranks 0
    # and 1): not read as a run set of two runs (issue 30), refused naming --layout ranks
    r = cli_run(["info", str(tmp_path)], timeout=300, text=False)
    assert r.returncode == 1 and b"one job's ranks by their data" in r.stderr
    assert b"--layout ranks" in r.stderr
    one = info(tmp_path, "--layout", "ranks", "--allow-missing-ranks")
    assert "runs" not in one
    assert [g["rank"] for g in one["gpus"]] == [0, 1]
    assert [Path(g["file"]).name for g in one["gpus"]] == ["node-a.json.gz", "node-b.json.gz"]


def test_info_layout_runs_lists_each_rank_file_as_a_run(tmp_path: Path) -> None:
    for f in FILES:
        shutil.copy(f, tmp_path / f.name)
    # by default: the names say ranks and so does the data: one run (its 126 other ranks allowed)
    assert "runs" not in info(tmp_path, "--allow-missing-ranks")
    runs = info(tmp_path, "--layout", "runs")["runs"]
    assert [Path(r["path"]).name for r in runs] == [f.name for f in FILES]
