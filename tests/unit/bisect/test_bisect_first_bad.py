"""tracediff/bisect/result.first_bad and bisect_share.seen_again: which culprit `tracediff bisect`
names first when fresh runs did not see a culprit's change again (and how that rule differs from
a look's, bisect_rest.moved), and how the report says so."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tracediff.bisect.follow import Q
from tracediff.bisect.rest import moved
from tracediff.bisect.result import first_bad
from tracediff.bisect.share import ci_of, seen_again
from tracediff.report import bisect as report

H200 = Path(__file__).parent.parents[1] / "data" / "h200-bisect" / "bisect-auto.json"


def _c(sha: str, confirmed: bool | None) -> dict:
    return {"commit": sha, "confirmed": confirmed}


def test_a_culprit_whose_change_did_not_hold_is_not_named_first() -> None:
    # the first search's culprit, unless its fresh runs showed nothing and a later one's held
    assert first_bad([_c("a", None), _c("b", True)])["commit"] == "a"
    assert first_bad([_c("a", True), _c("b", True)])["commit"] == "a"
    assert first_bad([_c("a", False), _c("b", True)])["commit"] == "b"
    assert first_bad([_c("a", False), _c("b", None), _c("c", True)])["commit"] == "b"
    # none held: the first search's stays (the result says it is a guess)
    assert first_bad([_c("a", False), _c("b", False)])["commit"] == "a"
    # a state file of older code has no `confirmed`: as before
    assert first_bad([{"commit": "a"}, {"commit": "b"}])["commit"] == "a"


def test_seen_again_is_the_ci_excluding_zero_on_the_regressions_side() -> None:
    assert seen_again((0.1, 2.0), 1.0) and not seen_again((-0.1, 2.0), 1.0)
    assert not seen_again((0.0, 2.0), 1.0)
    assert seen_again((-2.0, -0.1), -1.0) and not seen_again((0.1, 2.0), -1.0)  # a speed-up


def test_a_look_takes_any_row_and_a_culprits_confirmation_the_summed_change() -> None:
    """bisect_rest.moved and seen_again agree on the cycle time; over several followed rows a
    look beside a culprit is moved by one row (a miss there is final), while a culprit's change
    is seen again only when the rows' summed CI excludes 0 (a false "held" names a red herring)."""
    for ci in ((0.5, 3.0), (-0.5, 3.0), (-3.0, -0.5)):
        cycle = [Q("cycle time", sum(ci) / 2, ci[0] > 0 or ci[1] < 0, None, ci)]
        assert moved(cycle, 1.0) is seen_again(ci_of(cycle), 1.0)
    rows = [
        Q("verify", 0.02, True, None, (0.01, 0.03)),
        Q("draft", 0.0, False, None, (-0.02, 0.02)),
    ]
    assert moved(rows, 0.03) and not seen_again(ci_of(rows), 0.03)
    assert moved(rows[:1], 0.03) and seen_again(ci_of(rows[:1]), 0.03)


def test_the_report_says_which_culprit_did_not_hold_and_when_first_bad_is_a_guess() -> None:
    real = json.loads(H200.read_text())  # the bundled H200 pool's bisect, one culprit
    plain = report.render_table(real)
    assert "not confirmed" not in plain and "best guess" not in plain
    r = copy.deepcopy(real)
    r["culprits"][0]["confirmed"] = False
    r["first_bad_confirmed"] = False
    for text in (report.render_table(r), report.render_markdown(r)):
        first = next(ln for ln in text.splitlines() if "irst bad" in ln)
        assert "best guess" in first
        assert text.count("did not see its change again") == 1, text  # the one culprit
    # a confirmed culprit beside one that did not hold: only the latter is marked
    assert "did not see" not in report.render_table({**r, "culprits": real["culprits"]})
