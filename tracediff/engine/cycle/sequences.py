"""Cycle sequences and templates: each device's cycles as hashed op sequences, and the template
every cycle of a device is aligned to.

Stage: engine (before alignment, engine/cycle/align.py). Input: cycle-tagged ops (column `side`) of one
file; output: `Sequences` (the ops in (side, device, cycle) order, grouped, each group's 64-bit
sequence hash, the same in every process) and `DeviceTemplate`s (one cycle's op names and kinds).
Per file: `Sequences.stats` (how often each distinct sequence occurs per device); across files,
on the driver: `choose_templates` (base's most frequent sequence per device over all its runs).
Also the (side, device, cycle) group key and grouping that later stages (attribution, the
collective split) order and group ops by.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine.groupsum import dense_codes

SIDES = pl.Enum(["base", "head"])
_MULT = np.random.default_rng(0x7D1F).integers(1, 1 << 63, size=1 << 16, dtype=np.uint64) | 1
"""Per-position multipliers of the sequence hash (odd, so no position is ignored)."""


def group_key(ops: pl.DataFrame) -> np.ndarray:
    """(side, device, cycle) packed in one int64 that sorts in that order ("base" < "head").
    Only an order and a grouping: read side, device and cycle from the rows, not from the key.
    Device ids outside 0..2**16 (a Kineto pid) are replaced by their rank, cycles must fit 2**32."""
    fast = _group_key_np(ops)
    if fast is not None:
        return fast
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


def _group_key_np(ops: pl.DataFrame) -> np.ndarray | None:
    """`group_key` by numpy where no column has nulls and the device ids and cycles fit as
    they are (the usual run: ~3x cheaper than the polars query at 1 M ops); else None."""
    if ops.height == 0 or ops.schema["side"] != SIDES:
        return None
    if any(ops[c].null_count() for c in ("side", "device_id", "cycle")):
        return None
    dev = ops["device_id"].to_numpy()
    cycle = ops["cycle"].to_numpy()
    if dev.min() < 0 or dev.max() >= 1 << 16 or cycle.min() < 0 or cycle.max() >= 1 << 32:
        return None
    key = ops["side"].to_physical().to_numpy().astype(np.int64)  # SIDES: base 0, head 1
    key <<= 48
    key += dev.astype(np.int64) << 32
    key += cycle
    return key


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
    codes, at, _ = dense_codes(phys)  # each name once: its first row
    texts = ops["name"].gather(at).cast(pl.String).to_list() if n else []
    hashes = np.array([_name_hash(t) for t in texts], dtype=np.uint64)
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
