"""The bootstrap's resampling counts, drawn natively where the C module is built.

Stage: engine (statistics). Input: a numpy Generator, n, the category probabilities and the
number of rows; output: the [rows x categories] int64 counts, the same numbers, and the generator
left in the same state, as `rng.multinomial(n, pvals, size=rows)`. multinomial.c says how and
why (0.72 -> 0.45 CPU-s for 2 x 1000 resamples of 6,000 cycles); where it is not built, or a
row needs a draw it does not make, numpy draws them.

`Ahead`: a compare's counts drawn on a thread while the compare goes on (module doc there).
"""

from __future__ import annotations

import os
import threading

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


def drawn_weights(nb: int, nh: int, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's weights drawn here: `n_boot` rows over base's `nb` cycles, then over head's
    `nh`, from one generator of `seed` (the order `Ahead` draws its counts in)."""
    rng = np.random.default_rng(seed)
    cb = multinomial_rows(rng, nb, np.full(nb, 1.0 / nb), n_boot, per=nb)
    return cb, multinomial_rows(rng, nh, np.full(nh, 1.0 / nh), n_boot, per=nh)


def uniform_counts(rng: np.random.Generator, n: int, rows: int) -> np.ndarray | None:
    """`rng.multinomial(n, np.full(n, 1 / n), size=rows)` as uint8 [rows x n] (the bootstrap's
    resampling counts, drawn as `multinomial_rows` draws them, in an eighth of int64's bytes);
    None where the C module is not built or a count does not fit (the generator is then
    somewhere in the rows: draw again from the seed)."""
    if multinomial is None or n < 1 or rows < 1:
        return None
    out = np.zeros((rows, n), np.uint8)
    bits = rng.bit_generator
    with bits.lock:
        done = multinomial.draws(bits.capsule, n, np.full(n, 1.0 / n), out, -1.0)
    return out if done == rows else None


def as_weights(counts: np.ndarray, per: int) -> np.ndarray:
    """`counts` / `per` as float64 (the bootstrap's weights), the bits `multinomial_rows(...,
    per=per)` gives, in pages a freed block held where there is one (base/blocks.py)."""
    out = blocks.take(counts.size * 8).view(np.float64).reshape(counts.shape)
    np.divide(counts, float(per), out=out)
    return out


class Ahead:
    """The resampling counts of a compare of one run a side (nb cycles of base, n_boot
    resamples, from `seed`), drawn on a thread of the lowest priority while the compare goes
    on: base's as soon as its cycles are known (head is then read and reduced beside it; the
    draws release the GIL), head's once `head` tells its cycles. `weights` gives both sides'
    weights where its counts match what the bootstrap asks for, else None (then drawn there,
    `drawn_weights`: the same numbers either way).

    Why: 2 x 1000 resamples of 6,000 cycles are ~0.33 CPU-s of one core at the end of a x500
    compare, while the other core mostly waits through head's read. Held as uint8 counts
    (~6 MB a side), not as the float64 weights (~48 MB a side), which would be fresh pages at
    the compare's peak; the weights are made from them when asked for (`as_weights`)."""

    def __init__(self, nb: int, n_boot: int, seed: int) -> None:
        self.nb, self.n_boot, self.seed = nb, n_boot, seed
        self.nh: int | None = None
        self._told = threading.Event()
        self._counts: tuple[np.ndarray, np.ndarray] | None = None
        self._thread = threading.Thread(target=self._draw, name="tracediff-draws", daemon=True)
        self._thread.start()

    def head(self, nh: int | None) -> None:
        """Head's cycles (None: no bootstrap will ask: base's counts are dropped); the first
        told is the one drawn for."""
        if not self._told.is_set():
            self.nh = nh
            self._told.set()

    def _draw(self) -> None:
        _lowest_priority()
        rng = np.random.default_rng(self.seed)
        cb = uniform_counts(rng, self.nb, self.n_boot)
        if cb is None:
            return
        self._told.wait()
        ch = uniform_counts(rng, self.nh, self.n_boot) if self.nh is not None else None
        if ch is not None:
            self._counts = cb, ch

    def weights(
        self, nb: int, nh: int, n_boot: int, seed: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Base's and head's weights where these are the counts asked for (they wait for the
        thread), else None."""
        if (nb, nh, n_boot, seed) != (self.nb, self.nh, self.n_boot, self.seed):
            return None
        self._thread.join()
        if self._counts is None:
            return None
        cb, ch = self._counts
        return as_weights(cb, nb), as_weights(ch, nh)


def _lowest_priority() -> None:
    """This thread (not the process) at nice 19 where the system lets a thread have its own:
    it takes a core only while nothing else wants it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


_pending: list[Ahead] = []  # the compare's draws ahead: at most one
_slot = threading.Lock()


def draw_ahead(nb: int, n_boot: int, seed: int) -> None:
    """Start drawing a compare's counts (`Ahead`) with base's `nb` cycles; one drawn ahead
    before and never asked for is dropped."""
    with _slot:
        for old in _pending:
            old.head(None)
        _pending[:] = [Ahead(nb, n_boot, seed)]


def tell_head(nh: int | None) -> None:
    """Head's cycles to the counts drawn ahead, if any (None: no bootstrap will ask)."""
    with _slot:
        if _pending:
            _pending[0].head(nh)
            if nh is None:
                _pending.clear()


def take_ahead(nb: int, nh: int, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The weights drawn ahead, where they are these (else None, and they are dropped)."""
    with _slot:
        got, _pending[:] = (_pending[0] if _pending else None), []
    if got is None:
        return None
    got.head(None)  # a thread still waiting for head's cycles stops
    return got.weights(nb, nh, n_boot, seed)
