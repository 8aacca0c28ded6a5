"""`np.searchsorted` of many values in a short sorted array, the same numbers, faster.

Stage: none (a numeric leaf, numpy only). Where a million op launch times, in order, are looked
up among a few thousand range starts (engine/cycle/launch.py `_search`), numpy's binary search
costs ~20 ns a value (~20 ms a search at x500, four a compare); searching the few starts among
the values and spreading the answer is one pass (~1 ms). Where millions of values in any order
are looked up among a handful (the processes of an 8-GPU report: parse/nsys/tables.py `pack`),
counting the array's values below each value, one comparison pass each, takes a quarter of it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["search_sorted"]

RATIO = 8
"""The values must outnumber the array this many times for the search to be turned round."""

FEW = 16
"""An array this short is searched by counting (a pass over the values for each of its own)."""


def search_sorted(a: np.ndarray, v: np.ndarray, side: str = "left") -> np.ndarray:
    """`np.searchsorted(a, v, side)` (intp), the same numbers; `a` sorted, as numpy requires.
    Where `v` is much longer than `a`: `a` of at most `FEW` values, each of `v`'s answers is
    counted; else, `v` sorted too, each of `a`'s values is searched among `v`'s instead, and the
    answer of each of `v` is the count of `a`'s values before it."""
    n, m = len(a), len(v)
    if m < 2 or n * RATIO > m:
        return np.searchsorted(a, v, side=side)  # type: ignore[call-overload, no-any-return]
    if n <= FEW:
        return _counted(a, v, side)
    if not bool((v[1:] >= v[:-1]).all()):
        return np.searchsorted(a, v, side=side)  # type: ignore[call-overload, no-any-return]
    # v[i] counts a[j] (side right: a[j] <= v[i]; left: a[j] < v[i]) from the first i at which
    # that holds: b[j], where a[j] falls among v searched from the other side; b rises with a
    b = np.searchsorted(v, a, side="left" if side == "right" else "right")
    return np.repeat(np.arange(n + 1, dtype=np.intp), np.diff(b, prepend=0, append=m))


def _counted(a: np.ndarray, v: np.ndarray, side: str) -> np.ndarray:
    """How many of `a`'s values come before each of `v` (left: below it; right: not above)."""
    count = np.zeros(len(v), np.uint8)
    for x in a:
        np.add(count, v > x if side == "left" else v >= x, out=count, casting="unsafe")
    return count.astype(np.intp)
