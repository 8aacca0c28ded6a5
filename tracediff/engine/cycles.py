"""Cycle segmentation: which GPU operations belong to which repetition of the workload's loop.

Stage: engine. Input: a `Run` and its GPU ops (engine/ops.py); output: `Segmentation` with each op
tagged by cycle (and phase), plus per-cycle host ranges.

Two methods:
- NVTX (or Kineto annotation) ranges named by `--cycle` or found automatically: a cycle's GPU work
  is what its host range launched: the launch API call lies inside the range on the same thread,
  and the op carries that call's correlation (CUDA-graph node kernels carry their cudaGraphLaunch).
- Kernel period, when the run has no markers: the shortest period P with
  name[i] == name[i + P] for nearly all i of a device's op sequence; cycles are cut where the GPU
  idles longest within the period.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracediff.engine import align as al
from tracediff.errors import AnalysisError
from tracediff.runfile import Run

MIN_COVERAGE = 0.3
"""An automatically found cycle range must have launched at least this share of the GPU ops."""
WHOLE = ("whole", "all")
"""`--cycle whole`: the whole run is one cycle (totals; no per-cycle statistics)."""
PREFERRED = ("cycle", "verify", "decode", "step", "ProfilerStep", "iteration", "forward")


@dataclass
class Segmentation:
    ops: (
        pl.DataFrame
    )  # gpu ops with `cycle` (i64) and `phase` (categorical) columns, only ops inside cycles
    ranges: (
        pl.DataFrame
    )  # process_id, cycle, start_ns, end_ns, wall_ns (host range; empty for kernel-period)
    phases: pl.DataFrame  # process_id, cycle, phase, duration_ns (host time of nested ranges)
    method: str
    warnings: list[str]
    range_key: tuple[str | None, str] | None = None
    """(domain, name) of a range found automatically (domain None: the default one): the other
    side is cut at exactly that range, not at a name that may also be another domain's."""


def _ranges(run: Run) -> pl.DataFrame:
    df = pl.from_arrow(run.table("nvtx_ranges"))
    assert isinstance(df, pl.DataFrame)
    return df.filter(
        (pl.col("range_kind").cast(pl.String) != "mark")
        & pl.col("end_ns").is_not_null()
        & (pl.col("domain").cast(pl.String).fill_null("") != "NCCL")
        & pl.col("device_id").is_null()
        # NCCL's own ranges (ncclAllReduce, ncclGroupEnd) even where the domain was not resolved
        & ~pl.col("name").cast(pl.String).fill_null("").str.contains(r"^nccl[A-Z]")
    ).with_columns(
        pl.col("domain").cast(pl.String),
        pl.col("name").cast(pl.String).fill_null("").str.replace(r"#\d+$", "").alias("key"),
    )


def _match(ranges: pl.DataFrame, spec: str) -> pl.DataFrame:
    """Ranges named `spec` (in any domain), else DOMAIN:NAME ("aten::mm" is a name first)."""
    sel = ranges.filter(pl.col("key") == spec)
    if sel.height or ":" not in spec:
        return sel
    domain, _, name = spec.rpartition(":")
    return ranges.filter((pl.col("key") == name) & (pl.col("domain") == domain))


def _exact(ranges: pl.DataFrame, key: tuple[str | None, str]) -> pl.DataFrame:
    """Ranges of exactly this (domain, name); domain None: the default domain only."""
    return ranges.filter((pl.col("key") == key[1]) & pl.col("domain").eq_missing(key[0]))


def key_label(key: tuple[str | None, str]) -> str:
    return key[1] if key[0] is None else f"{key[0]}:{key[1]}"


def _outermost(sel: pl.DataFrame) -> pl.DataFrame:
    """Same-named ranges nested in each other (recursion): keep the outermost of each thread."""
    min_depth = sel.group_by("process_id", "thread_id").agg(pl.col("depth").min().alias("_d"))
    return (
        sel.join(min_depth, on=["process_id", "thread_id"])
        .filter(pl.col("depth") == pl.col("_d"))
        .drop("_d")
    )


def _latest_started(
    points: pl.DataFrame, at: str, intervals: pl.DataFrame, start: str, by: list[str]
) -> pl.DataFrame:
    """Each row of `points` (sorted by `at`) with the interval of the same `by` keys that started
    last at or before it (null columns where none): the candidate enclosing interval. Callers
    check its end, since the intervals of one key do not overlap."""
    return points.join_asof(
        intervals, left_on=at, right_on=start, by=by, strategy="backward", check_sortedness=False
    )


def _assign(ops: pl.DataFrame, cyc: pl.DataFrame) -> pl.DataFrame:
    """Which cycle range launched each op: (_op = row of `ops`, process_id, launch_thread_id,
    launch_start_ns, cycle, _other_thread); ops in no cycle are absent.

    First on the range's own thread. Ops launched by another thread of the same process while a
    cycle range was open (PyTorch's autograd threads launch the backward pass) belong to that
    cycle too: they get `_other_thread` = true and are phased "(other thread)". Works on these
    few columns only: the wide op frame is gathered once, by `_tagged`.
    """
    r = cyc.select(
        "process_id",
        pl.col("thread_id").alias("launch_thread_id"),
        pl.col("start_ns").alias("_rs"),
        pl.col("end_ns").alias("_re"),
        "cycle",
    ).sort("_rs")
    o = (
        ops.select("process_id", "launch_thread_id", "launch_start_ns")
        .with_row_index("_op")
        .filter(pl.col("launch_start_ns").is_not_null())
        .sort("launch_start_ns")
    )
    j = _latest_started(o, "launch_start_ns", r, "_rs", ["process_id", "launch_thread_id"])
    inside = pl.col("cycle").is_not_null() & (pl.col("launch_start_ns") <= pl.col("_re"))
    same = j.filter(inside).drop("_rs", "_re").with_columns(pl.lit(False).alias("_other_thread"))
    placed = np.zeros(ops.height, bool)
    placed[same["_op"].to_numpy()] = True
    rest = o.filter(~pl.Series(placed).gather(o["_op"]))
    if rest.height:
        rp = r.drop("launch_thread_id")
        other = _latest_started(rest, "launch_start_ns", rp, "_rs", ["process_id"])
        other = (
            other.filter(inside)
            .drop("_rs", "_re")
            .with_columns(pl.lit(True).alias("_other_thread"))
        )
        if other.height:
            same = pl.concat([same, other])
    return same


def _tagged(ops: pl.DataFrame, tags: pl.DataFrame) -> pl.DataFrame:
    """The ops `tags` names, with cycle and phase, in (device, start, end) order: the wide frame
    is gathered once, dropping ops outside cycles and ordering them for alignment together."""
    # rows of a run come in start order: by row, then (stably) by device is usually the order
    # wanted, and far cheaper than a three-key sort
    tags = tags.select("_op", "cycle", "phase").sort("_op")
    tags = tags.with_columns(ops.select("device_id", "start_ns", "end_ns")[tags["_op"]])
    dev = tags["device_id"].to_numpy()
    if len(dev) and 0 <= dev.min() and dev.max() < 1 << 15:
        tags = tags[np.argsort(dev.astype(np.int16), kind="stable")]
    if not al.lex_sorted(*(tags[c].to_numpy() for c in ("device_id", "start_ns", "end_ns"))):
        tags = tags.sort("device_id", "start_ns", "end_ns", "_op")
    return ops[tags["_op"]].with_columns(tags["cycle"], tags["phase"])


def _number(sel: pl.DataFrame) -> pl.DataFrame:
    return sel.sort("start_ns").with_columns(
        pl.col("start_ns").rank("ordinal").over("process_id").cast(pl.Int64).sub(1).alias("cycle")
    )


def _phases(ranges: pl.DataFrame, cyc: pl.DataFrame) -> pl.DataFrame:
    """Host ranges nested one level inside each cycle range, on the same thread."""
    depth = cyc.select("process_id", "thread_id", (pl.col("depth") + 1).alias("depth")).unique()
    inner = ranges.join(depth, on=["process_id", "thread_id", "depth"])
    if inner.height == 0:
        return pl.DataFrame(
            schema={
                "process_id": pl.Int64,
                "thread_id": pl.Int64,
                "cycle": pl.Int64,
                "phase": pl.String,
                "start_ns": pl.Int64,
                "end_ns": pl.Int64,
            }
        )
    r = cyc.select(
        "process_id",
        "thread_id",
        pl.col("start_ns").alias("_rs"),
        pl.col("end_ns").alias("_re"),
        "cycle",
    ).sort("_rs")
    j = _latest_started(inner.sort("start_ns"), "start_ns", r, "_rs", ["process_id", "thread_id"])
    j = j.filter(pl.col("cycle").is_not_null() & (pl.col("end_ns") <= pl.col("_re")))
    return j.select(
        "process_id", "thread_id", "cycle", pl.col("key").alias("phase"), "start_ns", "end_ns"
    )


def _tag_phase(tags: pl.DataFrame, phases: pl.DataFrame) -> pl.DataFrame:
    """`tags` (from _assign) with `phase`: the nested host range that launched the op."""
    other = pl.lit("(other thread)", pl.Categorical)
    if phases.height == 0:
        return tags.with_columns(
            pl.when(pl.col("_other_thread"))
            .then(other)
            .otherwise(pl.lit("(cycle)", pl.Categorical))
            .alias("phase")
        )
    p = phases.select(
        "process_id",
        pl.col("thread_id").alias("launch_thread_id"),
        pl.col("start_ns").alias("_ps"),
        pl.col("end_ns").alias("_pe"),
        pl.col("phase").cast(pl.Categorical).alias("_ph"),
    ).sort("_ps")
    j = _latest_started(
        tags.sort("launch_start_ns"),
        "launch_start_ns",
        p,
        "_ps",
        ["process_id", "launch_thread_id"],
    )
    inside = pl.col("_ph").is_not_null() & (pl.col("launch_start_ns") <= pl.col("_pe"))
    return j.with_columns(
        pl.when(pl.col("_other_thread"))
        .then(other)
        .when(inside)
        .then(pl.col("_ph"))
        .otherwise(pl.lit("(between phases)", pl.Categorical))
        .alias("phase")
    ).drop("_ps", "_pe", "_ph")


def by_ranges(
    run: Run, ops: pl.DataFrame, spec: str | None, key: tuple[str | None, str] | None = None
) -> Segmentation | None:
    """Cycles from host ranges. `spec` is NAME or DOMAIN:NAME, `key` an exact (domain, name)
    (the range the other side's cut found); neither: find one. None if no ranges fit."""
    ranges = _ranges(run)
    if key is not None:
        spec = key_label(key)
    if ranges.height == 0:
        if spec:
            raise AnalysisError(
                f"{run.path}: no NVTX ranges or annotations to cut cycles at",
                "drop --cycle to cut cycles from the kernel sequence",
            )
        return None
    moved = None  # the other side's range found only in another domain
    if spec:
        sel = _match(ranges, spec) if key is None else _exact(ranges, key)
        if sel.height == 0 and key is not None:
            sel = ranges.filter(pl.col("key") == key[1])
            moved = sorted({d or "the default domain" for d in sel["domain"].unique().to_list()})
        if sel.height == 0:
            names = (
                ranges.group_by("key")
                .len()
                .sort("len", "key", descending=[True, False])
                .head(8)["key"]
                .to_list()
            )
            raise AnalysisError(
                f"{run.path}: no range named {spec!r}", f"ranges present: {', '.join(names)}"
            )
        cyc = _number(_outermost(sel))
        chosen = spec
        assigned = _assign(ops, cyc)
    else:
        best = None
        cands = ranges.group_by("domain", "key").agg(
            pl.len().alias("n"), pl.col("depth").min().alias("depth")
        )
        # in name order: of two ranges with equal scores the first wins, the same one every run
        cands = cands.filter(pl.col("n") >= 3).sort("domain", "key", nulls_last=False)
        for row in cands.iter_rows(named=True):
            sel = ranges.filter(
                (pl.col("key") == row["key"]) & (pl.col("domain").eq_missing(row["domain"]))
            )
            cyc = _number(_outermost(sel))
            tags = _assign(ops, cyc)
            covered = tags.height
            if covered < MIN_COVERAGE * ops.height:
                continue
            starts = cyc.filter(pl.col("process_id") == cyc["process_id"][0])["start_ns"].to_numpy()
            periods = np.diff(np.sort(starts))
            steady = len(periods) == 0 or (periods.std() <= periods.mean())
            pref = next(
                (i for i, p in enumerate(PREFERRED) if row["key"].lower() == p.lower()),
                len(PREFERRED),
            )
            score = (steady, covered, -row["depth"], -pref)
            if best is None or score > best[0]:
                best = (score, cyc, (row["domain"], row["key"]), tags)
            del tags
        if best is None:
            return None
        _, cyc, key, assigned = best
        chosen = key_label(key)
        del best
    phases = _phases(ranges, cyc)
    tags = _tag_phase(assigned, phases)
    del assigned
    warnings = []
    if moved:
        warnings.append(
            f"no {chosen!r} range in the other side's domain: cut at {key[1]!r} in "  # type: ignore[index]
            f"{', '.join(moved)}"
        )
    n_other = int(tags["_other_thread"].sum())
    tagged = _tagged(ops, tags)
    del tags
    if n_other:
        warnings.append(
            f"{n_other} GPU ops launched by other threads while a {chosen!r} range was open are "
            "included, phase '(other thread)'"
        )
    outside = ops.height - tagged.height
    if tagged.height == 0:
        raise AnalysisError(
            f"{run.path}: the {chosen!r} ranges launched no GPU work",
            "pick another range with --cycle, or none to cut cycles from the kernel sequence",
        )
    if outside:
        warnings.append(
            f"{outside} of {ops.height} GPU ops were launched outside any {chosen!r} range and are not compared"
        )
    rng = cyc.select(
        "process_id",
        "thread_id",
        "cycle",
        "start_ns",
        "end_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("wall_ns"),
    )
    ph = phases.group_by("process_id", "cycle", "phase").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("duration_ns")
    )
    return Segmentation(
        ops=tagged,
        ranges=rng,
        phases=ph,
        method=f"nvtx:{chosen}",
        warnings=warnings,
        range_key=key,  # None for a user's --cycle NAME (it names ranges in every domain)
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


def _no_ranges() -> pl.DataFrame:
    """Segmentation.ranges of a method without host ranges."""
    return pl.DataFrame(
        schema={
            "process_id": pl.Int64,
            "thread_id": pl.Int64,
            "cycle": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "wall_ns": pl.Int64,
        }
    )


def _no_phases() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "process_id": pl.Int64,
            "cycle": pl.Int64,
            "phase": pl.String,
            "duration_ns": pl.Int64,
        }
    )


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
        ranges=_no_ranges(),
        phases=_no_phases(),
        method=f"kernel-period:{short}",
        warnings=warnings,
    )


def whole(ops: pl.DataFrame) -> Segmentation:
    """The whole run as a single cycle."""
    tagged = ops.with_columns(
        pl.lit(0, pl.Int64).alias("cycle"), pl.lit("(cycle)", pl.Categorical).alias("phase")
    )
    return Segmentation(
        ops=tagged, ranges=_no_ranges(), phases=_no_phases(), method="whole-run", warnings=[]
    )


def segment(
    run: Run,
    ops: pl.DataFrame,
    spec: str | None,
    *,
    method: str | None = None,
    key: tuple[str | None, str] | None = None,
) -> Segmentation:
    """Cut cycles: by `spec` (range name, or "whole"), else at the exact range `key` or as
    `method` says (the other side's cut), else found."""
    src = run.path
    if ops.height == 0:
        raise AnalysisError(
            f"{src}: the run has no GPU operations",
            "profile with CUDA tracing on (nsys -t cuda,nvtx)",
        )
    if (spec or "").lower() in WHOLE or method == "whole-run":
        return whole(ops)
    if method and method.startswith("kernel-period"):
        return by_kernel_period(ops, src)
    seg = by_ranges(run, ops, spec, key)
    if seg is None:
        try:
            seg = by_kernel_period(ops, src)
        except AnalysisError:
            seg = whole(ops)
            seg.warnings.append(
                "no cycle markers and no repeating kernel sequence: compared the whole run as one cycle"
            )
    return seg
