"""`compare(base, head)`: segment both runs into cycles, align them, attribute the change.

Stage: engine front door. Input: two `Run`s; output: a `Comparison` (engine/result.py). The steps,
each a module of its own: segment base and take its cycle rule (engine/cycles.py), cut head by
that rule, align both sides' ops (engine/align.py), attribute each cycle's time to contributors
(engine/attribute.py, engine/stats.py), the headline and side summaries (engine/verdict.py), the
detail tables (engine/tables.py). Runs without GPU operations go to engine/host.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import polars as pl

from tracediff import schema
from tracediff.engine import align as al
from tracediff.engine import attribute as at
from tracediff.engine import correspond, cycles, runsets, sources
from tracediff.engine import stats as st
from tracediff.engine import tables as tb
from tracediff.engine import verdict as vd
from tracediff.engine.env import env_diffs
from tracediff.engine.host import compare_host
from tracediff.engine.ops import gpu_ops_counted
from tracediff.engine.period import RuleMismatch
from tracediff.engine.result import Comparison, ReplayInputs
from tracediff.engine.segmentation import Segmentation
from tracediff.errors import AnalysisError
from tracediff.runfile import Run

__all__ = ["compare", "env_diffs"]


def compare(
    base: Run | Sequence[Run],
    head: Run | Sequence[Run],
    *,
    cycle: str | None = None,
    n_boot: int = 1000,
    progress: Callable[[str], None] | None = None,
    labels: tuple[str | None, str | None] = (None, None),
) -> Comparison:
    """Compare two runs cycle by cycle. Raises AnalysisError when the runs cannot be compared.

    Either side may be a run set: several runs of one workload (engine/runsets.py). Every run is
    cut by base's first run's rule, the runs' cycles are aligned together, and with >= 2 runs a
    side each run's mean is one sample of the statistics. `labels`: the sides' names for run
    sets (the user's folder names)."""
    say = progress or (lambda _msg: None)
    bases = [base] if isinstance(base, Run) else list(base)
    heads = [head] if isinstance(head, Run) else list(head)
    say("collecting GPU operations")
    # one run at a time, each run's untagged ops freed once it is cut into cycles: at most
    # one untagged and one tagged copy of a run's ops are alive at once
    ops_b, drop_b = gpu_ops_counted(bases[0])
    bases[0].release()  # the run file's pages of the kernel table: read, no longer needed
    if ops_b.height == 0 and gpu_ops_counted(heads[0])[0].height == 0:
        one = len(bases) == 1 and len(heads) == 1  # host-only runs (NVTX, no CUDA trace)
        return compare_host(
            bases[0] if one else bases, heads[0] if one else heads, cycle, n_boot, labels
        )
    tracers = correspond.check_tracers(bases, heads, cycle)  # refuses without --cycle
    say("finding cycles")
    first = cycles.find(bases[0], ops_b, cycle)
    del ops_b
    dropped = {"base": drop_b, "head": 0}
    segs_b, segs_h, fallback = _cut_all(bases, heads, first, dropped)
    seg_b, run_b = runsets.merge(segs_b)
    seg_h, run_h = runsets.merge(segs_h)
    runs = runsets.RunIndex(run_b, run_h, len(bases), len(heads))
    warnings = _warnings(bases, heads, seg_b, seg_h, dropped) + vd.run_set_warnings(runs)
    if tracers:
        warnings.insert(0, tracers)
    devices = {s: sorted(g.ops["device_id"].unique().to_list()) for s, g in _sides(seg_b, seg_h)}
    ops = _both_sides(seg_b, seg_h)
    say(f"aligning {ops.height} operations")
    ops, _ = al.align(ops)
    renamed = al.renames(ops)
    say("attributing")
    ops, cyc = at.per_device_cycles(ops)
    ops = at.collective_split(ops)
    t = _cycle_times(cyc)
    v = vd.verdict(t.base_ms, t.head_ms, n_boot, runs, (t.base_cycles, t.head_cycles))
    long = at.contributions(ops, cyc)
    attribution = tb.attribution(long, t.base_cycles, t.head_cycles, n_boot, renamed, runs)
    if fallback:  # whole-run totals of runs not checked to do the same work: nothing is judged
        # (run sets would otherwise call the totals' difference significant across runs)
        v = replace(v, significant=False)
        attribution = attribution.with_columns(pl.lit(False).alias("significant"))
    if len(t.base_ms) < 2 or len(t.head_ms) < 2:
        warnings.append(vd.FEW_CYCLES)
    return _assemble(
        (bases, heads),
        (seg_b, seg_h),
        v,
        t,
        ops,
        cyc,
        long,
        attribution,
        warnings,
        devices,
        n_boot,
        runs,
        labels,
        fallback,
    )


def _cut_all(
    bases: list[Run], heads: list[Run], first: Segmentation, dropped: dict[str, int]
) -> tuple[list[Segmentation], list[Segmentation], str | None]:
    """Every run but base's first cut by its rule, one run at a time (each run's ops freed once
    cut). Where base's kernel period does not fit a run, or the cycles it finds there cannot be
    checked to hold the same loop (engine/correspond.py), every run is compared whole, and the
    third value says why: never a per-cycle verdict from two different cuts."""
    try:
        segs_b = [first] + [_cut_one("base", r, first, dropped) for r in bases[1:]]
        segs_h = [_cut_one("head", r, first, dropped) for r in heads]
    except RuleMismatch as e:
        misfit = f"not cut as base is ({first.rule.label}): {e.message}"
        segs_b, segs_h = _wholes(bases, heads)
        segs_h[0].warnings.append(
            f"{misfit}; compared the whole runs as one cycle each (pass --cycle NAME with an "
            "NVTX range both runs have)"
        )
        return segs_b, segs_h, misfit
    others = [(_run_name("base", i, len(bases)), s) for i, s in enumerate(segs_b[1:], 1)]
    others += [(_run_name("head", i, len(heads)), s) for i, s in enumerate(segs_h)]
    why = correspond.cut_fallback(first, others)
    if why is None:
        return segs_b, segs_h, None
    segs_b, segs_h = _wholes(bases, heads)
    segs_h[0].warnings.append(
        f"{why}; compared the whole runs as one cycle each (capture with NVTX ranges around "
        "each cycle and pass --cycle NAME)"
    )
    return segs_b, segs_h, why


def _run_name(side: str, i: int, n: int) -> str:
    return side if n == 1 else f"{side} run {i + 1}"


def _wholes(bases: list[Run], heads: list[Run]) -> tuple[list[Segmentation], list[Segmentation]]:
    """Every run as one cycle (its ops read again: the cut freed them)."""
    wholes = [cycles.whole(gpu_ops_counted(r)[0]) for r in bases + heads]
    for r in bases + heads:
        r.release()
    return wholes[: len(bases)], wholes[len(bases) :]


def _cut_one(side: str, run: Run, first: Segmentation, dropped: dict[str, int]) -> Segmentation:
    """One run cut by base's first run's rule (a refusal says how that run was cut)."""
    ops, n = gpu_ops_counted(run)
    run.release()
    dropped[side] += n
    try:
        return cycles.cut(run, ops, first.rule)
    except RuleMismatch:
        raise
    except AnalysisError as e:
        also = "" if side == "head" else "every run of a run set is cut the same way; "
        raise AnalysisError(
            f"{side} {e.message}",
            f"base cycles are {first.rule.label}; {also}{e.hint or ''}".strip(),
        ) from None


@dataclass(frozen=True)
class _CycleTimes:
    """Each cycle's time: the span of the device that finished it last (the critical one)."""

    base_ms: np.ndarray
    head_ms: np.ndarray
    base_cycles: list[int]
    head_cycles: list[int]
    critical_device: int | None  # the GPU that finishes last in most head cycles


def _cycle_times(cyc: pl.DataFrame) -> _CycleTimes:
    crit = cyc.filter(pl.col("critical"))
    span = {s: crit.filter(pl.col("side") == s).sort("cycle") for s in ("base", "head")}
    if span["base"].height == 0 or span["head"].height == 0:
        raise AnalysisError("no complete cycles in one of the runs", "check --cycle")
    dev = crit.filter(pl.col("side") == "head")["device_id"].mode().sort()
    return _CycleTimes(
        base_ms=span["base"]["span_ns"].to_numpy() / 1e6,
        head_ms=span["head"]["span_ns"].to_numpy() / 1e6,
        base_cycles=span["base"]["cycle"].to_list(),
        head_cycles=span["head"]["cycle"].to_list(),
        critical_device=int(dev[0]) if len(dev) else None,
    )


def _assemble(
    runs_of: tuple[list[Run], list[Run]],
    segs: tuple[Segmentation, Segmentation],
    v: vd.Verdict,
    t: _CycleTimes,
    ops: pl.DataFrame,
    cyc: pl.DataFrame,
    long: pl.DataFrame,
    attribution: pl.DataFrame,
    warnings: list[str],
    devices: dict[str, list[int]],
    n_boot: int,
    runs: runsets.RunIndex,
    labels: tuple[str | None, str | None],
    fallback: str | None = None,
) -> Comparison:
    """The `Comparison`: the verdict, both sides' summaries and every table. `devices`: each
    side's GPUs (the segmentations have given their ops up to `ops`)."""
    (bases, heads), (seg_b, seg_h) = runs_of, segs
    base, head = bases[0], heads[0]
    across = (
        st.across_gpus(long, attribution, t.base_cycles, t.head_cycles, n_boot, runs)
        if max(len(devices["base"]), len(devices["head"])) > 1
        else pl.DataFrame()
    )
    if fallback and across.height:
        across = across.with_columns(pl.lit(False).alias("significant"))
    nb, nh = len(t.base_cycles), len(t.head_cycles)
    set_b = vd.run_set_of(v, "base", bases, labels[0])
    set_h = vd.run_set_of(v, "head", heads, labels[1])
    return Comparison(
        base=vd.side_summary(base, seg_b, t.base_ms, vd.host_walls(seg_b), devices["base"], set_b),
        head=vd.side_summary(head, seg_h, t.head_ms, vd.host_walls(seg_h), devices["head"], set_h),
        delta_ms_per_cycle=v.delta_ms_per_cycle,
        delta_ci95=v.delta_ci95,
        delta_pct=v.delta_pct,
        significant=v.significant,
        noise_floor_ms=v.noise_floor_ms,
        residual_ms_per_cycle=v.delta_ms_per_cycle - float(attribution["delta_ms_per_cycle"].sum()),
        critical_device=t.critical_device,
        env_diffs=env_diffs(base, head),
        attribution=attribution,
        cycles=tb.cycle_table(cyc, seg_b.ranges, seg_h.ranges),
        events_builder=partial(tb.events, ops, cyc, attribution),
        host=schema.conform_diff("host", vd.host_phases(seg_b, seg_h, n_boot, runs)),
        across_gpus=schema.conform_diff("across_gpus", across),
        collectives=tb.collectives(ops, nb, nh),
        totals=tb.totals(ops),
        sources=sources.sources(ops, attribution, bases + heads),
        launch_stacks=sources.launch_stacks(ops, attribution, bases, heads),
        warnings=warnings,
        replay_inputs=ReplayInputs(
            ops=ops,
            head_api=head.table("api_calls"),
            base_events=base.table("cuda_events"),
            head_events=head.table("cuda_events"),
        )
        if len(bases) == 1 and len(heads) == 1
        else ReplayInputs(),  # the replay models one run's timeline: not a run set's
        noise_unit=v.noise_unit,
        p_value=v.p_value,
        cycle_fallback=fallback,
    )


def _sides(seg_b: Segmentation, seg_h: Segmentation) -> tuple[tuple[str, Segmentation], ...]:
    return (("base", seg_b), ("head", seg_h))


def _warnings(
    bases: list[Run],
    heads: list[Run],
    seg_b: Segmentation,
    seg_h: Segmentation,
    dropped: dict[str, int],
) -> list[str]:
    """The segmentations' and readers' warnings, each side's, then what the comparison skips."""

    def readers(runs: list[Run]) -> list[str]:
        if len(runs) == 1:
            return list(runs[0].warnings)
        return [f"run {i + 1}: {w}" for i, r in enumerate(runs) for w in r.warnings]

    warnings = [f"base: {w}" for w in seg_b.warnings + readers(bases)] + [
        f"head: {w}" for w in seg_h.warnings + readers(heads)
    ]
    warnings += [  # gpu_ops drops ops that end before they start
        f"{s}: {n} GPU operations end before they start or have no end time; they are not compared"
        for s, n in dropped.items()
        if n
    ]
    ndev_b, ndev_h = seg_b.ops["device_id"].n_unique(), seg_h.ops["device_id"].n_unique()
    if ndev_b != ndev_h:
        warnings.append(
            f"base ran on {ndev_b} GPU(s), head on {ndev_h}: per-GPU contributors are not comparable one to one"
        )
    return warnings


def _both_sides(seg_b: Segmentation, seg_h: Segmentation) -> pl.DataFrame:
    """Both sides' cycle-tagged ops in one frame (column `side`); the segmentations give theirs
    up, so one copy is alive."""
    ops = pl.concat(
        [
            seg_b.ops.with_columns(pl.lit("base", al.SIDES).alias("side")),
            seg_h.ops.with_columns(pl.lit("head", al.SIDES).alias("side")),
        ],
        how="vertical" if seg_b.ops.schema == seg_h.ops.schema else "diagonal_relaxed",
    )
    seg_b.ops, seg_h.ops = seg_b.ops.clear(), seg_h.ops.clear()
    return ops
