"""The CI gate of `compare --fail-above PCT`: slower beyond PCT, within PCT, or cannot decide.

Stage: engine (verdict policy). Input: a `Comparison` and PCT; output: a `Gate` (the command turns
it into exit 3 / 0 / 4 with the reason on stderr).

The rule (README "CI gate"):

- GPU work, always: the summed change of the GPU-work contributors (kernels, copies, memsets,
  collectives, dependency waits; engine/result.py) that are significant on their own, as a
  percentage of base's mean cycle time. Fail above PCT. Host-bound idle (the GPU waiting for a
  launch) is left out: it follows CPU launch speed, which swings between processes, and one run
  a side cannot tell that from a change (the Kineto k pair: +25.6 % cycle time, all of it launch
  timing; its only code change is a 17 us copy).
- Run sets, >= 2 runs a side (`noise_unit` "run"), also the whole cycle: fail when the mean
  cycle time's change is significant across runs (engine/statistics/runstats.py) and above PCT. Runs
  measure what a process does to launch timing, so there the whole cycle is fair to gate on.
- Cannot decide (exit 4, never a silent pass): runs compared whole because their cut could not
  be trusted (`cycle_fallback`: even run sets' totals are of runs not checked to do the same
  work); no confidence interval (fewer than 2 cycles a
  side, `--cycle whole`); run counts that cannot reach 5 % (3 vs 3 runs); no GPU work to judge
  (host-only runs are judged on their cycle time as for run sets, when their CI exists); a base
  cycle time of 0; and a change or CI that is not a finite number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import polars as pl

from tracediff.engine.result import Comparison, part_of

Decision = Literal["fail", "pass", "undecided"]


@dataclass(frozen=True)
class Gate:
    decision: Decision
    measured_pct: float | None  # what the gate compared with PCT (None: undecided)
    what: str  # "cycle time across runs" | "GPU work" | "host range time"
    reason: str  # one line for stderr


def gate(c: Comparison, pct: float) -> Gate:
    """The gate's decision for `c` at PCT percent (a finite number, checked by the caller)."""
    lo, hi = c.delta_ci95
    base = c.base.mean_ms
    if c.cycle_fallback:  # totals of runs whose cycles could not be checked to correspond
        return Gate(
            "undecided",
            None,
            "-",
            "the runs were compared whole, not cycle by cycle (the report's first line says "
            "why): mark cycles with NVTX ranges and pass --cycle NAME",
        )
    if not base or not math.isfinite(base):
        return Gate("undecided", None, "-", "base's mean cycle time is 0 or unknown")
    if math.isnan(lo) or math.isnan(hi):
        return Gate(
            "undecided",
            None,
            "-",
            "no confidence interval (fewer than 2 cycles a side): the change cannot be judged "
            "against noise; gate on cycles (--cycle NAME) or on run sets",
        )
    if c.noise_unit == "run" and (math.isinf(lo) or math.isinf(hi)):
        return Gate(
            "undecided",
            None,
            "cycle time across runs",
            f"{c.base.runs} vs {c.head.runs} runs cannot reach 5 % across runs: capture >= 4 "
            "runs a side",
        )
    host_only = c.attribution.height > 0 and bool((c.attribution["kind"] == "host").all())
    whole: Gate | None = None
    if c.noise_unit == "run" or host_only:
        what = "cycle time across runs" if c.noise_unit == "run" else "host range time"
        measured = 100.0 * c.delta_ms_per_cycle / base
        whole = _decide(measured, c.significant and c.delta_ms_per_cycle > 0, pct, what)
        if host_only or whole.decision != "pass":
            return whole
    att = c.attribution.with_columns(part_of())
    work = att.filter(pl.col("part") == "gpu_work")
    if work.height == 0:
        return whole or Gate("undecided", None, "GPU work", "no GPU work in the attribution")
    sig = work.filter(pl.col("significant"))
    delta = float(sig["delta_ms_per_cycle"].sum()) if sig.height else 0.0
    if not math.isfinite(delta):
        return Gate("undecided", None, "GPU work", "the GPU-work change is not a finite number")
    measured = 100.0 * delta / base
    return _decide(measured, delta > 0, pct, "GPU work")


def _decide(measured: float, slower: bool, pct: float, what: str) -> Gate:
    if not math.isfinite(measured):
        return Gate("undecided", None, what, f"the {what} change is not a finite number")
    if slower and measured > pct:
        return Gate(
            "fail",
            measured,
            what,
            f"{what} grew {measured:.1f} % of base's cycle time (> {pct:g} %), significant",
        )
    return Gate(
        "pass",
        measured,
        what,
        f"{what} changed {measured:+.1f} % of base's cycle time, significant part within {pct:g} %",
    )
