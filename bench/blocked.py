"""The round-blocked test (tracediff/engine/statistics/blocked.py) against the unpaired one
(tracediff/engine/statistics/runstats.py) on interleaved captures under drift, at the same level.

Simulated bisect ends: A and B captured interleaved (A B B A A B ...), one run mean per capture:
  base  BASE_MS + SHIFT (B only)
  drift the machine's load as a random walk over the captures, DRIFT ms a capture (sd)
  offset each process's own offset, uniform in [0, OFFSET] ms (issue 22's per-process offsets)
  jitter N(0, JITTER) ms per cycle, CYCLES cycles a run (averaged in the run mean)
Per scenario and run count: how often a same-vs-same pair is called changed (false positives)
and how often a shifted one is (power), for

  unpaired-5%   runstats.across_runs at one look, p <= 5 %
  blocked-5%    blocked.p_values (two-sided) at one look, p <= 5 %
  unpaired-seq  what bisect's ends did: looks at 4, 6, 8 runs a side, p <= 1 % / 3 at each
  blocked-seq   blocked.sequential: looks at 4, 6, 8 rounds, 1 % over all looks (exact)
  blocked-seq-1s  the same, one-sided (B slower), as bisect's ends use it

    .venv/bin/python bench/blocked.py [--seeds 400]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tracediff.engine.statistics import blocked as bk
from tracediff.engine.statistics.runstats import across_runs

BASE_MS, CYCLES, JITTER = 19.0, 20, 1.0
SCENARIOS = {
    # name: (drift sd a capture, offset range), ms
    "offsets only": (0.0, 6.0),
    "drift 1.5 + offsets": (1.5, 6.0),
    "drift 3 + offsets": (3.0, 6.0),
}
SHIFTS = (0.0, 4.0, 8.0)


def capture(
    rng: np.random.Generator, rounds: int, shift: float, drift: float, offset: float
) -> tuple[np.ndarray, np.ndarray]:
    """Run means of A and B by round, captured A B B A ... under a drifting load."""
    n = 2 * rounds
    load = np.cumsum(rng.normal(0.0, drift, n)) if drift else np.zeros(n)
    noise = rng.uniform(0.0, offset, n) + rng.normal(0.0, JITTER / np.sqrt(CYCLES), n)
    slots = BASE_MS + load + noise
    a, b = np.empty(rounds), np.empty(rounds)
    for r in range(rounds):
        first, second = slots[2 * r], slots[2 * r + 1]
        a[r], b[r] = (first, second) if r % 2 == 0 else (second, first)
    return a, b + shift


def calls(a: np.ndarray, b: np.ndarray) -> dict[str, bool]:
    out = {}
    t = across_runs(a[None, :], b[None, :])
    out["unpaired-5%"] = bool(t.p_value[0] <= 0.05)
    pg, pl = bk.p_values(bk.blocks_of(a, b))
    out["blocked-5%"] = min(1.0, 2 * min(pg, pl)) <= 0.05
    hit = False
    for k in (4, 6, 8):
        t = across_runs(a[None, :k], b[None, :k])
        hit |= bool(t.p_value[0] <= 0.01 / 3)
    out["unpaired-seq"] = hit
    out["blocked-seq"] = bk.sequential(a, b, [4, 6, 8], 8, 0.01).rejected_at is not None
    one = bk.sequential(a, b, [4, 6, 8], 8, 0.01, two_sided=False)
    out["blocked-seq-1s"] = one.rejected_at is not None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=400)
    args = ap.parse_args()
    print(
        f"interleaved A B B A captures, 8 rounds; jitter N(0,{JITTER}) ms x {CYCLES} cycles; "
        f"{args.seeds} seeds a cell; shifts in ms"
    )
    methods = ("unpaired-5%", "blocked-5%", "unpaired-seq", "blocked-seq", "blocked-seq-1s")
    head = " ".join(f"{m:>13}" for m in methods)
    print(f"{'scenario':<22} {'shift':>5} {head}")
    t0 = time.perf_counter()
    for name, (drift, offset) in SCENARIOS.items():
        for shift in SHIFTS:
            hits = dict.fromkeys(methods, 0)
            for seed in range(args.seeds):
                rng = np.random.default_rng([seed, int(10 * shift), int(10 * drift)])
                a, b = capture(rng, 8, shift, drift, offset)
                for m, hit in calls(a, b).items():
                    hits[m] += hit
            row = " ".join(f"{hits[m] / args.seeds:>13.1%}" for m in methods)
            print(f"{name:<22} {shift:>5.1f} {row}")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
