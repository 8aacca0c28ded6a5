"""Calibration of the across-run test (tracediff/engine/statistics/runstats.py) against the alternatives.

Simulated runs of one workload: each run (process) draws an offset U(0, OFFSET) ms that every one
of its cycles carries, and each cycle adds N(0, JITTER) ms. A "same" pair draws both sides from
this; a "shifted" pair adds SHIFT x (the SD of the run means) to every head cycle. Per method and
run count: how often a same-vs-same pair is called significant (false positives; want <= 5 %) and
how often a shifted pair is (power).

Methods:
  cycles      the bootstrap over cycles of all runs pooled (what one-run-a-side compare does)
  hier-boot   a hierarchical bootstrap: resample runs, then cycles within them; percentile CI
  permutation exact permutation test on the run means (runstats.across_runs), its inverted CI

    .venv/bin/python bench/runstats.py [--seeds 1000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tracediff.engine.statistics.attribute import bootstrap_delta
from tracediff.engine.statistics.runstats import across_runs

CYCLES, BASE_MS, OFFSET, JITTER = 20, 3.4, 1.5, 0.3


def side(rng: np.random.Generator, runs: int, shift: float) -> np.ndarray:
    """[runs x cycles] cycle times in ms."""
    off = rng.uniform(0, OFFSET, size=(runs, 1))
    return BASE_MS + shift + off + rng.normal(0, JITTER, size=(runs, CYCLES))


def cycles_boot(b: np.ndarray, h: np.ndarray) -> bool:
    lo, hi = bootstrap_delta(b.reshape(1, -1), h.reshape(1, -1), 200, seed=0)
    return bool(lo[0] > 0 or hi[0] < 0)


def hier_boot(b: np.ndarray, h: np.ndarray, rng: np.random.Generator, n_boot: int = 200) -> bool:
    def draw(x: np.ndarray) -> np.ndarray:
        r = rng.integers(0, x.shape[0], size=(n_boot, x.shape[0]))
        c = rng.integers(0, x.shape[1], size=(n_boot, x.shape[0], x.shape[1]))
        return x[r[:, :, None], c].mean(axis=(1, 2))

    d = draw(h) - draw(b)
    lo, hi = np.percentile(d, [2.5, 97.5])
    return bool(lo > 0 or hi < 0)


def permutation(b: np.ndarray, h: np.ndarray) -> bool:
    t = across_runs(b.mean(axis=1)[None, :], h.mean(axis=1)[None, :])
    return bool(t.ci95_low[0] > 0 or t.ci95_high[0] < 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=1000)
    args = ap.parse_args()
    sd_run = np.sqrt(OFFSET**2 / 12 + JITTER**2 / CYCLES)
    print(
        f"runs: offset U(0,{OFFSET}) ms, jitter N(0,{JITTER}) ms, {CYCLES} cycles; "
        f"SD of run means {sd_run:.3f} ms; {args.seeds} seeds per cell"
    )
    print(f"{'method':<12} {'runs':>5} {'FP same':>8} {'power 2x':>9} {'power 2.8x':>11} {'s':>6}")
    for n in (2, 3, 4, 5, 8):
        for name in ("cycles", "hier-boot", "permutation"):
            t0 = time.perf_counter()
            hits = {0.0: 0, 2.0: 0, 2.8: 0}
            for seed in range(args.seeds):
                for mult in hits:
                    rng = np.random.default_rng([seed, n, int(mult * 10)])
                    b, h = side(rng, n, 0.0), side(rng, n, mult * sd_run)
                    if name == "cycles":
                        hit = cycles_boot(b, h)
                    elif name == "hier-boot":
                        hit = hier_boot(b, h, rng)
                    else:
                        hit = permutation(b, h)
                    hits[mult] += hit
            f = {k: v / args.seeds for k, v in hits.items()}
            print(
                f"{name:<12} {n:>5} {f[0.0]:>8.1%} {f[2.0]:>9.1%} {f[2.8]:>11.1%} "
                f"{time.perf_counter() - t0:>6.1f}"
            )


if __name__ == "__main__":
    main()
