"""tracediff/bisect/step.decide: the per-commit rule of `tracediff bisect` (tracediff/bisect/bisection.py)."""

from __future__ import annotations

import pytest

from tracediff.bisect.follow import Q
from tracediff.bisect.step import between, decide, share_ci

TOTAL = Q("cycle time", 4.0, True, 0.03, (1.0, 7.0))  # GOOD -> BAD: 4 ms slower, significant


def q(delta: float, significant: bool) -> Q:
    return Q("cycle time", delta, significant, None, (0.0, 0.0))


@pytest.mark.parametrize(
    ("vs_good", "vs_bad", "expected"),
    [
        (q(4.1, True), q(-0.1, False), "bad"),  # moved from good, sits at bad
        (q(0.2, False), q(3.8, True), "good"),  # sits at good, bad is further on
        (q(2.5, True), q(1.5, True), "bad"),  # between the ends, past half the change
        (q(1.5, True), q(2.5, True), "good"),  # between, short of half: the culprit is later
        (q(2.0, False), q(2.0, False), None),  # told apart from neither: more runs
        (q(-3.0, True), q(7.0, True), "good"),  # faster than good: not the regression
        (q(-3.0, True), q(0.5, False), None),  # moved, but the other way, and not from bad
    ],
)
def test_decide(vs_good: Q, vs_bad: Q, expected: str | None) -> None:
    assert decide(vs_good, vs_bad, TOTAL) == expected


def test_a_speed_up_being_bisected_mirrors_the_rule() -> None:
    faster = Q("cycle time", -4.0, True, 0.03, (-7.0, -1.0))
    assert decide(q(-4.0, True), q(0.0, False), faster) == "bad"
    assert decide(q(0.0, False), q(-4.0, True), faster) == "good"


@pytest.mark.parametrize(
    ("vs_good", "vs_bad", "expected"),
    [
        (q(2.5, True), q(1.5, True), True),  # moved from both: the change is split around X
        (q(4.1, True), q(-0.1, False), False),  # at bad
        (q(2.0, True), q(2.0, False), False),  # told apart from one end only
        (q(-3.0, True), q(7.0, True), False),  # faster than good: not between
    ],
)
def test_between(vs_good: Q, vs_bad: Q, expected: bool) -> None:
    assert between(vs_good, vs_bad, TOTAL) is expected


def test_a_near_tie_between_the_ends_is_undecided_until_its_ci_leaves_the_line() -> None:
    """Issue 31's red herring: between the ends at 47 % of the change, its CI across the 50 %
    line: not "like good" as a plain decision, but more runs first (at the cap: by closeness,
    flagged, with its margin)."""
    tie = Q("cycle time", 0.47 * 4.0, True, None, (0.8, 3.0))  # 20-75 % of the change
    assert decide(tie, q(2.1, True), TOTAL) is None
    clear = Q("cycle time", 0.47 * 4.0, True, None, (1.6, 1.9))  # 40-47.5 %: short of half
    assert decide(clear, q(2.1, True), TOTAL) == "good"
    assert share_ci(tie, TOTAL) == pytest.approx((0.2, 0.75))
    unbounded = Q("cycle time", 2.0, True, None, (float("-inf"), float("inf")))
    assert share_ci(unbounded, TOTAL) == (float("-inf"), float("inf"))
