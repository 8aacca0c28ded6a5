"""Kineto `python_function` events → the launch stack of every CUDA/HIP API call.

Stage: parse (inside the Kineto reader). Input: the API calls (tables.api_calls) and the
"python" role's frame (one row per Python call, recorded with `with_stack=True`: name
`file(first line): function`); output: the API calls with a
`stack_id` column (null where no Python call encloses them), and the run tables `frames` and
`stacks` (tracediff/schema.py).

The launching frame of an API call is the innermost Python call on the same thread (pid, tid)
whose interval holds the call's midpoint: the latest-starting Python call at or before it (an
as-of join per thread), or, when that one had already returned, the nearest of its callers that
still runs (a walk up the callers, vectorised: one numpy step per level). Callers come from time
nesting (parse/intervals.py and an as-of join), not from Kineto's `Python parent id`. A stack
is the chain from that frame to the root.

Ids are content hashes (64-bit, blake2b of the frame's text, chained innermost → root), so the
same call path has the same `stack_id` in every parse and in every run of one commit: stacks of
two runs can be compared or unioned without renumbering. Everything here is column work: the
only Python loops run over distinct frame texts and over stack levels, never over events.
"""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl
import pyarrow as pa

from tracediff import schema
from tracediff.parse.intervals import nesting_depth

_FRAME = r"^(?P<file>.+)\((?P<line>\d+)\): (?P<function>.*)$"
"""`file(line): function`; other names (`<built-in method ...>`, `nn.Module: Linear_0`) are
frames without a file or line, the name as their function."""

_ADDRESS = r" at 0x[0-9a-fA-F]+"
"""`<built-in method arange of type object at 0x7f1a...>`: the address differs every run."""

_MUL = np.uint64(0x100000001B3)


def _hash_texts(texts: list[str]) -> np.ndarray:
    """64-bit hashes of strings (one per distinct frame text), as uint64."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
            for t in texts
        ],
        dtype=np.uint64,
    )


def _mix(parent: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """A stack's hash from its parent stack's hash and its innermost frame's (splitmix64's
    finaliser over a FNV-style combination; wraps, as uint64 does)."""
    with np.errstate(over="ignore"):
        z = (parent * _MUL) ^ frame
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return np.where(z == 0, np.uint64(1), z)  # 0 is "no parent"


def empty() -> dict[str, pa.Table]:
    return {"frames": schema.empty("frames"), "stacks": schema.empty("stacks")}


def resolve(api: pl.DataFrame, py: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, pa.Table]]:
    """(api with `stack_id`, {"frames", "stacks"} tables). Without Python events: a null
    `stack_id` and empty tables, at no cost."""
    no = pl.lit(None, pl.Int64).alias("stack_id")
    if not api.height:
        return api, empty()
    py = py.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    if py.height:
        py = py.filter(_holds_a_call(py, api))  # the other calls can be no launch's frame
    if not py.height:
        return api.with_columns(no), empty()
    # parents start no later than their children, and among calls starting together the outer
    # ends last: in this order every parent comes before its children (as nesting_depth counts)
    py = py.sort(["start_ns", "end_ns"], descending=[False, True], maintain_order=True)
    py = py.with_columns(
        nesting_depth(py, "start_ns", "end_ns", ["pid", "tid"]).alias("_d")
    ).with_row_index("_i")
    parent = _parents(py)

    # frames: one hash per distinct text, without the object addresses of built-ins
    names = py["name"].fill_null("<unnamed>")
    distinct = names.unique().sort()
    code = (
        names.to_frame("name")
        .join(
            distinct.to_frame("name").with_row_index("_c"),
            on="name",
            how="left",
            maintain_order="left",
        )["_c"]
        .to_numpy()
    )
    distinct = distinct.str.replace_all(_ADDRESS, "")
    fd = _hash_texts(distinct.to_list())  # per distinct text
    fh = fd[code]  # per call

    # each call's stack hash, level by level from the roots (parents come first in the order)
    level = py["_d"].to_numpy().astype(np.int64)  # callers are one level up (_parents)
    h = np.zeros(py.height, dtype=np.uint64)
    order = np.argsort(level, kind="stable")
    bounds = np.searchsorted(level[order], np.arange(level.max() + 2))
    for d in range(level.max() + 1):
        idx = order[bounds[d] : bounds[d + 1]]
        p = parent[idx]
        ph = np.where(p >= 0, h[np.maximum(p, 0)], np.uint64(0))
        h[idx] = _mix(ph, fh[idx])

    leaf = _launching(api, py, parent)
    sid = np.where(leaf >= 0, h[np.maximum(leaf, 0)], np.uint64(0)).view(np.int64)
    api = api.with_columns(
        pl.Series("stack_id", sid, dtype=pl.Int64).replace(0, None)
        if (leaf >= 0).any()
        else pl.lit(None, pl.Int64).alias("stack_id")
    )
    if not (leaf >= 0).any():
        return api, empty()
    return api, _tables(np.unique(leaf[leaf >= 0]), parent, h, fd, code, distinct)


def _midpoint() -> pl.Expr:
    """An API call's midpoint (its start where its end is unknown)."""
    return pl.col("start_ns") + (pl.col("end_ns") - pl.col("start_ns")).fill_null(0) // 2


def _holds_a_call(py: pl.DataFrame, api: pl.DataFrame) -> pl.Series:
    """Per Python call: does its interval hold some API call's midpoint on its thread? Only
    those can be frames of a launch stack (and all callers of one that does, do too): on the
    SGLang prefill-decode trace 8310 of 53321 do. Two binary searches per thread in the sorted
    midpoints (a loop over threads, numpy within each)."""
    calls = (
        api.select(
            pl.col("process_id").alias("pid"), pl.col("thread_id").alias("tid"),
            _midpoint().alias("_mid"),
        )
        .drop_nulls()
        .sort("pid", "tid", "_mid")
    )  # fmt: skip
    mids = calls["_mid"].to_numpy()
    threads = calls.group_by("pid", "tid", maintain_order=True).len()
    ends = np.cumsum(threads["len"].to_numpy())
    where = {
        (p, t): (int(e - n), int(e))
        for p, t, n, e in zip(
            threads["pid"].to_list(), threads["tid"].to_list(), threads["len"].to_list(), ends,
            strict=True,
        )
    }  # fmt: skip
    out = np.zeros(py.height, dtype=bool)
    pid, tid = py["pid"].to_numpy(), py["tid"].to_numpy()
    start, end = py["start_ns"].to_numpy(), py["end_ns"].to_numpy()
    if len(where) <= 64:  # few threads (the usual case): one mask per thread, no polars calls
        parts = [np.flatnonzero((pid == p) & (tid == t)) for p, t in where]
    else:
        parts = [
            g["_r"].to_numpy()
            for _, g in py.select("pid", "tid").with_row_index("_r").group_by("pid", "tid")
        ]
    for r in parts:
        if not r.size or (key := (int(pid[r[0]]), int(tid[r[0]]))) not in where:
            continue
        lo, hi = where[key]
        m = mids[lo:hi]
        out[r] = np.searchsorted(m, end[r], "right") > np.searchsorted(m, start[r], "left")
    return pl.Series(out)


def _parents(py: pl.DataFrame) -> np.ndarray:
    """Each Python call's caller (row index, -1 for a root): the latest call before it in the
    order on the same thread one level up, by an as-of join. Time nesting, not Kineto's
    `Python parent id`: in real traces (TraceLens vllm graph_execution) those skip levels."""
    me = py.select("pid", "tid", (pl.col("_d") - 1).alias("_pd"), "_i")
    up = py.select("pid", "tid", pl.col("_d").alias("_pd"), pl.col("_i").alias("_pi"))
    j = me.join_asof(
        up,
        left_on="_i",
        right_on="_pi",
        by=["pid", "tid", "_pd"],
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )  # both in _i order
    return j["_pi"].fill_null(-1).to_numpy().astype(np.int64)


def _launching(api: pl.DataFrame, py: pl.DataFrame, parent: np.ndarray) -> np.ndarray:
    """Per API call (api's order), the row of its innermost enclosing Python call, else -1."""
    mid = (
        api.select(
            pl.col("process_id").alias("pid"),
            pl.col("thread_id").alias("tid"),
            _midpoint().alias("_mid"),
        )
        .with_row_index("_a")
        .filter(pl.col("_mid").is_not_null())
        .sort("_mid")
    )
    right = py.select("pid", "tid", pl.col("start_ns").alias("_mid"), "_i").sort("_mid")
    j = mid.join_asof(
        right, on="_mid", by=["pid", "tid"], strategy="backward", check_sortedness=False
    )  # both sorted by _mid (by-groups cannot be checked)
    cur = j["_i"].fill_null(-1).to_numpy().astype(np.int64)
    at = j["_mid"].to_numpy()
    end = py["end_ns"].to_numpy()
    todo = np.flatnonzero(cur >= 0)
    while todo.size:  # the candidate returned before the call: try its caller
        gone = end[cur[todo]] < at[todo]
        todo = todo[gone]
        cur[todo] = parent[cur[todo]]
        todo = todo[cur[todo] >= 0]
    out = np.full(api.height, -1, dtype=np.int64)
    out[j["_a"].to_numpy()] = cur
    return out


def _tables(
    leaves: np.ndarray,
    parent: np.ndarray,
    h: np.ndarray,
    fid: np.ndarray,
    code: np.ndarray,
    distinct: pl.Series,
) -> dict[str, pa.Table]:
    """The `stacks` rows (stack_id, depth, frame_id: innermost at depth 0) of the distinct
    launching stacks, and the `frames` they use."""
    _, first = np.unique(h[leaves], return_index=True)  # one call per distinct stack
    cur = leaves[first]
    sid = h[cur].view(np.int64)
    rows_s, rows_d, rows_f = [], [], []
    depth = 0
    while cur.size:
        rows_s.append(sid)
        rows_d.append(np.full(cur.size, depth, dtype=np.int32))
        rows_f.append(code[cur])
        nxt = parent[cur]
        keep = nxt >= 0
        cur, sid = nxt[keep], sid[keep]
        depth += 1
    fcode = np.concatenate(rows_f)
    stacks = pl.DataFrame(
        {
            "stack_id": np.concatenate(rows_s),
            "depth": np.concatenate(rows_d),
            "frame_id": fid[fcode].view(np.int64),
        }
    ).sort("stack_id", "depth")
    used = np.unique(fcode)
    parts = (
        distinct.gather(used)
        .to_frame("name")
        .with_columns(pl.col("name").str.extract_groups(_FRAME).alias("_g"))
        .select(
            pl.Series("frame_id", fid[used].view(np.int64)),
            pl.col("_g").struct.field("file"),
            pl.col("_g").struct.field("line").cast(pl.Int32, strict=False),
            pl.coalesce(pl.col("_g").struct.field("function"), pl.col("name")).alias("function"),
        )
        .unique("frame_id")  # texts that differed only by an address
        .sort("frame_id")
    )
    return {
        "frames": schema.conform("frames", parts.to_arrow()),
        "stacks": schema.conform("stacks", stacks.to_arrow()),
    }
