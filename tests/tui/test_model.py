"""The TUI's headless view model on the real samples' comparison: bucketing, lanes, sparklines."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from tracediff.engine.result import Comparison, EnvDiff
from tracediff.report.verdict import verdict_lines
from tracediff.tui import model as m
from tracediff.tui import timelinemodel as tl
from tracediff.tui.verdict import verdict_text


def test_every_operation_of_the_cycle_is_painted(comparison: Comparison) -> None:
    tm = tl.TimelineModel(comparison)
    width = 400
    for cycle in (0, 7):
        rows = tm.render(cycle, 0, tm.full_span(cycle), width)
        for side in m.SIDES:
            ev = tm.cycle_events(side, cycle)
            assert (
                ev.height
                == comparison.events.filter(
                    (pl.col("side") == side) & (pl.col("cycle") == cycle)
                ).height
            )
            dt = (rows.t1_ns - rows.t0_ns) / width
            busy = np.zeros(width, bool)
            for a, b in ev.select("rel_start_ns", "rel_end_ns").iter_rows():
                c0 = int(a // dt)
                busy[c0 : max(int(np.ceil(b / dt)), c0 + 1)] = True
            painted = rows.codes[side][0] >= m.KERNEL
            assert (painted == busy).all()
            # beyond this side's span nothing is drawn; before it, idle where no op runs
            span = tm.span[(side, cycle)]
            assert (rows.codes[side][0][int(np.ceil(span / dt)) :] == m.OUT).all()


def test_added_ops_are_marked_only_in_head(comparison: Comparison) -> None:
    tm = tl.TimelineModel(comparison)
    rows = tm.render(0, 0, tm.full_span(0), 300)
    assert (rows.codes["head"] == m.CHANGED).any()
    assert not (rows.codes["base"] == m.CHANGED).any()  # the samples add ops, remove none


def test_align_puts_matched_head_ops_on_their_base_twins(comparison: Comparison) -> None:
    tm = tl.TimelineModel(comparison)
    base, head = tm.cycle_events("base", 3), tm.cycle_events("head", 3)
    warp = tl.warp_map(base, head)
    hx, bx = warp[0]
    j = head.join(base, on=["device_id", "slot"], suffix="_b")
    mapped = np.interp(j["rel_start_ns"].to_numpy(), hx, bx)
    assert np.allclose(mapped, j["rel_start_ns_b"].to_numpy())
    assert not np.allclose(j["rel_start_ns"].to_numpy(), j["rel_start_ns_b"].to_numpy())


def test_a_gpu_with_several_streams_gets_a_lane_per_stream(comparison: Comparison) -> None:
    ev = comparison.events.with_columns(
        pl.when(pl.col("kind") == "memcpy")
        .then(99)
        .otherwise(pl.col("stream_id"))
        .alias("stream_id")
    )
    tm = tl.TimelineModel(replace(comparison, events_builder=lambda: ev, events_slice=None))
    assert [ln.label for ln in tm.lanes] == ["G0 s7", "G0 s99"]
    rows = tm.render(0, 0, tm.full_span(0), 300)
    assert (rows.codes["head"][1] == m.MEMCPY).any() or (rows.codes["head"][1] == m.CHANGED).any()
    assert not (rows.codes["head"][0] == m.MEMCPY).any()


def test_unsorted_events_are_indexed_correctly(comparison: Comparison) -> None:
    shuffled = comparison.events.sample(fraction=1.0, shuffle=True, seed=1)
    tm = tl.TimelineModel(replace(comparison, events_builder=lambda: shuffled, events_slice=None))
    got = tm.cycle_events("head", 5).sort("rel_start_ns", "name")
    want = comparison.events.filter((pl.col("side") == "head") & (pl.col("cycle") == 5))
    assert (
        got.height == want.height
        and got["name"].to_list() == want.sort("rel_start_ns", "name")["name"].to_list()
    )


def test_sparkline_marks_the_outlier_cycle(comparison: Comparison) -> None:
    ids, ms = m.cycle_spans(comparison)["base"]
    line = m.spark(ms, 12)
    assert len(line) == 12 and line[int(np.argmax(ms))] == "█" and line[int(np.argmin(ms))] == "▁"
    # more values than columns: the max of each column's values survives
    assert m.spark(np.r_[np.zeros(99), 5.0], 10)[-1] == "█"


def test_table_view_filters_compose(comparison: Comparison) -> None:
    v = m.table_view(comparison.attribution, "head ms", kind="kernel", gpu=0, query="NVJET")
    assert v.height > 0 and set(v["kind"]) == {"kernel"}
    assert all("nvjet" in n.lower() for n in v["name"])
    assert v["head_ms_per_cycle"].to_list() == sorted(
        v["head_ms_per_cycle"].to_list(), reverse=True
    )
    assert m.table_view(comparison.attribution, query="no such kernel").height == 0


def test_verdict_shows_environment_differences_and_warnings(comparison: Comparison) -> None:
    plain = verdict_text(comparison).plain
    assert "base 5.570 ms → head 3.622 ms per cycle" in plain and "SIGNIFICANT" in plain
    assert "⚠" not in plain  # the samples share their environment
    c = replace(
        comparison,
        env_diffs=[EnvDiff("manifest.gpu_clock_mhz", 1980, 1755)],
        warnings=["head: 2 cycles cut at the end of the capture", "third"],
    )
    plain = verdict_text(c).plain
    assert "environment differs: manifest.gpu_clock_mhz: 1980 → 1755" in plain
    assert "head: 2 cycles cut" in plain and "1 more warnings: press w" in plain


def test_verdict_says_what_moved_as_the_report_does(comparison: Comparison) -> None:
    """The demo pair's change is mostly host-bound idle: the TUI's change line says so in the
    report's words (the report's first rows detail GPU work and host-bound idle)."""
    tui = verdict_text(comparison).plain
    report = "\n".join(verdict_lines(comparison))
    assert "SIGNIFICANT  mostly host-bound idle" in tui
    assert "significant, mostly host-bound idle" in report


def test_verdict_words_are_the_reports_in_the_tui_too(comparison: Comparison) -> None:
    """One wording: without a CI (one cycle a side) the TUI says what the text report says, not
    "CI [+nan, +nan] not significant"; with one, the same CI and change."""
    nan = float("nan")
    one = replace(comparison, delta_ci95=(nan, nan), significant=False, delta_pct=nan)
    tui, report = verdict_text(one).plain, "\n".join(verdict_lines(one))
    for words in ("no CI with fewer than 2 cycles a side", "(n/a)", "CI -"):
        assert words in tui and words in report, words
    assert "nan" not in tui.lower() and "nan" not in report.lower()
    tui, report = verdict_text(comparison).plain, "\n".join(verdict_lines(comparison))
    lo, hi = comparison.delta_ci95
    ci = f"[{lo:+.3f}, {hi:+.3f}]"
    change = f"{comparison.delta_ms_per_cycle:+.3f} ms"
    assert ci in tui and ci in report and change in tui and change in report
