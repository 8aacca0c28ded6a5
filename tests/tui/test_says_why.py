"""The TUI on what it cannot show: host-only runs, narrow and wide terminals, long warnings, and
keys that cannot act for the runs at hand (each says why). Real keys, real comparisons."""

from __future__ import annotations

import os
import re

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from textual.pilot import Pilot

from tests.support.tui import ready, run
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load
from tracediff.runs import schema
from tracediff.runs.runfile import Run
from tracediff.tui import attribution as at
from tracediff.tui.app import MainScreen, TracediffApp
from tracediff.tui.screens import ErrorModal, NotesScreen

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]


def no_error(pilot: Pilot) -> None:
    errors = [s for s in pilot.app.screen_stack if isinstance(s, ErrorModal)]
    assert not errors, errors[0].body.plain


def visible(s: MainScreen, row: int) -> str:
    """What the table shows of a row on screen (its text from the scroll offset, cut at the
    width the table has for it)."""
    x = int(s.table.scroll_x)
    return str(s.table.get_row_at(row)[0])[x : x + s.table.scrollable_content_region.width]


@pytest.mark.parametrize("size", SIZES)
def test_host_only_capture_opens_and_the_timeline_says_why(
    hostonly: Comparison, size: tuple[int, int]
) -> None:
    """Two `tracediff capture` runs made without a GPU: the TUI opens on the phases, no error;
    the timeline says there are no GPU events and why; keys that need them say so."""
    att = hostonly.attribution

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        no_error(pilot)
        assert s.host_only and s.model is not None and s.model.lanes == []
        text = s.timeline.render().plain
        assert "no GPU events" in text and "host NVTX ranges" in text, text
        assert "indexing" not in text
        assert "no GPU events" in str(s.timeline.border_title)
        assert "host range wall time" in str(s.query_one("#replay").border_title)
        # the phases are the rows, the slower one (verify, +6 ms injected) first and on screen
        assert (
            s.table.ids
            == att.sort(pl.col("delta_ms_per_cycle").abs(), descending=True)[
                "contributor_id"
            ].to_list()
        )
        assert "verify" in visible(s, 0)
        await pilot.press("right")
        assert s.cycle == 1  # cycles still step: the replay strip shows host range wall times
        for key, said in [
            ("e", "no GPU events"),
            ("x", "replay needs GPU operations"),
            ("m", "host-only comparison"),
            ("plus", "no GPU events"),
            ("a", "no GPU events"),
            ("g", "no GPU events"),
            ("p", "no GPU events"),
            ("enter", "is a host phase"),
        ]:
            s.last_note = None
            await pilot.press(key)
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            assert pilot.app.screen is s, key
            assert s.last_note is not None and said in s.last_note, (key, s.last_note)
        no_error(pilot)

    run(body, TracediffApp(hostonly), size=size)


def test_name_column_is_on_screen_at_80x24_and_the_rest_a_scroll_away(
    comparison: Comparison,
) -> None:
    att = comparison.attribution

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        for i, cid in enumerate(s.table.ids[:5]):
            name = att.filter(pl.col("contributor_id") == cid)["name"][0]
            assert name[: at.NAME_MIN - 1] in visible(s, i), (name, visible(s, i))
        lay = s.table.lay
        assert lay is not None
        header = [h for h, _, _ in lay.columns]
        assert header[:3] == ["change ms", "name", "phase"]
        width = s.table.scrollable_content_region.width
        assert lay.width > width  # not everything fits in 80 columns ...
        # ... the columns beyond the name are a sideways scroll away: `>` scrolls to the CI
        assert "[" not in visible(s, 0)  # the 95% CI is off-screen at first
        for _ in range(12):
            await pilot.press("greater_than_sign")
        await pilot.pause()
        assert s.table.scroll_x == s.table.max_scroll_x > 0
        row = att.filter(pl.col("contributor_id") == s.table.ids[0]).row(0, named=True)
        assert f"[{row['ci95_low']:+.3f},{row['ci95_high']:+.3f}]" in visible(s, 0)
        await pilot.press("shift+left")
        await pilot.pause()
        assert s.table.scroll_x < s.table.max_scroll_x
        assert s.cycle == 0  # sideways scrolling is not a cycle step

    run(body, TracediffApp(comparison), size=(80, 24))


def test_column_widths_follow_the_terminal_width(mfu_2gpu: Comparison) -> None:
    """Long kernel names get the room a wide terminal has (not a fixed 60 characters); the
    table is laid out again when the terminal is resized."""
    att = mfu_2gpu.attribution
    longest = int(att["name"].str.len_chars().max())
    assert longest > 120

    def name_width(s: MainScreen) -> int:
        assert s.table.lay is not None
        return next(w for h, w, _ in s.table.lay.columns if h == "name")

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        narrow = name_width(s)
        assert narrow >= at.NAME_MIN
        await pilot.resize_terminal(200, 50)
        await pilot.pause()
        lay = s.table.lay
        assert lay is not None
        width = s.table.scrollable_content_region.width
        # every column on screen, the name taking the rest: no empty columns, none off-screen
        assert lay.on_screen == len(lay.columns)
        assert name_width(s) > 100 and name_width(s) > narrow
        assert lay.width == s.table.text_width() <= width  # the line fills the table
        # the GPU column (two GPUs) comes right after status and shows the row's GPU
        h = [c[0] for c in lay.columns]
        assert h.index("GPU") == h.index("status") + 1
        top = att.filter(pl.col("contributor_id") == s.table.ids[0]).row(0, named=True)
        assert top["name"][:100] in visible(s, 0)

    run(body, TracediffApp(mfu_2gpu), size=(80, 24))


def test_warnings_are_one_line_and_w_opens_them_with_short_paths(
    mfu_2gpu: Comparison, data_dir
) -> None:  # noqa: ANN001
    """mfu_2gpu has 7 warnings, 6 naming their (absolute) input paths: one line under the
    verdict, file names only; `w` lists them all, paths relative to the working directory."""
    assert len(mfu_2gpu.warnings) == 7
    assert sum(str(data_dir) in w for w in mfu_2gpu.warnings) == 6

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        verdict = s.query_one("#verdict").render().plain  # type: ignore[union-attr]
        # the report's headline (GPU work, host-bound idle, change, base → head), no warning
        assert "⚠" not in verdict and len(verdict.splitlines()) == 4
        assert verdict.startswith("GPU work: ")
        line = s.query_one("#notes")
        assert line.display and line.size.height == 1
        text = line.render().plain  # type: ignore[union-attr]
        assert text.startswith("⚠ 7 warnings") and "w:" in text
        assert str(data_dir) not in text
        # the table keeps the rows the warnings took: at least 6 contributors on screen
        assert s.table.size.height - 1 >= 6
        await pilot.press("w")
        notes = pilot.app.screen
        assert isinstance(notes, NotesScreen)
        body_text = notes.body.plain if hasattr(notes.body, "plain") else str(notes.body)
        rel = os.path.relpath(data_dir / "nsys" / "nsys-ai" / "mfu_2gpu_before.sqlite")
        assert body_text.count("⚠") == 7 and rel in body_text
        assert str(data_dir) not in body_text or not str(data_dir).startswith(os.getcwd())
        await pilot.press("escape")
        assert pilot.app.screen is s

    run(body, TracediffApp(mfu_2gpu), size=(80, 24))


async def press_and_hear(pilot: Pilot, s: MainScreen, *keys: str) -> str:
    s.last_note = None
    await pilot.press(*keys)
    await pilot.pause()
    assert s.last_note is not None, keys
    return s.last_note


def test_keys_that_cannot_act_say_why(comparison: Comparison) -> None:
    """The bundled samples: one GPU, one stream, run files without a CUDA event table."""

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        assert "e" not in {k for k, b in s.active_bindings.items() if b.binding.show and b.enabled}
        said = await press_and_hear(pilot, s, "e")
        assert "no CUDA event records" in said and "cudaEventRecord 144 times" in said
        assert "re-parse" in said and s.timeline.edges  # nothing toggled
        assert "one GPU (0)" in await press_and_hear(pilot, s, "p")
        assert pilot.app.screen is s
        assert "first of 12" in await press_and_hear(pilot, s, "left")
        assert "whole cycle is shown" in await press_and_hear(pilot, s, "minus")
        assert "whole cycle is shown" in await press_and_hear(pilot, s, "0")
        s.last_note = None
        await pilot.press("plus", "0")  # zoomed in, 0 fits again: it acts, nothing said
        assert s.timeline.window is None and s.last_note is None
        assert "cycle's start" in await press_and_hear(pilot, s, "left_square_bracket")
        await pilot.press("slash", *"no such kernel", "enter")
        assert s.table.ids == []
        for key in ("m", "x", "enter"):
            said = await press_and_hear(pilot, s, key)
            assert "no contributor selected" in said and "escape clears" in said
        for _ in range(11):
            await pilot.press("right")
        assert "last of 12" in await press_and_hear(pilot, s, "right")

    run(body, TracediffApp(comparison), size=(80, 24))


def test_event_key_on_fresh_runs_without_cross_stream_waits(data_dir) -> None:  # noqa: ANN001
    """The samples' reports parsed today have CUDA event records, but one stream: `e` says that
    no stream waited on another's event (not that the records are missing)."""
    d = data_dir / "h200"
    c = compare(load(d / "g_good.sqlite"), load(d / "g_bad.sqlite"))

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        said = await press_and_hear(pilot, s, "e")
        assert "no stream waited" in said and "re-parse" not in said

    run(body, TracediffApp(c), size=(80, 24))


def test_event_key_still_toggles_where_there_are_edges(twostream) -> None:  # noqa: ANN001
    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        assert s.timeline.edges
        await pilot.press("e")
        assert not s.timeline.edges and s.last_note is None

    run(body, TracediffApp(twostream("cupy")), size=(120, 30))


def test_layout_keeps_the_name_and_fills_the_width() -> None:
    """`layout` alone, over widths and name lengths: the name is never below its minimum; the
    columns on screen fit; the name takes what is left up to the longest name; a column is left
    off-screen only when it would push the name below its minimum."""
    left = sum(w + 1 for _, w, _ in at.LEFT)
    for width in range(40, 260, 7):
        for longest in (4, 20, 60, 200):
            lay = at.layout(width, longest)
            lo = max(min(at.NAME_MIN, longest), len("name"))
            name_w = next(w for h, w, _ in lay.columns if h == "name")
            right = lay.columns[len(at.LEFT) + 1 :]
            fitted = right[: lay.on_screen - len(at.LEFT) - 1]
            used = left + name_w + sum(w + 1 for _, w, _ in fitted)
            assert lo <= name_w <= max(longest, lo)
            assert used <= width or not fitted
            if name_w < longest:  # the name is cut only where the screen is full
                assert used == width or name_w == lo
            if len(fitted) < len(right):
                nxt = right[len(fitted)][1]
                assert width - left - sum(w + 1 for _, w, _ in fitted) - (nxt + 1) < lo


EVIL = "evil\x1b[2J\nrow\u202ekernel"
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")  # what must never reach a terminal


def _hostile(run: Run, victim: str) -> Run:
    """`run` with every instance of kernel `victim` named EVIL, and a warning holding it."""
    tables = {n: run.table(n) for n in schema.TABLES}
    k = tables["kernels"]
    names = k["name"].cast(pa.string())
    k = k.set_column(
        k.schema.get_field_index("name"), "name", pc.if_else(pc.equal(names, victim), EVIL, names)
    )
    tables["kernels"] = schema.conform("kernels", k)
    return Run(tables=tables, metadata=dict(run.metadata), warnings=[f"seen {EVIL}"])


def test_hostile_names_are_shown_inert(data_dir) -> None:  # noqa: ANN001
    """A kernel name holding ESC[2J, a newline and a bidi override (and a warning holding it): the
    table row, the notes line, the w list, the drill-down and a key's message show it escaped,
    on one line."""
    d = data_dir / "nsys" / "nsys-ai"  # two GPUs: the per-GPU split shows the name too
    base, head = load(d / "mfu_2gpu_before.sqlite"), load(d / "mfu_2gpu_after.sqlite")
    victim = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
    c = compare(_hostile(base, victim), _hostile(head, victim))
    assert EVIL in c.attribution["name"].to_list()

    def clean(text: str) -> None:
        assert not RAW.search(text), repr(text)
        assert "\\x1b[2J" in text, repr(text)

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        await pilot.press("slash", *"evil", "enter")
        assert s.table.ids
        row = str(s.table.get_row_at(0)[0])
        assert "\n" not in row
        clean(row)
        notes_line = s.query_one("#notes").render().plain  # type: ignore[union-attr]
        assert not RAW.search(notes_line), repr(notes_line)  # the first warning: the cut's
        await pilot.press("x")  # what-if: its notification names the contributor id only
        await pilot.app.workers.wait_for_complete()
        await pilot.press("p")
        split = pilot.app.screen
        clean(split.query_one("#split-name").render().plain)  # type: ignore[union-attr]
        await pilot.press("escape", "enter")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        clean(pilot.app.screen.query_one("#drill-body").render().plain)  # type: ignore[union-attr]
        await pilot.press("escape", "w")
        notes = pilot.app.screen
        assert isinstance(notes, NotesScreen)
        clean(notes.body.plain if hasattr(notes.body, "plain") else str(notes.body))
        no_error(pilot)

    run(body, TracediffApp(c), size=(120, 40))


def test_renamed_op_shows_both_names_at_80x24(data_dir) -> None:  # noqa: ANN001
    """The Kineto ResNet pair pairs cuDNN kernels renamed in the same place (`old → new`): at 80
    columns the row shows the start of both names, not the old name alone."""
    d = data_dir / "kineto"
    c = compare(
        load(d / "resnet50_num_workers_0.worker0.pt.trace.json.gz"),
        load(d / "resnet50_num_workers_4.worker0.pt.trace.json.gz"),
    )
    renamed = c.attribution.filter(pl.col("name").str.contains(" → ", literal=True))
    assert renamed.height
    top = renamed.sort(pl.col("delta_ms_per_cycle").abs(), descending=True).row(0, named=True)
    old, new = top["name"].split(" → ", 1)
    assert len(top["name"]) > 80

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        i = s.table.ids.index(top["contributor_id"])
        s.table.move_cursor(row=i)
        await pilot.pause()
        shown = visible(s, i)
        assert f"{old[:6]}" in shown and f" → {new[:12]}" in shown, shown

    run(body, TracediffApp(c), size=(80, 24))
