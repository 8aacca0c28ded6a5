"""`compare(base, head)`: segment both runs into cycles, align them, attribute the change.

Stage: engine front door. Input: two `Run`s; output: a `Comparison` (engine/result.py). The steps,
each a module of its own: segment base and take its cycle rule (engine/cycles.py), cut head by
that rule, align both sides' ops (engine/align.py), attribute each cycle's time to contributors
(engine/attribute.py, engine/stats.py), the headline and side summaries (engine/verdict.py), the
detail tables (engine/tables.py). Runs without GPU operations go to engine/host.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import polars as pl

from tracediff import schema
from tracediff.engine import align as al
from tracediff.engine import attribute as at
from tracediff.engine import cycles
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
    base: Run,
    head: Run,
    *,
    cycle: str | None = None,
    n_boot: int = 1000,
    progress: Callable[[str], None] | None = None,
) -> Comparison:
    """Compare two runs cycle by cycle. Raises AnalysisError when the runs cannot be compared."""
    say = progress or (lambda _msg: None)
    say("collecting GPU operations")
    # one side at a time, each side's untagged ops freed once it is cut into cycles: at most
    # one untagged and one tagged copy of a side's ops are alive at once
    ops_b, drop_b = gpu_ops_counted(base)
    base.release()  # the run file's pages of the kernel table: read, no longer needed
    if ops_b.height == 0 and gpu_ops_counted(head)[0].height == 0:
        return compare_host(base, head, cycle, n_boot)  # host-only runs (NVTX, no CUDA trace)
    say("finding cycles")
    seg_b = cycles.find(base, ops_b, cycle)
    del ops_b
    ops_h, drop_h = gpu_ops_counted(head)
    head.release()
    seg_b, seg_h = _cut_head(base, head, ops_h, seg_b)
    del ops_h
    warnings = _warnings(base, head, seg_b, seg_h, {"base": drop_b, "head": drop_h})
    devices = {s: sorted(g.ops["device_id"].unique().to_list()) for s, g in _sides(seg_b, seg_h)}
    ops = _both_sides(seg_b, seg_h)
    say(f"aligning {ops.height} operations")
    ops, _ = al.align(ops)
    renamed = al.renames(ops)
    say("attributing")
    ops, cyc = at.per_device_cycles(ops)
    ops = at.collective_split(ops)
    t = _cycle_times(cyc)
    v = vd.verdict(t.base_ms, t.head_ms, n_boot)
    long = at.contributions(ops, cyc)
    attribution = tb.attribution(long, t.base_cycles, t.head_cycles, n_boot, renamed)
    if len(t.base_ms) < 2 or len(t.head_ms) < 2:
        warnings.append(vd.FEW_CYCLES)
    return _assemble(
        base, head, seg_b, seg_h, v, t, ops, cyc, long, attribution, warnings, devices, n_boot
    )


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
    base: Run,
    head: Run,
    seg_b: Segmentation,
    seg_h: Segmentation,
    v: vd.Verdict,
    t: _CycleTimes,
    ops: pl.DataFrame,
    cyc: pl.DataFrame,
    long: pl.DataFrame,
    attribution: pl.DataFrame,
    warnings: list[str],
    devices: dict[str, list[int]],
    n_boot: int,
) -> Comparison:
    """The `Comparison`: the verdict, both sides' summaries and every table. `devices`: each
    side's GPUs (the segmentations have given their ops up to `ops`)."""
    across = (
        st.across_gpus(long, attribution, t.base_cycles, t.head_cycles, n_boot)
        if max(len(devices["base"]), len(devices["head"])) > 1
        else pl.DataFrame()
    )
    nb, nh = len(t.base_cycles), len(t.head_cycles)
    return Comparison(
        base=vd.side_summary(base, seg_b, t.base_ms, vd.host_walls(seg_b), devices["base"]),
        head=vd.side_summary(head, seg_h, t.head_ms, vd.host_walls(seg_h), devices["head"]),
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
        host=schema.conform_diff("host", vd.host_phases(seg_b, seg_h, n_boot)),
        across_gpus=schema.conform_diff("across_gpus", across),
        collectives=tb.collectives(ops, nb, nh),
        totals=tb.totals(ops),
        warnings=warnings,
        replay_inputs=ReplayInputs(
            ops=ops,
            head_api=head.table("api_calls"),
            base_events=base.table("cuda_events"),
            head_events=head.table("cuda_events"),
        ),
    )


def _sides(seg_b: Segmentation, seg_h: Segmentation) -> tuple[tuple[str, Segmentation], ...]:
    return (("base", seg_b), ("head", seg_h))


def _cut_head(
    base: Run, head: Run, ops: pl.DataFrame, seg_b: Segmentation
) -> tuple[Segmentation, Segmentation]:
    """Both sides' cycles: head cut by base's rule (a refusal says how base was cut). Where
    base's kernel period does not fit head's ops, both runs are compared whole, with the reason:
    never a per-cycle verdict from two different cuts."""
    try:
        return seg_b, cycles.cut(head, ops, seg_b.rule)
    except RuleMismatch as e:
        seg_h = cycles.whole(ops)
        seg_h.warnings.append(
            f"not cut as base is ({seg_b.rule.label}): {e.message}; compared the whole runs as "
            "one cycle each (pass --cycle NAME with an NVTX range both runs have)"
        )
        ops_b, _ = gpu_ops_counted(base)
        base.release()
        return cycles.whole(ops_b), seg_h
    except AnalysisError as e:
        raise AnalysisError(
            f"head {e.message}", f"base cycles are {seg_b.rule.label}; {e.hint or ''}".strip()
        ) from None


def _warnings(
    base: Run, head: Run, seg_b: Segmentation, seg_h: Segmentation, dropped: dict[str, int]
) -> list[str]:
    """The segmentations' and readers' warnings, each side's, then what the comparison skips."""
    warnings = [f"base: {w}" for w in seg_b.warnings + base.warnings] + [
        f"head: {w}" for w in seg_h.warnings + head.warnings
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
