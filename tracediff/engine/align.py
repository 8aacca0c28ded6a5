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


def align(ops: pl.DataFrame) -> tuple[pl.DataFrame, dict[int, pl.DataFrame]]:
    """Add slot/status/contributor columns. Returns (ops, templates by device)."""
    # (side, device, cycle) packed in one integer: the same order ("base" < "head"; device ids
    # < 2**16, cycles < 2**32), and a 3-key numeric sort costs ~1/3 of 5 keys with a string
    group = (
        (pl.col("side") == "head").cast(pl.Int64) * (1 << 48)
        + pl.col("device_id").cast(pl.Int64) * (1 << 32)
        + pl.col("cycle")
    )
    ops = ops.sort(group, "start_ns", "end_ns").with_columns(
        pl.col("name").cast(pl.Categorical).to_physical().cast(pl.Int64).alias("_code"),
        pl.int_range(pl.len()).over("side", "device_id", "cycle").alias("_pos"),
    )
    seqs = (
        ops.group_by("side", "device_id", "cycle", maintain_order=True)
        .agg(pl.col("_code").alias("codes"), pl.col("kind").alias("kinds"))
        .with_columns(pl.col("codes").hash().alias("_h"))
    )
    templates: dict[int, pl.DataFrame] = {}
    slot_rows = []
    for dev in seqs["device_id"].unique().sort().to_list():
        sd = seqs.filter(pl.col("device_id") == dev)
        base = sd.filter(pl.col("side") == "base")
        if base.height == 0:
            base = sd  # device only in head: template from head
        mode_h = base.group_by("_h").len().sort(["len", "_h"], descending=[True, False])["_h"][0]
        trow = base.filter(pl.col("_h") == mode_h).row(0, named=True)
        tpl, tkind = list(trow["codes"]), list(trow["kinds"])
        tcycle = trow["cycle"]
        tops = ops.filter(
            (pl.col("side") == trow["side"])
            & (pl.col("device_id") == dev)
            & (pl.col("cycle") == tcycle)
        )
        templates[dev] = tops.select("name", "kind", "grid", "block").with_row_index("slot")
        for h in sd["_h"].unique().to_list():
            r = sd.filter(pl.col("_h") == h).row(0, named=True)
            if h == mode_h:
                slots = list(range(len(tpl)))
            else:
                slots = _align_seq(list(r["codes"]), tpl, list(r["kinds"]), tkind)
            slot_rows.append(
                pl.DataFrame(
                    {
                        "device_id": [dev] * len(slots),
                        "_h": [h] * len(slots),
                        "_pos": list(range(len(slots))),
                        "slot": slots,
                    },
                    schema={
                        "device_id": pl.Int32,
                        "_h": pl.UInt64,
                        "_pos": pl.Int64,
                        "slot": pl.Int64,
                    },
                )
            )
    slot_map = (
        pl.concat(slot_rows)
        if slot_rows
        else pl.DataFrame(
            schema={"device_id": pl.Int32, "_h": pl.UInt64, "_pos": pl.Int64, "slot": pl.Int64}
        )
    )
    ops = ops.join(
        seqs.select("side", "device_id", "cycle", "_h"),
        on=["side", "device_id", "cycle"],
        how="left",
    )
    ops = ops.with_columns(pl.col("device_id").cast(pl.Int32), pl.col("_pos").cast(pl.Int64))
    ops = ops.join(slot_map, on=["device_id", "_h", "_pos"], how="left").with_columns(
        pl.when(pl.col("slot") >= 0).then(pl.col("slot")).alias("slot")
    )
    tnames = (
        pl.concat(
            [
                t.select(
                    pl.lit(dev, pl.Int32).alias("device_id"),
                    pl.col("slot").cast(pl.Int64),
                    pl.col("name").alias("_tname"),
                )
                for dev, t in templates.items()
            ]
        )
        if templates
        else pl.DataFrame(schema={"device_id": pl.Int32, "slot": pl.Int64, "_tname": pl.String})
    )
    ops = ops.join(tnames, on=["device_id", "slot"], how="left", maintain_order="left")
    # contributor of each distinct (template name, name) pair, joined back, so it stays categorical
    pairs = (
        ops.select("name", "_tname")
        .unique()
        .with_columns(
            pl.when(pl.col("_tname").is_null() | (pl.col("_tname") == pl.col("name")))
            .then(pl.col("name").cast(pl.String))
            .otherwise(
                pl.concat_str(
                    [
                        pl.col("_tname").cast(pl.String),
                        pl.lit(" → "),
                        pl.col("name").cast(pl.String),
                    ]
                )
            )
            .cast(pl.Categorical)
            .alias("contributor")
        )
    )
    ops = ops.join(
        pairs, on=["name", "_tname"], how="left", nulls_equal=True, maintain_order="left"
    )
    ops = ops.with_columns(
        pl.when(pl.col("slot").is_null())
        .then(pl.lit("added"))
        .otherwise(pl.lit("matched"))
        .alias("status"),
    ).drop("_code", "_pos", "_h", "_tname")
    return ops, templates


def removed_counts(ops: pl.DataFrame, templates: dict[int, pl.DataFrame]) -> pl.DataFrame:
    """Template slots missing from each cycle: (side, device_id, cycle, slot, name, kind)."""
    rows = []
    for dev, t in templates.items():
        present = (
            ops.filter((pl.col("device_id") == dev) & pl.col("slot").is_not_null())
            .select("side", "cycle", "slot")
            .unique()
        )
        cycles = ops.filter(pl.col("device_id") == dev).select("side", "cycle").unique()
        full = cycles.join(t.select(pl.col("slot").cast(pl.Int64), "name", "kind"), how="cross")
        miss = full.join(present, on=["side", "cycle", "slot"], how="anti")
        rows.append(miss.with_columns(pl.lit(dev, pl.Int32).alias("device_id")))
    if not rows:
        return pl.DataFrame()
    return pl.concat(rows)
