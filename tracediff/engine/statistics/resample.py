"""The bootstrap's resampling counts, drawn natively where the C module is built, and its
weights, drawn once a process and, where the caller can tell the cycle counts early, ahead.

Stage: engine (statistics). Input: a numpy Generator, n, the category probabilities and the
number of rows; output: the [rows x categories] int64 counts, the same numbers, and the generator
left in the same state, as `rng.multinomial(n, pvals, size=rows)`. multinomial.c says how and
why (0.72 -> 0.45 CPU-s for 2 x 1000 resamples of 6,000 cycles); where it is not built, or a
row needs a draw it does not make, numpy draws them.

`weights(nb, nh, n_boot, seed)` are the resampling weights of both sides (base's drawn first,
head's from where base's left the generator). The draws are the one step of a compare that
cannot be split (each row's draws depend on where the last row left the generator) and they
need only the cycle counts, so `draw_ahead` starts them on a thread of their own (the C draws
release the GIL) as soon as a count is known: base's while head is read and cut, head's while
the driver joins the files. `weights` takes what was drawn ahead for the same counts and seed,
or draws them itself: the same numbers either way, and a guess that proves wrong costs only
the thread's time.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

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
        out = np.zeros((rows, len(p)), np.int64 if per is None else np.float64)
        with bits.lock:
            saved = bits.state
            done = multinomial.draws(bits.capsule, n, p, out, float(per or 0))
        if done == rows:
            return out
        bits.state = saved  # a draw it does not make: numpy draws all of them again
    counts: np.ndarray = rng.multinomial(n, pvals, size=rows)
    return counts if per is None else counts.astype(np.float64) / per


Drawn = tuple[np.ndarray, Mapping[str, Any], np.ndarray | None]
"""Base's weights, the generator state they left, and head's weights (None: not drawn yet)."""

_ahead: dict[tuple[int, int, int], Future[Drawn]] = {}
_lock = threading.Lock()


def _side(rng: np.random.Generator, n: int, n_boot: int) -> np.ndarray:
    w = multinomial_rows(rng, n, np.full(n, 1.0 / n), n_boot, per=n)
    w.flags.writeable = False
    return w


def _draw(nb: int, nh: int | None, n_boot: int, seed: int, first: Future[Drawn] | None) -> Drawn:
    got = None
    if first is not None:
        try:
            got = first.result()
        except Exception:  # noqa: BLE001 - drawn again below; the draws raise the same there
            got = None
    if got is None:
        rng = np.random.default_rng(seed)
        cb = _side(rng, nb, n_boot)
        state = rng.bit_generator.state
    else:
        cb, state, _ = got
    if nh is None:
        return cb, state, None
    rng = np.random.default_rng(seed)
    rng.bit_generator.state = state
    return cb, state, _side(rng, nh, n_boot)


def _head_of(fut: Future[Drawn]) -> int | None:
    """How many head cycles `fut` drew weights for (None: none, or not done yet, or failed)."""
    if not fut.done() or fut.exception() is not None:
        return None
    ch = fut.result()[2]
    return None if ch is None else ch.shape[1]


def draw_ahead(nb: int, n_boot: int, nh: int | None = None, seed: int = 0) -> None:
    """Start drawing the weights of `nb` base cycles (and of `nh` head cycles, after them) on a
    thread of their own, for a `weights` call with these counts to take (module doc). One guess
    is held at a time: a new base count drops the last one's."""
    if nb < 2 or n_boot < 1 or (nh is not None and nh < 2):
        return
    key = (nb, n_boot, seed)
    with _lock:
        first = _ahead.get(key)
        if first is None:
            _ahead.clear()
        elif nh is None or _head_of(first) == nh:  # drawing or drawn already
            return
        fut: Future[Drawn] = Future()
        _ahead[key] = fut

    def run() -> None:
        try:
            fut.set_result(_draw(nb, nh, n_boot, seed, first))
        except BaseException as e:  # noqa: BLE001 - handed to whoever takes the draws
            fut.set_exception(e)

    threading.Thread(target=run, name="tracediff-bootstrap", daemon=True).start()


@functools.lru_cache(maxsize=2)
def weights(nb: int, nh: int, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's resampling weights (each row: how often each cycle was drawn / n), base's
    and head's, read-only. The same for every call with the same cycle counts (GPU attribution,
    host phases, the total), so drawn once (or ahead: module doc). 1000 x 6,000 binomial draws
    a side cost more than the statistics themselves."""
    with _lock:
        ahead = _ahead.get((nb, n_boot, seed))
    got = None
    if ahead is not None:
        try:
            got = ahead.result()
        except Exception:  # noqa: BLE001 - drawn here instead; the same error is raised there
            got = None
    if got is not None and got[2] is not None and got[2].shape[1] == nh:
        return got[0], got[2]
    cb, _, ch = _draw(nb, nh, n_boot, seed, ahead)
    assert ch is not None
    return cb, ch
