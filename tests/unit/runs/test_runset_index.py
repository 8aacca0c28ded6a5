"""The run-set index (tracediff/runs/runset.py) and the capture order of capture/runsets.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from capture.runsets import folder_name, interleave
from tracediff.base.errors import InputError, UnsupportedVersionError
from tracediff.parse import sides
from tracediff.runs import runset as rs

ROOT = Path(__file__).parent.parents[2]
G = ROOT / "samples" / "g_good.arrow"


def test_two_sets_are_abba() -> None:
    assert interleave(2, 4) == [(0, 1), (1, 1), (1, 2), (0, 2), (0, 3), (1, 3), (1, 4), (0, 4)]


@pytest.mark.parametrize(("sets", "repeat"), [(1, 3), (3, 4), (3, 5), (5, 2)])
def test_every_set_gets_every_run_once_and_the_same_mean_slot(sets: int, repeat: int) -> None:
    order = interleave(sets, repeat)
    assert sorted(order) == [(s, i) for s in range(sets) for i in range(1, repeat + 1)]
    # each round holds run r of every set, runs of one set in increasing order
    assert [i for _, i in order] == [r for r in range(1, repeat + 1) for _ in range(sets)]
    if repeat % 2 == 0:  # forward/backward rounds: every set's mean position is the same
        means = {
            s: sum(k for k, (t, _) in enumerate(order) if t == s) / repeat for s in range(sets)
        }
        assert len(set(means.values())) == 1, means


@pytest.mark.parametrize(
    ("ref", "sha", "name"),
    [
        ("good", "ab" * 20, "good"),
        ("feature/x", "ab" * 20, "feature-x"),
        ("HEAD~1", "ab" * 20, "HEAD-1"),
        ("abab", "ab" * 20, "abab"),  # too short to be read as a sha prefix
        ("ABABABA", "ab" * 20, "abababababab"),
        ("../..", "cd" * 20, "cdcdcdcdcdcd"),
    ],
)
def test_folder_names(ref: str, sha: str, name: str) -> None:
    assert folder_name(ref, sha) == name


def _runs(folder: Path, statuses: list[str]) -> None:
    runs = []
    for i, st in enumerate(statuses, 1):
        d = folder / f"run-{i:02d}"
        d.mkdir()
        # a real run each (an index that lists one capture twice is refused: issue 30)
        shutil.copy(ROOT / "samples" / "runs" / "good" / f"run-0{i}" / "run.arrow", d)
        (d / "manifest.json").write_text('{"manifest_version": 1}')
        # written out of order: the index is sorted by start time
        start = f"2026-01-01T00:00:{60 - i:02d}.000Z"
        runs.append({"name": d.name, "path": d.name, "status": st, "start_utc": start})
    rs.write_index(folder, {"name": "x", "commit": "ab" * 20, "runs": runs})


def test_index_round_trip_order_and_finished_runs(tmp_path: Path) -> None:
    _runs(tmp_path, ["ok", "failed", "ok", "running"])
    index = rs.read_index(tmp_path)
    text = (tmp_path / rs.INDEX).read_text()
    assert list(json.loads(text))[:2] == ["format_version", "kind"]
    assert [r["name"] for r in index["runs"]] == ["run-04", "run-03", "run-02", "run-01"]
    assert rs.finished_runs(tmp_path) == [tmp_path / "run-03", tmp_path / "run-01"]
    assert sides.list_runs(tmp_path) == [
        tmp_path / "run-03/run.arrow",
        tmp_path / "run-01/run.arrow",
    ]


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"format_version": 2}, UnsupportedVersionError, "newer than this tracediff reads"),
        ({"format_version": "1"}, InputError, "format_version missing"),
        ({"kind": "something"}, InputError, "not a tracediff runset.json"),
        ({"runs": [{"path": "run-01", "status": "done?"}]}, InputError, "known status"),
        ({"runs": [{"status": "ok"}]}, InputError, "with a path"),
    ],
)
def test_damaged_index_is_refused(
    tmp_path: Path, change: dict, error: type[Exception], match: str
) -> None:
    _runs(tmp_path, ["ok"])
    data = {**json.loads((tmp_path / rs.INDEX).read_text()), **change}
    (tmp_path / rs.INDEX).write_text(json.dumps(data))
    with pytest.raises(error, match=match):
        rs.read_index(tmp_path)


def test_index_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / rs.INDEX).write_text("{runs")
    with pytest.raises(InputError, match="not a readable runset.json"):
        rs.read_index(tmp_path)


def test_a_several_set_capture_folder_names_its_sets(tmp_path: Path) -> None:
    for name in ("good", "bad"):
        (tmp_path / name).mkdir()
        _runs(tmp_path / name, ["ok"])
    rs.write_json_atomic(
        tmp_path / rs.GROUP_INDEX,
        {"format_version": 1, "kind": rs.GROUP_KIND, "sets": {"good": {}, "bad": {}}},
    )
    # named in the index's order (the order the commits were given to capture), not sorted
    with pytest.raises(InputError, match=r"holds several run sets \(good, bad\)"):
        sides.list_runs(tmp_path)
    assert sides.list_runs(tmp_path / "bad") == [tmp_path / "bad/run-01/run.arrow"]


def test_a_folder_of_plain_reports_is_a_run_set(tmp_path: Path) -> None:
    for name in ("b", "a"):
        shutil.copy(G, tmp_path / f"{name}.arrow")
    assert sides.list_runs(tmp_path) == [tmp_path / "a.arrow", tmp_path / "b.arrow"]
