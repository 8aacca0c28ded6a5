"""bisect's search order (tracediff/bisect/order.choose), walked over every range of up to 16
commits, every first bad commit and every top suspect (right, wrong, none): the search ends at
the first bad commit, never takes more decided steps than the binary search's bound, and with
a right suspect never more than binary search and fewer in all.
"""

from __future__ import annotations

import pytest

from tracediff.bisect.order import choose, steps_for

N_MAX = 16


def walk(n: int, culprit: int, suspect: int | None, skipped: frozenset[int] = frozenset()):
    """(last like-good, first like-bad, decided steps, probes) of a search over commits 0..n
    (0 good, n bad) whose first bad commit is `culprit`."""
    lo, hi, steps, left, probes = 0, n, 0, steps_for(n), []
    while True:
        cand = [i for i in range(lo + 1, hi) if i not in skipped]
        if not cand:
            return lo, hi, steps, probes
        x, how = choose(cand, lo, hi, left, suspect)
        probes.append((x, how))
        if x in skipped:
            raise AssertionError(f"probed skipped {x}")
        steps, left = steps + 1, left - 1
        if x >= culprit:
            hi = x
        else:
            lo = x


@pytest.mark.parametrize("n", range(2, N_MAX + 1))
def test_every_suspect_keeps_the_bound_and_finds_the_culprit(n: int) -> None:
    for culprit in range(1, n + 1):
        for suspect in [None, *range(1, n + 1)]:
            lo, hi, steps, _ = walk(n, culprit, suspect)
            assert (lo, hi) == (culprit - 1, culprit), (n, culprit, suspect)
            assert steps <= steps_for(n), (n, culprit, suspect)


def test_a_right_suspect_never_costs_more_than_binary_and_saves_in_all() -> None:
    right = binary = 0
    for n in range(2, N_MAX + 1):
        for c in range(1, n + 1):
            r, b = walk(n, c, c)[2], walk(n, c, None)[2]
            assert r <= b, (n, c)
            right, binary = right + r, binary + b
    assert right < 0.8 * binary, (right, binary)


def test_seven_commits() -> None:
    # the 7-commit range of the bisect tests: bound 3; a right suspect at 3, 5, 7 needs 2
    assert [walk(7, c, c)[2] for c in range(1, 8)] == [2, 3, 2, 3, 2, 3, 2]
    assert [walk(7, c, None)[2] for c in range(1, 8)] == [2, 3, 3, 3, 3, 3, 3]
    # suspect 5 right: its parent 4 first (like good), then 5 (like bad)
    assert walk(7, 5, 5)[3] == [(4, "suspect"), (5, "suspect")]
    # suspect 6 wrong (5 is the culprit): a step toward it (6 and 5 are not allowed first),
    # then its parent 5 (like bad: the suspect is out), then the middle
    assert walk(7, 5, 6)[2:] == (3, [(3, "toward suspect"), (5, "suspect"), (4, "middle")])
    # suspect 3 wrong: probed first (like good), then the binary search's middle
    assert walk(7, 5, 3)[2:] == (3, [(3, "suspect"), (5, "middle"), (4, "middle")])


def test_without_a_suspect_it_is_the_binary_search_s_middle() -> None:
    for n in range(2, N_MAX + 1):
        for c in range(1, n + 1):
            for _, how in walk(n, c, None)[3]:
                assert how == "middle"
    # the middle rule: nearest (lo + hi) / 2, ties to the lower index
    assert choose([1, 2, 3, 4, 5, 6], 0, 7, 3, None) == (3, "middle")


def test_skipped_commits_are_never_probed() -> None:
    for n in range(3, 10):
        for c in range(1, n + 1):
            for s in (None, c, 1, n):
                skip = frozenset({n // 2})
                lo, hi, _, _ = walk(n, c, s, skip)
                # the culprit lies in (lo, hi], only skipped commits between them
                assert lo < c <= hi and all(i in skip for i in range(lo + 1, hi))
