"""What a side of a comparison is: one run, or a folder of runs (a run set), or refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from tracediff.base.errors import InputError
from tracediff.parse.ranks.ranknames import looks_like_ranks, parse_name
from tracediff.parse.sides import resolve

ROOT = Path(__file__).resolve().parent.parents[2]
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
    for k, name in enumerate(("b", "a", "c")):  # three real runs (an index refuses a copy)
        d = tmp_path / name
        d.mkdir()
        shutil.copy(ROOT / "samples" / "runs" / "good" / f"run-0{k + 1}" / "run.arrow", d)
        (d / "manifest.json").write_text('{"manifest_version": 1}')
    assert [p.parent.name for p in resolve(tmp_path).runs] == ["a", "b", "c"]
    # an index wins: its order (the capture order), and unfinished runs left out
    runs = [
        {"path": "c", "status": "ok"},
        {"path": "a", "status": "ok"},
        {"path": "b", "status": "running"},
    ]
    index = {
        "format_version": 1,
        "kind": "tracediff.runset",
        "runs": runs,
    }  # tracediff/runs/runset.py
    (tmp_path / "runset.json").write_bytes(orjson.dumps(index))
    side = resolve(tmp_path)
    assert [p.parent.name for p in side.runs] == ["c", "a"] and side.runs[0].name == "run.arrow"


def test_one_capture_folder_is_one_run(tmp_path: Path) -> None:
    shutil.copy(G, tmp_path / "run.arrow")
    (tmp_path / "manifest.json").write_text('{"manifest_version": 1}')
    side = resolve(tmp_path)
    assert side.runs == (tmp_path / "run.arrow",) and not side.is_run_set


def test_per_rank_files_of_one_run_are_one_run(tmp_path: Path) -> None:
    for r in range(4):
        shutil.copy(G, tmp_path / f"trace-TP-{r}.json.gz")
    side = resolve(tmp_path)
    assert side.runs == (tmp_path,) and not side.is_run_set
    forced = resolve(tmp_path, "runs")
    assert len(forced.runs) == 4 and forced.is_run_set  # forced


def test_a_folder_of_rank_folders_is_a_run_set(tmp_path: Path) -> None:
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        for r in range(2):
            shutil.copy(G, tmp_path / run / f"rank-{r}.json.gz")
    side = resolve(tmp_path)
    assert side.runs == (tmp_path / "a", tmp_path / "b") and side.is_run_set


def test_two_groups_of_rank_files_are_refused_saying_what_was_found(tmp_path: Path) -> None:
    for t in ("1733000000.1", "1733000099.5"):
        for r in range(2):
            shutil.copy(G, tmp_path / f"{t}-TP-{r}.trace.json.gz")
    with pytest.raises(InputError, match=r"ambiguous.*2 files 1733000000\.1-TP-0.*2 files"):
        resolve(tmp_path)
    assert len(resolve(tmp_path, "runs").runs) == 4


def test_rank_files_beside_another_file_are_refused(tmp_path: Path) -> None:
    for r in range(2):
        shutil.copy(G, tmp_path / f"rank-{r}.json.gz")
    shutil.copy(G, tmp_path / "summary.json.gz")
    with pytest.raises(InputError, match="without a rank token"):
        resolve(tmp_path)


@pytest.mark.parametrize(
    "names,ranks",
    [
        (["rank-0.json", "rank-1.json"], True),
        (["host.rank0.pt.trace.json", "host.rank1.pt.trace.json"], True),
        (["1.5-TP-0-DP-0.trace.json.gz", "1.5-TP-1-DP-0.trace.json.gz"], True),  # SGLang
        (["1.5-TP-0-DP-0.trace.json.gz", "1.5-TP-0-DP-0.trace.json.gz.1"], False),
        (["TP-0.json", "TP-0-DP-1.json"], False),  # different token kinds
        (["run1.json", "run2.json"], False),  # repeats numbered, not ranks
        (["rank-0.json", "rank-0.json.bak"], False),
        (["good_rank-0_a.json", "good_rank-1_b.json"], False),  # differ elsewhere too
    ],
)
def test_rank_rule(names: list[str], ranks: bool) -> None:
    assert looks_like_ranks([Path(n) for n in names]) is ranks


def test_rank_tokens() -> None:
    def tokens(name: str) -> tuple[tuple[str, int], ...] | None:
        n = parse_name(Path(name))
        return None if n is None else n.tokens

    assert tokens("x.rank-3.json") == (("rank", 3),)
    assert tokens("TP-2.json") == (("tp", 2),)
    assert tokens("run-7.json") is None
    # SGLang: TP first in the name, ordered pipeline-major here
    assert tokens("1733.2-TP-3-DP-1-PP-0-EP-3-DECODE.trace.json.gz") == (
        ("pp", 0),
        ("dp", 1),
        ("tp", 3),
        ("ep", 3),
    )


def test_mixed_and_empty_folders_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no run in it"):
        resolve(tmp_path)
    shutil.copy(G, tmp_path / "a.arrow")
    shutil.copy(ROOT / "tests/data/h200/g_good.sqlite", tmp_path / "b.sqlite")
    with pytest.raises(InputError, match="mixes file types"):
        resolve(tmp_path)


def test_each_rank_as_sqlite_and_as_nsys_rep_is_refused(tmp_path: Path) -> None:
    """nsys leaves a report's .sqlite beside its .nsys-rep: two groups of per-rank files."""
    for r in range(2):
        shutil.copy(ROOT / "tests/data/h200/g_good.sqlite", tmp_path / f"report_rank{r}.sqlite")
        shutil.copy(ROOT / "tests/data/h200/g_good.nsys-rep", tmp_path / f"report_rank{r}.nsys-rep")
    with pytest.raises(InputError, match=r"ambiguous.*report_rank0.nsys-rep .. report_rank1.nsys"):
        resolve(tmp_path)
