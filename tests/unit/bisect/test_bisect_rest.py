"""tracediff/bisect/rest.py: the rule that decides whether a range beside a culprit holds a further
change (`further`) and the culprit's share of its range (`share_of_range`)."""

from __future__ import annotations

import pytest

from tracediff.bisect import rest as br
from tracediff.bisect.follow import Q
from tracediff.engine.statistics import runstats as rs

CYCLE = {"what": "cycle time", "rows": []}
ROWS = {"what": "contributors", "rows": [["host", "verify", None, None]]}


class Cmp:
    """What `further` reads of an engine comparison (as in test_bisect_ends)."""

    def __init__(self, d: float, ci: tuple[float, float], p: float, sig: bool) -> None:
        self.delta_ms_per_cycle, self.delta_ci95, self.p_value, self.significant = d, ci, p, sig


def q(d: float, ci: tuple[float, float], sig: bool = True) -> Q:
    return Q("verify", d, sig, None, ci)


@pytest.mark.parametrize(
    ("d", "ci", "p", "sig", "expected"),
    [
        (8.0, (4.5, 11.5), 0.03, True, True),  # a real half: precise
        # significant at 95 %, as the former rule took it, but its CI reaches to an eighth of
        # it: drift between run sets or chance, not a culprit
        (2.4, (0.3, 4.6), 0.03, True, False),
        (8.0, (0.5, 16.0), 0.0008, True, True),  # a load spike widens it; runs fully apart
        (8.0, (0.5, 16.0), 0.002, True, False),  # ... but p above the sides' level
        (-8.0, (-11.5, -4.5), 0.001, True, False),  # faster, not a further regression
        (0.5, (0.3, 0.7), 0.0001, True, False),  # precise but immaterial: 0.5 of 16 (3 %)
        (8.0, (-1.0, 17.0), 0.3, False, False),
    ],
)
def test_a_further_change_on_the_cycle_time_needs_the_ends_protection(
    d: float, ci: tuple[float, float], p: float, sig: bool, expected: bool
) -> None:
    c = Cmp(d, ci, p, sig)
    assert br.further(c, [Q("cycle time", d, sig, p, ci)], 16.0, CYCLE) is expected


def test_the_sides_level_splits_the_p_route_and_8_runs_a_side_can_reach_it() -> None:
    assert br.SIDE_LEVEL == pytest.approx(0.01 / 8)
    assert rs.min_p(8, 8) <= br.SIDE_LEVEL < rs.min_p(4, 4)


def test_a_further_change_on_contributors_counts_only_the_precise_rows() -> None:
    c = Cmp(0.0, (-1.0, 1.0), 0.5, False)  # the cycle time does not decide here
    assert br.further(c, [q(0.017, (0.0168, 0.0172))], 0.034, ROWS)
    assert not br.further(c, [q(0.017, (0.002, 0.032))], 0.034, ROWS)  # imprecise
    assert not br.further(c, [q(0.017, (0.0168, 0.0172), sig=False)], 0.034, ROWS)
    assert not br.further(c, [q(0.002, (0.0019, 0.0021))], 0.034, ROWS)  # 6 % of the change


def test_the_share_of_its_range_takes_the_steps_ci_over_the_ranges_change() -> None:
    c = {"delta_ms_per_cycle": 8.0, "delta_ci95": [5.0, 11.0]}
    s, lo, hi = br.share_of_range(c, 8.0)
    assert (s, lo, hi) == (1.0, 0.625, 1.375) and "share_of_range_ci95" not in c
    s, lo, hi = br.share_of_range({"delta_ms_per_cycle": -8.0, "delta_ci95": [-11.0, -5.0]}, -8.0)
    assert (s, lo, hi) == (1.0, 0.625, 1.375)  # a speed-up bisected the same way


def test_known_evidence_leaves_only_significance_to_say_where() -> None:
    """A two-culprit seed at load 8: the side held 8.3 ms of a 16 ms change on 8 runs a side,
    significant but not precise, beside a step that had differed from both ends."""
    c = Cmp(8.3, (2.0, 14.6), 0.01, True)
    cycle = [Q("cycle time", 8.3, True, 0.01, (2.0, 14.6))]
    assert not br.further(c, cycle, 16.0, CYCLE)
    assert br.further(c, cycle, 16.0, CYCLE, known=True)
    # not a significant change, or not in the regression's direction, or immaterial: still no
    assert not br.further(Cmp(8.3, (-1.0, 17.0), 0.2, False), cycle, 16.0, CYCLE, known=True)
    assert not br.further(Cmp(-8.3, (-14.6, -2.0), 0.01, True), cycle, 16.0, CYCLE, known=True)
    assert not br.further(Cmp(0.5, (0.1, 0.9), 0.01, True), cycle, 16.0, CYCLE, known=True)
    rows = [q(0.017, (0.002, 0.032))]
    assert br.further(Cmp(0.0, (-1.0, 1.0), 0.5, False), rows, 0.034, ROWS, known=True)


def test_known_evidence_needs_the_fresh_runs_alone_to_show_the_change() -> None:
    """Seed 109 (session 9, load 4-5): an unchanged commit came out between its ends at 4 runs;
    its side passed at 8 runs a side (those 4 biased runs with 4 fresh: +1.68 ms, CI 0.11-3.25,
    p 0.039, of +10.14) while the fresh runs alone showed +0.75 ms. A real half keeps its
    change on fresh runs, a load spike on one of them included."""
    c = Cmp(1.68, (0.11, 3.25), 0.039, True)
    both = [Q("cycle time", 1.68, True, 0.039, (0.11, 3.25))]
    assert br.further(c, both, 10.14, CYCLE, known=True)  # without the fresh runs: as before
    fresh = [Q("cycle time", 0.75, False, 0.6, (-3.30, 5.40))]
    assert not br.further(c, both, 10.14, CYCLE, known=True, fresh=fresh)
    half = Cmp(8.3, (2.0, 14.6), 0.01, True)
    spiked = [Q("cycle time", 6.0, False, 0.11, (-1.0, 13.0))]  # one good run slowed by 8 ms
    assert br.further(
        half, [Q("cycle time", 8.3, True, 0.01, (2.0, 14.6))], 16.0, CYCLE, True, spiked
    )
    # rows alike: the fresh rows' summed change in the regression's direction
    rows = [q(0.017, (0.002, 0.032))]
    assert not br.further(
        Cmp(0.0, (-1.0, 1.0), 0.5, False), rows, 0.034, ROWS, True, [q(0.002, (-0.01, 0.01), False)]
    )
    assert br.further(
        Cmp(0.0, (-1.0, 1.0), 0.5, False), rows, 0.034, ROWS, True, [q(0.015, (-0.01, 0.04), False)]
    )
    # not known: the precision rule decides on the 2N runs a side, the fresh ones not asked
    precise = Cmp(8.0, (4.5, 11.5), 0.03, True)
    flat = [Q("cycle time", 0.0, False, 1.0, (-4.0, 4.0))]
    assert br.further(
        precise, [Q("cycle time", 8.0, True, 0.03, (4.5, 11.5))], 16.0, CYCLE, fresh=flat
    )


def test_a_looks_reach_is_the_most_of_the_change_its_ci_leaves_room_for() -> None:
    # a slower regression (+10 ms): a look of -1..+3 ms leaves room for 30 % beside the culprit
    assert br.reach((-1.0, 3.0), 10.0) == pytest.approx(0.3)
    # a faster one (-10 ms): the same look's -1 ms end is the regression's direction
    assert br.reach((-1.0, 3.0), -10.0) == pytest.approx(0.1)
    # a look that cannot say: room for anything
    assert br.reach((float("-inf"), 3.0), 10.0) == float("inf")
    assert br.reach((-1.0, 3.0), 0.0) == float("inf")
    # 40 % or more beside it is what the share's 60 % line looks for: not excluded
    assert br.reach((-1.0, 4.5), 10.0) >= 1 - br.SHARE_TO_CONTINUE


def test_known_evidence_takes_the_fresh_runs_alone_when_they_are_significant() -> None:
    """Two culprits at load 15-18: the side's fresh runs alone +13.7 ms (significant), with the
    ends' runs captured minutes before +6.8 (not): the second half is there."""
    pooled = Cmp(6.8, (-1.5, 15.0), 0.09, False)
    both = [Q("cycle time", 6.8, False, 0.09, (-1.5, 15.0))]
    fresh = [Q("cycle time", 13.7, True, 0.029, (4.0, 22.0))]
    assert br.further(pooled, both, 13.2, CYCLE, known=True, fresh=fresh)
    # not without the earlier evidence (`known`), nor when the fresh runs are not significant
    assert not br.further(pooled, both, 13.2, CYCLE, known=False, fresh=fresh)
    weak = [Q("cycle time", 13.7, False, 0.11, (-2.0, 29.0))]
    assert not br.further(pooled, both, 13.2, CYCLE, known=True, fresh=weak)
    # nor when they moved the other way, or too little of the change
    faster = [Q("cycle time", -13.7, True, 0.029, (-22.0, -4.0))]
    assert not br.further(pooled, both, 13.2, CYCLE, known=True, fresh=faster)
    tiny = [Q("cycle time", 0.9, True, 0.029, (0.2, 1.6))]
    assert not br.further(pooled, both, 13.2, CYCLE, known=True, fresh=tiny)


def test_a_side_is_unsure_when_its_change_is_significant_and_material_but_not_decided() -> None:
    # in the regression's direction, significant, >= MATERIAL of the change: more fresh runs
    half = [Q("verify", 5.5, True, None, (0.8, 10.2))]
    assert br.unsure(half, 17.3)
    assert not br.unsure([Q("verify", 5.5, False, None, (-0.8, 11.8))], 17.3)  # not significant
    assert not br.unsure([Q("verify", -5.5, True, None, (-10.2, -0.8))], 17.3)  # a speed-up
    assert not br.unsure([Q("verify", 1.0, True, None, (0.1, 1.9))], 17.3)  # < 10 % of 17.3
    # a speed-up bisected: the same rule, signs turned
    assert br.unsure([Q("verify", -5.5, True, None, (-10.2, -0.8))], -17.3)
