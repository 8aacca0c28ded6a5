"""bisect's OUTDIR state (tracediff/bisect/state.py): what a resume may change, and what it keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediff.base.errors import OutputError
from tracediff.bisect import state as bstate


def key(**over: object) -> dict[str, object]:
    k: dict[str, object] = {
        "good": "a" * 40, "bad": "b" * 40, "repeat": 4, "max_runs": 8, "contributor": None,
        "cycle": None, "pool": None, "live": True,
    }  # fmt: skip
    return {**k, **over}


def test_a_larger_repeat_or_max_runs_resumes_and_keeps_what_was_spent(tmp_path: Path) -> None:
    state = bstate.load(tmp_path, key())
    state.update(skipped={"c" * 40: "does not run"}, wall_s_call=185.0)
    state["log"] = [{"step": 0, "commit": "b" * 40, "against": "a" * 40, "wall_s": 60.0}]
    bstate.save(tmp_path, state)
    again = bstate.load(tmp_path, key(repeat=8, max_runs=16))
    assert again["repeat"] == 8 and again["max_runs"] == 16
    assert again["resumed_from"] == {"repeat": 4, "max_runs": 8}
    assert again["skipped"] == state["skipped"] and again["log"] == []
    assert again["wall_s_before"] == 185.0 and again["earlier_log"] == state["log"]
    again["wall_s_call"] = 15.0
    bstate.save(tmp_path, again)
    third = bstate.load(tmp_path, key(repeat=8, max_runs=16))
    assert third["wall_s_before"] == 200.0 and "resumed_from" not in third


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ({"repeat": 2}, "more runs (--repeat 2 < 4)"),
        ({"max_runs": 6}, "more runs (--max-runs 6 < 8)"),
        ({"contributor": "verify"}, "other settings (contributor)"),
    ],
)
def test_less_evidence_or_another_question_is_refused(
    tmp_path: Path, over: dict[str, object], says: str
) -> None:
    bstate.save(tmp_path, bstate.load(tmp_path, key()))
    with pytest.raises(OutputError, match=r"bisect.json: holds a bisection with ") as e:
        bstate.load(tmp_path, key(**over))
    assert says in e.value.message
