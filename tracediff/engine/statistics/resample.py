"""The bootstrap's resampling counts, drawn natively where the C module is built.

Stage: engine (statistics). Input: a numpy Generator, n, the category probabilities and the
number of rows; output: the [rows x categories] int64 counts, the same numbers, and the generator
left in the same state, as `rng.multinomial(n, pvals, size=rows)`. multinomial.c says how and
why (0.72 -> 0.45 CPU-s for 2 x 1000 resamples of 6,000 cycles); where it is not built, or a
row needs a draw it does not make, numpy draws them.
"""

from __future__ import annotations

import numpy as np

from tracediff.base import blocks

try:
    from tracediff.engine.statistics import multinomial
except ImportError:  # not built (no C compiler): numpy's draws, the same numbers
    multinomial = None  # type: ignore[assignment]  # the stub types the built module


def multinomial_rows(
    rng: np.random.Generator, n: int, pvals: np.ndarray, rows: int, per: int | None = None
) -> np.ndarray:
    """`rng.multinomial(n, pvals, size=rows)` (int64 [rows x len(pvals)]), faster; with `per`,
    those counts as float64 / per (made as they are drawn: no int64 copy of 48 MB a side at
    1000 x 6,000)."""
    bits = rng.bit_generator
    p = np.ascontiguousarray(pvals, np.float64)
    # what numpy would refuse (negative, NaN, summing past 1) or check to the last bit, numpy
    # draws or refuses itself
    plain = p.ndim == 1 and len(p) and bool(np.all(p >= 0)) and float(p[:-1].sum()) <= 1 - 1e-9
    if multinomial is not None and isinstance(n, int) and n >= 0 and plain and rows > 0:
        # pages a freed block held, where there is one (base/blocks.py): ~44 MB a side
        out = blocks.zeroed((rows, len(p)), np.int64 if per is None else np.float64)
        with bits.lock:
            saved = bits.state
            done = multinomial.draws(bits.capsule, n, p, out, float(per or 0))
        if done == rows:
            return out
        bits.state = saved  # a draw it does not make: numpy draws all of them again
    counts: np.ndarray = rng.multinomial(n, pvals, size=rows)
    return counts if per is None else counts.astype(np.float64) / per
