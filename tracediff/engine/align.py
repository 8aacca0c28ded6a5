"""Instance alignment: every op of every cycle of both runs mapped to a slot of a cycle template.

Stage: engine. Input: cycle-tagged ops of base and head (column `side`); output: the same ops with
`slot` (position in the device's template; null = added, not in the template), `status` and
`contributor` (the template op's name, `old → new` for a renamed op in the same place).

The template of a device is base's most frequent op sequence per cycle. Cycles identical to the
template (the common case: same code, same shapes) are mapped without any alignment work; each
distinct other sequence is aligned once (difflib on name codes) and the result reused for every
cycle that has it. Inside a replaced block ops are paired in order when their kind agrees (a
renamed or re-tuned kernel in the same place), with the launch configuration breaking ties.
"""

from __future__ import annotations

import difflib

import polars as pl


def _align_seq(seq: list[int], tpl: list[int], seq_kind: list[str], tpl_kind: list[str]) -> list[int]:
    """Slot for each element of seq (-1 = added)."""
    out = [-1] * len(seq)
    sm = difflib.SequenceMatcher(None, seq, tpl, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                out[i1 + k] = j1 + k
        elif tag == "replace":
            j = j1
            for i in range(i1, i2):
                while j < j2 and tpl_kind[j] != seq_kind[i]:
                    j += 1
                if j >= j2:
                    break
                out[i] = j
                j += 1
    return out


def align(ops: pl.DataFrame) -> tuple[pl.DataFrame, dict[int, pl.DataFrame]]:
    """Add slot/status/contributor columns. Returns (ops, templates by device)."""
    ops = ops.sort("side", "device_id", "cycle", "start_ns", "end_ns").with_columns(
        pl.col("name").cast(pl.Categorical).to_physical().cast(pl.Int64).alias("_code"),
        pl.int_range(pl.len()).over("side", "device_id", "cycle").alias("_pos"),
    )
    seqs = ops.group_by("side", "device_id", "cycle", maintain_order=True).agg(
        pl.col("_code").alias("codes"), pl.col("kind").alias("kinds")
    ).with_columns(pl.col("codes").hash().alias("_h"))
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
        tops = ops.filter((pl.col("side") == trow["side"]) & (pl.col("device_id") == dev) & (pl.col("cycle") == tcycle))
        templates[dev] = tops.select("name", "kind", "grid", "block").with_row_index("slot")
        for h in sd["_h"].unique().to_list():
            r = sd.filter(pl.col("_h") == h).row(0, named=True)
            if h == mode_h:
                slots = list(range(len(tpl)))
            else:
                slots = _align_seq(list(r["codes"]), tpl, list(r["kinds"]), tkind)
            slot_rows.append(pl.DataFrame({
                "device_id": [dev] * len(slots), "_h": [h] * len(slots),
                "_pos": list(range(len(slots))), "slot": slots,
            }, schema={"device_id": pl.Int32, "_h": pl.UInt64, "_pos": pl.Int64, "slot": pl.Int64}))
    slot_map = pl.concat(slot_rows) if slot_rows else pl.DataFrame(
        schema={"device_id": pl.Int32, "_h": pl.UInt64, "_pos": pl.Int64, "slot": pl.Int64})
    ops = ops.join(seqs.select("side", "device_id", "cycle", "_h"), on=["side", "device_id", "cycle"], how="left")
    ops = ops.with_columns(pl.col("device_id").cast(pl.Int32), pl.col("_pos").cast(pl.Int64))
    ops = ops.join(slot_map, on=["device_id", "_h", "_pos"], how="left").with_columns(
        pl.when(pl.col("slot") >= 0).then(pl.col("slot")).alias("slot")
    )
    tnames = pl.concat([
        t.select(pl.lit(dev, pl.Int32).alias("device_id"), pl.col("slot").cast(pl.Int64), pl.col("name").alias("_tname"))
        for dev, t in templates.items()
    ]) if templates else pl.DataFrame(schema={"device_id": pl.Int32, "slot": pl.Int64, "_tname": pl.String})
    ops = ops.join(tnames, on=["device_id", "slot"], how="left")
    ops = ops.with_columns(
        pl.when(pl.col("slot").is_null()).then(pl.lit("added")).otherwise(pl.lit("matched")).alias("status"),
        pl.when(pl.col("slot").is_null() | (pl.col("_tname") == pl.col("name"))).then(pl.col("name"))
        .otherwise(pl.concat_str([pl.col("_tname"), pl.lit(" → "), pl.col("name")])).alias("contributor"),
    ).drop("_code", "_pos", "_h", "_tname")
    return ops, templates


def removed_counts(ops: pl.DataFrame, templates: dict[int, pl.DataFrame]) -> pl.DataFrame:
    """Template slots missing from each cycle: (side, device_id, cycle, slot, name, kind)."""
    rows = []
    for dev, t in templates.items():
        present = ops.filter((pl.col("device_id") == dev) & pl.col("slot").is_not_null()).select("side", "cycle", "slot").unique()
        cycles = ops.filter(pl.col("device_id") == dev).select("side", "cycle").unique()
        full = cycles.join(t.select(pl.col("slot").cast(pl.Int64), "name", "kind"), how="cross")
        miss = full.join(present, on=["side", "cycle", "slot"], how="anti")
        rows.append(miss.with_columns(pl.lit(dev, pl.Int32).alias("device_id")))
    if not rows:
        return pl.DataFrame()
    return pl.concat(rows)

