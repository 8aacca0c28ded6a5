"""What a side of a comparison is: one run, or a folder of runs (a run set), or refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from tracediff.errors import InputError
from tracediff.parse.sides import looks_like_ranks, rank_of, resolve

ROOT = Path(__file__).resolve().parents[2]
G = ROOT / "samples" / "g_good.arrow"


def test_a_file_is_one_run() -> None:
    side = resolve(G)
    assert side.runs == (G,) and not side.is_run_set


def test_a_folder_of_reports_is_a_run_set_in_name_order(tmp_path: Path) -> None:
    for i in (2, 0, 1):
        shutil.copy(G, tmp_path / f"good_{i}.arrow")
    (tmp_path / "notes.txt").write_text("not a run")
    side = resolve(tmp_path)
    assert side.is_run_set
    assert [p.name for p in side.runs] == ["good_0.arrow", "good_1.arrow", "good_2.arrow"]


def test_capture_folders_and_the_index_order(tmp_path: Path) -> None:
    for name in ("b", "a", "c"):
        d = tmp_path / name
        d.mkdir()
        shutil.copy(G, d / "run.arrow")
        (d / "manifest.json").write_text('{"manifest_version": 1}')
    assert [p.parent.name for p in resolve(tmp_path).runs] == ["a", "b", "c"]
    # an index wins: its order (the capture order), and unfinished runs left out
    runs = [
        {"path": "c", "status": "ok"},
        {"path": "a", "status": "ok"},
        {"path": "b", "status": "running"},
    ]
    index = {"format_version": 1, "kind": "tracediff.runset", "runs": runs}  # tracediff/runset.py
    (tmp_path / "runset.json").write_bytes(orjson.dumps(index))
    side = resolve(tmp_path)
    assert [p.parent.name for p in side.runs] == ["c", "a"] and side.runs[0].name == "run.arrow"


def test_one_capture_folder_is_one_run(tmp_path: Path) -> None:
    shutil.copy(G, tmp_path / "run.arrow")
    (tmp_path / "manifest.json").write_text('{"manifest_version": 1}')
    side = resolve(tmp_path)
    assert side.runs == (tmp_path / "run.arrow",) and not side.is_run_set


def test_per_rank_files_of_one_run_are_not_read_as_repeats(tmp_path: Path) -> None:
    for r in range(4):
        shutil.copy(G, tmp_path / f"trace-TP-{r}.json.gz")
    with pytest.raises(InputError, match="per-rank files of one run"):
        resolve(tmp_path)
    assert len(resolve(tmp_path, "runs").runs) == 4  # forced


@pytest.mark.parametrize(
    "names,ranks",
    [
        (["rank-0.json", "rank-1.json"], True),
        (["host.rank0.pt.trace.json", "host.rank1.pt.trace.json"], True),
        (["TP-0-DP-0.json", "TP-1-DP-0.json"], False),  # two rank kinds per name: not decided here
        (["run1.json", "run2.json"], False),  # repeats numbered, not ranks
        (["rank-0.json", "rank-0.json.bak"], False),
        (["good_rank-0_a.json", "good_rank-1_b.json"], False),  # differ elsewhere too
    ],
)
def test_rank_rule(names: list[str], ranks: bool) -> None:
    assert looks_like_ranks([Path(n) for n in names]) is ranks


def test_rank_of() -> None:
    assert rank_of("x.rank-3.json") == ("rank", 3)
    assert rank_of("TP-2.json") == ("tp", 2)
    assert rank_of("run-7.json") is None


def test_mixed_and_empty_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no run in it"):
        resolve(tmp_path)
    shutil.copy(G, tmp_path / "a.arrow")
    shutil.copy(ROOT / "tests/data/h200/g_good.sqlite", tmp_path / "b.sqlite")
    with pytest.raises(InputError, match="mixes file types"):
        resolve(tmp_path)
