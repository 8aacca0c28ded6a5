"""compare, info, export and whatif take a folder of one run's per-rank files, and compare a
folder of such folders as a run set (issue 20), on HTA's two-rank `trace_filter` job."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.support.cli import cli_run

KINETO = Path(__file__).resolve().parents[1] / "data" / "kineto"
FILES = [KINETO / f"sampled_rank-{r}.json.gz" for r in (0, 1)]


def td(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return cli_run(args, timeout=300, text=False)


def _job(d: Path) -> Path:
    d.mkdir(parents=True)
    for f in FILES:
        shutil.copy(f, d / f.name)
    return d


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sets")
    for side in ("base", "head"):
        for run in ("run-1", "run-2"):
            _job(root / side / run)
    return root


def test_info_and_export_read_a_rank_folder_as_one_run(sets: Path, tmp_path: Path) -> None:
    job = sets / "base" / "run-1"
    # the traces say world size 128: two of its ranks are refused unless asked for (issue 30)
    for cmd in (("info", job), ("export", job, "--parquet", tmp_path / "no")):
        r = td(*cmd)
        assert r.returncode == 1 and b"ranks 2-127 of world size 128 have no file" in r.stderr
        assert not (tmp_path / "no").exists()
    r = td("info", job, "--format", "json", "--allow-missing-ranks")
    assert r.returncode == 0, r.stderr
    info = orjson.loads(r.stdout)
    assert [g["rank"] for g in info["gpus"]] == [0, 1] and len(info["files"]) == 2
    assert [d["device_id"] for d in info["devices"]] == [0, 1]
    assert info["identity"]["missing_ranks"] == list(range(2, 128))
    assert info["decided"].startswith("input: 1 run of 2 ranks (world size 128, one job")
    e = td("export", job, "--parquet", tmp_path / "pq", "--allow-missing-ranks")
    assert e.returncode == 0, e.stderr
    assert sorted(p.name for p in (tmp_path / "pq" / "kernels").iterdir()) == ["run=run-1"]


def test_a_folder_of_rank_folders_is_a_run_set(sets: Path) -> None:
    r = td("compare", sets / "base", sets / "head", "--format", "json", "--allow-missing-ranks")
    assert r.returncode == 0, r.stderr
    d = orjson.loads(r.stdout)
    assert d["inputs"]["allow_missing_ranks"] is True
    assert d["inputs"]["base"]["line"].startswith("base: 2 runs of 2 ranks each of one workload")
    # run-1 and run-2 hold copies of the same files: said, not silently counted as two runs
    assert any("are the same capture" in w for w in d["warnings"])
    assert d["runs"] == {"base": 2, "head": 2}
    assert d["base"]["devices"] == [0, 1] and d["base"]["cycles"] > 0
    assert {p["by"] for p in d["device_map"]} == {"rank"}
    # the same data on both sides: nothing is added or removed
    assert not {a["status"] for a in d["attribution"]} & {"added", "removed"}


def test_whatif_takes_rank_folders(sets: Path) -> None:
    r = td(
        "whatif", sets / "base" / "run-1", sets / "head" / "run-1", "--take", "all",
        "--allow-missing-ranks",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert b"what-if" in r.stdout
