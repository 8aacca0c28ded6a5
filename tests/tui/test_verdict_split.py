"""The TUI's verdict panel opens with the text report's headline (issue 17, "the headline follows
host-side launch timing"): "GPU work: …" then "host-bound idle: …", in the report's words
(report.verdict.split_lines), before the change and its CI, at 80x24 and larger, with the
attribution table's names still on screen. `make demo` opens this screen on a terminal.

Pilot tests with real key presses; they read the exported screen's text (tests/tui/test_runsets).
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from tests.support.tui import ready, run, screen_lines
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison, change_split
from tracediff.parse import load
from tracediff.report.verdict import split_lines, verdict_lines
from tracediff.tui.app import TracediffApp

SIZES = [
    pytest.param((80, 24), id="80x24"),
    pytest.param((120, 40), id="120x40"),
    pytest.param((200, 50), id="200x50"),
]


def _top(lines: list[str]) -> list[str]:
    """The screen's rows without the window title row and blank rows, stripped."""
    return [ln.strip() for ln in lines if ln.strip() and ln.strip() != "tracediff"]


def _shown(row: str, full: str, width: int) -> None:
    """`row` is `full` as a row of `width` columns shows it: whole, or cut with an ellipsis."""
    if row.endswith("…"):
        assert full.startswith(row[:-1]) and len(row) >= width - 4, (row, full)
    else:
        assert row == full


def _check_headline(c: Comparison, size: tuple[int, int], keys: tuple[str, ...]) -> None:
    split = c.change_split
    assert split == change_split(c.attribution)  # the property is the function of its rows
    assert split is not None
    gpu, host = split_lines(c, split)
    report = verdict_lines(c)  # the text report's first lines are the same two
    assert report[:2] == [gpu, host]

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        await pilot.press(*keys)
        await pilot.pause()
        top = _top(screen_lines(pilot.app))
        _shown(top[0], gpu, size[0])
        _shown(top[1], host, size[0])
        # which part moved, in numbers and words, inside the first 80 columns
        assert top[0].startswith(f"GPU work: {split.gpu_work_delta_ms_per_cycle:+.3f} ms/cycle")
        assert top[1].startswith(
            f"host-bound idle: {split.host_bound_idle_delta_ms_per_cycle:+.3f} ms/cycle"
        )
        assert top[2].startswith(f"change {c.delta_ms_per_cycle:+.3f} ms")
        # the table's names are still on screen: its header and the first rows' names
        lay = s.table.lay
        assert lay is not None
        heads = [col[0] for col in lay.columns]
        assert heads.index("name") < lay.on_screen
        assert any("change ms name" in ln for ln in top)
        by_id = dict(zip(c.attribution["contributor_id"], c.attribution["name"], strict=True))
        body_rows = "\n".join(top[3:])
        for cid in s.table.ids[:3]:  # the table's first three rows, each shown by its name
            assert by_id[cid][:12] in body_rows, (by_id[cid], body_rows)

    run(body, TracediffApp(c), size)


@pytest.mark.parametrize("size", SIZES)
def test_the_demo_opens_on_what_moved(runsets: Comparison, size: tuple[int, int]) -> None:
    """`make demo`: 4 H200 runs a side; the copy is the GPU-work change, the host-bound idle
    swings, and the panel says both before the change line (after moving down the table)."""
    _check_headline(runsets, size, ("down", "down"))


@pytest.mark.parametrize("size", SIZES)
def test_one_run_a_side_opens_on_what_moved(comparison: Comparison, size: tuple[int, int]) -> None:
    """g_good vs g_bad: 35 % faster, significant, but mostly host-bound idle; the GPU work
    line names the real change (the added device copy) first."""
    _check_headline(comparison, size, ("s", "s"))  # sorted otherwise: the panel stays
    assert comparison.change_split.moved == "host_bound_idle"  # type: ignore[union-attr]


def test_a_whole_run_fallback_says_so_first(data_dir) -> None:  # noqa: ANN001
    """A cut that cannot be checked to correspond (SGLang decode vs prefill-decode): the panel's
    first row is the report's 'NOT COMPARED CYCLE BY CYCLE' line, then the split."""
    k = data_dir / "kineto"
    c = compare(
        load(k / "sglang_Qwen3-8B_decode.json.gz"),
        load(k / "sglang_Qwen3-8B_prefilldecode.json.gz"),
        n_boot=50,
    )
    assert c.cycle_fallback

    async def body(pilot: Pilot) -> None:
        await ready(pilot)
        await pilot.press("down")
        top = _top(screen_lines(pilot.app))
        assert top[0].startswith("NOT COMPARED CYCLE BY CYCLE: head's cycles")
        assert top[1].startswith("GPU work: ") and top[2].startswith("host-bound idle: ")

    run(body, TracediffApp(c), (80, 24))
