"""Types of the native multinomial draws (multinomial.c); used by engine/statistics/resample.py."""

from typing import Any

import numpy as np

def draws(
    capsule: Any, n: int, pvals: np.ndarray[Any, Any], out: np.ndarray[Any, Any], per: float = 0.0
) -> int:
    """Rows of multinomial(n, pvals) draws from the bit generator in `capsule` into `out` (int64
    [rows x len(pvals)], zeroed), as numpy's Generator.multinomial draws them; returns the rows
    drawn (fewer: the next row needs a draw this module does not make). With `per` > 0, `out`
    is float64 and takes each count / per; with `per` < 0, `out` is uint8 and a count over 255
    stops the rows there. Hold the bit generator's lock around the call."""
