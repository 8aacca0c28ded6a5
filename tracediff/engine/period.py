"""Cycles from the repeating op sequence of each GPU, for runs without cycle markers.

Stage: engine (segmentation). Input: a run's GPU ops (engine/ops.py); output: a `Segmentation`
(engine/segmentation.py) without host ranges. The period is the shortest P with
name[i] == name[i + P] for nearly all i of a device's op sequence; cycles are cut where the GPU
idles longest within the period.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.engine.segmentation import CycleRule, Segmentation, no_phases, no_ranges
from tracediff.errors import AnalysisError


def _period(names: np.ndarray) -> int | None:
    """The op sequence's period: the lag P at which names repeat best (name[i] == name[i + P]).

    Candidates are the common index distances between repeats of a name. A cycle made of similar
    halves (8 target layers, then 1-layer draft steps of the same kernels) also repeats well at a
    fraction of its length, but less exactly: take the best-matching lag, and among lags within
    0.5 % of it the shortest (multiples of the period match as well as the period itself).
    """
    n = len(names)
    if n < 6:
        return None
    s = pl.DataFrame({"n": names, "i": np.arange(n)})
    diffs = (
        s.with_columns(pl.col("i").diff().over("n").alias("d"))
        .drop_nulls("d")
        .group_by("d")
        .len()
        .sort(["len", "d"], descending=[True, False])  # ties by lag: the same 64 every run
        .head(64)["d"]
        .to_list()
    )
    scores = {
        p: float(np.mean(names[:-p] == names[p:]))
        for p in sorted(int(d) for d in diffs if 2 <= d <= n // 3)
    }
    if not scores:
        return None
    best = max(scores.values())
    if best < 0.75:
        return None
    return min(p for p, m in scores.items() if m >= best - 0.005)


def by_kernel_period(ops: pl.DataFrame, source: str) -> Segmentation:
    """Cycles from the repeating op sequence of each device."""
    parts = []
    anchors = []
    warnings = []
    for dev in ops["device_id"].unique().sort().to_list():
        d = ops.filter(pl.col("device_id") == dev).sort("start_ns", maintain_order=True)
        codes = d["name"].cast(pl.Categorical).to_physical().to_numpy()
        p = _period(codes)
        if p is None:
            warnings.append(f"GPU {dev}: no repeating op sequence found; its ops are not compared")
            continue
        # idle gap before each op; cut the period where the GPU idles longest
        prev_end = d["end_ns"].cum_max().shift(1)
        gap = (d["start_ns"] - prev_end).fill_null(0).clip(lower_bound=0).to_numpy()
        idx = np.arange(d.height)
        # the anchor must be an op that occurs once per period (a name that recurs inside the
        # cycle would cut it in pieces); among those, the one after the longest idle
        counts = np.bincount(codes)
        once = np.abs(counts[codes] - d.height / p) <= max(1.0, 0.1 * d.height / p)
        resid = (
            pl.DataFrame({"r": idx % p, "g": gap, "once": once})
            .group_by("r")
            .agg(pl.col("g").median(), pl.col("once").mean())
            .sort(["once", "g", "r"], descending=[True, True, False])  # ties: the earliest r
        )
        r0 = int(resid["r"][0])
        anchor = codes[r0]
        occ = np.flatnonzero(codes == anchor)
        starts: list[int] = []
        for o in occ:  # loop over anchor occurrences (one per cycle), not over events
            if not starts or o - starts[-1] >= 0.9 * p:  # the anchor may recur inside a cycle
                starts.append(int(o))
        starts_a = np.asarray(starts)
        if len(starts_a) < 2:
            continue
        cyc = np.full(d.height, -1, dtype=np.int64)
        seg = np.searchsorted(starts_a, idx, side="right") - 1
        cyc[idx >= starts_a[0]] = seg[idx >= starts_a[0]]
        lengths = np.diff(np.append(starts_a, d.height))
        # drop a trailing partial cycle
        if lengths[-1] < 0.9 * np.median(lengths[:-1] if len(lengths) > 1 else lengths):
            cyc[cyc == len(starts_a) - 1] = -1
        parts.append(d.with_columns(pl.Series("cycle", cyc)).filter(pl.col("cycle") >= 0))
        anchors.append(str(d["name"][int(starts_a[0])]))
    if not parts:
        raise AnalysisError(
            f"{source}: no cycle markers and no repeating kernel sequence",
            "capture with NVTX ranges around each cycle and pass --cycle NAME",
        )
    tagged = pl.concat(parts).with_columns(pl.lit("(cycle)", pl.Categorical).alias("phase"))
    short = anchors[0].split("(")[0][:60]
    return Segmentation(
        ops=tagged,
        ranges=no_ranges(),
        phases=no_phases(),
        rule=CycleRule.kernel_period(short),
        warnings=warnings,
    )
