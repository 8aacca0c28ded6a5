"""What-if front door: which contributors to take from BASE, and what HEAD's cycle would be.

Stage: replay (output). Input: a `Comparison` and selectors; output: a `WhatIf` (predicted mean
cycle GPU span, the change recovered, the new critical path), or `recover_top`'s table for
`compare --whatif`. The graph and HEAD's own replay come from cache.py (one per comparison);
simulate.py replays, path.py reads the critical path off the replay.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from tracediff.base.errors import UsageError
from tracediff.engine.result import KINDS, Comparison
from tracediff.replay.cache import graph_of, own_replay
from tracediff.replay.graph import replay_input
from tracediff.replay.path import critical_path
from tracediff.replay.simulate import replay
from tracediff.replay.types import ReplayGraph, WhatIf

__all__ = ["SELECTABLE_KINDS", "predict", "recover_top", "select"]

UNALIGNED_WARN = 0.1
"""Warn when more than this share of HEAD's ops has no aligned BASE instance."""
SELECTABLE_KINDS = tuple(k for k in KINDS if k != "overlap")


# ---------------------------------------------------------------- selectors


def select(c: Comparison, selectors: list[str]) -> pl.DataFrame:
    """Attribution rows chosen by selectors: `all`, a kind, a contributor id (c3), `name:REGEX`,
    or a plain pattern (regex searched in contributor names)."""
    att = c.attribution
    if not selectors:
        raise UsageError(
            "nothing selected", "pass --take SELECTOR: all, a kind, an id like c3, or name:REGEX"
        )
    ids = set(att["contributor_id"].to_list())
    chosen: set[str] = set()
    for sel in selectors:
        s = sel.strip()
        if s.lower() == "all":
            m = att.filter(pl.col("kind") != "overlap")
        elif s.lower() in SELECTABLE_KINDS:
            m = att.filter(pl.col("kind") == s.lower())
        elif s.lower() == "overlap":
            raise UsageError(
                "overlap cannot be taken from base: it follows from the other durations",
                "take the ops whose overlap changed instead",
            )
        elif s in ids:
            m = att.filter(pl.col("contributor_id") == s)
            if m["kind"][0] == "overlap":
                raise UsageError(
                    f"{s} is the streams' overlap: it follows from the other durations",
                    "take the ops whose overlap changed instead",
                )
        else:
            pattern = s[len("name:") :] if s.startswith("name:") else s
            if re.fullmatch(r"[ch]\d+", s):  # an id: c (GPU) or h (host-only) and a number
                known = att["contributor_id"].to_list()
                span = f"ids run {known[0]}..{known[-1]}" if known else "there are no ids"
                raise UsageError(f"no contributor {s}", f"{span}; see `tracediff compare`")
            try:
                re.compile(pattern)
            except re.error as e:
                raise UsageError(
                    f"--take {sel!r}: not a valid regular expression ({e})",
                    "escape special characters",
                ) from None
            m = att.filter(
                (pl.col("kind") != "overlap") & pl.col("name").cast(pl.String).str.contains(pattern)
            )
        if m.height == 0:
            raise UsageError(
                f"--take {sel!r} matches no contributor",
                "see `tracediff compare --format table` for ids, kinds and names",
            )
        chosen |= set(m["contributor_id"].to_list())
    return att.filter(pl.col("contributor_id").is_in(sorted(chosen)))


# ---------------------------------------------------------------- prediction


def _spans(g: ReplayGraph, start: np.ndarray, end: np.ndarray) -> pl.DataFrame:
    """Per cycle: span of the device that finishes last (ties: the longer span), as compare does.
    Ops are in chain order, so each (cycle, device) is a contiguous run: reduceat, no group-by."""
    seg = np.flatnonzero(
        np.r_[True, (g.cycle[1:] != g.cycle[:-1]) | (g.device[1:] != g.device[:-1])]
    )
    smin, emax = np.minimum.reduceat(start, seg), np.maximum.reduceat(end, seg)
    cyc, dev = g.cycle[seg], g.device[seg]
    span = emax - smin
    order = np.lexsort((-span, -emax, cyc))  # per cycle: latest end first, then longer span
    best = order[np.r_[True, cyc[order][1:] != cyc[order][:-1]]]
    return pl.DataFrame(
        {"c": cyc[best], "dev": dev[best], "s": smin[best], "e": emax[best], "span": span[best]}
    )


def predict(comparison: Comparison, selector: str | list[str], *, top: int = 10) -> WhatIf:
    """Predict HEAD's mean cycle time with the selected contributors' durations taken from BASE.

    `selector`: one selector or a list (`all`, a kind, an id such as "c3", "name:REGEX", a
    pattern). Cheap to call repeatedly: the graph and HEAD's own replay are built once per
    comparison (cache.py).
    """
    sels = [selector] if isinstance(selector, str) else list(selector)
    chosen_df = select(comparison, sels)
    g = graph_of(comparison)
    row = {cid: i for i, cid in enumerate(comparison.attribution["contributor_id"].to_list())}
    chosen = np.array([row[x] for x in chosen_df["contributor_id"].to_list()], dtype=np.int64)
    all_sel = any(s.strip().lower() == "all" for s in sels)
    own = own_replay(comparison)  # the same for every selector: replayed once
    rp = replay(g, chosen, all_sel)
    sp0, sp1 = _spans(g, own.start, own.end), _spans(g, rp.start, rp.end)
    measured = comparison.cycles.filter((pl.col("side") == "head") & pl.col("critical")).select(
        "cycle", "span_ns"
    )
    cyc = (
        pl.DataFrame({"c": np.arange(len(g.cycle_labels)), "cycle": g.cycle_labels})
        .join(sp0.select("c", pl.col("span").alias("_r")), on="c")
        .join(sp1.select("c", pl.col("span").alias("_p")), on="c")
        .join(measured, on="cycle", how="left")
        .select(
            "cycle",
            (pl.col("span_ns") / 1e6).alias("measured_ms"),
            (pl.col("_r") / 1e6).alias("replayed_ms"),
            (pl.col("_p") / 1e6).alias("predicted_ms"),
        )
        .sort("cycle")
    )
    replayed = float(cyc["replayed_ms"].to_numpy().mean())
    predicted = float(cyc["predicted_ms"].to_numpy().mean())
    recovered = replayed - predicted
    change = comparison.head.mean_ms - comparison.base.mean_ms
    warnings = []
    unaligned = float(g.stats.get("unaligned_share", 0.0))
    if unaligned > UNALIGNED_WARN:
        warnings.append(
            f"{100 * unaligned:.0f} % of head's ops are not aligned to base (their cycles differ "
            "in content); taken from base they are removed, so the prediction is only as good "
            "as the alignment: check --cycle"
        )
    if chosen_df["name"].cast(pl.String).str.ends_with("[wait for last rank]").any():
        warnings.append(
            "a collective's wait follows from the other ranks' timelines: "
            "take the straggler's ops instead"
        )
    return WhatIf(
        selectors=sels,
        selected=chosen_df.select(
            "contributor_id", "kind", "name", "phase", "device_id", "delta_ms_per_cycle", "status"
        ),
        base_ms_per_cycle=comparison.base.mean_ms,
        head_ms_per_cycle=comparison.head.mean_ms,
        replayed_head_ms_per_cycle=replayed,
        predicted_ms_per_cycle=predicted,
        recovered_ms_per_cycle=recovered,
        recovered_share=recovered / change if abs(change) > 1e-12 else None,
        critical_path=critical_path(g, rp, sp1, top),
        cycles=cyc,
        sweeps=rp.sweeps,
        warnings=warnings,
    )


def recover_top(comparison: Comparison, n: int = 5) -> pl.DataFrame:
    """For each of the top `n` contributors (by |change|, overlap excluded): HEAD's predicted mean
    cycle with only that contributor taken from BASE, and the time that recovers. One replay each
    (no critical path), so `compare --whatif` stays cheap.
    Columns: contributor_id, predicted_ms_per_cycle, recovered_ms_per_cycle."""
    att = comparison.attribution
    top = att.with_row_index("_code").filter(pl.col("kind") != "overlap").head(n)
    out = pl.DataFrame(
        schema={
            "contributor_id": pl.String,
            "predicted_ms_per_cycle": pl.Float64,
            "recovered_ms_per_cycle": pl.Float64,
        }
    )
    ops = replay_input(comparison, "ops")
    if top.height == 0 or not isinstance(ops, pl.DataFrame) or ops.height == 0:
        return out  # nothing to replay (host-only runs): the report shows no what-if section
    g = graph_of(comparison)
    own = own_replay(comparison)
    base_mean = float(_spans(g, own.start, own.end)["span"].to_numpy().mean()) / 1e6
    rows = []
    for cid, code in zip(top["contributor_id"].to_list(), top["_code"].to_list(), strict=True):
        rp = replay(g, np.array([code], dtype=np.int64))
        pred = float(_spans(g, rp.start, rp.end)["span"].to_numpy().mean()) / 1e6
        rows.append((cid, pred, base_mean - pred))
    return pl.DataFrame(rows, schema=out.schema, orient="row")
