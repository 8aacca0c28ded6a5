"""`np.searchsorted` of many sorted values in a short sorted array, turned round.

Stage: none (a numeric leaf, numpy only). Used where a million op launch times, in order, are
looked up among a few thousand range starts (engine/cycle/launch.py `_search`): numpy's
binary search costs ~20 ns a value there (~20 ms a search at x500, four a compare), where
searching the few starts among the values and spreading the answer is one pass (~1 ms).
"""

from __future__ import annotations

import numpy as np

__all__ = ["search_sorted"]

RATIO = 8
"""The values must outnumber the array this many times for the search to be turned round."""


def search_sorted(a: np.ndarray, v: np.ndarray, side: str = "left") -> np.ndarray:
    """`np.searchsorted(a, v, side)` (intp), the same numbers; `a` sorted, as numpy requires.
    Where `v` is sorted too and much longer than `a`, each of `a`'s values is searched among
    `v`'s instead, and the answer of each of `v` is the count of `a`'s values before it."""
    n, m = len(a), len(v)
    if m < 2 or n * RATIO > m or not bool((v[1:] >= v[:-1]).all()):
        return np.searchsorted(a, v, side=side)  # type: ignore[call-overload, no-any-return]
    # v[i] counts a[j] (side right: a[j] <= v[i]; left: a[j] < v[i]) from the first i at which
    # that holds: b[j], where a[j] falls among v searched from the other side; b rises with a
    b = np.searchsorted(v, a, side="left" if side == "right" else "right")
    return np.repeat(np.arange(n + 1, dtype=np.intp), np.diff(b, prepend=0, append=m))
