"""Cycles from host ranges (NVTX ranges, Kineto annotations): which range launched each GPU op.

Stage: engine (segmentation). Input: a `Run` and its GPU ops (engine/ops.py); output: a
`Segmentation` (engine/cycle/segmentation.py), each op tagged by cycle and phase, plus each cycle's
host range. A cycle's GPU work is what its host range launched: the launch API call lies inside
the range on the same thread, and the op carries that call's correlation (CUDA-graph node
kernels carry their cudaGraphLaunch). Host-only runs (no GPU ops) are cut by `host_only`.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.base import devorder
from tracediff.base.errors import AnalysisError
from tracediff.engine.cycle.launch import assign, latest_started, tag_phase
from tracediff.engine.cycle.segmentation import CycleRule, RangeKey, Segmentation, key_label
from tracediff.runs.runfile import Run
from tracediff.runs.stackdomain import NVTX_DROPPED, NVTX_FIX, TOOL_DOMAIN_PREFIXES

MIN_COVERAGE = 0.3
"""An automatically found cycle range must have launched at least this share of the GPU ops."""
PREFERRED = ("cycle", "verify", "decode", "step", "ProfilerStep", "iteration", "forward")
"""Range names preferred, in this order, among automatically found candidates."""


def read_ranges(run: Run) -> pl.DataFrame:
    """The run's closed host ranges that can delimit cycles, with `key` (the name without a
    trailing #N): no marks, no GPU-side annotations, none of NCCL's own ranges."""
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


TOOL = pl.any_horizontal(
    pl.col("domain").fill_null("").str.starts_with(p) for p in TOOL_DOMAIN_PREFIXES
)
"""Ranges the tooling added (function-trace frames, stackdomain.TOOL_DOMAIN_PREFIXES)."""


def own(ranges: pl.DataFrame) -> pl.DataFrame:
    """The workload's own ranges: never cycles from ranges the tooling added."""
    return ranges.filter(~TOOL)


NO_OWN_RANGES = "no NVTX range of the workload's own"
"""How `markerless_note` begins (compare keeps it where the cut falls back to whole runs)."""


def markerless_note(ranges: pl.DataFrame) -> str | None:
    """Why a run with host ranges is cut without them: every one was added by the tooling
    (nvtx ranges the trace dropped, stackdomain.NVTX_DROPPED); None where that is not so."""
    if ranges.height == 0 or own(ranges).height:
        return None
    domains = sorted(ranges["domain"].unique().to_list())
    shown = ", ".join(domains[:3]) + (f" and {len(domains) - 3} more" if len(domains) > 3 else "")
    return (
        f"{NO_OWN_RANGES}, only function-trace ranges that tracediff "
        f"capture adds ({shown}): call frames, never cycles, so cycles were cut without markers. "
        f"If the workload "
        f"marks its loop with the nvtx package, its ranges were dropped: {NVTX_DROPPED}; "
        f"{NVTX_FIX}"
    )


def tool_cut_note(cyc: pl.DataFrame, spec: str) -> str | None:
    """The warning of cycles cut, as `--cycle` asked, at ranges the tooling added."""
    if cyc.height == 0 or cyc.filter(~TOOL).height:
        return None
    return (
        f"--cycle {spec}: a function-trace range that tracediff capture adds, not one of the "
        "workload's own: a cycle is one call of that function and holds only what it launched"
    )


def match(ranges: pl.DataFrame, spec: str) -> pl.DataFrame:
    """Ranges named `spec` (in any domain; the workload's own first), else DOMAIN:NAME
    ("aten::mm" is a name first)."""
    sel = own(ranges).filter(pl.col("key") == spec)
    if sel.height == 0:
        sel = ranges.filter(pl.col("key") == spec)
    if sel.height or ":" not in spec:
        return sel
    domain, _, name = spec.rpartition(":")
    return ranges.filter((pl.col("key") == name) & (pl.col("domain") == domain))


def exact(ranges: pl.DataFrame, key: RangeKey) -> pl.DataFrame:
    """Ranges of exactly this (domain, name); domain None: the default domain only."""
    return ranges.filter((pl.col("key") == key[1]) & pl.col("domain").eq_missing(key[0]))


def outermost(sel: pl.DataFrame) -> pl.DataFrame:
    """Same-named ranges nested in each other (recursion): keep the outermost of each thread."""
    min_depth = sel.group_by("process_id", "thread_id").agg(pl.col("depth").min().alias("_d"))
    return (
        sel.join(min_depth, on=["process_id", "thread_id"])
        .filter(pl.col("depth") == pl.col("_d"))
        .drop("_d")
    )


_CUT_ONLY = ("process_id", "launch_thread_id")
"""What only the cut reads of an op (launch.py: the thread whose range launched it). A lean ops
frame (engine/ops.py: no stream ids, which only kept ops carry) leaves them behind when `_tagged`
gathers its ops: 2 of its 12 columns, ~15 MB a side at 0.95 M ops that nothing reads again."""


def _tagged(ops: pl.DataFrame, tags: pl.DataFrame) -> pl.DataFrame:
    """The ops `tags` names, with cycle and phase, in (device, start, end) order: the wide frame
    is gathered once, dropping ops outside cycles and ordering them for alignment together."""
    keys = ["device_id", "start_ns", "end_ns"]
    if any(ops[c].null_count() for c in keys):
        tags = tags.select("_op", "cycle", "phase")
        tags = tags.with_columns(ops.select(keys)[tags["_op"]])
        tags = tags.sort(*keys, "_op")
        return ops[tags["_op"]].with_columns(tags["cycle"], tags["phase"])
    # the same order (`_op` is unique), whatever order `tags` came in: one numpy lexsort
    # (stable sorts of nearly sorted keys) costs a fifth of polars' four-key sort at 1 M ops,
    # and less than sorting by `_op` first to find the order already there (0.163 -> 0.134
    # CPU-s at 954 k ops whose memops follow the kernels, 0.070 -> 0.054 in order); the sort
    # keys taken by numpy, not gathered into the tags and then gathered again with them
    op = tags["_op"].to_numpy()
    rising = len(op) < 2 or bool((np.diff(op) > 0).all())
    if rising and len(op) == ops.height:  # every op, in row order: the columns as they are
        device, start, end = (ops[c].to_numpy() for c in keys)
    else:
        device, start, end = (ops[c].to_numpy()[op] for c in keys)
    order = _by_device(op, device, start, end, rising)
    if order is None:
        order = np.lexsort([op, end, start, device])
    elif len(op) == ops.height and order[-1] == len(op) - 1 and (np.diff(order) == 1).all():
        # every op, already in that order (one device, a run file's device-major kernels,
        # runs/runfile.py, or ops put in order before the cut, engine/ops.py): no gather
        return _lean(ops).with_columns(tags["cycle"], tags["phase"])
    ops = _lean(ops)
    # a uint32 index, polars' own: an int64 one is converted and bounds-checked first
    at = pl.Series("_at", op[order].astype(np.uint32, copy=False))
    return ops[at].with_columns(tags["cycle"].gather(order), tags["phase"].gather(order))


def _lean(ops: pl.DataFrame) -> pl.DataFrame:
    """A lean frame (no stream ids) without what only the cut read (`_CUT_ONLY`)."""
    return ops if "stream_id" in ops.columns else ops.drop(_CUT_ONLY, strict=False)


def _by_device(
    op: np.ndarray, device: np.ndarray, start: np.ndarray, end: np.ndarray, rising: bool
) -> np.ndarray | None:
    """The (device, start, end, op) order of the tags (base/devorder.py `by_device`: a stable
    sort by device alone), where `op` rises and each device's ops then come in (start, end)
    order (one file's ops, kernels read in start order, nothing appended). None where they do
    not (the lexsort). `rising`: whether `op` rises."""
    if len(op) < 2 or not rising:
        return None
    return devorder.by_device(device, start, end)


def number(sel: pl.DataFrame) -> pl.DataFrame:
    """`sel` in start order with `cycle`: 0, 1, ... per process, so cycle k of one process (rank)
    is matched with cycle k of the others. Where several processes' cycle ranges all carry a
    step number (`ProfilerStep#551`), distinct within each process, cycles are matched by it
    instead: ranks whose profiling began at different steps (per-rank files of one job) meet at
    the same step, and only the steps every process has are kept (a step one rank lacks would
    compare a cycle without it)."""
    out = sel.sort("start_ns")
    by_order = pl.col("start_ns").rank("ordinal").over("process_id").cast(pl.Int64).sub(1)
    if out.height == 0 or out["process_id"].n_unique() < 2:
        return out.with_columns(by_order.alias("cycle"))
    step = pl.col("name").cast(pl.String).str.extract(r"#(\d+)$").cast(pl.Int64, strict=False)
    out = out.with_columns(step.alias("_step"))
    per = out.group_by("process_id").agg(
        pl.col("_step").null_count().alias("nulls"),
        pl.col("_step").n_unique().alias("distinct"),
        pl.len().alias("n"),
    )
    if (per["nulls"] > 0).any() or (per["distinct"] != per["n"]).any():
        return out.with_columns(by_order.alias("cycle")).drop("_step")
    n_proc = per.height
    common = out.group_by("_step").agg(pl.col("process_id").n_unique().alias("_p"))
    keep = common.filter(pl.col("_p") == n_proc)["_step"]
    if keep.len() == 0:  # no step on every rank: by order, as without numbers
        return out.with_columns(by_order.alias("cycle")).drop("_step")
    return (
        out.filter(pl.col("_step").is_in(keep.implode()))
        .with_columns(pl.col("_step").rank("dense").cast(pl.Int64).sub(1).alias("cycle"))
        .drop("_step")
    )


def phases_in(ranges: pl.DataFrame, cyc: pl.DataFrame) -> pl.DataFrame:
    """Host ranges nested one level inside each cycle range, on the same thread. Function-trace
    ranges (domains `python:MODULE`, `tracediff capture`'s default) are stack frames, not
    phases, and are left out: nsys counts depth per domain, so `python:pkg.work`'s `pkg.work.verify`
    sat at the cycle's depth + 1 beside the user's own `verify` and was a second phase (its time
    counted twice, "(outside phases)" negative)."""
    depth = cyc.select("process_id", "thread_id", (pl.col("depth") + 1).alias("depth")).unique()
    inner = own(ranges).join(depth, on=["process_id", "thread_id", "depth"])
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
    r = (
        cyc.lazy()
        .select(
            "process_id",
            "thread_id",
            pl.col("start_ns").alias("_rs"),
            pl.col("end_ns").alias("_re"),
            "cycle",
        )
        .sort("_rs")
    )
    j = latest_started(
        inner.lazy().sort("start_ns"), "start_ns", r, "_rs", ["process_id", "thread_id"]
    )
    j = j.filter(pl.col("cycle").is_not_null() & (pl.col("end_ns") <= pl.col("_re")))
    return j.select(
        "process_id", "thread_id", "cycle", pl.col("key").alias("phase"), "start_ns", "end_ns"
    ).collect()


def _present(ranges: pl.DataFrame) -> str:
    """The hint of a missing range: the most frequent names, ties by name, and the ways out (a
    run with NVTX cycles against a Kineto trace without markers said nothing more, #17)."""
    names = (
        ranges.group_by("key")
        .len()
        .sort("len", "key", descending=[True, False])
        .head(8)["key"]
        .to_list()
    )
    return (
        f"ranges present: {', '.join(names) or 'none'}; pass --cycle NAME of a range both runs "
        "have, or --cycle whole (a Kineto trace has ranges where the workload calls "
        "torch.profiler.record_function)"
    )


def _named(
    ranges: pl.DataFrame, rule: CycleRule, src: str, *, moved_ok: bool
) -> tuple[pl.DataFrame, list[str] | None]:
    """The ranges `rule` names, and the domains they were found in when only the other side's
    name matched, in another domain (`moved_ok`: a range moved between commits)."""
    spec = rule.name if rule.key is None else key_label(rule.key)
    assert spec is not None
    sel = match(ranges, spec) if rule.key is None else exact(ranges, rule.key)
    moved = None
    if sel.height == 0 and rule.key is not None and moved_ok:
        sel = own(ranges).filter(pl.col("key") == rule.key[1])
        moved = sorted({d or "the default domain" for d in sel["domain"].unique().to_list()})
    if sel.height == 0:
        raise AnalysisError(f"{src}: no range named {spec!r}", _present(ranges))
    return sel, moved


def _host_ranges(cyc: pl.DataFrame, phases: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`Segmentation.ranges` and `.phases` of cycles cut at host ranges."""
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
    return rng, ph


Candidate = tuple[RangeKey, int, pl.DataFrame]
"""A range that may cut cycles: its key, its least depth, its ranges numbered as cycles."""


def candidates(ranges: pl.DataFrame) -> list[Candidate]:
    """The workload's own ranges (never the tooling's: `own`) repeating 3+ times, each numbered
    as cycles (`number`), in name order: of two ranges with equal scores the first wins, the
    same one every run."""
    cands = (
        own(ranges)
        .group_by("domain", "key")
        .agg(pl.len().alias("n"), pl.col("depth").min().alias("depth"))
    )
    cands = cands.filter(pl.col("n") >= 3).sort("domain", "key", nulls_last=False)
    out = []
    for row in cands.iter_rows(named=True):
        sel = ranges.filter(
            (pl.col("key") == row["key"]) & (pl.col("domain").eq_missing(row["domain"]))
        )
        out.append(((row["domain"], row["key"]), int(row["depth"]), number(outermost(sel))))
    return out


def coverage(ops: pl.DataFrame, cyc: pl.DataFrame) -> int:
    """How many of `ops` the cycle ranges `cyc` launched (summable over a run's files)."""
    return assign(ops, cyc).height


def best(cands: list[Candidate], covered: list[int], n_ops: int) -> int | None:
    """The range found automatically: of those launching at least MIN_COVERAGE of the ops, the
    steadiest, then the most covering, outermost, preferred name; None if none fits."""
    top = None
    for i, cand in enumerate(cands):
        score = _score(cand, covered[i], n_ops)
        if score is not None and (top is None or score > top[0]):
            top = (score, i)
    return None if top is None else top[1]


def _score(cand: Candidate, covered: int, n_ops: int) -> tuple[bool, int, int, int] | None:
    """`best`'s order of one candidate covering `covered` of `n_ops` ops (None: too few)."""
    (_, key), depth, cyc = cand
    if covered < MIN_COVERAGE * n_ops:
        return None
    starts = cyc.filter(pl.col("process_id") == cyc["process_id"][0])["start_ns"].to_numpy()
    periods = np.diff(np.sort(starts))
    steady = bool(len(periods) == 0 or (periods.std() <= periods.mean()))
    pref = next((j for j, p in enumerate(PREFERRED) if key.lower() == p.lower()), len(PREFERRED))
    return (steady, covered, -depth, -pref)


def _found(ops: pl.DataFrame, cands: list[Candidate]) -> tuple[int, pl.DataFrame] | None:
    """`best` of `cands` over `ops`, with its `assign` (tag's first step: made once). A
    candidate that could not beat the best so far even launching every op with a launch
    record (its score's bound) is not assigned at all: the same choice, fewer assignments."""
    top = None
    most = int(ops["launch_start_ns"].is_not_null().sum())  # what `assign` can place at most
    for i, cand in enumerate(cands):
        bound = _score(cand, most, ops.height)
        if bound is None or (top is not None and not bound > top[0]):
            continue
        made = assign(ops, cand[2])
        score = _score(cand, made.height, ops.height)
        if score is not None and (top is None or score > top[0]):
            top = (score, i, made)
        del made
    return None if top is None else (top[1], top[2])


def cut_at(
    ranges: pl.DataFrame, rule: CycleRule, src: str
) -> tuple[pl.DataFrame, list[str] | None]:
    """The cycle ranges `rule` names, numbered, and the domains they were found in when only in
    another domain than the other side's (`_named`)."""
    sel, moved = _named(ranges, rule, src, moved_ok=True)
    return number(outermost(sel)), moved


def tag(
    ops: pl.DataFrame,
    cyc: pl.DataFrame,
    phases: pl.DataFrame,
    assigned: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, int]:
    """The ops the cycle ranges launched, with cycle and phase, and how many of them other
    threads launched (per process: a run's files can each tag their own). `assigned`: `assign`
    of these ops and ranges, when already made."""
    tags = tag_phase(assign(ops, cyc) if assigned is None else assigned, phases)
    n_other = int(tags["_other_thread"].sum())
    return _tagged(ops, tags), n_other


def cut_warnings(
    rule: CycleRule, moved: list[str] | None, n_other: int, n_tagged: int, n_ops: int, src: str
) -> list[str]:
    """The cut's warnings from its counts (summed over a run's files), or its refusal."""
    chosen = rule.label[len("nvtx:") :]
    warnings = []
    if moved:
        assert rule.key is not None
        warnings.append(
            f"no {chosen!r} range in the other side's domain: cut at {rule.key[1]!r} in "
            f"{', '.join(moved)}"
        )
    if n_other:
        warnings.append(
            f"{n_other} GPU ops launched by other threads while a {chosen!r} range was open are "
            "included, phase '(other thread)'"
        )
    if n_tagged == 0:
        raise AnalysisError(
            f"{src}: the {chosen!r} ranges launched no GPU work",
            "pick another range with --cycle, or none to cut cycles from the kernel sequence",
        )
    if n_ops > n_tagged:
        warnings.append(
            f"{n_ops - n_tagged} of {n_ops} GPU ops were launched outside any {chosen!r} range "
            "and are not compared"
        )
    return warnings


def host_ranges(cyc: pl.DataFrame, phases: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    return _host_ranges(cyc, phases)


def by_ranges(run: Run, ops: pl.DataFrame, rule: CycleRule | None) -> Segmentation | None:
    """Cycles at the host ranges `rule` names (kind "range"); rule None: find a range. None if
    none was asked for and none fits."""
    ranges = read_ranges(run)
    if ranges.height == 0:
        if rule is not None:
            raise AnalysisError(
                f"{run.path}: no NVTX ranges or annotations to cut cycles at",
                "drop --cycle to cut cycles from the kernel sequence",
            )
        return None
    moved = None  # the other side's range found only in another domain
    assigned = None
    if rule is not None:
        cyc, moved = cut_at(ranges, rule, run.path)
    else:
        cands = candidates(ranges)
        found = _found(ops, cands)
        if found is None:
            return None
        i, assigned = found
        cyc, rule = cands[i][2], CycleRule.range_at(cands[i][0])
    phases = phases_in(ranges, cyc)
    tagged, n_other = tag(ops, cyc, phases, assigned)
    warnings = cut_warnings(rule, moved, n_other, tagged.height, ops.height, run.path)
    warnings += [w for w in [tool_cut_note(cyc, rule.label[len("nvtx:") :])] if w]
    rng, ph = _host_ranges(cyc, phases)
    return Segmentation(ops=tagged, ranges=rng, phases=ph, rule=rule, warnings=warnings)


def _best_by_name(ranges: pl.DataFrame, src: str) -> RangeKey:
    """Host-only runs: the workload's own range repeating 3+ times with the most preferred name,
    outermost, most frequent (ties by domain and name). With none but the tooling's, there is
    no markerless rule without GPU work: refused, saying why (`markerless_note`)."""
    note = markerless_note(ranges)
    if note is not None:
        raise AnalysisError(
            f"{src}: no GPU operations and no NVTX range of the workload's own (only "
            "function-trace ranges that capture adds, which are never cycles)",
            f"{NVTX_DROPPED}: {NVTX_FIX}; or pass --cycle python:MODULE:FUNCTION to cut at "
            "the calls of a function called once a cycle",
        )
    cands = (
        own(ranges)
        .group_by("domain", "key")
        .agg(pl.len().alias("n"), pl.col("depth").min().alias("depth"))
    )
    cands = cands.filter(pl.col("n") >= 3)
    if cands.height == 0:
        raise AnalysisError(
            f"{src}: no GPU operations and no range repeats 3 or more times",
            "pass --cycle NAME",
        )
    pref = {p.lower(): i for i, p in enumerate(PREFERRED)}
    cands = cands.with_columns(
        pl.col("key")
        .str.to_lowercase()
        .replace_strict(pref, default=len(pref), return_dtype=pl.Int64)
        .alias("_p")
    ).sort(  # ties by name: the same range every run
        ["_p", "depth", "n", "domain", "key"],
        descending=[False, False, True, False, False],
        nulls_last=False,
    )
    row = cands.row(0, named=True)
    return (row["domain"], row["key"])


def host_only(run: Run, rule: CycleRule | None) -> Segmentation:
    """Cycles of a run without GPU ops: at the host ranges `rule` names, or found (by name, as
    there is no GPU work to cover). Its `ops` are empty."""
    ranges = read_ranges(run)
    if ranges.height == 0:
        raise AnalysisError(
            f"{run.path}: the run has no GPU operations and no NVTX ranges",
            "profile with CUDA tracing on (nsys -t cuda,nvtx) or mark cycles with NVTX ranges",
        )
    if rule is None:
        rule = CycleRule.range_at(_best_by_name(ranges, run.path))
    sel, _ = _named(ranges, rule, run.path, moved_ok=False)
    cyc = number(outermost(sel))
    rng, ph = _host_ranges(cyc, phases_in(ranges, cyc))
    warnings = [w for w in [tool_cut_note(cyc, rule.label[len("nvtx:") :])] if w]
    return Segmentation(ops=pl.DataFrame(), ranges=rng, phases=ph, rule=rule, warnings=warnings)
