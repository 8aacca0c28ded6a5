"""`tracediff bisect`'s followed quantities: what the ends found to have moved, and its value in
any comparison of the bisection.

Stage: bisect (tracediff/bisect/bisection.py's step 1 picks what to follow; every later comparison reads
it). Input: an engine comparison of two run sets (`tracediff.engine.compare`) and the followed
quantity (`{"what": "cycle time" | "contributors", "rows": [ROW_KEY values, ...]}`, kept in
bisect.json); output: one `Q` per followed quantity (its change, significance, CI). The rule
for what is followed is tracediff/bisect/ends.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracediff.bisect import ends as be
from tracediff.engine.result import part_of
from tracediff.report.bisect import where


@dataclass
class Q:
    """One followed quantity at one comparison: its change and whether it is significant."""

    name: str
    delta: float
    significant: bool
    p: float | None
    ci: tuple[float, float]


ROW_KEY = ("kind", "name", "phase", "device_id")
"""What names one attribution row in every comparison of a bisection: a copy's name alone is
not enough (the H200 culprit moved two "Memcpy DtoD" rows, in verify and in draft, and
a key of kind and name measured the first of them twice)."""


def follow(
    c: Any, contributor: str | None, level: float | None, paired: be.Paired | None = None
) -> be.Ends:
    """What the ends' comparison `c` found to have moved, by tracediff/bisect/ends.py's rule at a
    look whose cycle-time level is `level` (None: no p-value route), with the round-blocked
    test `paired` (follow None: nothing yet). `contributor`: the --contributor regex (only the
    rows it matches are candidates)."""
    att = c.attribution
    if contributor is not None:
        rows = att.filter(pl.col("name").str.contains(contributor))
    elif be.cycle_time_moved(c, level, paired):
        return be.Ends({"what": "cycle time", "rows": []}, [], level)
    elif att.height > 0 and bool((att["kind"] == "host").all()):
        rows = att
    else:
        rows = att.with_columns(part_of()).filter(pl.col("part") == "gpu_work")
    picked, left_out = be.pick_rows(rows)
    what = {"what": "contributors", "rows": row_keys(picked)} if picked.height else None
    return be.Ends(what, left_out, level)


def quantities(c: Any, follow: dict[str, Any]) -> list[Q]:
    """The followed quantities' values in comparison `c` (a followed row absent there: no
    change, not significant, CI unknown)."""
    if follow["what"] == "cycle time":
        return [Q("cycle time", c.delta_ms_per_cycle, bool(c.significant), c.p_value, c.delta_ci95)]
    out = []
    for key in follow["rows"]:
        row = c.attribution.filter(row_is(key))
        if row.height == 0:
            out.append(Q(row_label(key), 0.0, False, None, (math.nan, math.nan)))
            continue
        r = row.row(0, named=True)
        out.append(
            Q(
                row_label(key),
                float(r["delta_ms_per_cycle"]),
                bool(r["significant"]),
                None,
                (float(r["ci95_low"]), float(r["ci95_high"])),
            )
        )
    return out


def row_keys(rows: pl.DataFrame) -> list[list[Any]]:
    """Each attribution row's ROW_KEY values (as bisect.json keeps them)."""
    cols = [c for c in ROW_KEY if c in rows.columns]
    return [list(r) for r in rows.select(cols).iter_rows()]


def row_is(key: list[Any]) -> pl.Expr:
    """The attribution row of a followed key ([kind, name] in a state file of older code)."""
    cond = pl.lit(True)
    for col, v in zip(ROW_KEY, key, strict=False):
        cond &= pl.col(col).is_null() if v is None else pl.col(col) == v
    return cond


def row_label(key: list[Any]) -> str:
    """A followed row as the report names it (tracediff/report/bisect.where)."""
    return where(dict(zip(ROW_KEY, key, strict=False)))
