"""engine/statistics/resample.py: the native multinomial draws are numpy's, number for number,
and leave the generator where numpy leaves it; what the C module does not draw, numpy does."""

from __future__ import annotations

import numpy as np
import pytest

from tracediff.engine.statistics import resample


@pytest.mark.parametrize("d", [1, 2, 3, 17, 600, 6000])
@pytest.mark.parametrize("n_of", [lambda d: d, lambda d: max(1, d // 3), lambda d: 2 * d + 1])
def test_uniform_draws_are_numpys(d: int, n_of) -> None:  # type: ignore[no-untyped-def]
    n, rows = n_of(d), 40 if d > 1000 else 200
    pvals = np.full(d, 1.0 / d)
    for seed in range(3):
        mine, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        got = resample.multinomial_rows(mine, n, pvals, rows)
        want = theirs.multinomial(n, pvals, size=rows)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert mine.bit_generator.state == theirs.bit_generator.state


def test_uneven_pvals_and_numpys_other_algorithm() -> None:
    """Uneven probabilities (some > 0.5, flipped; zeros) and draws of n p > 30, which the C
    module leaves to numpy (BTPE): the same numbers either way."""
    cases = [(np.array([0.7, 0.2, 0.1]), 25), (np.array([0.0, 0.5, 0.0, 0.5]), 9)]
    gen = np.random.default_rng(7)
    for _ in range(20):
        p = gen.random(int(gen.integers(2, 40)))
        cases.append((p / p.sum(), int(gen.integers(0, 300))))
    cases.append((np.array([0.5, 0.5]), 1000))  # n p = 500: BTPE
    cases.append((np.array([0.25, 0.75]), 0))  # nothing to draw: no number used
    for pvals, n in cases:
        mine, theirs = np.random.default_rng(3), np.random.default_rng(3)
        got = resample.multinomial_rows(mine, n, pvals, 100)
        assert np.array_equal(got, theirs.multinomial(n, pvals, size=100)), (pvals, n)
        assert mine.random() == theirs.random()


def test_the_module_is_built() -> None:
    """pip builds it (pyproject's ext-modules); without it the bootstrap is numpy's, slower."""
    assert resample.multinomial is not None


def test_what_numpy_refuses_it_refuses_and_without_the_module_numpy_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for bad in (np.array([0.5, -0.1, 0.6]), np.array([0.7, 0.7, 0.0]), np.array([np.nan, 1.0])):
        with pytest.raises(ValueError):
            np.random.default_rng(0).multinomial(5, bad, size=3)
        with pytest.raises(ValueError):
            resample.multinomial_rows(np.random.default_rng(0), 5, bad, 3)
    monkeypatch.setattr(resample, "multinomial", None)
    pvals = np.full(50, 1 / 50)
    got = resample.multinomial_rows(np.random.default_rng(4), 50, pvals, 30)
    assert np.array_equal(got, np.random.default_rng(4).multinomial(50, pvals, size=30))
    weights = resample.multinomial_rows(np.random.default_rng(4), 50, pvals, 30, per=50)
    assert np.array_equal(weights, got / 50)


@pytest.mark.parametrize(
    "pvals, n", [(np.full(6000, 1 / 6000), 6000), (np.array([0.5, 0.5]), 1000)]
)
def test_weights_are_numpys_counts_over_n(pvals: np.ndarray, n: int) -> None:
    """`per`: the bootstrap's weights, counts / per as float64, made as drawn (uniform: the C
    module; n p = 500: numpy's BTPE), bit for bit the division of numpy's counts."""
    mine, theirs = np.random.default_rng(11), np.random.default_rng(11)
    got = resample.multinomial_rows(mine, n, pvals, 30, per=n)
    want = theirs.multinomial(n, pvals, size=30).astype(np.float64) / n
    assert got.dtype == np.float64 and got.tobytes() == want.tobytes()
    assert mine.random() == theirs.random()


@pytest.mark.parametrize("n", [2, 17, 6000])
def test_counts_drawn_ahead_make_the_weights_drawn_in_place(n: int) -> None:
    """`uniform_counts` (uint8) then `as_weights`: the bytes `multinomial_rows(per=n)` gives, and
    the generator left where it leaves it."""
    rows = 30
    mine, theirs = np.random.default_rng(5), np.random.default_rng(5)
    counts = resample.uniform_counts(mine, n, rows)
    assert counts is not None and counts.dtype == np.uint8 and counts.shape == (rows, n)
    want = resample.multinomial_rows(theirs, n, np.full(n, 1.0 / n), rows, per=n)
    assert resample.as_weights(counts, n).tobytes() == want.tobytes()
    assert mine.bit_generator.state == theirs.bit_generator.state


def test_a_count_over_255_stops_the_uint8_rows() -> None:
    """A count a byte cannot hold is not drawn as uint8: the rows stop there (the caller draws
    from the seed again)."""
    assert resample.multinomial is not None
    out = np.zeros((4, 2), np.uint8)
    bits = np.random.default_rng(0).bit_generator
    assert resample.multinomial.draws(bits.capsule, 1000, np.array([0.999, 0.001]), out, -1.0) == 0
    assert resample.multinomial.draws(bits.capsule, 200, np.array([0.999, 0.001]), out, -1.0) == 4
    assert (out.sum(axis=1) == 200).all()


def test_weights_drawn_ahead_are_the_bootstraps_and_only_for_their_counts() -> None:
    """`Ahead`: base's counts on a thread, head's once told; the weights are those drawn in
    place, bit for bit, for the cycles, resamples and seed they were drawn for, else None."""
    ahead = resample.Ahead(300, 100, 3)
    ahead.head(450)
    got = ahead.weights(300, 450, 100, 3)
    assert got is not None
    for g, w in zip(got, resample.drawn_weights(300, 450, 100, 3), strict=True):
        assert g.tobytes() == w.tobytes()
    for key in [(300, 451, 100, 3), (301, 450, 100, 3), (300, 450, 99, 3), (300, 450, 100, 4)]:
        assert ahead.weights(*key) is None
    dropped = resample.Ahead(300, 100, 3)
    dropped.head(None)  # no bootstrap will ask: head's are not drawn
    assert dropped.weights(300, 450, 100, 3) is None


def test_the_draws_ahead_are_taken_once_and_by_their_counts_only() -> None:
    """The compare's one slot: what is taken is gone; a take for other counts drops them; a
    new draw replaces one never taken."""
    resample.draw_ahead(40, 20, 0)
    resample.tell_head(50)
    assert resample.take_ahead(40, 51, 20, 0) is None  # other counts: dropped
    assert resample.take_ahead(40, 50, 20, 0) is None
    resample.draw_ahead(40, 20, 0)
    resample.draw_ahead(41, 20, 0)  # the first never taken: replaced
    resample.tell_head(50)
    got = resample.take_ahead(41, 50, 20, 0)
    assert (
        got is not None and got[0].tobytes() == resample.drawn_weights(41, 50, 20, 0)[0].tobytes()
    )
    assert resample.take_ahead(41, 50, 20, 0) is None
