"""Instance alignment: every op of every cycle of both runs mapped to a slot of a cycle template.

Stage: engine. Input: cycle-tagged ops of base and head (column `side`); output: the same ops with
`slot` (position in the device's template; null = added, not in the template), `status` and
`contributor` (the template op's name, `old → new` for a renamed op in the same place).

The template of a device is base's most frequent op sequence per cycle. Cycles identical to the
template (the common case: same code, same shapes) are mapped without any alignment work; each
distinct other sequence is aligned once (an exact longest common subsequence on name codes) and the result reused for every
cycle that has it. Inside a replaced block ops are paired in order when their kind agrees (a
renamed or re-tuned kernel in the same place), with the launch configuration breaking ties.
"""

from __future__ import annotations

import difflib

import numpy as np
import polars as pl

from tracediff.errors import AnalysisError

DP_CELLS = 60_000_000
"""Largest seq x template for the exact LCS (uint16 table, 120 MB); beyond it difflib's heuristic."""


def _lcs_pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of a and b (exact dynamic programming).

    Row by row with numpy: L[i][j] = cummax_j(max(L[i-1][j], L[i-1][j-1] + [a_i == b_j])), which
    holds because L is monotone in both indices. Repeated blocks (a layer's MLP run twice) are
    matched exactly where a greedy matcher would mis-pair a whole stretch.
    """
    n, m = len(a), len(b)
    table = np.zeros((n + 1, m + 1), dtype=np.uint16 if min(n, m) < 65535 else np.uint32)
    for i in range(1, n + 1):
        prev = table[i - 1]
        cand = np.maximum(prev[1:], prev[:-1] + (b == a[i - 1]))
        table[i, 1:] = np.maximum.accumulate(cand)
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:  # walk back: one step per element, not per cell
        if a[i - 1] == b[j - 1] and table[i, j] == table[i - 1, j - 1] + 1:
            pairs.append((i - 1, j - 1))
            i -= 1
            j -= 1
        elif table[i - 1, j] >= table[i, j - 1]:
            i -= 1
        else:
            j -= 1
    pairs.reverse()
    return pairs


def _align_seq(
    seq: list[int], tpl: list[int], seq_kind: list[str], tpl_kind: list[str]
) -> list[int]:
    """Slot for each element of seq (-1 = added).

    Equal names are matched by a longest common subsequence; between two matched anchors, the
    leftover ops of both sides are paired in order when their kinds agree (a renamed or re-tuned
    kernel in the same place).
    """
    out = [-1] * len(seq)
    if len(seq) * len(tpl) <= DP_CELLS:
        pairs = _lcs_pairs(np.asarray(seq), np.asarray(tpl))
    else:
        sm = difflib.SequenceMatcher(None, seq, tpl, autojunk=False)
        pairs = [
            (blk.a + k, blk.b + k) for blk in sm.get_matching_blocks() for k in range(blk.size)
        ]
    prev_i, prev_j = -1, -1
    for i, j in [*pairs, (len(seq), len(tpl))]:
        jj = prev_j + 1
        for ii in range(prev_i + 1, i):  # leftovers between anchors: pair by kind, in order
            while jj < j and tpl_kind[jj] != seq_kind[ii]:
                jj += 1
            if jj >= j:
                break
            out[ii] = jj
            jj += 1
        if i < len(seq):
            out[i] = j
        prev_i, prev_j = i, j
    return out


SIDES = pl.Enum(["base", "head"])
STATUS = pl.Enum(["matched", "added"])
_MULT = np.random.default_rng(0x7D1F).integers(1, 1 << 63, size=1 << 16, dtype=np.uint64) | 1
"""Per-position multipliers of the sequence hash (odd, so no position is ignored)."""


def group_key(ops: pl.DataFrame) -> np.ndarray:
    """(side, device, cycle) packed in one int64 that sorts in that order ("base" < "head").
    Only an order and a grouping: read side, device and cycle from the rows, not from the key.
    Device ids outside 0..2**16 (a Kineto pid) are replaced by their rank, cycles must fit 2**32."""
    dev = pl.col("device_id").cast(pl.Int64)
    lo, hi = (
        ops.select(dev.min().alias("lo"), dev.max().alias("hi")).row(0) if ops.height else (0, 0)
    )
    if lo is not None and (lo < 0 or hi >= 1 << 16):
        dev = dev.rank("dense").cast(pl.Int64)
    cyc = (
        ops.select(pl.col("cycle").min().alias("lo"), pl.col("cycle").max().alias("hi")).row(0)
        if ops.height
        else (0, 0)
    )
    if cyc[0] is not None and (cyc[0] < 0 or cyc[1] >= 1 << 32):
        raise AnalysisError(
            f"cycle numbers out of range ({cyc[0]}..{cyc[1]})", "report this as a tracediff bug"
        )
    return (
        ops.select(
            (pl.col("side") == "head").cast(pl.Int64) * (1 << 48)
            + dev * (1 << 32)
            + pl.col("cycle")
        )
        .to_series()
        .to_numpy()
    )


def in_cycle_order(ops: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """ops sorted by (side, device, cycle, start, end), and their packed group keys.

    The ops usually arrive in that order already (each side sorted by device and start, and a
    device's cycles follow each other), so the wide frame is only gathered when they do not.
    """
    key = group_key(ops)
    if not lex_sorted(key, ops["start_ns"], ops["end_ns"]):
        s, e = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
        order = (
            pl.DataFrame({"k": key, "s": s, "e": e})
            .select(pl.arg_sort_by("k", "s", "e", maintain_order=True))
            .to_series()
            .to_numpy()
        )
        ops, key = ops[order], key[order]
    return ops, key


def lex_sorted(*cols: np.ndarray | pl.Series, block: int = 1 << 20) -> bool:
    """Rows in non-decreasing order of (cols[0], cols[1], ...)? Checked a block at a time, so the
    temporaries stay a few MB for any number of rows (a polars column is not copied whole)."""
    n = len(cols[0])
    for lo in range(0, max(n - 1, 0), block):
        hi = min(lo + block + 1, n)
        ok = np.zeros(hi - lo - 1, bool)
        tie = np.ones(hi - lo - 1, bool)
        for c in cols:
            part = c.slice(lo, hi - lo).to_numpy() if isinstance(c, pl.Series) else c[lo:hi]
            d = np.diff(part)
            ok |= tie & (d > 0)
            tie &= d == 0
        if not (ok | tie).all():
            return False
    return True


def groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by `key`: the group index of each row and the first row of each group."""
    n = len(key)
    brk = np.flatnonzero(key[1:] != key[:-1]) + 1 if n else np.zeros(0, np.int64)
    first = np.concatenate([np.zeros(min(n, 1), np.int64), brk])
    lengths = np.diff(np.append(first, n))
    return np.repeat(np.arange(len(first), dtype=np.int32), lengths), first


def _seq_hash(
    codes: np.ndarray, pos: np.ndarray, first: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """A 64-bit hash of each group's code sequence: Σ (code + 1) · M[pos] mod 2**64, mixed with
    the length (numpy's unsigned arithmetic wraps)."""
    mult = _MULT
    if len(pos) and int(pos.max()) >= len(mult):
        mult = (
            np.random.default_rng(0x7D1F).integers(
                1, 1 << 63, size=int(pos.max()) + 1, dtype=np.uint64
            )
            | 1
        )
    with np.errstate(over="ignore"):
        terms = codes.astype(np.uint64)  # in place from here: one 8-byte temporary per op
        terms += np.uint64(1)
        terms *= mult[pos]
        h = np.add.reduceat(terms, first) if len(first) else np.zeros(0, np.uint64)
        del terms
        return h ^ (lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))


def align(ops: pl.DataFrame) -> tuple[pl.DataFrame, dict[int, pl.DataFrame]]:
    """Add slot/status/contributor columns. Returns (ops in cycle order, templates by device).

    Works on numpy arrays of the few columns it needs; the wide frame only gains columns.
    """
    ops, key = in_cycle_order(ops)
    gid, first = groups(key)
    n = ops.height
    lengths = np.diff(np.append(first, n))
    pos = np.arange(n, dtype=np.int32) - np.repeat(first.astype(np.int32), lengths)
    codes = ops["name"].cast(pl.Categorical).to_physical().to_numpy().astype(np.int64, copy=False)
    h = _seq_hash(codes, pos, first, lengths)
    g_side = (ops["side"].gather(first) == "head").to_numpy().astype(np.int64)  # 0 base, 1 head
    g_dev = ops["device_id"].gather(first).to_numpy().astype(np.int64)
    del key
    kind_col = ops["kind"]

    def kinds(lo: int, ln: int) -> list[str]:
        return kind_col.slice(lo, ln).cast(pl.String).to_list()

    templates: dict[int, pl.DataFrame] = {}
    g_off = np.zeros(len(first), np.int64)  # each group's offset into `flat` (slot per position)
    flat_parts: list[np.ndarray] = []
    t_off: dict[int, int] = {}  # each device's offset into `t_flat` (template code per slot)
    t_parts: list[np.ndarray] = []
    used = 0
    t_used = 0
    for dev in np.unique(g_dev).tolist():
        on_dev = np.flatnonzero(g_dev == dev)
        cand = on_dev[g_side[on_dev] == 0]
        if len(cand) == 0:
            cand = on_dev  # device only in head: template from head
        # template: base's most frequent sequence (ties: the one seen first)
        uh, first_at, counts = np.unique(h[cand], return_index=True, return_counts=True)
        best = np.lexsort((first_at, -counts))[0]
        tg = int(cand[first_at[best]])
        t0, tl = int(first[tg]), int(lengths[tg])
        tpl = codes[t0 : t0 + tl]
        tkind = kinds(t0, tl)
        templates[dev] = (
            ops.slice(t0, tl).select("name", "kind", "grid", "block").with_row_index("slot")
        )
        t_off[dev] = t_used
        t_parts.append(tpl)
        t_used += tl
        dh, d_first, d_inv = np.unique(h[on_dev], return_index=True, return_inverse=True)
        offs = np.zeros(len(dh), np.int64)
        for i, hv in enumerate(dh.tolist()):  # one alignment per distinct sequence
            g = int(on_dev[d_first[i]])
            s0, ln = int(first[g]), int(lengths[g])
            if hv == int(h[tg]):
                slots = np.arange(ln, dtype=np.int32)
            else:
                seq = codes[s0 : s0 + ln]
                slots = np.asarray(
                    _align_seq(seq.tolist(), tpl.tolist(), kinds(s0, ln), tkind),
                    dtype=np.int32,
                )
            offs[i] = used
            flat_parts.append(slots)
            used += ln
        g_off[on_dev] = offs[d_inv.ravel()]
    flat = np.concatenate(flat_parts) if flat_parts else np.zeros(0, np.int32)
    t_flat = np.concatenate(t_parts) if t_parts else np.zeros(0, np.int64)
    slot = flat[g_off[gid] + pos] if n else np.zeros(0, np.int32)
    del pos
    matched = slot >= 0
    # the template op's name at this slot; where it differs, the contributor is "old → new"
    devs = np.array(sorted(t_off), dtype=np.int64)
    dev_off = np.array([t_off[d] for d in devs.tolist()], dtype=np.int64)
    # each op's device's offset in t_flat (a per-group lookup first)
    at = dev_off[np.searchsorted(devs, g_dev)][gid] if len(devs) else np.zeros(n, np.int64)
    is_head, dev_of = g_side[gid] == 1, g_dev[gid]
    del gid
    at += np.maximum(slot, 0)
    tcode = t_flat[at]
    del at
    np.copyto(tcode, codes, where=~matched)
    differs = tcode != codes
    own = _carry_renames(slot, differs, codes, is_head, dev_of)
    del is_head, dev_of
    ops = ops.with_columns(
        pl.Series("_slot", slot),
        _status(matched),
        pl.Series("_differs", differs),
        _renamed(ops["name"], codes, own, tcode, differs),
    ).with_columns(
        pl.when(pl.col("_slot") >= 0).then(pl.col("_slot")).alias("slot"),
        pl.when(pl.col("_differs"))
        .then(pl.col("_renamed"))
        .otherwise(pl.col("name").cast(pl.Categorical))
        .alias("contributor"),
    )
    return ops.drop("_slot", "_differs", "_renamed"), templates


RENAMED = " → "
"""Between the two names of a contributor renamed in place: `base name → head name`."""


def renames(ops: pl.DataFrame) -> pl.DataFrame:
    """The contributors renamed in place between the runs by `align` (a renamed or re-tuned op
    of head in the template slot of base's op): name (the contributor label, `base → head`),
    base_name (the template's op), head_name (head's op). A substitution base makes itself
    (cycles of one run differ among themselves: a run with itself has such labels on both
    sides) is not a rename between the runs and is left out. One row per label; computed on the
    distinct (side, label, name) triples, so it costs a unique over the ops' dictionary codes,
    not a string per op."""
    pairs = (
        ops.select("side", "contributor", "name")
        .unique()
        .select(
            "side",
            pl.col("contributor").cast(pl.String).alias("label"),
            pl.col("name").cast(pl.String).alias("head_name"),
        )
        .filter(pl.col("label") != pl.col("head_name"))
        .filter(pl.col("label").str.ends_with(pl.lit(RENAMED) + pl.col("head_name")))
    )
    in_base = pairs.filter(pl.col("side") == "base").select("label").unique()
    cut = pl.col("label").str.len_chars() - len(RENAMED) - pl.col("head_name").str.len_chars()
    return (
        pairs.join(in_base, on="label", how="anti")
        .select(
            pl.col("label").alias("name"),
            pl.col("label").str.slice(0, cut).alias("base_name"),
            "head_name",
        )
        .sort("name", "base_name")
        .unique("name", keep="first", maintain_order=True)
    )


def _status(matched: np.ndarray) -> pl.Series:
    lookup = pl.Series("status", ["added", "matched"], dtype=STATUS)
    return lookup.gather(matched.astype(np.uint32))


def _carry_renames(
    slot: np.ndarray, differs: np.ndarray, codes: np.ndarray, is_head: np.ndarray, dev: np.ndarray
) -> np.ndarray:
    """The code each op's contributor label names as its own (`template → own`). Where every
    head op in a template slot is another op (a kernel renamed in place), base's ops in that
    slot take head's op (its most frequent, ties: the smallest code) and `differs` is set for
    them: base's and head's time then land on one `old → new` row, not on a `removed` row for
    the old name beside a `renamed` one that has no base time. Modifies `differs` in place."""
    own = codes
    head_moved = is_head & differs & (slot >= 0)
    if not head_moved.any():
        return own
    key = dev.astype(np.int64) * (1 << 32) + slot
    hm = is_head & (slot >= 0)
    per = (
        pl.DataFrame({"k": key[hm], "d": differs[hm], "c": codes[hm]})
        .group_by("k")
        .agg(pl.col("d").all().alias("all"), pl.col("c").filter(pl.col("d")).mode().min())
        .filter(pl.col("all"))
        .sort("k")
    )
    if per.height == 0:
        return own
    keys, new = per["k"].to_numpy(), per["c"].to_numpy()
    base_rows = np.flatnonzero(~is_head & (slot >= 0) & ~differs)
    at = np.minimum(np.searchsorted(keys, key[base_rows]), len(keys) - 1)
    hit = keys[at] == key[base_rows]
    rows = base_rows[hit]
    own = codes.copy()
    own[rows] = new[at[hit]]
    differs[rows] = True
    return own


def _renamed(
    names: pl.Series, codes: np.ndarray, own: np.ndarray, tcode: np.ndarray, differs: np.ndarray
) -> pl.Series:
    """`template name → own name` for ops whose template slot held another op (a renamed or
    re-tuned kernel in the same place; `own`: the op's code, or for base's ops in a slot head
    renamed, head's: _carry_renames); categorical, one label per distinct pair; elsewhere any
    label."""
    rows = np.flatnonzero(differs)
    out = np.zeros(len(codes), np.uint32)
    if len(rows) == 0:
        return pl.Series("_renamed", [None], dtype=pl.Categorical).gather(out)
    pair = tcode[rows] * (int(codes.max()) + 1) + own[rows]
    upair, first_at, inv = np.unique(pair, return_index=True, return_inverse=True)
    firsts = rows[first_at]
    # each name from an op that carries it (codes, not `own`: a base op's own name is not the
    # label's head name)
    need = np.union1d(tcode[firsts], own[firsts])
    carriers = np.flatnonzero(np.isin(codes, need))
    uc, one = np.unique(codes[carriers], return_index=True)
    text = {
        int(c): str(names[int(carriers[i])]) for c, i in zip(uc.tolist(), one.tolist(), strict=True)
    }
    labels = [f"{text[int(tcode[r])]}{RENAMED}{text[int(own[r])]}" for r in firsts.tolist()]
    out[rows] = inv.ravel().astype(np.uint32)
    return pl.Series("_renamed", labels, dtype=pl.Categorical).gather(out)
