"""Cycles from the repeating op sequence of each GPU, for runs without cycle markers.

Stage: engine (segmentation). Input: a run's GPU ops (engine/ops.py); output: a `Segmentation`
(engine/cycle/segmentation.py) without host ranges. The period is the shortest P with
name[i] == name[i + P] for nearly all i of a device's op sequence; cycles start at an anchor op
of the repeating body that occurs once per period, the one the GPU idles longest before. Base's
cut (period and anchor per GPU) is the rule head is cut by, and a head whose ops that rule does
not fit raises RuleMismatch: the caller then compares whole runs instead of two different cuts.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine.cycle.segmentation import (
    CycleRule,
    DeviceCut,
    Segmentation,
    no_phases,
    no_ranges,
)


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


MIN_SPACING = 0.9
"""Occurrences of the anchor closer than this share of the period are one cycle (the anchor may
recur inside a cycle)."""
LENGTH_TOLERANCE = (0.75, 1.33)
"""Another run cut by a rule: its median cycle length (in ops) must lie within these multiples
of the rule's period, or the rule does not describe its loop."""
DROP_WARN = 0.05
"""Warn when a cut leaves out at least this share of a GPU's ops (or a whole period's worth)."""


LABEL_WIDTH = 80
"""An anchor's display name is shortened to this many characters (generated GEMM names run to
hundreds)."""


class RuleMismatch(AnalysisError):
    """A run cannot be cut by the other side's kernel-period rule (the caller falls back)."""


def display_name(name: str) -> str:
    """A kernel's name without return type, template arguments and parameter list:
    "void at::native::(anonymous namespace)::foo<float, 4>(int, float*)" ->
    "at::native::(anonymous namespace)::foo"."""
    out, depth = [], 0
    for ch in name:  # template arguments may hold parentheses: drop <...> first, balanced
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    s = "".join(out).strip()
    if s.endswith(")"):  # the parameter list: the last balanced (...) group
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                if s[i:] != "(anonymous namespace)" and i > 0:
                    s = s[:i].rstrip()
                break
    s = s.removeprefix("void ").strip() or name
    return s if len(s) <= LABEL_WIDTH else s[: LABEL_WIDTH - 1] + "…"


def _cut_points(is_anchor: np.ndarray, period: int) -> np.ndarray:
    """Indices where cycles start: the anchor's occurrences, each at least MIN_SPACING
    periods after the previous start."""
    starts: list[int] = []
    for o in np.flatnonzero(is_anchor):  # one iteration per anchor occurrence (~ per cycle)
        if not starts or o - starts[-1] >= MIN_SPACING * period:
            starts.append(int(o))
    return np.asarray(starts, dtype=np.int64)


def _find(d: pl.DataFrame) -> DeviceCut | None:
    """Base's cut of one device's ops (in start order): the period, and as anchor the op that
    starts the period where the GPU idles longest, among ops of the repeating body occurring
    once per period. None if the sequence does not repeat."""
    codes = d["name"].cast(pl.Categorical).to_physical().to_numpy()
    p = _period(codes)
    if p is None:
        return None
    n = d.height
    prev_end = d["end_ns"].cum_max().shift(1)
    gap = (d["start_ns"] - prev_end).fill_null(0).clip(lower_bound=0).to_numpy()
    idx = np.arange(n)
    counts = np.bincount(codes)
    once_code = np.abs(counts - n / p) <= max(1.0, 0.1 * n / p)
    once = once_code[codes]
    resid = (
        pl.DataFrame({"r": idx % p, "g": gap, "once": once, "c": codes})
        .group_by("r")
        .agg(
            pl.col("g").median(),
            pl.col("once").mean(),
            # the op the body holds at this position: the most frequent name there, not the
            # first run's (a prologue op occurring once would anchor nothing)
            pl.col("c").mode().min().alias("anchor"),
        )
        .sort(["once", "g", "r"], descending=[True, True, False])  # ties: the earliest r
    )
    ranked = resid["anchor"].to_list()
    # an op occurring once per period first (one that recurs inside the cycle cuts it where
    # it first occurs after MIN_SPACING); each candidate costs a pass over the ops
    for code in [c for c in ranked if once_code[c]] + [c for c in ranked if not once_code[c]]:
        is_anchor = codes == code
        if len(_cut_points(is_anchor, p)) >= 2:
            name = str(d["name"].cast(pl.String)[int(np.argmax(is_anchor))])
            return DeviceCut(device_id=int(d["device_id"][0]), anchor=name, period=p)
    return None


def _apply(d: pl.DataFrame, cut: DeviceCut, *, own: bool) -> tuple[np.ndarray, int, int] | str:
    """Each op's cycle (-1: outside whole cycles), the number of cycles and their typical length
    in ops, or why `cut` does not fit these ops. `own`: the cut was found on these ops (no fit
    check)."""
    is_anchor = (d["name"].cast(pl.String) == cut.anchor).to_numpy()
    starts = _cut_points(is_anchor, cut.period)
    if len(starts) < 2:
        return f"{display_name(cut.anchor)!r} occurs {int(is_anchor.sum())} time(s), not once per cycle"
    n = d.height
    lengths = np.diff(np.append(starts, n))
    typical = float(np.median(lengths[:-1]))
    lo, hi = LENGTH_TOLERANCE
    if not own and not lo * cut.period <= typical <= hi * cut.period:
        return (
            f"{display_name(cut.anchor)!r} starts a cycle every {typical:.0f} ops, "
            f"not every ~{cut.period}"
        )
    idx = np.arange(n)
    cyc = np.full(n, -1, dtype=np.int64)
    seg = np.searchsorted(starts, idx, side="right") - 1
    inside = idx >= starts[0]
    cyc[inside] = seg[inside]
    ncyc = len(starts)
    if lengths[-1] < MIN_SPACING * typical:  # a trailing partial cycle
        cyc[cyc == ncyc - 1] = -1
        ncyc -= 1
    return cyc, ncyc, round(typical)


def by_kernel_period(
    ops: pl.DataFrame,
    source: str,
    rule: CycleRule | None = None,
    devices: list[int] | None = None,
    some: bool = False,
) -> Segmentation:
    """Cycles from the repeating op sequence of each device: found (rule None), or cut by the
    other side's `rule` (raises RuleMismatch where it does not fit these ops). `devices`: every
    GPU of the run when `ops` hold only some (one of its files): a GPU base lacks takes the cut
    by its place among them. `some`: finding, no GPU repeating is not refused here (the
    caller judges the whole run): the cut is then empty, with its warnings."""
    parts, cuts, warnings = [], [], []
    given = {c.device_id: c for c in rule.cuts} if rule is not None else {}
    mine = ops["device_id"].unique().sort().to_list()
    place = {d: i for i, d in enumerate(devices if devices is not None else mine)}
    for dev in mine:
        i = place[dev]
        d = ops.filter(pl.col("device_id") == dev).sort("start_ns", maintain_order=True)
        if rule is None:
            cut = _find(d)
            if cut is None:
                warnings.append(
                    f"GPU {dev}: no repeating op sequence found; its ops are not compared"
                )
                continue
        else:
            # the same GPU's cut; a GPU base does not have: the cut of the GPU in its place
            cut = given.get(dev) or rule.cuts[min(i, len(rule.cuts) - 1)]
        got = _apply(d, cut, own=rule is None)
        if isinstance(got, str):
            if rule is None:
                continue
            raise RuleMismatch(f"{source}: GPU {dev}: {got}", f"the other side is cut {rule.label}")
        cyc, ncyc, length = got
        if ncyc < 1:
            continue
        tagged = d.with_columns(pl.Series("cycle", cyc)).filter(pl.col("cycle") >= 0)
        left = d.height - tagged.height
        if left and (left >= DROP_WARN * d.height or left >= length):
            warnings.append(
                f"GPU {dev}: {left} of {d.height} ops ({100 * left / d.height:.0f} %) lie outside "
                f"whole {length}-op cycles (before the first {display_name(cut.anchor)!r} or in a "
                "last partial cycle) and are not compared"
            )
        parts.append(tagged)
        cuts.append(cut)
    if not parts and some and rule is None:
        empty = ops.clear().with_columns(
            pl.lit(0, pl.Int64).alias("cycle"), pl.lit("(cycle)", pl.Categorical).alias("phase")
        )
        return Segmentation(
            ops=empty, ranges=no_ranges(), phases=no_phases(), rule=CycleRule.whole(),
            warnings=warnings,
        )  # fmt: skip
    if not parts:
        if rule is not None:
            raise RuleMismatch(
                f"{source}: no GPU of the other side's cut", f"the other side is cut {rule.label}"
            )
        raise AnalysisError(
            f"{source}: no cycle markers and no repeating kernel sequence",
            "capture with NVTX ranges around each cycle and pass --cycle NAME",
        )
    tagged = pl.concat(parts).with_columns(pl.lit("(cycle)", pl.Categorical).alias("phase"))
    if rule is None:
        rule = CycleRule.kernel_period(tuple(cuts), display_name(cuts[0].anchor))
    return Segmentation(
        ops=tagged, ranges=no_ranges(), phases=no_phases(), rule=rule, warnings=warnings
    )
