"""Types of the native launch-stack walk (_stack_walk.c); used by parse/stacks/launch_stacks.py."""

from typing import Any, TypeAlias

import numpy as np

Array: TypeAlias = np.ndarray[Any, Any]
"""A C-contiguous numpy array (int64, or uint64 for fh and h)."""

def walk(
    s: Array,
    e: Array,
    e_sorted: Array,
    thr: Array,
    fh: Array,
    mids: Array,
    mthr: Array,
    parent: Array,
    h: Array,
    cur: Array,
    /,
) -> None:
    """Frame calls sorted by start (s, e, e_sorted, thr: int64, thr empty for one thread; fh:
    uint64 frame hashes) and sorted midpoints (mids, mthr: int64) -> parent (int64), h (uint64)
    and cur (int64) written in place. ValueError on lengths that do not match or unsorted
    starts or midpoints."""

def holding(mids: Array, s: Array, e: Array, out: Array, ok: Array = ..., /) -> int:
    """mids sorted (int64), s and e (int64, any order) -> k: out[:k] = the positions i,
    ascending, whose [s[i], e[i]] holds some midpoint (with ok, a bool per call: only where
    ok[i]). ValueError on unsorted midpoints or lengths that do not match."""

def launches(cur: Array, h: Array, sid: Array, leaves: Array, /) -> int:
    """cur (int64 per midpoint: its launching frame call or -1), h (uint64 stack hash per frame
    call, never 0) -> k: sid (int64 per midpoint) = h[cur] or 0, leaves[:k] = one frame call per
    distinct hash among them, the first in midpoint order. ValueError on a cur beyond h, a 0
    hash, or lengths that do not match."""

def pick(
    mids: Array,
    s: Array,
    e: Array,
    pid: Array,
    tid: Array,
    code: Array,
    p0: int,
    t0: int,
    out_s: Array,
    out_e: Array,
    out_code: Array,
    at: int,
    ok: Array = ...,
    /,
) -> int:
    """mids sorted (int64; not checked), one chunk of frame calls (s, e, pid, tid: int64, code:
    int32) -> k: the calls with pid p0 and tid t0 (and ok, a bool per call, if given) whose
    [s, e] holds some midpoint, their s, e and code written at out_s/out_e/out_code[at:k] in
    the chunk's order. ValueError on lengths that do not match or outputs too short."""
