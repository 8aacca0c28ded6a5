"""A step's capture order with fewer fresh runs of its end than of its commit (issue 31)."""

from __future__ import annotations

import pytest

from capture.runsets import interleave, spread
from tracediff.bisect.bisection import fresh_count


def test_unequal_counts_are_spread_so_each_sets_mean_slot_is_the_middle() -> None:
    order = spread([2, 4])
    assert ["AX"[s] for s, _ in order] == list("XAXXAX")
    for s in (0, 1):
        slots = [k for k, (t, _) in enumerate(order) if t == s]
        assert sum(slots) / len(slots) == pytest.approx((len(order) - 1) / 2)
    # every run once, in its own order
    assert sorted(order) == [(0, 1), (0, 2), (1, 1), (1, 2), (1, 3), (1, 4)]


def test_the_runs_added_to_an_undecided_step_keep_the_spread() -> None:
    first = spread([2, 4])
    more = [x for x in spread([3, 6]) if x not in first]
    assert more == [(1, 5), (0, 3), (1, 6)]


@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_equal_counts_are_the_interleaved_order(n: int) -> None:
    assert spread([n, n]) == interleave(2, n)


def test_a_step_takes_a_quarter_as_many_fresh_runs_of_each_end() -> None:
    assert [fresh_count(n) for n in (2, 3, 4, 6, 8)] == [1, 1, 1, 2, 2]


def test_a_step_beside_fresh_runs_of_both_ends_has_every_set_centred() -> None:
    # X X A B X X: GOOD's and BAD's fresh runs both at the call's middle, as X's mean run is
    order = spread([1, 4, 1])
    assert ["AXB"[s] for s, _ in order] == list("XXABXX")
    more = [x for x in spread([2, 6, 2]) if x not in order]  # an undecided step's 2 more runs
    assert len(more) == 4 and {s for s, _ in more} == {0, 1, 2}
    for s in (0, 1, 2):
        slots = [k for k, (t, _) in enumerate(spread([2, 6, 2])) if t == s]
        assert sum(slots) / len(slots) == pytest.approx((10 - 1) / 2)
