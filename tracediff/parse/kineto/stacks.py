"""Kineto `python_function` events → the launch stack of every CUDA/HIP API call.

Stage: parse (inside the Kineto reader). Input: the API calls (tables.api_calls) and the
"python" role's frame (one row per Python call, recorded with `with_stack=True`: name
`file(first line): function`); output: the API calls with a `stack_id` column (null where no
Python call encloses them), and the run tables `frames` and `stacks` (tracediff/runs/schema.py).

The resolution itself (innermost enclosing Python call of each API call's midpoint on its
thread, callers from time nesting, content-hash ids) is parse/stacks/launch_stacks.py, shared with the
nsys reader. Callers come from time nesting, not from Kineto's `Python parent id`: in real
traces (TraceLens vllm graph_execution) those skip levels. This module only picks the columns
and splits Kineto's frame names into file, line and function.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from tracediff.parse.stacks import launch_stacks
from tracediff.runs import schema

from . import scan

_FRAME = re.compile(r"(.+)\(([0-9]+)\): (.*)")
"""`file(line): function` (the whole text, `.` not matching a newline); other names (`<built-in
method ...>`, `nn.Module: Linear_0`, a line beyond int32) are frames without a file or line,
the name as their function. Python's re over the distinct frames a run's stacks use: pyarrow's
regex kernels cost more to start than the few hundred matches."""


def empty() -> dict[str, pa.Table]:
    return {"frames": schema.empty("frames"), "stacks": schema.empty("stacks")}


def resolve(api: pl.DataFrame, py: pa.Table) -> tuple[pl.DataFrame, dict[str, pa.Table]]:
    """(api with `stack_id`, {"frames", "stacks"} tables) from the Python calls (Roles.table:
    the scanned pieces' chunks, names dictionary-encoded). Without Python events: a null
    `stack_id` and empty tables, at no cost."""
    if not api.height or not py.num_rows:
        return api.with_columns(pl.lit(None, pl.Int64).alias("stack_id")), empty()
    cols = ("process_id", "thread_id", "start_ns", "end_ns")
    a_rows: np.ndarray | None = None
    if any(api[c].null_count() for c in cols[:3]):
        keep = api.select((pl.all_horizontal(pl.col(cols[:3]).is_not_null())).arg_true())
        a_rows = keep.to_series().to_numpy()
    cp, ct, cs = (_np(api[c], a_rows) for c in cols[:3])
    ce = api["end_ns"].fill_null(api["start_ns"]) if api["end_ns"].null_count() else api["end_ns"]
    mid = cs + (_np(ce, a_rows) - cs) // 2  # the midpoint (the start where the end is unknown)
    n = len(mid)
    if n and cp.min() == cp.max() and ct.min() == ct.max() and (chunks := _chunks(py)):
        # one launching thread (the usual case): its frame calls picked chunk by chunk
        c_order = np.argsort(mid, kind="stable")
        mids = mid[c_order]
        got = launch_stacks.pick(mids, int(cp[0]), int(ct[0]), [c for c, _ in chunks])
        names = _picked_names(got, [w for _, w in chunks])
        res = launch_stacks.resolve_picked(n, c_order, mids, got, names)
    else:
        res = _resolve_joined(cp, ct, mid, py)
    if not res.frame_ids.size:
        return api.with_columns(pl.lit(None, pl.Int64).alias("stack_id")), empty()
    sid = res.stack_id
    if a_rows is not None:
        sid = np.zeros(api.height, np.int64)
        sid[a_rows] = res.stack_id
    api = api.with_columns(pl.Series("stack_id", pa.array(sid, mask=sid == 0)))
    return api, tables(res)


_F_COLS = ("pid", "tid", "start_ns", "end_ns")


def _chunks(py: pa.Table) -> list[tuple[launch_stacks.Chunk, pa.Array]] | None:
    """The Python calls' chunks as numpy (nulls zeroed and marked not ok), each with its names'
    dictionary ("<unnamed>" added where a name is null), or None where the columns' chunks do
    not line up (then the columns are joined)."""
    cols = [py[c] for c in ("name", *_F_COLS)]
    if len({tuple(len(a) for a in c.chunks) for c in cols}) != 1:
        return None
    out = []
    for name, *parts in zip(*(c.chunks for c in cols), strict=True):
        if not isinstance(name, pa.DictionaryArray) or name.indices.type != pa.int32():
            return None
        ok = None
        if any(p.null_count for p in parts):
            ok = np.logical_and.reduce([p.is_valid().to_numpy(zero_copy_only=False) for p in parts])
            parts = [pc.fill_null(p, 0) for p in parts]
        name = launch_stacks.named(name)
        pid, tid, s, e = (p.to_numpy() for p in parts)
        out.append(
            (launch_stacks.Chunk(s, e, pid, tid, name.indices.to_numpy(), ok), name.dictionary)
        )
    return out


def _picked_names(got: launch_stacks.Picked, words: list[pa.Array]) -> pa.DictionaryArray:
    """The picked calls' names: their codes, chunk by chunk, in one dictionary (unified in C
    where the scanner's dictionaries allow it)."""
    parts = []
    for w, a, b in zip(words, got.bounds[:-1], got.bounds[1:], strict=True):
        codes = pa.Array.from_buffers(pa.int32(), b - a, [None, pa.py_buffer(got.code[a:b])])
        parts.append(pa.DictionaryArray.from_arrays(codes, w))
    return scan.join_calls(parts)


def _resolve_joined(
    cp: np.ndarray, ct: np.ndarray, mid: np.ndarray, py: pa.Table
) -> launch_stacks.Stacks:
    """resolve over the Python calls' columns joined (API calls on several threads)."""
    py = pa.table({c: scan.join_calls(py[c].chunks) for c in py.column_names})
    f_rows: np.ndarray | None = None
    if any(py[c].null_count for c in _F_COLS):
        ok = np.logical_and.reduce([py[c].is_valid().to_numpy() for c in _F_COLS])
        f_rows = np.flatnonzero(ok)
    names = py["name"].chunk(0)  # joined: one chunk
    if f_rows is not None:
        names = names.take(f_rows)
    fp, ft, fs, fe = (_arrow_np(py[c], f_rows) for c in _F_COLS)
    return launch_stacks.resolve(cp, ct, mid, fp, ft, fs, fe, names)


def _np(col: pl.Series, rows: np.ndarray | None) -> np.ndarray:
    """An int64 column (no nulls in `rows`, or in all of it when rows is None) as numpy."""
    v = col.to_numpy()
    return v if rows is None else v[rows]


def _arrow_np(col: pa.ChunkedArray, rows: np.ndarray | None) -> np.ndarray:
    """An int64 Arrow column (one chunk; nulls only outside `rows`) as numpy."""
    v: np.ndarray = (pc.fill_null(col, 0) if col.null_count else col).to_numpy()
    return v if rows is None else v[rows]


def tables(got: launch_stacks.Stacks) -> dict[str, pa.Table]:
    """The `stacks` and `frames` run tables of a resolution whose texts are Kineto frame names."""
    st, dp, fr = got.stack_rows
    stacks = pa.table({"stack_id": st, "depth": dp, "frame_id": fr})
    texts = got.frame_texts.to_pylist()
    split = [m if (m := _FRAME.fullmatch(t)) and int(m[2]) < 1 << 31 else None for t in texts]
    parts = pa.table(
        {
            "frame_id": got.frame_ids,
            "file": pa.array([m and m[1] for m in split], pa.string()),
            "line": pa.array([m and int(m[2]) for m in split], pa.int32()),
            "function": pa.array(
                [t if m is None else m[3] for m, t in zip(split, texts, strict=True)], pa.string()
            ),
        }
    )
    return {
        "frames": schema.conform("frames", parts),
        "stacks": schema.conform("stacks", stacks),
    }
