"""Launch stacks by time nesting: each API call's innermost enclosing frame call on its thread.

Stage: parse (shared by the Kineto and nsys readers, as intervals.py is). Input: per API call
its thread (pid, tid) and midpoint; per frame call (one run of a Python function: a Kineto
`python_function` event, an nsys function-trace NVTX range) its thread, start, end and text.
Output (`Stacks`): per API call a stack hash (0: no frame call holds it), and the rows of the
`stacks` and `frames` run tables (tracediff/runs/schema.py) of the stacks that launch something;
each reader splits the frame texts into file, line and function by its own naming rule.

The launching frame of an API call is the innermost frame call on its thread whose interval
holds the call's midpoint: the latest-starting one at or before it (in start order, longer
first at one instant), or, when that one had already returned, the nearest of its callers that
still runs (a walk up the callers: one numpy step per level). A frame call's caller is the
latest earlier one on its thread one nesting level up (intervals.depths). Only frame calls on
threads with API calls whose interval holds some call's midpoint are kept (the others can be no
launch's frame, and every caller of a kept one is kept): on the SGLang prefill-decode trace
8310 of 53321.

The Kineto reader, with its API calls on one thread (the usual case), does not join the
scanner's chunks of Python calls first: `pick` reads each chunk once in C (thread, null and
holding checks), writing only the picked calls' start, end and name code, and
`resolve_picked` goes on from there.

Ids are content hashes (64-bit, blake2b of the frame's text, chained innermost → root), so the
same call path has the same `stack_id` in every parse and in every run of one commit.

The selection is numpy on one sortable key per row (thread code × span + time; times replaced
by their ranks where that would overflow), with stable sorts only (traces are nearly in time
order: timsort and radix sorts run 10× faster on them than numpy's default sort or lexsort).
Depth is counted, not swept: calls started before less calls ended before the start. Depths,
callers, hashes and the launching calls then come from one forward pass in C (_stack_walk.c:
a caller always precedes its callees in start order); `_walk_numpy` computes the same arrays
(one numpy step per nesting level) where the module is not built, and the tests hold the two
equal; so do `_launches_native` / `_launches_numpy` (each API call's stack id, one frame call
per distinct stack). No Python loop runs over events: only over distinct frame texts (their hashes, their
addresses removed by Python's re, cheaper to start than pyarrow's regex kernels). The polars
version (as-of joins, one mask per thread) took 12 ms on the SGLang prefill-decode trace and
1.5-2.9 s on a generated 1 M-kernel trace (2.4 M Python calls); the numpy one 5 ms and
0.85-1.1 s; this one 1.8 ms on the SGLang trace (direct calls, min of 100), before the
frame-call pick moved to C (`_holding`: 0.36 ms of it by numpy's searchsorted); with one
launching thread picked from the whole arrays and the stack ids in C (`launches`), in one
process: 2.5 ms and, on the 1 M-kernel trace, 0.33 s (was 0.55 s); with the Kineto reader's
`pick` over its segments' chunks (no join), warm, the whole of kineto/stacks.resolve: 2-5 ms
and 60 ms.
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa

try:
    from tracediff.parse.stacks import _stack_walk
except ImportError:  # pragma: no cover - built by pip install; a bare checkout walks in numpy
    _stack_walk = None  # type: ignore[assignment]  # the stub types the built module

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""`<built-in method arange of type object at 0x7f1a...>`: the address differs every run, so
it is no part of a frame's identity."""

_MUL = np.uint64(0x100000001B3)


class Stacks(NamedTuple):
    stack_id: np.ndarray  # int64 per API call (the input's order), 0 where none
    stack_rows: tuple[np.ndarray, np.ndarray, np.ndarray]  # stack_id, depth, frame_id: sorted
    frame_ids: np.ndarray  # int64, sorted, distinct: the frames the stacks use
    frame_texts: pa.Array  # their texts (addresses removed), one per frame id


def _none(n: int) -> Stacks:
    z = np.zeros(0, np.int64)
    return Stacks(np.zeros(n, np.int64), (z, z.astype(np.int32), z), z, pa.array([], pa.string()))


def _hash_texts(texts: list[str]) -> np.ndarray:
    """64-bit hashes of strings (one per distinct frame text), as uint64."""
    blake = hashlib.blake2b
    return np.frombuffer(
        b"".join([blake(t.encode(), digest_size=8).digest() for t in texts]), "<u8"
    ).astype(np.uint64)


def _mix(parent: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """A stack's hash from its parent stack's hash and its innermost frame's (splitmix64's
    finaliser over a FNV-style combination; wraps, as uint64 does). In place on one new array:
    it runs once per nesting level."""
    with np.errstate(over="ignore"):
        z = parent * _MUL
        z ^= frame
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    z[z == 0] = 1  # 0 is "no parent"
    return z


def _code(values: np.ndarray, universe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each value in the sorted distinct `universe`, whether it is there)."""
    i = np.minimum(np.searchsorted(universe, values), len(universe) - 1)
    return i, universe[i] == values


def resolve(
    call_pid: np.ndarray,
    call_tid: np.ndarray,
    call_mid: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    text: pl.Series | pa.DictionaryArray,
) -> Stacks:
    """The launch stack of every API call (int64 arrays, no nulls) from the frame calls (pid,
    tid, start, end: int64, no nulls; text: their names, nulls allowed; a dictionary array:
    the Kineto scanner's codes, read without a polars conversion)."""
    n_calls = len(call_mid)
    if not n_calls or not len(start):
        return _none(n_calls)
    # only frame calls that hold some API call's midpoint can be frames of a launch stack: the
    # first midpoint at or after a call's start is at most its end. Picked before the sort, so
    # that only these are sorted (on the SGLang prefill-decode trace 8310 of 53321)
    p0, t0 = call_pid[0], call_tid[0]
    if call_pid.min() == call_pid.max() == p0 and call_tid.min() == call_tid.max() == t0:
        # one launching thread (the usual case): the times are the keys, and the pick skips
        # the frame calls of other threads (a mask, not thread codes: no int64 per call)
        ok = None
        if not (pid.min() == pid.max() == p0 and tid.min() == tid.max() == t0):
            ok = (pid == p0) & (tid == t0)
        c_order = np.argsort(call_mid, kind="stable")
        mids = call_mid[c_order]
        held = _holding(mids, start, end, ok)
        return _resolved(n_calls, None, None, c_order, mids, held, start[held], end[held], text)
    c_thr, f_thr, n_thr = _threads(call_pid, call_tid, pid, tid)
    on = (end >= start) & (f_thr >= 0)
    rows: np.ndarray | None = None if on.all() else np.flatnonzero(on)
    if rows is not None and not rows.size:
        return _none(n_calls)

    # one sortable int64 per instant: thread × span + time (ranks where that would overflow)
    s, e = (start, end) if rows is None else (start[rows], end[rows])
    fthr = f_thr if rows is None else f_thr[rows]
    lo, hi = min(int(s.min()), int(call_mid.min())), max(int(e.max()), int(call_mid.max()))
    span = hi - lo + 1
    if span * n_thr < 1 << 62:
        ck = c_thr * span + (call_mid - lo)
        s, e = fthr * span + (s - lo), fthr * span + (e - lo)
    else:
        u = np.unique(np.concatenate([s, e, call_mid]))
        span = len(u)
        ck = c_thr * span + np.searchsorted(u, call_mid)
        s, e = fthr * span + np.searchsorted(u, s), fthr * span + np.searchsorted(u, e)

    c_order = np.argsort(ck, kind="stable")
    mids = ck[c_order]
    keep = _holding(mids, s, e)
    rows = keep if rows is None else rows[keep]
    return _resolved(n_calls, c_thr, f_thr, c_order, mids, rows, s[keep], e[keep], text)


class Picked(NamedTuple):
    """The frame calls on the one launching thread that hold some midpoint (`pick`)."""

    s: np.ndarray  # int64 starts
    e: np.ndarray  # int64 ends
    code: np.ndarray  # int32: each call's code in its chunk's names
    bounds: list[int]  # where each chunk's picked calls begin, and the end


class Chunk(NamedTuple):
    """One chunk of frame calls as a reader holds them (int64 s, e, pid, tid; int32 code;
    ok: a bool per call, False where a field is null, or None)."""

    s: np.ndarray
    e: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    code: np.ndarray
    ok: np.ndarray | None


def pick(mids: np.ndarray, p0: int, t0: int, chunks: list[Chunk]) -> Picked:
    """The frame calls of thread (p0, t0) that hold some midpoint (mids sorted), chunk by
    chunk as the reader holds them, in their order (`resolve_picked` takes them): one C pass
    over each chunk, with no join of the chunks and no mask or gathers of every call first
    (the Kineto reader's 2.4 M Python calls of a 1 M-kernel trace: an 85 MB join before)."""
    if len(mids) > 1 and (mids[1:] < mids[:-1]).any():
        raise ValueError("midpoints not sorted")
    total = sum(len(c.s) for c in chunks)
    out_s, out_e = np.empty(total, np.int64), np.empty(total, np.int64)
    out_c = np.empty(total, np.int32)
    bounds, at = [0], 0
    c = np.ascontiguousarray
    m = c(mids, np.int64)
    for ch in chunks:
        if _stack_walk is not None:
            a = (m, c(ch.s, np.int64), c(ch.e, np.int64), c(ch.pid, np.int64),
                 c(ch.tid, np.int64), c(ch.code, np.int32), p0, t0, out_s, out_e, out_c, at)  # fmt: skip
            at = _stack_walk.pick(*a) if ch.ok is None else _stack_walk.pick(*a, c(ch.ok, bool))
        else:
            ok = (ch.pid == p0) & (ch.tid == t0)
            if ch.ok is not None:
                ok &= ch.ok
            keep = _holding(m, ch.s, ch.e, ok)
            k = at + len(keep)
            out_s[at:k], out_e[at:k], out_c[at:k] = ch.s[keep], ch.e[keep], ch.code[keep]
            at = k
        bounds.append(at)
    return Picked(out_s[:at], out_e[:at], out_c[:at], bounds)


def resolve_picked(
    n_calls: int, c_order: np.ndarray, mids: np.ndarray, got: Picked, names: pa.DictionaryArray
) -> Stacks:
    """resolve for API calls on one thread, from `pick`'s frame calls (c_order: the API calls in
    midpoint order, mids their midpoints sorted; names: the picked calls' names in their order,
    no nulls)."""
    if not len(got.s):
        return _none(n_calls)
    return _resolved(n_calls, None, None, c_order, mids, None, got.s, got.e, names)


def _resolved(
    n_calls: int,
    c_thr: np.ndarray | None,
    f_thr: np.ndarray | None,
    c_order: np.ndarray,
    mids: np.ndarray,
    rows: np.ndarray | None,
    s: np.ndarray,
    e: np.ndarray,
    text: pl.Series | pa.DictionaryArray,
) -> Stacks:
    """resolve, from the frame calls `rows` that hold a midpoint (s, e: their keys; rows None:
    text holds just these calls) and the midpoints' keys in order (mids; c_order: the API
    calls in that order); c_thr, f_thr the API and frame calls' thread codes, None for one
    thread."""
    if rows is not None and not rows.size:
        return _none(n_calls)

    # by thread, start, the longer first, then input order: callers come before callees.
    # Stable sorts only (timsort: traces are nearly in time order; 10x faster than lexsort)
    order, s = _start_order(s, e)
    e = e[order]
    rows = order if rows is None else rows[order]
    thr = None if f_thr is None else f_thr[rows]

    # frames: one hash per distinct text (addresses removed), per call through its code
    fd, code, distinct = _frames(text, rows)
    fh = fd[code]

    # callers, stack hashes and each API call's launching frame call (in midpoint order)
    mthr = None if thr is None or c_thr is None else c_thr[c_order]
    parent, h, cur = (_walk_native if _stack_walk is not None else _walk_numpy)(
        s, e, thr, fh, mids, mthr
    )
    sid_m, rep = (_launches_native if _stack_walk is not None else _launches_numpy)(cur, h)
    if not rep.size:
        return _none(n_calls)
    sid = np.empty(n_calls, np.int64)
    sid[c_order] = sid_m
    return Stacks(sid, *_tables(rep, parent, h, fd, code, distinct))


def _launches_native(cur: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_launches_numpy's stack ids, and its frame calls in another order, in one C pass."""
    assert _stack_walk is not None
    sid, leaves = np.empty(len(cur), np.int64), np.empty(len(cur), np.int64)
    k = _stack_walk.launches(cur, h, sid, leaves)
    return sid, leaves[:k]


def _launches_numpy(cur: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stack id per midpoint: its launching frame call's hash, 0 where none; one launching
    frame call per distinct stack, in any order: _tables takes them as a set)."""
    found = cur >= 0
    sid = np.where(found, h[np.maximum(cur, 0)], np.uint64(0)).view(np.int64)
    hs = np.sort(np.unique_values(h[cur[found]]))  # hash-based: no sort of the calls
    rep = np.empty(len(hs), np.int64)
    rep[np.searchsorted(hs, h[cur[found]])] = cur[found]
    return sid, rep


def _frames(
    text: pl.Series | pa.DictionaryArray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(hash per distinct text, each row's code 0..distinct-1, the distinct texts with their
    addresses removed) of the frame calls `rows`. Which code a text gets does not matter: the
    ids are the hashes, and texts equal once their addresses are removed share one."""
    if isinstance(text, pa.DictionaryArray):  # codes into the dictionary: no cast, no gather
        text = named(text)
        idx, words = text.indices, text.dictionary
        raw = idx.to_numpy()[rows]
        present = np.bincount(raw, minlength=len(words)) > 0
        code = (np.cumsum(present, dtype=np.int32) - 1)[raw]  # dense: 0..distinct-1
        # a list's items, not pyarrow's take: its first call in a process costs 1-5 ms
        every = words.to_pylist()
        texts = [every[i] for i in np.flatnonzero(present).tolist()]
    else:
        names = text.gather(rows)
        if names.null_count():
            names = names.fill_null(UNNAMED)
        raw = names.cast(pl.Categorical).to_physical().to_numpy()  # codes of polars' categories
        present = np.zeros(int(raw.max()) + 1, bool)
        present[raw] = True
        code = (np.cumsum(present) - 1)[raw]  # dense: 0..distinct-1, in category order
        one = np.empty(len(present), np.int64)
        one[raw] = np.arange(len(raw))  # a row of each text (which one does not matter)
        texts = names.gather(one[present]).to_list()
    # Python's re on the few distinct texts: pyarrow's regex kernels cost more to start
    strip = ADDRESS.sub
    distinct = [strip("", t) if " at 0x" in t else t for t in texts]
    return _hash_texts(distinct), code, distinct


UNNAMED = "<unnamed>"
"""The text of a frame call without a name."""


def named(names: pa.DictionaryArray) -> pa.DictionaryArray:
    """names without nulls: each null the word UNNAMED, added to the dictionary."""
    import pyarrow.compute as pc  # late: its import builds ~290 wrappers

    idx, words = names.indices, names.dictionary
    if not idx.null_count:
        return names
    words = pa.concat_arrays([words, pa.array([UNNAMED], words.type)])
    return pa.DictionaryArray.from_arrays(pc.fill_null(idx, len(names.dictionary)), words)


def _holding(
    mids: np.ndarray, s: np.ndarray, e: np.ndarray, ok: np.ndarray | None = None
) -> np.ndarray:
    """The positions (ascending) of the frame calls whose [s, e] holds some midpoint (sorted;
    so e >= s), of those where `ok` (bool) is true if given."""
    if _stack_walk is not None:  # a search from the last answer: starts come nearly sorted
        keep = np.empty(len(s), np.int64)
        c = np.ascontiguousarray
        a = (c(mids, np.int64), c(s, np.int64), c(e, np.int64), keep)
        return keep[: _stack_walk.holding(*a) if ok is None else _stack_walk.holding(*a, c(ok))]
    j = np.searchsorted(mids, s, "left")
    hold = j < len(mids)
    hold &= mids[np.minimum(j, len(mids) - 1)] <= e
    if ok is not None:
        hold &= ok
    return np.flatnonzero(hold)


def _walk_native(
    s: np.ndarray,
    e: np.ndarray,
    thr: np.ndarray | None,
    fh: np.ndarray,
    mids: np.ndarray,
    mthr: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_walk_numpy's arrays from one pass in C (_stack_walk.c)."""
    n = len(s)
    parent, h, cur = np.empty(n, np.int64), np.empty(n, np.uint64), np.empty(len(mids), np.int64)
    none = np.zeros(0, np.int64)
    c = np.ascontiguousarray
    assert _stack_walk is not None
    _stack_walk.walk(
        c(s, np.int64), c(e, np.int64), c(np.sort(e, kind="stable"), np.int64),
        none if thr is None else c(thr, np.int64), c(fh, np.uint64),
        c(mids, np.int64), none if mthr is None else c(mthr, np.int64),
        parent, h, cur,
    )  # fmt: skip
    return parent, h, cur


def _walk_numpy(
    s: np.ndarray,
    e: np.ndarray,
    thr: np.ndarray | None,
    fh: np.ndarray,
    mids: np.ndarray,
    mthr: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(caller position or -1, stack hash, launching frame call or -1 per midpoint) of frame
    calls sorted by start (s, e: keys; thr: thread codes, None for one thread; fh: frame
    hashes) and sorted midpoints (mthr: their threads)."""
    n = len(s)
    # nesting depth: calls started before (the position) less calls ended before the start
    # (ends sort before starts at one instant, except a zero-length call's own end)
    ended = np.searchsorted(np.sort(e, kind="stable"), s, "right")
    if (zero := s == e).any():
        z = s[zero]
        ended -= np.searchsorted(z, s, "right") - np.searchsorted(z, s, "left")
    d = np.arange(n) - ended
    d = d.astype(np.int16 if d.max() < 1 << 15 else np.int64)  # int16: a radix sort below

    # caller: the latest earlier frame call on the same thread one level up
    by_level = np.argsort(d, kind="stable")
    key = d[by_level].astype(np.int64) * n + by_level  # sorted
    j = np.searchsorted(key, key - n, "left") - 1  # in by_level order
    cand = by_level[np.maximum(j, 0)]
    ok = (j >= 0) & (d[cand] == d[by_level] - 1)
    if thr is not None:
        ok &= thr[cand] == thr[by_level]
    parent = np.empty(n, np.int64)
    parent[by_level] = np.where(ok, cand, -1)

    # each frame call's stack hash, level by level from the roots, in level order (contiguous
    # slices; a caller's slot, or slot n for a root, holding 0)
    where = np.empty(n + 1, np.int64)
    where[by_level] = np.arange(n)
    where[n] = n
    up = where[np.where(parent >= 0, parent, n)[by_level]]
    f_l = fh[by_level]
    h_l = np.zeros(n + 1, dtype=np.uint64)
    bounds = np.searchsorted(d[by_level], np.arange(int(d.max()) + 2))
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        h_l[a:b] = _mix(h_l[up[a:b]], f_l[a:b])
    h = h_l[where[:n]]

    # the launching frame call of each API call, then up the callers while it had returned
    cur = np.searchsorted(s, mids, "right") - 1
    if thr is not None:
        assert mthr is not None
        cur = np.where((cur >= 0) & (thr[np.maximum(cur, 0)] == mthr), cur, -1)
    todo = np.flatnonzero(cur >= 0)
    while todo.size:
        todo = todo[e[cur[todo]] < mids[todo]]
        cur[todo] = parent[cur[todo]]
        todo = todo[cur[todo] >= 0]
    return parent, h, cur


def _threads(
    call_pid: np.ndarray, call_tid: np.ndarray, pid: np.ndarray, tid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """(thread code 0..T-1 per API call, per frame call (-1: a thread without API calls), T)
    of API calls on several threads (resolve compares, not searches, the one-thread case)."""
    upid, utid = np.unique(call_pid), np.unique(call_tid)
    pair = np.searchsorted(upid, call_pid) * len(utid) + np.searchsorted(utid, call_tid)
    threads = np.unique(pair)
    pi, ok = _code(pid, upid)
    ti, ok_t = _code(tid, utid)
    f_thr, ok_p = _code(pi * len(utid) + ti, threads)
    return np.searchsorted(threads, pair), np.where(ok & ok_t & ok_p, f_thr, -1), len(threads)


def _start_order(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The permutation sorting by (s, -e, position), and s in that order: a stable sort by s,
    then calls sharing a start reordered longer first (a lexsort of those few)."""
    order = np.argsort(s, kind="stable")
    ss = s[order]
    tie = ss[1:] == ss[:-1]
    if tie.any():
        run = np.zeros(len(s), bool)
        run[1:] |= tie
        run[:-1] |= tie
        idx = order[run]  # by start, then position
        order[run] = idx[np.lexsort((-e[idx], s[idx]))]  # their starts stay ss[run]
    return order, ss


def _tables(
    leaves: np.ndarray,
    parent: np.ndarray,
    h: np.ndarray,
    fd: np.ndarray,
    code: np.ndarray,
    distinct: list[str],
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray, pa.Array]:
    """The stack rows (stack_id, depth, frame_id: innermost at depth 0) of the distinct
    launching stacks, sorted, and the frames they use (ids sorted, texts)."""
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
    st, dp, fc = np.concatenate(rows_s), np.concatenate(rows_d), np.concatenate(rows_f)
    o = np.lexsort((dp, st))
    fid = fd.view(np.int64)
    used = np.flatnonzero(np.bincount(fc, minlength=len(fd)))  # codes of texts, sorted;
    # texts that differed only by an address share an id
    ids, first_used = np.unique(fid[used], return_index=True)
    texts = pa.array([distinct[i] for i in used[first_used].tolist()], pa.string())
    return (st[o], dp[o], fid[fc[o]]), ids, texts
