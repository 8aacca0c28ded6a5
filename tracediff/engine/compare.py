"""`compare(base, head)`: segment both runs into cycles, align them, attribute the change.

Stage: engine front door. Input: two `Run`s; output: a `Comparison` (engine/result.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import polars as pl

from tracediff.engine import align as al
from tracediff.engine import attribute as at
from tracediff.engine import stats as st
from tracediff.engine import tables as tb
from tracediff.engine.cycles import Segmentation, segment
from tracediff.engine.env import env_diffs
from tracediff.engine.ops import gpu_ops_counted
from tracediff.engine.result import Comparison, SideSummary
from tracediff.errors import AnalysisError
from tracediff.runfile import Run


def _side_summary(
    run: Run,
    seg: Segmentation,
    spans_ms: np.ndarray,
    wall_ms: np.ndarray | None,
    devices: list[int],
) -> SideSummary:
    q = np.percentile(spans_ms, [50, 90, 99]) if len(spans_ms) else [float("nan")] * 3
    return SideSummary(
        label=run.label,
        source=str(run.metadata.get("source", "")),
        cycles=len(spans_ms),
        cycle_method=seg.method,
        mean_ms=float(spans_ms.mean()),
        p50_ms=float(q[0]),
        p90_ms=float(q[1]),
        p99_ms=float(q[2]),
        min_ms=float(spans_ms.min()),
        max_ms=float(spans_ms.max()),
        std_ms=float(spans_ms.std(ddof=1)) if len(spans_ms) > 1 else 0.0,
        wall_mean_ms=float(wall_ms.mean()) if wall_ms is not None and len(wall_ms) else None,
        devices=devices,
    )


def _host(
    segs: dict[str, Segmentation], n_boot: int
) -> tuple[dict[str, np.ndarray | None], pl.DataFrame]:
    """Host wall time per cycle and its split into nested phases."""
    walls: dict[str, np.ndarray | None] = {}
    rows = []
    for side, seg in segs.items():
        if seg.ranges.height == 0:
            walls[side] = None
            continue
        w = seg.ranges.group_by("cycle").agg(pl.col("wall_ns").max()).sort("cycle")
        walls[side] = w["wall_ns"].to_numpy() / 1e6
        # phases of the first process (ranks run the same code)
        p0 = seg.ranges["process_id"].min()
        ph = seg.phases.filter(pl.col("process_id") == p0)
        inside = ph.group_by("cycle").agg(pl.col("duration_ns").sum().alias("_in"))
        rw = seg.ranges.filter(pl.col("process_id") == p0).select("cycle", "wall_ns")
        outside = rw.join(inside, on="cycle", how="left").select(
            "cycle",
            pl.lit("(outside phases)").alias("phase"),
            (pl.col("wall_ns") - pl.col("_in").fill_null(0)).alias("duration_ns"),
        )
        rows.append(
            pl.concat([ph.select("cycle", "phase", "duration_ns"), outside]).with_columns(
                pl.lit(side).alias("side")
            )
        )
    if len(rows) < 2:
        return walls, pl.DataFrame()
    long = pl.concat(rows).rename({"duration_ns": "value_ns"})
    cb = sorted(segs["base"].ranges["cycle"].unique().to_list())
    ch = sorted(segs["head"].ranges["cycle"].unique().to_list())
    host = (
        st.per_cycle_stats(long, ["phase"], cb, ch, n_boot)
        .sort(st.BY_CHANGE)  # ties (an unchanged phase): phase order, the same every run
        .drop("_k")
    )
    return walls, host


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
        from tracediff.engine.host import compare_host  # host-only runs (NVTX, no CUDA trace)

        return compare_host(base, head, cycle, n_boot)
    say("finding cycles")
    seg_b = segment(base, ops_b, cycle)
    del ops_b
    spec = cycle
    if spec is None and seg_b.method.startswith("nvtx:"):
        spec = seg_b.method[len("nvtx:") :]
    ops_h, drop_h = gpu_ops_counted(head)
    head.release()
    dropped = {"base": drop_b, "head": drop_h}  # gpu_ops drops ops that end before they start
    try:
        seg_h = segment(
            head,
            ops_h,
            spec if seg_b.range_key is None or cycle else None,
            method=None if spec else seg_b.method,
            key=None if cycle else seg_b.range_key,  # base's range, in its domain only
        )
    except AnalysisError as e:
        raise AnalysisError(
            f"head {e.message}", f"base cycles are {seg_b.method}; {e.hint or ''}".strip()
        ) from None
    del ops_h
    if seg_b.method.split(":")[0] != seg_h.method.split(":")[0]:
        raise AnalysisError(
            f"cycles found differently: base {seg_b.method}, head {seg_h.method}",
            "pass --cycle NAME with a range both runs have",
        )
    warnings = [f"base: {w}" for w in seg_b.warnings + base.warnings] + [
        f"head: {w}" for w in seg_h.warnings + head.warnings
    ]
    warnings += [
        f"{s}: {n} GPU operations end before they start or have no end time; they are not compared"
        for s, n in dropped.items()
        if n
    ]
    ndev_b, ndev_h = seg_b.ops["device_id"].n_unique(), seg_h.ops["device_id"].n_unique()
    if ndev_b != ndev_h:
        warnings.append(
            f"base ran on {ndev_b} GPU(s), head on {ndev_h}: per-GPU contributors are not comparable one to one"
        )
    devices = {
        s: sorted(g.ops["device_id"].unique().to_list())
        for s, g in (("base", seg_b), ("head", seg_h))
    }
    ops = pl.concat(
        [
            seg_b.ops.with_columns(pl.lit("base", al.SIDES).alias("side")),
            seg_h.ops.with_columns(pl.lit("head", al.SIDES).alias("side")),
        ],
        how="vertical" if seg_b.ops.schema == seg_h.ops.schema else "diagonal_relaxed",
    )
    seg_b.ops, seg_h.ops = seg_b.ops.clear(), seg_h.ops.clear()  # `ops` holds them now
    say(f"aligning {ops.height} operations")
    ops, templates = al.align(ops)
    say("attributing")
    ops, cyc = at.per_device_cycles(ops)
    ops = at.collective_split(ops)
    # drop cycles that span only part of the devices? keep all; critical device per cycle
    crit = cyc.filter(pl.col("critical"))
    span = {s: crit.filter(pl.col("side") == s).sort("cycle") for s in ("base", "head")}
    if span["base"].height == 0 or span["head"].height == 0:
        raise AnalysisError("no complete cycles in one of the runs", "check --cycle")
    sb, sh = span["base"]["span_ns"].to_numpy() / 1e6, span["head"]["span_ns"].to_numpy() / 1e6
    long = at.contributions(ops, cyc)
    keys = ["kind", "name", "phase", "device_id"]
    cb, chh = span["base"]["cycle"].to_list(), span["head"]["cycle"].to_list()
    stats = st.per_cycle_stats(long, keys, cb, chh, n_boot)
    tot_lo, tot_hi = at.bootstrap_delta(sb[None, :], sh[None, :], n_boot)
    delta = float(sh.mean() - sb.mean())
    counts = long.group_by("side", *keys).agg(pl.col("count").sum())
    cnt = stats.join(
        counts.filter(pl.col("side") == "base").drop("side").rename({"count": "_cb"}),
        on=keys,
        how="left",
        nulls_equal=True,
    )
    cnt = cnt.join(
        counts.filter(pl.col("side") == "head").drop("side").rename({"count": "_ch"}),
        on=keys,
        how="left",
        nulls_equal=True,
    ).sort("_k")
    attribution = (
        cnt.with_columns(
            (pl.col("_cb").fill_null(0) / len(cb)).alias("base_count_per_cycle"),
            (pl.col("_ch").fill_null(0) / len(chh)).alias("head_count_per_cycle"),
        )
        .with_columns(
            st.share(delta),
            pl.when(pl.col("name") == at.GAP_CAUSES["host"])
            .then(pl.lit("host-side"))
            .when(pl.col("kind").is_in(["gap", "overlap"]))
            .then(pl.lit("-"))
            .when(pl.col("base_count_per_cycle") == 0)
            .then(pl.lit("added"))
            .when(pl.col("head_count_per_cycle") == 0)
            .then(pl.lit("removed"))
            .when(pl.col("base_count_per_cycle") != pl.col("head_count_per_cycle"))
            .then(pl.lit("mixed"))
            .otherwise(pl.lit("matched"))
            .alias("status"),
        )
        .filter((pl.col("base_ms_per_cycle") != 0) | (pl.col("head_ms_per_cycle") != 0))
    )
    attribution = (
        attribution.sort(st.BY_CHANGE)  # ties: key order, so the ids c0, c1... are stable
        .with_row_index("_r")
        .with_columns(
            pl.concat_str([pl.lit("c"), pl.col("_r").cast(pl.String)]).alias("contributor_id")
        )
        .select(
            "contributor_id",
            "kind",
            "name",
            "phase",
            pl.col("device_id").cast(pl.Int32),
            *st.ESTIMATE,
            "base_count_per_cycle",
            "head_count_per_cycle",
            "status",
        )
    )
    residual = delta - float(attribution["delta_ms_per_cycle"].sum())
    across = (
        st.across_gpus(long, attribution, cb, chh, n_boot, delta)
        if max(len(devices["base"]), len(devices["head"])) > 1
        else pl.DataFrame()
    )
    walls, host = _host({"base": seg_b, "head": seg_h}, n_boot)
    pooled = (
        float(
            np.sqrt(
                ((len(sb) - 1) * sb.var(ddof=1) + (len(sh) - 1) * sh.var(ddof=1))
                / max(len(sb) + len(sh) - 2, 1)
            )
        )
        if len(sb) > 1 and len(sh) > 1
        else 0.0
    )
    crit_dev = crit.filter(pl.col("side") == "head")["device_id"].mode().sort()
    significant = bool(
        (tot_lo[0] > 0 or tot_hi[0] < 0) and abs(delta) >= st.MIN_EFFECT_MS
    )  # NaN CI: False
    if len(sb) < 2 or len(sh) < 2:
        warnings.append(
            "fewer than 2 cycles on a side: no confidence intervals, nothing is called significant"
        )
    events = partial(tb.events, ops, cyc, attribution)  # built when first read (Comparison.events)
    wall = {s: walls.get(s) for s in ("base", "head")}
    # cycles table
    if seg_b.ranges.height and seg_h.ranges.height:
        wall_df = pl.concat(
            [
                s.ranges.group_by("cycle")
                .agg(pl.col("wall_ns").max())
                .with_columns(pl.lit(side, al.SIDES).alias("side"))
                for side, s in (("base", seg_b), ("head", seg_h))
            ]
        )
        cyc = cyc.join(wall_df, on=["side", "cycle"], how="left")
    else:
        cyc = cyc.with_columns(pl.lit(None, pl.Int64).alias("wall_ns"))
    cyc_out = cyc.select(
        pl.col("side").cast(pl.String),
        "cycle",
        pl.col("device_id").cast(pl.Int32),
        "start_ns",
        "end_ns",
        "span_ns",
        "busy_ns",
        "idle_ns",
        "wall_ns",
        "critical",
    )
    del templates
    return Comparison(
        base=_side_summary(base, seg_b, sb, wall["base"], devices["base"]),
        head=_side_summary(head, seg_h, sh, wall["head"], devices["head"]),
        delta_ms_per_cycle=delta,
        delta_ci95=(float(tot_lo[0]), float(tot_hi[0])),
        delta_pct=100.0 * delta / float(sb.mean()) if sb.mean() else float("nan"),
        significant=significant,
        noise_floor_ms=pooled,
        residual_ms_per_cycle=residual,
        critical_device=int(crit_dev[0]) if len(crit_dev) else None,
        env_diffs=env_diffs(base, head),
        attribution=attribution,
        cycles=cyc_out,
        events=events,  # type: ignore[arg-type]  # a thunk: see Comparison.__getattribute__
        host=host,
        across_gpus=across,
        collectives=tb.collectives(ops, len(cb), len(chh)),
        totals=tb.totals(ops),
        warnings=warnings,
        replay_inputs={
            "ops": ops,
            "head_api": head.table("api_calls"),
            "base_events": base.table("cuda_events"),  # cross-stream edges (replay/events.py,
            "head_events": head.table("cuda_events"),  # the TUI's event marks: tui/edges.py)
        },
    )
