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

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import polars as pl

from tracediff.base.errors import InputError
from tracediff.runs.runfile import Run

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


@dataclass(frozen=True)
class Counts:
    """What the checks read of one table of GPU records; summable over a run's files (their
    GPUs have distinct ids once joined, so no duplicate spans two files)."""

    height: int = 0
    n_long: int = 0
    longest: int = 0
    timed: int = 0  # durations known
    nonzero: int = 0
    n_dup: int = 0
    n_neg: int = 0

    def __add__(self, o: Counts) -> Counts:
        return Counts(
            self.height + o.height,
            self.n_long + o.n_long,
            max(self.longest, o.longest),
            self.timed + o.timed,
            self.nonzero + o.nonzero,
            self.n_dup + o.n_dup,
            self.n_neg + o.n_neg,
        )


def counts_of(run: Run) -> dict[str, Counts]:
    """Per table of GPU records, what `check_counts` judges."""
    out = {}
    for table in _WHAT:
        df = pl.from_arrow(run.read(table, [*_KEY, "duration_ns"]))
        assert isinstance(df, pl.DataFrame)
        if df.height == 0:
            out[table] = Counts()
            continue
        d = df["duration_ns"]
        out[table] = Counts(
            height=df.height,
            n_long=int((d > ABSURD_NS).sum()),
            longest=int(d.max() or 0),  # type: ignore[arg-type]
            timed=d.len() - d.null_count(),
            nonzero=int((d != 0).sum()),  # a null compares null: not counted
            n_dup=_duplicates(df[_KEY]),
            n_neg=int((d < 0).sum()),
        )
    return out


def _duplicates(keys: pl.DataFrame) -> int:
    """Rows of `keys` equal to an earlier row. Distinct row hashes mean distinct rows, so the
    exact count (2-3 times the hashes' cost at 1 M rows) is needed only where two hashes are
    equal. Records in start order (as nsys writes them), or in start order within each device
    in turn (a run file's device-major order), can only repeat where a row's device and start
    are those of the row above: only those rows are compared, no row hashed."""
    start, device = keys["start_ns"], keys["device_id"]
    if keys.height and not start.null_count():
        starts = start.to_numpy()  # numpy: three polars queries fewer (~0.1 ms of plan each)
        step = np.diff(starts)
        if (step >= 0).all():  # start order: a repeat shares its start with the rows between
            same = step == 0
        elif device.null_count():
            return _hashed(keys)
        else:
            turn = np.diff(device.to_numpy())
            on = turn == 0  # the next row is the same device's
            if (turn < 0).any() or (on & (step < 0)).any():
                return _hashed(keys)
            same = on & (step == 0)  # device-major: a device's rows of one start are together
        if not same.any():
            return 0
        tie = np.zeros(len(starts), bool)
        tie[1:] |= same
        tie[:-1] |= same
        tied = keys.filter(pl.Series(tie))
        return tied.height - tied.n_unique()
    return _hashed(keys)


def _hashed(keys: pl.DataFrame) -> int:
    """`_duplicates` of rows in no such order."""
    if keys.hash_rows().n_unique() == keys.height:
        return 0
    return keys.height - keys.n_unique()


def check_run(run: Run, src: str) -> None:
    """Refuse a run whose GPU records cannot be real (every kernel 0 ns, a record lasting hours,
    most records repeated); warn about the few damaged records it can still use. The counts are
    kept with the run (`Run.record_counts`): a run file written from it carries them, and its
    check reads them back instead of decoding its biggest columns to count again (a 5 M-kernel
    run file: ~0.3 CPU-s); counts that are not whole are counted again."""
    run.warnings.extend(check_counts(counts(run), src))


def counts(run: Run) -> dict[str, Counts]:
    """`counts_of(run)`, from `Run.record_counts` where they are there and whole (then kept)."""
    got = _stored(run.record_counts)
    if got is None:
        got = counts_of(run)
        run.record_counts = {t: asdict(c) for t, c in got.items()}  # (anything else kept goes too)
    return got


def _stored(got: Any) -> dict[str, Counts] | None:
    """`Run.record_counts` as Counts: a table of GPU records each, every field an int (other
    keys, such as parse/ranks/gpus.py's devices in use, are theirs to read)."""
    if not isinstance(got, dict) or not set(_WHAT) <= set(got):
        return None
    names = [f.name for f in fields(Counts)]
    out = {}
    for table in _WHAT:
        c = got[table]
        if not isinstance(c, dict) or sorted(c) != sorted(names):
            return None
        if not all(type(c[n]) is int for n in names):
            return None
        out[table] = Counts(**c)
    return out


def check_counts(counts: dict[str, Counts], src: str) -> list[str]:
    """`check_run` on a run's counts: raises the refusal, or returns the warnings."""
    warnings = []
    for table, what in _WHAT.items():
        c = counts.get(table, Counts())
        if c.height == 0:
            continue
        if c.n_long:
            raise InputError(
                f"{src}: {c.n_long} {what} record(s) last longer than an hour (the longest "
                f"{_fmt_ns(c.longest)}): no GPU operation does; the record or the trace's "
                "clock is damaged",
                "profile again, or remove the damaged records",
            )
        if table == "kernels" and c.timed > 0 and c.nonzero == 0:
            raise InputError(
                f"{src}: all {c.height} kernels last 0 ns: the trace holds no kernel timings",
                "profile again: the export or the trace's clock lost them",
            )
        if c.n_dup >= DUPLICATE_REFUSE * c.height:
            raise InputError(
                f"{src}: {c.n_dup} of {c.height} {what} records are exact duplicates (same GPU, "
                "stream, start and end): the trace holds them twice",
                "export the report again, or merge traces without repeating events",
            )
        if c.n_dup:
            warnings.append(
                f"{src}: {c.n_dup} {what} records are exact duplicates (same GPU, stream, start "
                "and end): each is counted twice"
            )
        if c.n_neg == c.height:
            raise InputError(
                f"{src}: all {c.height} {what} records end before they start: the trace's "
                "clock or its export is damaged",
                "profile again",
            )
        if c.n_neg:
            warnings.append(
                f"{src}: {c.n_neg} {what} records end before they start (damaged records): "
                "their time is not counted"
            )
    return warnings


def kernel_count(run: Any) -> int:
    """The run's kernel count (a run of rank files not read here says its own)."""
    if isinstance(run, Run):
        kept = _stored(run.record_counts)  # counted when it was checked (`counts`)
        if kept is not None:
            return kept["kernels"].height
        # one column, not cached: a run set's every kernel table kept for a count was most of
        # the memory of a run-set compare
        return int(run.read("kernels", ["start_ns"]).num_rows)
    return int(run.kernels)


def check_pair(base: Any, head: Any, counts: tuple[int, int] | None = None) -> None:
    """Refuse a pair where one side has no kernels and the other thousands: it was profiled
    without kernel tracing (or lost them), and every kernel would read as added or removed.
    `counts`: the runs' `kernel_count`s, where known (else counted here)."""
    kb, kh = counts if counts is not None else (kernel_count(r) for r in (base, head))
    for side, run, n, other in (("base", base, kb, kh), ("head", head, kh, kb)):
        if n == 0 and other >= MIN_OTHER_SIDE:
            raise InputError(
                f"{run.path}: the {side} run has no kernels while the other has {other}: it "
                "was profiled without kernel tracing or lost its kernels",
                "profile both runs the same way (nsys -t cuda; ProfilerActivity.CUDA)",
            )
