"""Which host range launched each GPU op: the cycle range, then the phase inside it.

Stage: engine (segmentation, a step of engine/cycle/ranges.py). Input: the ops' launch
records (process, thread, launch start) and the ranges (process, thread, start, end); output:
`assign`'s tags (op row, its cycle, launched on the range's thread or another of its process)
and `tag_phase`'s phase of each tag.

A range launched an op when the op's launch call started inside it: of the ranges of the op's
thread, the one that started last at or before the launch, if it has not ended by then (the
ranges of one thread cut at one name do not overlap). Found by a binary search of each op's
launch start in the start-sorted ranges of its thread (numpy's `searchsorted`, the ops in any
order: no sort of a million launches, no join; launches in order, the usual case, turned round:
base/sortedsearch.py), one pass per thread that holds ranges. Where
that does not fit (null keys, more threads than `MAX_THREADS`), the same as a polars as-of join.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.base.sortedsearch import search_sorted
from tracediff.engine.groupsum import distinct_rows

MAX_THREADS = 64
"""Threads (or processes) holding ranges beyond which the search is polars' as-of join: a
pass over the ops per thread is cheap for the few threads that mark cycles."""


def latest_started(
    points: pl.LazyFrame, at: str, intervals: pl.LazyFrame, start: str, by: list[str]
) -> pl.LazyFrame:
    """Each row of `points` (sorted by `at`) with the interval of the same `by` keys that started
    last at or before it (null columns where none): the candidate enclosing interval. Callers
    check its end, since the intervals of one key do not overlap."""
    return points.join_asof(
        intervals, left_on=at, right_on=start, by=by, strategy="backward", check_sortedness=False
    )


def _np(frame: pl.DataFrame, cols: list[str]) -> list[np.ndarray] | None:
    """Int64 arrays of `cols`; None where one has nulls."""
    if any(frame[c].null_count() for c in cols):
        return None
    return [frame[c].cast(pl.Int64).to_numpy() for c in cols]


Rows = np.ndarray | slice
"""A group's op rows: their indexes, or the slice of them where the group's ops are one run of
rows (a run file's ops, device-major: each process's launches together)."""


def _size(rows: Rows, n: int) -> int:
    return len(range(n)[rows]) if isinstance(rows, slice) else len(rows)


def _search(
    rows: np.ndarray,
    at: np.ndarray,
    groups: list[tuple[Rows, np.ndarray]],
    start: np.ndarray,
    end: np.ndarray,
) -> np.ndarray:
    """For each of `rows` (ops, their launch starts `at`): the interval that started last at or
    before it among those of its group, if it has not ended by then, else -1. `groups`: (the
    op rows of a group, its intervals' rows)."""
    got = np.full(len(at), -1, np.int64)
    for ops_in, ivs in groups:
        size = _size(ops_in, len(at))
        if size == 0:
            continue
        starts = start[ivs]
        if len(starts) > 1 and (np.diff(starts) < 0).any():
            order = np.argsort(starts, kind="stable")
            ivs, starts = ivs[order], starts[order]
        every = size == len(at)  # all of them: no copies
        t = at if every else at[ops_in]  # (a slice's: a view)
        k = search_sorted(starts, t, side="right")  # (launches in order: one pass)
        k -= 1  # -1: none started by then; it indexes the sentinels below
        ends = np.append(end[ivs], np.iinfo(np.int64).min)
        k[t > ends[k]] = -1  # ended before the launch
        # the intervals' own rows, in order (one thread's ranges, started in order): k is the hit
        mine = len(ivs) == len(start) and (len(ivs) < 2 or (np.diff(ivs) == 1).all())
        hit = k if mine and (not len(ivs) or ivs[0] == 0) else np.append(ivs, -1)[k]
        if every:
            got = hit
        else:
            got[ops_in] = hit
    return got


def _by_key(
    key_ops: list[np.ndarray], key_ivs: list[np.ndarray], rows: np.ndarray
) -> list[tuple[Rows, np.ndarray]] | None:
    """(op rows, interval rows) per distinct key of the intervals; None: too many keys."""
    if not len(key_ivs[0]):
        return []
    distinct = distinct_rows(key_ivs)
    if len(distinct) > MAX_THREADS:
        return None
    if len(distinct) == 1 and all(
        len(c) == 0 or (c.min() == c.max() == v)
        for c, v in zip(key_ops, distinct[0].tolist(), strict=True)
    ):  # every op on the one thread holding ranges (the usual run): no masks
        return [(rows, np.arange(len(key_ivs[0])))]
    # the ops' keys gathered once, not once a key (`rows` sorted and distinct: all of them is
    # every row, no gather)
    every = len(rows) == len(key_ops[0])
    cols_o = key_ops if every else [c[rows] for c in key_ops]
    runs = _runs(cols_o) if every else None
    out: list[tuple[Rows, np.ndarray]] = []
    for key in distinct:
        on_i = np.ones(len(key_ivs[0]), bool)
        for col_i, v in zip(key_ivs, key.tolist(), strict=True):
            on_i &= col_i == v
        if runs is not None:
            out.append((runs.get(tuple(key.tolist()), slice(0, 0)), np.flatnonzero(on_i)))
            continue
        on_o = np.ones(len(rows), bool)
        for col_o, v in zip(cols_o, key.tolist(), strict=True):
            on_o &= col_o == v
        out.append((np.flatnonzero(on_o) if every else rows[on_o], np.flatnonzero(on_i)))
    return out


def _runs(cols: list[np.ndarray]) -> dict[tuple[int, ...], slice] | None:
    """Each key's rows as one slice, where each key's rows are one run (a run file's ops,
    device-major: a process's launches together; 2 comparisons an op, not 2 a key); None where
    a key comes back after another."""
    n = len(cols[0])
    change = np.zeros(max(n - 1, 0), bool)
    for c in cols:
        change |= c[1:] != c[:-1]
    edges = [0, *(np.flatnonzero(change) + 1).tolist(), n]
    if len(edges) - 1 > MAX_THREADS:
        return None
    keys = [tuple(int(c[i]) for c in cols) for i in edges[:-1]]
    if len(set(keys)) < len(keys):
        return None
    return {k: slice(a, b) for k, a, b in zip(keys, edges[:-1], edges[1:], strict=True)}


def assign(ops: pl.DataFrame, cyc: pl.DataFrame) -> pl.DataFrame:
    """Which cycle range launched each op: (_op = row of `ops`, process_id, launch_thread_id,
    launch_start_ns, cycle, _other_thread); ops in no cycle are absent.

    First on the range's own thread. Ops launched by another thread of the same process while a
    cycle range was open (PyTorch's autograd threads launch the backward pass) belong to that
    cycle too: they get `_other_thread` = true and are phased "(other thread)". Rows in no
    particular order (`_tagged` orders them)."""
    launch = ops["launch_start_ns"]
    sub = ops.select("process_id", "launch_thread_id", "launch_start_ns")
    if launch.null_count():
        rows = np.flatnonzero(launch.is_not_null().to_numpy())
        sub = sub[rows]
    else:  # every op has its launch record: no gather
        rows = np.arange(ops.height)
    op_cols = _np(sub, ["process_id", "launch_thread_id", "launch_start_ns"])
    iv_cols = _np(cyc, ["process_id", "thread_id", "start_ns", "end_ns", "cycle"])
    if op_cols is None or iv_cols is None:
        return _assign_joined(ops, cyc)
    pid, tid, at = op_cols
    rp, rt, rs, re, rc = iv_cols
    local = rows if len(rows) == ops.height else np.arange(len(rows))  # (read, never written)
    own = _by_key([pid, tid], [rp, rt], local)
    if own is None:
        return _assign_joined(ops, cyc)
    same = _search(local, at, own, rs, re)
    # the rest, on any thread of the range's process (the latest-started of them all)
    rest = np.flatnonzero(same < 0)
    if len(rest):
        by_process = _by_key([pid], [rp], rest)
        if by_process is None:
            return _assign_joined(ops, cyc)
        other = _search(rest, at, by_process, rs, re)
        hit = np.where(same >= 0, same, other)
    else:  # every op on its range's own thread
        hit = same
    if (hit >= 0).all():  # every op launched in a cycle: no gathers
        op, cycle, elsewhere = rows.astype(np.uint32), rc[hit], same < 0
    else:
        keep = np.flatnonzero(hit >= 0)
        sub = sub[keep]
        op, cycle, elsewhere = rows[keep].astype(np.uint32), rc[hit[keep]], same[keep] < 0
    return sub.select(
        pl.Series("_op", op),
        "process_id",
        "launch_thread_id",
        "launch_start_ns",
        pl.Series("cycle", cycle),
        pl.Series("_other_thread", elsewhere),
    )


def _assign_joined(ops: pl.DataFrame, cyc: pl.DataFrame) -> pl.DataFrame:
    """`assign` as polars as-of joins (null keys, many threads). One lazy plan, collected once."""
    r = (
        cyc.lazy()
        .select(
            "process_id",
            pl.col("thread_id").alias("launch_thread_id"),
            pl.col("start_ns").alias("_rs"),
            pl.col("end_ns").alias("_re"),
            "cycle",
        )
        .sort("_rs")
    )
    o = (
        ops.lazy()
        .select("process_id", "launch_thread_id", "launch_start_ns")
        .with_row_index("_op")
        .filter(pl.col("launch_start_ns").is_not_null())
        .sort("launch_start_ns")
    )
    j = latest_started(o, "launch_start_ns", r, "_rs", ["process_id", "launch_thread_id"])
    inside = pl.col("cycle").is_not_null() & (pl.col("launch_start_ns") <= pl.col("_re"))
    same = j.filter(inside).drop("_rs", "_re").with_columns(pl.lit(False).alias("_other_thread"))
    # the rest, still in launch order, on any thread of the range's process (`inside` is null
    # where a range has no end: not inside)
    rest = j.filter(~inside.fill_null(False)).select(o.collect_schema().names())
    rp = r.drop("launch_thread_id")
    other = (
        latest_started(rest, "launch_start_ns", rp, "_rs", ["process_id"])
        .filter(inside)
        .drop("_rs", "_re")
        .with_columns(pl.lit(True).alias("_other_thread"))
    )
    return pl.concat([same, other]).collect()


OTHER, BETWEEN, CYCLE = "(other thread)", "(between phases)", "(cycle)"


def tag_phase(tags: pl.DataFrame, phases: pl.DataFrame) -> pl.DataFrame:
    """`tags` (from `assign`) with `phase`: the nested host range that launched the op."""
    if phases.height == 0:
        return tags.with_columns(
            pl.when(pl.col("_other_thread"))
            .then(pl.lit(OTHER, pl.Categorical))
            .otherwise(pl.lit(CYCLE, pl.Categorical))
            .alias("phase")
        )
    op_cols = _np(tags, ["process_id", "launch_thread_id", "launch_start_ns"])
    iv_cols = _np(phases, ["process_id", "thread_id", "start_ns", "end_ns"])
    if op_cols is None or iv_cols is None or phases["phase"].null_count():
        return _tag_phase_joined(tags, phases)
    pid, tid, at = op_cols
    pp, pt, ps, pe = iv_cols
    local = np.arange(tags.height)
    groups = _by_key([pid, tid], [pp, pt], local)
    if groups is None:
        return _tag_phase_joined(tags, phases)
    hit = _search(local, at, groups, ps, pe)
    names = phases["phase"].cast(pl.String)
    # labels: 0 other thread, 1 between phases, 2 + i the phase of `phases` row i
    label = np.where(hit >= 0, hit + 2, 1)
    label[tags["_other_thread"].to_numpy()] = 0
    texts = pl.concat([pl.Series([OTHER, BETWEEN]), names]).cast(pl.Categorical)
    return tags.with_columns(texts.gather(label).alias("phase"))


def _tag_phase_joined(tags: pl.DataFrame, phases: pl.DataFrame) -> pl.DataFrame:
    """`tag_phase` as a polars as-of join (null keys, many threads)."""
    p = (
        phases.lazy()
        .select(
            "process_id",
            pl.col("thread_id").alias("launch_thread_id"),
            pl.col("start_ns").alias("_ps"),
            pl.col("end_ns").alias("_pe"),
            pl.col("phase").cast(pl.Categorical).alias("_ph"),
        )
        .sort("_ps")
    )
    j = latest_started(
        tags.lazy().sort("launch_start_ns"),
        "launch_start_ns",
        p,
        "_ps",
        ["process_id", "launch_thread_id"],
    )
    inside = pl.col("_ph").is_not_null() & (pl.col("launch_start_ns") <= pl.col("_pe"))
    return (
        j.with_columns(
            pl.when(pl.col("_other_thread"))
            .then(pl.lit(OTHER, pl.Categorical))
            .when(inside)
            .then(pl.col("_ph"))
            .otherwise(pl.lit(BETWEEN, pl.Categorical))
            .alias("phase")
        )
        .drop("_ps", "_pe", "_ph")
        .collect()
    )
