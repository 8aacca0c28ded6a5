"""Plausibility of a run's GPU records: damage that reads as data (issue #17).

Stage: parse, after the readers. `load()` calls `check_run` once per input (so `info`, `parse`,
`compare` and `whatif` judge a run alike); `check_pair` is for commands that compare two runs.
Input: a Run; output: the same Run with warnings added, or an InputError.

A reader accepts any record whose fields have the right types; these checks catch what no real
capture holds. The thresholds come from the bundled real traces (tests/data, samples: 30 nsys and
Kineto captures): no kernel or copy longer than 68 ms, no exact duplicate record, zero-length
kernels only among others (the ResNet traces' 1 µs clock rounds ~5 % of kernels to 0).
"""

from __future__ import annotations

import polars as pl

from tracediff.errors import InputError
from tracediff.runfile import Run

ABSURD_NS = 3600 * 10**9
"""A GPU record longer than an hour is a damaged record or a clock jump, not a kernel (the
longest real one in the bundled traces: 68 ms). One of 11 days made a +1.5e9 % 'change'."""

DUPLICATE_REFUSE = 0.05
"""Share of exact duplicate records (same GPU, stream, start and end: impossible on one stream)
above which the trace is refused as repeated; below it each is counted twice, with a warning."""

MIN_OTHER_SIDE = 100
"""A side with no kernels is refused when the other has at least this many."""

_KEY = ["device_id", "stream_id", "start_ns", "end_ns"]
_WHAT = {"kernels": "kernel", "memops": "copy/memset"}


def _fmt_ns(ns: int) -> str:
    if ns >= 86400 * 10**9:
        return f"{ns / (86400 * 10**9):.1f} days"
    return f"{ns / (3600 * 10**9):.1f} h"


def check_run(run: Run, src: str) -> None:
    """Refuse a run whose GPU records cannot be real (every kernel 0 ns, a record lasting hours,
    most records repeated); warn about the few damaged records it can still use."""
    for table, what in _WHAT.items():
        df = pl.from_arrow(run.read(table, [*_KEY, "duration_ns"]))
        assert isinstance(df, pl.DataFrame)
        if df.height == 0:
            continue
        d = df["duration_ns"]
        longest = d.max()
        n_long = int((d > ABSURD_NS).sum())
        if n_long:
            raise InputError(
                f"{src}: {n_long} {what} record(s) last longer than an hour (the longest "
                f"{_fmt_ns(int(longest))}): no GPU operation does; the record or the trace's "  # type: ignore[arg-type]
                "clock is damaged",
                "profile again, or remove the damaged records",
            )
        if (
            table == "kernels"
            and d.null_count() < d.len()
            and int((d.fill_null(0) != 0).sum()) == 0
        ):
            raise InputError(
                f"{src}: all {df.height} kernels last 0 ns: the trace holds no kernel timings",
                "profile again: the export or the trace's clock lost them",
            )
        n_dup = df.height - df.select(_KEY).n_unique()
        if n_dup >= DUPLICATE_REFUSE * df.height:
            raise InputError(
                f"{src}: {n_dup} of {df.height} {what} records are exact duplicates (same GPU, "
                "stream, start and end): the trace holds them twice",
                "export the report again, or merge traces without repeating events",
            )
        if n_dup:
            run.warnings.append(
                f"{src}: {n_dup} {what} records are exact duplicates (same GPU, stream, start "
                "and end): each is counted twice"
            )
        n_neg = int((d < 0).sum())
        if n_neg == df.height:
            raise InputError(
                f"{src}: all {df.height} {what} records end before they start: the trace's "
                "clock or its export is damaged",
                "profile again",
            )
        if n_neg:
            run.warnings.append(
                f"{src}: {n_neg} {what} records end before they start (damaged records): "
                "their time is not counted"
            )


def check_pair(base: Run, head: Run) -> None:
    """Refuse a pair where one side has no kernels and the other thousands: it was profiled
    without kernel tracing (or lost them), and every kernel would read as added or removed."""
    # one column, not cached: a run set's every kernel table kept for a count was most of the
    # memory of a run-set compare
    kb, kh = (r.read("kernels", ["start_ns"]).num_rows for r in (base, head))
    for side, run, n, other in (("base", base, kb, kh), ("head", head, kh, kb)):
        if n == 0 and other >= MIN_OTHER_SIDE:
            raise InputError(
                f"{run.path}: the {side} run has no kernels while the other has {other}: it "
                "was profiled without kernel tracing or lost its kernels",
                "profile both runs the same way (nsys -t cuda; ProfilerActivity.CUDA)",
            )
