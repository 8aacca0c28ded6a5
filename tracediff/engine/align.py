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
import hashlib
from dataclasses import dataclass

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


@dataclass(frozen=True)
class DeviceTemplate:
    """One device's cycle template: the op sequence every cycle of that GPU is aligned to
    (base's most frequent sequence, ties: the one seen first). Small: one cycle's names."""

    hash: int  # seq_hash of `names` (a sequence with this hash is the template itself)
    names: tuple[str, ...]
    kinds: tuple[str, ...]


@dataclass
class Sequences:
    """One file's ops in cycle order, grouped by (side, device, cycle), with each group's
    sequence hash: what alignment and the template choice read."""

    ops: pl.DataFrame
    gid: np.ndarray  # group of each row
    first: np.ndarray  # first row of each group
    lengths: np.ndarray
    pos: np.ndarray  # position of each row in its group
    codes: np.ndarray  # each row's name as a code local to this file (texts[code])
    texts: list[str]
    h: np.ndarray  # each group's sequence hash (uint64)
    g_dev: np.ndarray
    g_cycle: np.ndarray

    def stats(self) -> pl.DataFrame:
        """device_id, hash, count, first_cycle: how often each distinct sequence occurs per
        device and its first cycle (what the template choice across files needs)."""
        return (
            pl.DataFrame(
                {
                    "device_id": self.g_dev,
                    "hash": self.h.view(np.int64),
                    "cycle": self.g_cycle,
                }
            )
            .group_by("device_id", "hash")
            .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("cycle").min().alias("first_cycle"))
            .sort("device_id", "count", "first_cycle", descending=[False, True, False])
        )

    def template(self, device: int, hash_: int) -> DeviceTemplate:
        """The sequence of hash `hash_` on `device` (its first group)."""
        on = np.flatnonzero((self.g_dev == device) & (self.h.view(np.int64) == hash_))
        g = int(on[0])
        s0, ln = int(self.first[g]), int(self.lengths[g])
        names = tuple(self.texts[c] for c in self.codes[s0 : s0 + ln].tolist())
        kinds = tuple(self.ops["kind"].slice(s0, ln).cast(pl.String).to_list())
        return DeviceTemplate(hash_, names, kinds)


def _name_hash(text: str) -> int:
    """A name's 64-bit hash, the same in every process (the sequence hash is compared across
    files and machines; Python's str hash is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def sequences(ops: pl.DataFrame) -> Sequences:
    """`ops` (cycle-tagged, column `side`) in cycle order with each group's sequence hash."""
    ops, key = in_cycle_order(ops)
    gid, first = groups(key)
    n = ops.height
    lengths = np.diff(np.append(first, n))
    pos = np.arange(n, dtype=np.int32) - np.repeat(first.astype(np.int32), lengths)
    phys = ops["name"].cast(pl.Categorical).to_physical().to_numpy()
    uniq, at, codes = np.unique(phys, return_index=True, return_inverse=True)
    texts = ops["name"].gather(at).cast(pl.String).to_list() if n else []
    hashes = np.array([_name_hash(t) for t in texts], dtype=np.uint64)
    codes = codes.ravel().astype(np.int64)
    h = _seq_hash(hashes[codes], pos, first, lengths)
    return Sequences(
        ops=ops,
        gid=gid,
        first=first,
        lengths=lengths,
        pos=pos,
        codes=codes,
        texts=texts,
        h=h,
        g_dev=ops["device_id"].gather(first).to_numpy().astype(np.int64),
        g_cycle=ops["cycle"].gather(first).to_numpy().astype(np.int64),
    )


def own_templates(seqs: Sequences) -> dict[int, DeviceTemplate]:
    """Each device's most frequent sequence in these ops (ties: the first cycle)."""
    st = seqs.stats().unique("device_id", keep="first", maintain_order=True)
    return {
        int(d): seqs.template(int(d), int(hv))
        for d, hv in zip(st["device_id"].to_list(), st["hash"].to_list(), strict=True)
    }


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
    gid, first, lengths, pos, h, g_dev = (
        seqs.gid,
        seqs.first,
        seqs.lengths,
        seqs.pos,
        seqs.h,
        seqs.g_dev,
    )
    texts = list(seqs.texts)
    code_of = {t: i for i, t in enumerate(texts)}
    codes = seqs.codes
    kind_col = ops["kind"]
    missing = sorted(set(np.unique(g_dev).tolist()) - set(templates))
    own = own_templates(seqs) if missing else {}
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
        t = templates.get(dev) or own[dev]
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


def slot_changes(ops: pl.DataFrame) -> pl.DataFrame:
    """device_id, slot, n, name, count of one head file's aligned ops: per template slot its op
    count (`n`) and the names of the ops in it that are not the template's (null name, count
    0: none), what `carried` sums over head's files."""
    o = ops.filter(pl.col("slot").is_not_null()).select(
        "device_id",
        "slot",
        pl.when(pl.col("contributor").cast(pl.String) != pl.col("name").cast(pl.String))
        .then(pl.col("name"))
        .alias("moved"),
    )
    n = o.group_by("device_id", "slot").agg(pl.len().cast(pl.Int64).alias("n"))
    moved = (
        o.filter(pl.col("moved").is_not_null())
        .group_by("device_id", "slot", "moved")
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


def choose_templates(stats: list[pl.DataFrame], head_stats: list[pl.DataFrame]) -> dict[int, int]:
    """The template hash of every device from the files' `Sequences.stats` (each side's files
    in order): base's most frequent sequence over all its files' cycles, ties the one seen
    first (the lowest file, then cycle); a device only head has: head's, the same way."""
    out: dict[int, int] = {}
    for side in (stats, head_stats):
        parts = [s.with_columns(pl.lit(i).alias("_f")) for i, s in enumerate(side) if s.height]
        if not parts:
            continue
        allp = pl.concat(parts)
        # first occurrence: lowest file index, then lowest cycle in it
        firsts = (
            allp.sort("_f", "first_cycle")
            .group_by("device_id", "hash", maintain_order=True)
            .agg(pl.col("count").sum(), pl.col("_f").first(), pl.col("first_cycle").first())
            .sort("device_id", "count", "_f", "first_cycle", descending=[False, True, False, False])
            .unique("device_id", keep="first", maintain_order=True)
        )
        for d, hv in zip(firsts["device_id"].to_list(), firsts["hash"].to_list(), strict=True):
            out.setdefault(int(d), int(hv))
    return out


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
