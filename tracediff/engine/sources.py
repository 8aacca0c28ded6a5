"""Where each contributor was launched from: its source locations in user code, with shares.

Stage: engine output (issue 19). Input: the aligned, attributed ops of both sides (their
`stack_id`, parse's launch stacks), the attribution, and the runs' `stacks` / `frames` run
tables; output: the `Comparison.sources` frame (tracediff/runs/schema.py DIFF_TABLES["sources"]).

A launch's location is the innermost *user* frame of its stack: library frames are folded into
the user frame that called them (which frames are library code: parse/stacks/library.py's
`is_library`, the rule the suspects and the TUI fold by too). A stack with no user frame keeps
its innermost frame that has a file (else its innermost frame), so no launch is dropped.

A contributor's sources are the locations its ops (both sides, every cycle) were launched from,
each with the share of the contributor's GPU time launched from there, largest first; ops whose
stack is unknown count in the total and in no location, so shares sum to 1 only where every op
resolved. Runs without stacks: no rows, and nothing here runs. Not yet: a renamed row
(`old → new`, matched by neither op's name) has no sources.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracediff.parse.stacks.library import is_library
from tracediff.runs.runfile import Run
from tracediff.runs.schema import conform_diff, empty_frame


def locations(runs: Sequence[Run]) -> pl.DataFrame:
    """stack_id → the launch location (file, line, function) of every stack of these runs."""
    return locations_of(frames_of(runs))


def locations_of(f: pl.DataFrame) -> pl.DataFrame:
    """`locations` from the runs' `frames_of`."""
    if not f.height:
        return pl.DataFrame()
    # preference: a user frame, then a frame with a file, then any; innermost first within each
    rank = pl.when(~is_library(pl.col("file"))).then(0).when(pl.col("file").is_not_null())
    f = f.with_columns(rank.then(1).otherwise(2).alias("_pref"))
    return (
        f.sort("stack_id", "_pref", "depth")
        .group_by("stack_id", maintain_order=True)
        .first()
        .select("stack_id", "file", "line", "function")
    )


def stack_sums(ops: pl.DataFrame) -> pl.DataFrame | None:
    """GPU time per (kind, contributor name, phase, device_id, stack_id) of one file's aligned
    ops (None when the ops carry no launch stacks): what `sources` and `launch_stacks` need of
    the ops, summable across files (engine/pipeline/reduce.py)."""
    if "stack_id" not in ops.columns:
        return None
    # grouped first, then made text: text made per op and grouped would keep its whole buffer
    return (
        ops.group_by("kind", "contributor", "phase", "device_id", "stack_id")
        .agg(pl.col("duration_ns").sum().alias("_t"))
        .select(
            pl.col("kind").cast(pl.String),
            pl.col("contributor").cast(pl.String).alias("name"),
            pl.col("phase").cast(pl.String),
            "device_id",
            "stack_id",
            "_t",
        )
    )


def _per_stack(sums: pl.DataFrame, attribution: pl.DataFrame) -> pl.DataFrame:
    """contributor_id, side, stack_id, `_t` (GPU ns launched by that stack on that side) and
    `_all` (the contributor's GPU ns, both sides), attribution order kept in `_r`. `sums`: the
    files' `stack_sums` with `side`."""
    key = ["kind", "name", "phase", "device_id"]
    per = sums.group_by(*key, "side", "stack_id").agg(pl.col("_t").sum())
    # a collective split into wait and transfer rows: both were launched where the op was
    named = pl.concat(
        [
            per.with_columns(pl.col("name") + suffix)
            for suffix in ("", " [transfer]", " [wait for last rank]")
        ]
    )
    att = attribution.select(
        "contributor_id",
        pl.col("kind").cast(pl.String),
        pl.col("name").cast(pl.String),
        pl.col("phase").cast(pl.String),
        "device_id",
    ).with_row_index("_r")
    j = att.join(named, on=key, how="inner", nulls_equal=True)
    total = j.group_by("contributor_id").agg(pl.col("_t").sum().alias("_all"))
    return (
        j.join(total, on="contributor_id")
        .filter(pl.col("_all") > 0)
        .select("_r", "contributor_id", "side", "stack_id", "_t", "_all")
    )


def sources(
    sums: pl.DataFrame | None, attribution: pl.DataFrame, frames: pl.DataFrame
) -> pl.DataFrame:
    """`Comparison.sources`: per contributor, its launch locations and their shares. `sums`:
    the files' `stack_sums` with `side` (None: the ops carry no stacks); `frames`: `frames_of`
    every run of both sides."""
    if sums is None or not attribution.height:
        return empty_frame("sources")
    loc = locations_of(frames)
    if not loc.height:
        return empty_frame("sources")
    out = (
        _per_stack(sums, attribution)
        .join(loc, on="stack_id", how="left")
        .filter(pl.col("function").is_not_null())
        .group_by("_r", "contributor_id", "file", "line", "function")
        .agg(pl.col("_t").sum(), pl.col("_all").first())
        .with_columns((pl.col("_t") / pl.col("_all")).alias("share"))
        .sort(
            ["_r", "share", "file", "line", "function"],
            descending=[False, True, False, False, False],
            nulls_last=True,
        )  # ties by location: the same order every run
        .select("contributor_id", "file", "line", "function", "share")
    )
    return conform_diff("sources", out)


def stack_frames(run: Run) -> pl.DataFrame:
    """stack_id, depth, file, line, function: every frame of every stack of one run (empty
    without stacks), small enough to travel from a worker."""
    st = pl.from_arrow(run.table("stacks"))
    fr = pl.from_arrow(run.table("frames"))
    assert isinstance(st, pl.DataFrame) and isinstance(fr, pl.DataFrame)
    if not st.height:
        return pl.DataFrame()
    return st.join(fr, on="frame_id", how="left").select(
        "stack_id",
        "depth",
        pl.col("file").cast(pl.String),
        "line",
        pl.col("function").cast(pl.String),
    )


def frames_of(runs: Sequence[Run]) -> pl.DataFrame:
    """stack_id, depth, file, line, function: every frame of every stack of these runs."""
    return frames_joined([stack_frames(r) for r in runs])


def frames_joined(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """`frames_of` from each run's `stack_frames`, in run order (a stack id two runs share
    takes the first run's frames)."""
    parts = [p for p in parts if p.height]
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts).unique(["stack_id", "depth"], keep="first")


def launch_stacks(
    sums: pl.DataFrame | None,
    attribution: pl.DataFrame,
    frames_b: pl.DataFrame,
    frames_h: pl.DataFrame,
) -> pl.DataFrame:
    """`Comparison.launch_stacks`: every frame of every stack each contributor was launched
    from, per side (a side's frames come from its own runs: their lines are of its commit).
    `frames_b` / `frames_h`: `frames_of` each side's runs."""
    if sums is None or not attribution.height:
        return empty_frame("launch_stacks")
    per = _per_stack(sums, attribution).filter(pl.col("stack_id").is_not_null())
    parts = []
    for side, fr in (("base", frames_b), ("head", frames_h)):
        if fr.height:
            parts.append(per.filter(pl.col("side") == side).join(fr, on="stack_id", how="inner"))
    if not parts:
        return empty_frame("launch_stacks")
    out = (
        pl.concat(parts)
        .group_by("_r", "contributor_id", "side", "stack_id", "depth", "file", "line", "function")
        .agg(pl.col("_t").sum(), pl.col("_all").first())
        .with_columns((pl.col("_t") / pl.col("_all")).alias("share"))
        .sort(
            ["_r", "side", "share", "stack_id", "depth"],
            descending=[False, False, True, False, False],
        )
        .select("contributor_id", "side", "stack_id", "share", "depth", "file", "line", "function")
    )
    return conform_diff("launch_stacks", out)
