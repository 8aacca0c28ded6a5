"""Statistics whose block is the capture round: is a change real when both sides were captured
interleaved, and the machine drifted under them?

Stage: engine (statistics; `tracediff bisect` uses it). Input: one number per run (its mean
cycle time) of two sides A and B, each run tagged with the round it was captured in (`capture
--repeat` and bisect capture A and B interleaved: round r holds run r of each, A B in odd
rounds and B A in even ones); output: the change mean(B) - mean(A), an exact one- or two-sided
p-value, a confidence interval by inverting the test, and a group-sequential decision across
several looks (more rounds added between them) with exact error control.

Why blocks. engine/statistics/runstats.py tests the run means of A against those of B as exchangeable:
valid, but on a shared machine the load drifts over minutes, and that drift is in the spread of
each side's run means, so a real change is hidden behind it (issue 31: head slower than base in
11 of 12 interleaved rounds, yet p = 0.009 unpaired). Runs captured next to each other share the
machine's state; the test below exchanges labels only inside a block, so a drift slower than a
block moves every arrangement alike and cancels. A block is two consecutive rounds (A B B A):
its mean capture time is the same for both sides, so a linear drift cancels inside it exactly,
and its 6 arrangements (which 2 of the 4 runs are B) resolve more than two sign flips (4).

The test (a stratified permutation test). Under "no change" every arrangement of the labels
inside each block is equally likely, independently across blocks. The statistic is the total of
the B-labelled values (an affine function of mean(B) - mean(A), since each block's counts are
fixed); its null distribution is the convolution of the blocks' arrangement sums, enumerated
exactly up to MAX_EXACT arrangements, else drawn (N_RANDOM, fixed seed). Rounds missing one side
(a failed run) still form blocks with what they have: the test stays exact.

Resolution. The smallest one-sided p is 1/6 per full block: 2 blocks (4 runs a side) 1/36 =
0.028, 3 blocks 0.0046, 4 blocks 0.00077. The unpaired test reaches 1/70 at 4 v 4 but pays for
drift in spread; `bench/blocked.py` measures both under drift, per-process offsets and jitter.

Looks. A bisection looks again each time rounds are added. `sequential` keeps the chance of a
false "changed" at any look at most alpha, exactly: at the latest look it enumerates (or draws)
the arrangements of all blocks so far, and for each earlier look j sets the largest rejection
region whose null probability, among arrangements not rejected before j, keeps the running total
at most the spending A(j) = alpha * rounds_j / rounds_K (K the last planned look). An earlier
look's region depends only on its own blocks, so recomputing it later gives the same region: the
same runs always give the same decisions (a resumed bisection decides as the first call did).
Blocks never straddle a look: rounds added at a look form their own blocks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_EXACT = 200_000
"""Enumerate every arrangement up to this many (7 full blocks: 279,936)."""
N_RANDOM = 20_000
"""Drawn arrangements (fixed seed) beyond that; the observed one is always included."""
_TOL = 1e-9
Values = Sequence[float] | np.ndarray
"""Per-round run means of one side (NaN: that round's run is missing)."""


@dataclass(frozen=True)
class Blocks:
    """Per block, its values and which of them are B (`is_b`); values are per-run means."""

    values: tuple[np.ndarray, ...]
    is_b: tuple[np.ndarray, ...]

    @property
    def n_a(self) -> int:
        return int(sum((~b).sum() for b in self.is_b))

    @property
    def n_b(self) -> int:
        return int(sum(b.sum() for b in self.is_b))


def blocks_of(a: Values, b: Values, cuts: Sequence[int] = ()) -> Blocks:
    """Blocks of the rounds: a[r] and b[r] are round r's run of each side (NaN: that run is
    missing). Consecutive rounds pair into blocks (A B B A); a block never straddles a cut (a
    look's round count), so a look's odd round is a block of its own."""
    n = max(len(a), len(b))
    av = np.full(n, np.nan)
    bv = np.full(n, np.nan)
    av[: len(a)] = np.asarray(a, dtype=np.float64)
    bv[: len(b)] = np.asarray(b, dtype=np.float64)
    edges = sorted({0, n, *(c for c in cuts if 0 < c < n)})
    values, is_b = [], []
    for lo, hi in itertools.pairwise(edges):
        for start in range(lo, hi, 2):
            stop = min(start + 2, hi)
            va, vb = av[start:stop], bv[start:stop]
            va, vb = va[~np.isnan(va)], vb[~np.isnan(vb)]
            if len(va) == 0 or len(vb) == 0:
                continue  # one side only: no arrangement to test, no information
            values.append(np.concatenate([va, vb]))
            is_b.append(np.concatenate([np.zeros(len(va), bool), np.ones(len(vb), bool)]))
    return Blocks(tuple(values), tuple(is_b))


def _arrangements(values: np.ndarray, is_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every arrangement of one block (the observed first): its B-total, and how many of the
    runs it labels B really are B (a shift d of the B runs moves its total by -d times that)."""
    k = int(is_b.sum())
    obs = tuple(np.flatnonzero(is_b))
    combos = [obs] + [c for c in itertools.combinations(range(len(values)), k) if c != obs]
    idx = np.array(combos, dtype=np.int64).reshape(len(combos), k)
    return values[idx].sum(axis=1), is_b[idx].sum(axis=1).astype(np.float64)


def null_parts(blocks: Blocks, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[arrangements x blocks] B-totals and true-B counts of each block per arrangement (row 0:
    the observed one): every arrangement when at most MAX_EXACT, else N_RANDOM drawn ones. The
    B-total at a shift d (every B run moved by -d) is totals - d * counts."""
    per = [_arrangements(v, m) for v, m in zip(blocks.values, blocks.is_b, strict=True)]
    if not per:
        return np.zeros((1, 0)), np.zeros((1, 0))
    count = math.prod(len(p[0]) for p in per)
    if count <= MAX_EXACT:
        grids = np.meshgrid(*[np.arange(len(p[0])) for p in per], indexing="ij")
        pick = np.stack([g.ravel() for g in grids], axis=1)
    else:
        rng = np.random.default_rng(seed)
        drawn = np.stack([rng.integers(0, len(p[0]), N_RANDOM) for p in per], axis=1)
        pick = np.concatenate([np.zeros((1, len(per)), np.int64), drawn])
    totals = np.stack([p[0][pick[:, j]] for j, p in enumerate(per)], axis=1)
    counts = np.stack([p[1][pick[:, j]] for j, p in enumerate(per)], axis=1)
    return totals, counts


@dataclass(frozen=True)
class BlockedTest:
    """One look: the change mean(B) - mean(A), its p-values and its CI."""

    delta: float
    p_greater: float  # B above A
    p_less: float
    ci_low: float
    ci_high: float
    level: float  # of the CI: 1 - 2 * per-side alpha
    n_a: int
    n_b: int
    blocks: int

    @property
    def p_two(self) -> float:
        return min(1.0, 2.0 * min(self.p_greater, self.p_less))


def _delta(blocks: Blocks) -> float:
    a = np.concatenate([v[~m] for v, m in zip(blocks.values, blocks.is_b, strict=True)])
    b = np.concatenate([v[m] for v, m in zip(blocks.values, blocks.is_b, strict=True)])
    return float(b.mean() - a.mean())


def _p(s: np.ndarray, o: np.ndarray, shift: float) -> tuple[float, float]:
    t = s - shift * o
    tol = _TOL * max(1.0, float(np.abs(t).max()))
    return float((t >= t[0] - tol).mean()), float((t <= t[0] + tol).mean())


def p_values(blocks: Blocks, shift: float = 0.0) -> tuple[float, float]:
    """(p that B - A > shift, p that B - A < shift): one-sided, exact (or drawn)."""
    if not blocks.values:
        return 1.0, 1.0
    totals, counts = null_parts(blocks)
    return _p(totals.sum(axis=1), counts.sum(axis=1), shift)


def min_p(blocks: Blocks) -> float:
    """The smallest one-sided p these blocks can give (1 / arrangements, or 1 / draws)."""
    if not blocks.values:
        return 1.0
    count = math.prod(
        math.comb(len(v), int(m.sum())) for v, m in zip(blocks.values, blocks.is_b, strict=True)
    )
    return 1.0 / min(count, N_RANDOM + 1)


def bound(blocks: Blocks, side: int, alpha: float, iters: int = 48) -> float:
    """The CI end on `side` (+1 high, -1 low) at one-sided level alpha: the furthest shift d at
    which the test of B - A = d against that side still has p > alpha; infinite where the
    blocks cannot reach alpha."""
    if not blocks.values or min_p(blocks) > alpha:
        return side * math.inf
    totals, counts = null_parts(blocks)
    s, o = totals.sum(axis=1), counts.sum(axis=1)
    d0 = _delta(blocks)
    allv = np.concatenate(blocks.values)
    inside, outside = d0, d0 + side * (2.0 * float(np.ptp(allv)) + abs(d0) + 1e-12)
    for _ in range(iters):
        mid = 0.5 * (inside + outside)
        pg, pl_ = _p(s, o, mid)
        if (pl_ if side > 0 else pg) > alpha:  # high end: is "B - A < mid" rejected?
            inside = mid
        else:
            outside = mid
    return inside


def blocked_test(blocks: Blocks, alpha: float = 0.025) -> BlockedTest:
    """p-values and the (1 - 2 alpha) CI of the change, one look."""
    pg, pl_ = p_values(blocks)
    return BlockedTest(
        delta=_delta(blocks) if blocks.values else math.nan,
        p_greater=pg,
        p_less=pl_,
        ci_low=bound(blocks, -1, alpha),
        ci_high=bound(blocks, +1, alpha),
        level=1.0 - 2.0 * alpha,
        n_a=blocks.n_a,
        n_b=blocks.n_b,
        blocks=len(blocks.values),
    )


@dataclass(frozen=True)
class Sequential:
    """The group-sequential decision at the latest look: `rejected_at` the first look (0-based)
    whose region held the observed arrangement (None: not yet), with each look's spending."""

    rejected_at: int | None
    spent: tuple[float, ...]  # null probability of rejecting at or before each look
    alpha: float


def sequential(
    a: Values,
    b: Values,
    looks: Sequence[int],
    planned: int,
    alpha: float,
    two_sided: bool = True,
) -> Sequential:
    """Did B differ from A at any look so far, with the chance of a false "yes" over every look
    up to `planned` rounds at most `alpha` (module docstring)? `looks`: the round counts looked
    at so far (ascending; the last is the runs present); rounds beyond a look's count belong to
    later looks."""
    looks = [k for k in looks if k > 0]
    if not looks:
        return Sequential(None, (), alpha)
    blocks = blocks_of(a[: looks[-1]], b[: looks[-1]], looks)
    if not blocks.values:
        return Sequential(None, tuple(0.0 for _ in looks), alpha)
    totals = null_parts(blocks)[0]  # [arrangements x blocks]
    # which blocks each look sees (blocks never straddle a look)
    ends = _block_ends(a[: looks[-1]], b[: looks[-1]], looks)
    alive = np.ones(totals.shape[0], bool)
    spent, done = [], 0.0
    rejected_at = None
    for j, nb in enumerate(ends):
        stat = totals[:, :nb].sum(axis=1)
        if two_sided:
            stat = np.abs(stat - stat.mean())
        budget = alpha * min(1.0, looks[j] / max(planned, looks[-1])) - done
        region = _region(stat, alive, budget)
        if rejected_at is None and region[0]:
            rejected_at = j
        done += float(region.mean())
        spent.append(done)
        alive &= ~region
    return Sequential(rejected_at, tuple(spent), alpha)


def _block_ends(a: Values, b: Values, looks: Sequence[int]) -> list[int]:
    """How many blocks each look sees (blocks_of over the rounds up to it, same cuts)."""
    return [len(blocks_of(a[:k], b[:k], looks).values) for k in looks]


def _region(stat: np.ndarray, alive: np.ndarray, budget: float) -> np.ndarray:
    """The largest set {alive and stat >= t} with null probability <= budget (ties kept
    together; empty when even the largest statistic's set exceeds it)."""
    n = len(stat)
    k_max = math.floor(budget * n + 1e-9)
    if k_max <= 0 or not alive.any():
        return np.zeros(n, bool)
    cand = np.sort(stat[alive])[::-1]
    tol = _TOL * max(1.0, float(np.abs(cand).max()))
    # a threshold at cand[i] takes every alive value >= cand[i] - tol: valid set sizes are the
    # ends of tie groups
    new_group = np.concatenate([cand[1:] < cand[:-1] - tol, [True]])
    sizes = np.flatnonzero(new_group) + 1
    ok = sizes[sizes <= k_max]
    if len(ok) == 0:
        return np.zeros(n, bool)
    t = float(cand[ok[-1] - 1])
    region: np.ndarray = alive & (stat >= t - tol)
    return region


def rounds_needed(diffs: Values, alpha: float, power: float = 0.8) -> int | None:
    """About how many rounds would tell a change of mean(diffs) from none at one-sided level
    alpha with the given power, from the per-round differences' spread (normal approximation,
    the plan's estimate, not a test); None when the differences show no change at all."""
    d = np.asarray([x for x in diffs if math.isfinite(x)], dtype=np.float64)
    if len(d) < 2 or d.mean() == 0:
        return None
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    sd = float(d.std(ddof=1))
    n = ((z(1 - alpha) + z(power)) * sd / abs(float(d.mean()))) ** 2
    # and at least what the blocks' resolution needs: 1/6 per block must fall below alpha
    floor = 2 * math.ceil(math.log(1 / alpha) / math.log(6))
    return max(math.ceil(n), floor)
