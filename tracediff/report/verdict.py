"""The verdict in words: the change per cycle, its CI and whether it can be believed.

Stage: output. Input: a `Comparison`; output: the words (`verdict_words`) that the text reports
(`verdict_lines`) and the TUI's verdict panel both print, so a NaN CI, a NaN percentage or a
single cycle reads the same everywhere. The TUI only styles these parts; it adds no wording.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from tracediff.engine.result import ChangeSplit, Comparison, SideSummary
from tracediff.report.numbers import DECIMALS, settled
from tracediff.report.replacements import replacement_lines
from tracediff.report.text import op_label, plural

State = Literal["significant", "noise", "undecided"]

SIGNIFICANCE: dict[State, str] = {
    "significant": "significant",
    "noise": "not significant (within noise)",
    "undecided": "no CI with fewer than 2 cycles a side (try --cycle NAME)",
}
WHOLE_FALLBACK = "undecided: whole runs' totals, not cycles (see the first line); nothing is judged"


@dataclass(frozen=True)
class VerdictWords:
    """The verdict's parts as text. `state` says which of the three verdicts it is."""

    change: str  # "+1.234" (ms per cycle, signed)
    pct: str  # "+5.6 %", or "n/a" where base has no time
    ci: str  # "[+1.000, +1.500]", or "-" where there is no CI
    state: State
    significance: str  # SIGNIFICANCE[state]
    noise_floor: str  # "0.396" (ms)
    worse: bool  # head is slower


RUNS_UNDECIDED = "undecided: too few runs to reach 5 % across runs (capture >= 4 runs a side)"


def verdict_words(c: Comparison) -> VerdictWords:
    lo, hi = c.delta_ci95
    few_runs = c.noise_unit == "run" and (math.isinf(lo) or math.isinf(hi))
    fallback = bool(c.cycle_fallback)  # engine/cycle/correspond.py: the cut could not be trusted
    undecided = math.isnan(lo) or math.isnan(hi) or few_runs or fallback
    state: State = "undecided" if undecided else "significant" if c.significant else "noise"
    words = WHOLE_FALLBACK if fallback else RUNS_UNDECIDED if few_runs else SIGNIFICANCE[state]
    if c.noise_unit == "run" and c.p_value is not None and not few_runs and not fallback:
        across = "across runs" if state == "significant" else "across runs (within noise)"
        words = f"{'significant' if state == 'significant' else 'not significant'} {across}, p={c.p_value:.3f}"
    pct = c.delta_pct
    return VerdictWords(
        change=f"{c.delta_ms_per_cycle:+.3f}",
        pct="n/a" if math.isnan(pct) or math.isinf(pct) else f"{pct:+.1f} %",
        ci="-" if undecided else f"[{lo:+.3f}, {hi:+.3f}]",
        state=state,
        significance=words,
        noise_floor=f"{c.noise_floor_ms:.3f}",
        worse=c.delta_ms_per_cycle > 0,
    )


MOVED = {
    "gpu_work": "mostly GPU work",
    "host_bound_idle": "mostly host-bound idle",
    "both": "GPU work and host-bound idle both",
}
HOST_BOUND_CAVEAT = (
    "the GPU waiting for the CPU to launch: it follows CPU launch speed, which swings between"
    " runs; repeat the capture before blaming the code"
)


HOST_BOUND_RUNS = (
    "the GPU waiting for the CPU to launch: it follows CPU launch speed, which swings between"
    " runs; each row's CI below is across the runs"
)


def split_lines(c: Comparison, split: ChangeSplit) -> list[str]:
    """What moved, in words: GPU work first (what the code asks the GPU to do), then
    host-bound idle (what CPU launch timing did)."""
    state = verdict_words(c).state
    base = split.gpu_work_base_ms_per_cycle
    gpu = split.gpu_work_delta_ms_per_cycle
    pct = f" ({100 * gpu / base:+.1f} %)" if base > 0 else ""
    top = split.top_gpu_work
    if top is None:
        what = "no op changed"
    else:
        name = op_label(top, 60)
        where = f"{top['delta_ms_per_cycle']:+.3f} ms/cycle in {top['phase']}"
        if len(c.head.devices) > 1 and top["device_id"] is not None:
            where += f" on GPU {top['device_id']}"
        if state == "undecided":
            why = "whole runs: not judged" if c.cycle_fallback else "no CI with one cycle"
            what = f"largest change: {name} {where} ({why})"
        elif top["significant"]:
            n = split.gpu_work_significant
            what = f"{plural(n, 'significant change')}, largest: {name} {where}"
        else:
            what = f"no significant change (largest: {name} {where})"
    host = split.host_bound_idle_delta_ms_per_cycle
    host_line = f"host-bound idle: {host:+.3f} ms/cycle"
    if split.moved in ("host_bound_idle", "both"):
        host_line += f" ({HOST_BOUND_CAVEAT if c.noise_unit == 'cycle' else HOST_BOUND_RUNS})"
    if split.unknown_idle_delta_ms_per_cycle:
        host_line += (
            f"; idle of unknown cause (no launch record): "
            f"{split.unknown_idle_delta_ms_per_cycle:+.3f} ms/cycle"
        )
    return [f"GPU work: {gpu:+.3f} ms/cycle{pct}; {what}", host_line]


ONE_RUN = (
    "one run a side: the CIs are over cycles of one process each; run-to-run noise (another "
    "process, autotune picks, clocks, host jitter) is not measured: capture several runs a side "
    "(tracediff capture --repeat N) and compare the run sets"
)


def runs_lines(c: Comparison) -> list[str]:
    """How many runs each side holds and what the statistics are over, in words."""
    b, h = c.base, c.head
    if b.runs == 1 and h.runs == 1:
        return [ONE_RUN]

    def means(s: str, side: SideSummary) -> str:
        vals = " ".join(f"{m:.3f}" for m in side.run_means_ms)
        return f"{s} {plural(side.runs, 'run')} [{vals}]"

    unit = (
        "each run's mean is one sample (exact permutation test over runs); noise floor = "
        "between-run std of base's run means"
        if c.noise_unit == "run"
        else "fewer than 2 runs on a side: the CIs are over cycles"
    )
    return [f"runs (mean ms per cycle of each): {means('base', b)}, {means('head', h)}; {unit}"]


def fallback_line(why: str) -> str:
    """The first line of a comparison whose cut could not be trusted (Comparison.cycle_fallback)."""
    return f"NOT COMPARED CYCLE BY CYCLE: {why}; the numbers below are the whole runs' totals"


def residual_words(residual_ms: float) -> str:
    """What the attribution's parts leave of the measured change: below the printed precision
    (report/numbers.py) on a settled comparison, which is the usual case, or the amount."""
    if residual_ms == 0:
        return f"< 1e-{DECIMALS} ms"
    return f"{residual_ms:+.2e} ms"


def verdict_lines(c: Comparison) -> list[str]:
    """The verdict as the table and markdown reports open with it: for a GPU comparison, what
    moved (GPU work, host-bound idle) first, then the cycle time and the two sides."""
    b, h = c.base, c.head
    v = verdict_words(c)
    split = settled(c.change_split)
    sig = v.significance
    if split is not None and split.moved is not None and v.state == "significant":
        sig += f", {MOVED[split.moved]}"
    lines = [] if split is None else split_lines(c, split) + replacement_lines(c)
    if c.cycle_fallback:  # first: every number below is of whole runs, not of cycles
        lines.insert(0, fallback_line(c.cycle_fallback))
    lines += [
        f"change {v.change} ms/cycle ({v.pct}), 95% CI {v.ci}: {sig}; "
        f"noise floor {v.noise_floor} ms; residual {residual_words(c.residual_ms_per_cycle)}",
        f"base  {b.label}: {plural(b.cycles, 'cycle')} ({b.cycle_method}), mean {b.mean_ms:.3f} ms  p50 {b.p50_ms:.3f}  p90 {b.p90_ms:.3f}",
        f"head  {h.label}: {plural(h.cycles, 'cycle')} ({h.cycle_method}), mean {h.mean_ms:.3f} ms  p50 {h.p50_ms:.3f}  p90 {h.p90_ms:.3f}",
    ]
    lines += runs_lines(c)
    if c.critical_device is not None and len(h.devices) > 1:
        lines.append(f"critical GPU (finishes last in most head cycles): {c.critical_device}")
    if b.wall_mean_ms is not None and h.wall_mean_ms is not None and h.devices:
        dw = h.wall_mean_ms - b.wall_mean_ms
        lines.append(
            f"host range wall time per cycle: {b.wall_mean_ms:.3f} -> {h.wall_mean_ms:.3f} ms ({dw:+.3f} ms)"
        )
        if abs(dw) > 3 * max(abs(c.delta_ms_per_cycle), c.noise_floor_ms):
            lines.append(
                "the change is on the host side, outside the GPU span of the cycle (data loading,"
                " Python, syncs): see the host phases below"
            )
    return lines
