"""Instance alignment: every op of every cycle of both runs mapped to a slot of a cycle template.

Stage: engine. Input: cycle-tagged ops of base and head (column `side`); output: the same ops with
`slot` (position in the device's template; null = added, not in the template), `status` and
`contributor` (the template op's name, `old → new` for a renamed op in the same place).

The template of a device is base's most frequent op sequence per cycle. Cycles identical to the
template (the common case: same code, same shapes) are mapped without any alignment work; each
distinct other sequence is aligned once (an exact longest common subsequence on name codes) and the result reused for every
cycle that has it. Inside a replaced block ops are paired in order when their kind agrees (a
renamed or re-tuned kernel in the same place), with the launch configuration breaking ties.
The sequences, their hashes and the template choice are engine/cycle/sequences.py's; this module pairs
ops with template slots and names what moved (renames, slot changes).
"""

from __future__ import annotations

import difflib

import numpy as np
import polars as pl

# the sequences and templates alignment reads; the per-file stage and the driver use them as al.*
from tracediff.engine.cycle.sequences import SIDES as SIDES
from tracediff.engine.cycle.sequences import DeviceTemplate as DeviceTemplate
from tracediff.engine.cycle.sequences import Sequences as Sequences
from tracediff.engine.cycle.sequences import choose_templates as choose_templates
from tracediff.engine.cycle.sequences import group_key as group_key
from tracediff.engine.cycle.sequences import groups as groups
from tracediff.engine.cycle.sequences import in_cycle_order as in_cycle_order
from tracediff.engine.cycle.sequences import lex_sorted as lex_sorted
from tracediff.engine.cycle.sequences import own_templates as own_templates
from tracediff.engine.cycle.sequences import sequences as sequences
from tracediff.engine.groupsum import group_ids

STATUS = pl.Enum(["matched", "added"])

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


def align_to(
    seqs: Sequences,
    templates: dict[int, DeviceTemplate],
    carry: dict[tuple[int, int], str] | None = None,
) -> tuple[pl.DataFrame, dict[int, int]]:
    """Add slot/status/contributor columns, each device's cycles aligned to its template
    (`templates`; a device without one: this file's own most frequent sequence). Returns (ops
    in cycle order, the template hash used per device). `carry`: base's ops only: (device,
    slot) → the name head renamed that slot's op to in every head cycle (`carried`); those ops
    are labelled `template → that name`, so base's and head's time land on one row.

    Works on numpy arrays of the few columns it needs; the wide frame only gains columns."""
    ops, n = seqs.ops, seqs.ops.height
    gid, g_dev = seqs.gid, seqs.g_dev
    texts = list(seqs.texts)
    code_of = {t: i for i, t in enumerate(texts)}
    codes = seqs.codes
    missing = sorted(set(np.unique(g_dev).tolist()) - set(templates))
    own = own_templates(seqs) if missing else {}
    slot, t_flat, t_off, used = _slots(seqs, {**own, **templates}, code_of, texts)
    matched = slot >= 0
    # the template op's name at this slot; where it differs, the contributor is "old → new"
    devs = np.array(sorted(t_off), dtype=np.int64)
    dev_off = np.array([t_off[d] for d in devs.tolist()], dtype=np.int64)
    at = dev_off[np.searchsorted(devs, g_dev)][gid] if len(devs) else np.zeros(n, np.int64)
    at += np.maximum(slot, 0)
    tcode = t_flat[at] if n else np.zeros(0, np.int64)
    del at
    np.copyto(tcode, codes, where=~matched)
    differs = tcode != codes
    named = codes
    if carry:  # base's ops in a slot head renamed: labelled with head's name
        named = codes.copy()
        key = g_dev[gid] * (1 << 32) + slot
        for (dev, sl), name in carry.items():
            if name not in code_of:
                code_of[name] = len(texts)
                texts.append(name)
            rows = np.flatnonzero((key == dev * (1 << 32) + sl) & matched & ~differs)
            named[rows] = code_of[name]
            differs[rows] = True
    ops = ops.with_columns(
        pl.Series("_slot", slot),
        _status(matched),
        pl.Series("_differs", differs),
        _renamed(named, tcode, differs, texts),
    ).with_columns(
        pl.when(pl.col("_slot") >= 0).then(pl.col("_slot")).alias("slot"),
        pl.when(pl.col("_differs"))
        .then(pl.col("_renamed"))
        .otherwise(pl.col("name").cast(pl.Categorical))
        .alias("contributor"),
    )
    return ops.drop("_slot", "_differs", "_renamed"), used


def _slots(
    seqs: Sequences,
    templates: dict[int, DeviceTemplate],
    code_of: dict[str, int],
    texts: list[str],
) -> tuple[np.ndarray, np.ndarray, dict[int, int], dict[int, int]]:
    """Each op's slot in its device's template (-1: unmatched), one alignment per distinct
    sequence of a device; the templates' codes (`t_flat`, each device's from `t_off[dev]`) and
    the template hash used per device. A template name the file lacks gets a code of its own
    (`code_of` and `texts` gain it)."""
    n = seqs.ops.height
    gid, first, lengths, pos, h, g_dev = (
        seqs.gid,
        seqs.first,
        seqs.lengths,
        seqs.pos,
        seqs.h,
        seqs.g_dev,
    )
    codes = seqs.codes
    kind_col = seqs.ops["kind"]
    used: dict[int, int] = {}

    def kinds(lo: int, ln: int) -> list[str]:
        return kind_col.slice(lo, ln).cast(pl.String).to_list()

    g_off = np.zeros(len(first), np.int64)  # each group's offset into `flat` (slot per position)
    flat_parts: list[np.ndarray] = []
    t_off: dict[int, int] = {}  # each device's offset into `t_flat` (template code per slot)
    t_parts: list[np.ndarray] = []
    used_n = 0
    t_used = 0
    for dev in np.unique(g_dev).tolist():
        t = templates[dev]
        used[dev] = t.hash
        for name in t.names:  # a template name this file lacks gets a code of its own
            if name not in code_of:
                code_of[name] = len(texts)
                texts.append(name)
        tpl = np.array([code_of[x] for x in t.names], dtype=np.int64)
        tkind = list(t.kinds)
        t_off[dev] = t_used
        t_parts.append(tpl)
        t_used += len(tpl)
        on_dev = np.flatnonzero(g_dev == dev)
        dh, d_first, d_inv = np.unique(h[on_dev], return_index=True, return_inverse=True)
        offs = np.zeros(len(dh), np.int64)
        for i, hv in enumerate(dh.tolist()):  # one alignment per distinct sequence
            g = int(on_dev[d_first[i]])
            s0, ln = int(first[g]), int(lengths[g])
            if hv == (t.hash & 0xFFFFFFFFFFFFFFFF):
                slots = np.arange(ln, dtype=np.int32)
            else:
                seq = codes[s0 : s0 + ln]
                slots = np.asarray(
                    _align_seq(seq.tolist(), tpl.tolist(), kinds(s0, ln), tkind), dtype=np.int32
                )
            offs[i] = used_n
            flat_parts.append(slots)
            used_n += ln
        g_off[on_dev] = offs[d_inv.ravel()]
    flat = np.concatenate(flat_parts) if flat_parts else np.zeros(0, np.int32)
    t_flat = np.concatenate(t_parts) if t_parts else np.zeros(0, np.int64)
    slot = flat[g_off[gid] + pos] if n else np.zeros(0, np.int32)
    return slot, t_flat, t_off, used


def slot_changes(ops: pl.DataFrame) -> pl.DataFrame:
    """device_id, slot, n, name, count of one head file's aligned ops: per template slot its op
    count (`n`) and the names of the ops in it that are not the template's (null name, count
    0: none), what `carried` sums over head's files."""
    both = ops.schema["contributor"] == ops.schema["name"] == pl.Categorical
    # categoricals of one dtype share their categories: equal codes are equal names (no text
    # made per op)
    con, name = (
        (pl.col("contributor"), pl.col("name"))
        if both
        else (pl.col("contributor").cast(pl.String), pl.col("name").cast(pl.String))
    )
    got = group_ids(ops, ["device_id", "slot"], pl.col("slot").is_not_null())
    if got is None:  # codes that do not fit: polars' group-by
        o = ops.filter(pl.col("slot").is_not_null()).select(
            "device_id", "slot", pl.when(con != name).then(pl.col("name")).alias("moved")
        )
        n = o.group_by("device_id", "slot").agg(pl.len().cast(pl.Int64).alias("n"))
        o = o.filter(pl.col("moved").is_not_null())
    else:  # each slot's op count by a bincount of its code; the moved ops (few) by polars
        group, first, k, rows = got
        assert rows is not None  # `where` given: the rows it keeps
        count = pl.Series("n", np.bincount(group, minlength=k).astype(np.int64))
        n = ops.select("device_id", "slot")[rows[first]].with_columns(count)
        on = ops.select((pl.col("slot").is_not_null() & (con != name)).fill_null(False))
        o = ops.select("device_id", "slot", pl.col("name").alias("moved"))[
            np.flatnonzero(on.to_series().to_numpy())
        ]
    moved = (
        o.group_by("device_id", "slot", "moved")
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .select("device_id", "slot", pl.col("moved").cast(pl.String).alias("name"), "count")
    )
    return n.join(moved, on=["device_id", "slot"], how="left")


def carried(changes: list[pl.DataFrame]) -> dict[tuple[int, int], str]:
    """(device, slot) → name where every head op in that template slot is another op (a kernel
    renamed in place), over all head files' `slot_changes`: the name most of them have (ties:
    the first by name). Base's ops in that slot take it as their label's new name."""
    parts = [c for c in changes if c.height]
    if not parts:
        return {}
    allc = pl.concat(parts, how="vertical_relaxed")
    # n is per file and slot (repeated on every moved name's row): sum it once per file
    totals = (
        pl.concat([c.unique(["device_id", "slot"]).select("device_id", "slot", "n") for c in parts])
        .group_by("device_id", "slot")
        .agg(pl.col("n").sum())
    )
    moved = (
        allc.filter(pl.col("name").is_not_null())
        .group_by("device_id", "slot", "name")
        .agg(pl.col("count").sum())
    )
    every = moved.group_by("device_id", "slot").agg(pl.col("count").sum().alias("_m"))
    full = totals.join(every, on=["device_id", "slot"]).filter(pl.col("_m") == pl.col("n"))
    if full.height == 0:
        return {}
    best = (
        moved.join(full.select("device_id", "slot"), on=["device_id", "slot"], how="semi")
        .sort("device_id", "slot", "count", "name", descending=[False, False, True, False])
        .unique(["device_id", "slot"], keep="first", maintain_order=True)
    )
    return {
        (int(d), int(sl)): str(nm)
        for d, sl, nm in zip(best["device_id"], best["slot"], best["name"], strict=True)
    }


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


def _renamed(
    codes: np.ndarray, tcode: np.ndarray, differs: np.ndarray, texts: list[str]
) -> pl.Series:
    """`template name → name` for ops whose template slot held another op (a renamed or re-tuned
    kernel in the same place); categorical, one label per distinct pair; elsewhere any label.
    `texts[code]`: the name of a code."""
    rows = np.flatnonzero(differs)
    out = np.zeros(len(codes), np.uint32)
    if len(rows) == 0:
        return pl.Series("_renamed", [None], dtype=pl.Categorical).gather(out)
    pair = tcode[rows] * (len(texts) + 1) + codes[rows]
    upair, first_at, inv = np.unique(pair, return_index=True, return_inverse=True)
    labels = [
        f"{texts[int(tcode[r])]}{RENAMED}{texts[int(codes[r])]}" for r in rows[first_at].tolist()
    ]
    out[rows] = inv.ravel().astype(np.uint32)
    return pl.Series("_renamed", labels, dtype=pl.Categorical).gather(out)
