"""Pilot tests: press keys on the real samples' comparison and check what the widgets hold."""

from __future__ import annotations

import numpy as np
import polars as pl
from textual.pilot import Pilot

from tests.support.tui import ready, run
from tracediff.base.errors import AnalysisError
from tracediff.engine.result import Comparison
from tracediff.report.numbers import settle
from tracediff.tui import model as m
from tracediff.tui.app import MainScreen, TracediffApp
from tracediff.tui.drilldown import DrillScreen
from tracediff.tui.screens import ErrorModal, HelpScreen, LoadingScreen


def test_opens_on_biggest_change_and_sort_key_reorders(comparison: Comparison) -> None:
    att = comparison.attribution

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        # GIVEN the default sort: |change| descending, as the engine ranks them
        assert (
            s.table.ids
            == att.sort(pl.col("delta_ms_per_cycle").abs(), descending=True)[
                "contributor_id"
            ].to_list()
        )
        assert s.table.ids[0] == "c0"  # the host-bound gap of the draft phase: -1.88 ms/cycle
        # WHEN s is pressed THEN the largest increase comes first
        await pilot.press("s")
        assert s.sort == "change ↓"
        deltas = [
            att.filter(pl.col("contributor_id") == i)["delta_ms_per_cycle"][0] for i in s.table.ids
        ]
        assert deltas == sorted(deltas, reverse=True) and deltas[0] > 0 > deltas[-1]
        # the rendered first cell is that contributor's change
        assert str(s.table.get_row_at(0)[0]).split()[0].rstrip("*") == f"{deltas[0]:+.3f}"
        await pilot.press("s")  # change ↑: most improved first
        assert s.table.ids[0] == "c0"
        await pilot.press("s", "s", "s")  # head ms, base ms, name
        names = [att.filter(pl.col("contributor_id") == i)["name"][0].lower() for i in s.table.ids]
        assert s.sort == "name" and names == sorted(names)

    run(body, TracediffApp(comparison))


def test_kind_and_gpu_filters_cycle_through_values(comparison: Comparison) -> None:
    att = comparison.attribution

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        await pilot.press("k")
        assert s.kind == "kernel"
        assert set(att.filter(pl.col("contributor_id").is_in(s.table.ids))["kind"]) == {"kernel"}
        assert len(s.table.ids) == att.filter(pl.col("kind") == "kernel").height < att.height
        await pilot.press("k")
        assert (
            s.kind == "memcpy" and len(s.table.ids) == att.filter(pl.col("kind") == "memcpy").height
        )
        await pilot.press("k", "k", "k")  # memset, gap, back to all
        assert s.kind is None and len(s.table.ids) == att.height
        await pilot.press("g")
        assert s.gpu == 0 and len(s.table.ids) == att.filter(pl.col("device_id") == 0).height
        assert "GPU 0" in str(s.table.border_title)

    run(body, TracediffApp(comparison))


def test_search_filters_by_name_and_escape_clears(comparison: Comparison) -> None:
    att = comparison.attribution

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        await pilot.press("slash", *"dtod")
        expected = att.filter(pl.col("name").str.to_lowercase().str.contains("dtod"))[
            "contributor_id"
        ].to_list()
        assert expected and sorted(s.table.ids) == sorted(expected)
        await pilot.press("enter")  # keep the filter, back to the table
        assert s.table.has_focus and s.query_text == "dtod"
        await pilot.press("escape")
        assert s.query_text == "" and len(s.table.ids) == att.height

    run(body, TracediffApp(comparison))


def test_arrows_step_cycles_and_space_plays(comparison: Comparison) -> None:
    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        assert s.cycle == 0
        await pilot.press("left")  # already at the first cycle
        assert s.cycle == 0
        await pilot.press("right", "right")
        assert s.cycle == 2 and s.timeline.cycle == 2 and s.query_one("#replay").cycle == 2
        assert "cycle 2" in str(s.timeline.border_title)
        await pilot.press("space")
        assert s.playing
        s._tick()  # the play timer's callback
        assert s.cycle == 3
        await pilot.press("space")
        assert not s.playing
        for _ in range(20):
            await pilot.press("right")
        assert s.cycle == 11  # 12 cycles: stops at the last

    run(body, TracediffApp(comparison))


def test_zoom_and_pan_change_the_window(comparison: Comparison) -> None:
    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        full = s.timeline.span()
        assert full[0] == 0 and full[1] == s.model.full_span(0)
        await pilot.press("plus")
        t0, t1 = s.timeline.span()
        assert abs((t1 - t0) - (full[1] // 2)) <= 1
        await pilot.press("right_square_bracket")
        u0, u1 = s.timeline.span()
        assert u0 > t0 and u1 - u0 == t1 - t0
        await pilot.press("minus", "minus")
        assert s.timeline.span() == full

    run(body, TracediffApp(comparison))


def test_selected_contributor_is_highlighted_where_its_instances_are(
    comparison: Comparison,
) -> None:
    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        await pilot.press(
            "slash", *"dtod", "enter"
        )  # the memcpy that head runs 17x per cycle, base 1x
        cid = s.table.current()
        assert s.timeline.selected == cid
        await pilot.pause()
        rows = s.timeline.last_rows
        assert rows is not None
        width = rows.codes["head"].shape[1]
        ev = comparison.events.filter((pl.col("cycle") == 0) & (pl.col("contributor_id") == cid))
        for side in m.SIDES:
            # independent per-event computation of the columns each instance covers
            dt = (rows.t1_ns - rows.t0_ns) / width
            want = set()
            for a, b in (
                ev.filter(pl.col("side") == side).select("rel_start_ns", "rel_end_ns").iter_rows()
            ):
                c0 = int(np.floor((a - rows.t0_ns) / dt))
                want.update(range(c0, max(int(np.ceil((b - rows.t0_ns) / dt)), c0 + 1)))
            got = set(np.flatnonzero(rows.codes[side][0] == m.SELECTED).tolist())
            assert got == {c for c in want if 0 <= c < width} and got

    run(body, TracediffApp(comparison))


def test_enter_opens_drill_down_with_instances_and_counts(comparison: Comparison) -> None:
    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        await pilot.press("slash", *"dtod", "enter", "enter")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        d = pilot.app.screen
        assert isinstance(d, DrillScreen) and d.drill is not None
        ev = comparison.events.filter(pl.col("contributor_id") == d.contributor_id)
        nb, nh = (
            ev.filter(pl.col("side") == "base").height,
            ev.filter(pl.col("side") == "head").height,
        )
        assert (d.drill.durations["base"].size, d.drill.durations["head"].size) == (nb, nh)
        assert nh > nb > 0
        text = str(d.query_one("#drill-body").render())
        assert f"n={nb} " in text and f"n={nh} " in text and "Memcpy DtoD" in text
        per = d.drill.per_cycle.filter(pl.col("side") == "head")["n"]
        assert per.sum() == nh and per.len() == 12
        await pilot.press("escape")
        assert pilot.app.screen is s

    run(body, TracediffApp(comparison))


def test_drill_down_lists_launch_configurations_of_a_kernel(comparison: Comparison) -> None:
    k = comparison.attribution.filter(pl.col("kind") == "kernel")["contributor_id"][0]
    d = m.drill(comparison, k)
    ev = comparison.events.filter(pl.col("contributor_id") == k)
    assert d.launch.height == ev.select("grid", "block").unique().height >= 1
    assert int(d.launch["base_n"].sum()) == ev.filter(pl.col("side") == "base").height


def test_worst_cycle_key_jumps_to_the_largest_deviation(comparison: Comparison) -> None:
    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        cid = s.table.current()
        await pilot.press("m")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        pc = m.per_cycle(comparison, cid)
        base_mean = pc.filter(pl.col("side") == "base")["ns"].mean()
        head = pc.filter(pl.col("side") == "head")
        want = head["cycle"][int(np.argmax(np.abs(head["ns"].to_numpy() - base_mean)))]
        assert s.cycle == want != 0

    run(body, TracediffApp(comparison))


def test_help_lists_every_key(comparison: Comparison) -> None:
    async def body(pilot: Pilot) -> None:
        await ready(pilot)
        await pilot.press("question_mark")
        h = pilot.app.screen
        assert isinstance(h, HelpScreen)
        for b in MainScreen.BINDINGS:
            assert b.description in h.body.plain
        await pilot.press("escape")
        await pilot.press("q")
        assert pilot.app.return_code == 0  # q quits cleanly

    run(body, TracediffApp(comparison))


def test_loader_shows_progress_then_the_comparison(comparison: Comparison) -> None:
    said: list[str] = []

    def loader(say):  # noqa: ANN001, ANN202
        say("reading base")
        said.append("reading base")
        return comparison

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        # the app shows the comparison at the reports' printed precision (report/numbers.py)
        assert s.c is pilot.app.comparison and said == ["reading base"]
        assert s.c.delta_ms_per_cycle == settle(comparison.delta_ms_per_cycle)
        assert s.c.attribution.height == comparison.attribution.height

    run(body, TracediffApp(loader=loader))


def test_loader_error_opens_a_modal(comparison: Comparison) -> None:
    def loader(say):  # noqa: ANN001, ANN202
        raise AnalysisError("no complete cycles in one of the runs", "check --cycle")

    async def body(pilot: Pilot) -> None:
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        err = pilot.app.screen
        assert isinstance(err, ErrorModal)
        assert "no complete cycles" in err.body.plain and "check --cycle" in err.body.plain
        assert isinstance(pilot.app.screen_stack[-2], LoadingScreen)

    run(body, TracediffApp(loader=loader))


def test_cycles_only_one_run_has_are_shown_as_missing(data_dir) -> None:  # noqa: ANN001
    from tracediff.engine.compare import compare
    from tracediff.parse import load

    # the real eager pair: base 12 cycles, head 30
    c = compare(load(data_dir / "h200" / "e_good.sqlite"), load(data_dir / "h200" / "e_bad.sqlite"))

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        for _ in range(15):
            await pilot.press("right")
        assert s.cycle == 15
        text = s.timeline.render().plain
        assert "(no cycle 15 in base)" in text
        head_row = s.timeline.last_rows.codes["head"][0]
        assert (head_row >= m.KERNEL).sum() > 10
        strip = s.query_one("#replay").render().plain
        assert "base —" in strip and "head 6.464 ms" in strip

    run(body, TracediffApp(c), size=(100, 30))


def test_whatif_key_predicts_the_selected_contributor(comparison: Comparison) -> None:
    """`x` replays head with the highlighted contributor from base; the screen holds the same
    prediction as the library, and it moves the cycle time toward base by that contributor."""
    from tracediff.replay import predict

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        cid = s.table.current()
        assert cid is not None
        await pilot.press("x")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        w = s.last_whatif
        assert w is not None and w.selected["contributor_id"].to_list() == [cid]
        ref = predict(comparison, cid)
        assert abs(w.predicted_ms_per_cycle - ref.predicted_ms_per_cycle) < 1e-9
        assert abs(w.head_ms_per_cycle - comparison.head.mean_ms) < 1e-9

    run(body, TracediffApp(comparison))


def test_summed_over_gpus_view_on_a_multi_gpu_comparison(tmp_path_factory) -> None:  # noqa: ANN001
    """On 4 GPUs `g` offers Σ (the attribution summed over GPUs) before the single GPUs; its rows
    are Comparison.across_gpus, and `x` on one takes that op from base on every GPU."""
    from tests.support.gen_nsys import Straggler, write_report
    from tracediff.engine.compare import compare
    from tracediff.parse import load
    from tracediff.replay import predict

    tmp = tmp_path_factory.mktemp("tui4")
    tb = write_report(tmp / "b.sqlite", 4, 12, 24, seed=11)
    th = write_report(tmp / "h.sqlite", 4, 12, 24, [Straggler(2, 20_000)], seed=12)
    c = compare(load(tb.path), load(th.path))
    assert c.across_gpus.height > 0

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        assert s.gpu is None and len(s.table.ids) == c.attribution.height
        await pilot.press("g")
        assert s.gpu == m.SUMMED and "Σ" in str(s.table.border_title)
        assert len(s.table.ids) == c.across_gpus.height
        assert " Σ " in str(s.table.get_row_at(0)[0])  # the GPU column of a summed row
        await pilot.press("home")  # the cursor stays on the row it was on, if shown: go to the top
        # the top summed row is the biggest summed change, keyed by its GPU that changed most
        top = c.across_gpus.row(0, named=True)
        cid = s.table.current()
        assert cid is not None
        row = c.attribution.filter(pl.col("contributor_id") == cid).row(0, named=True)
        assert (row["name"], row["device_id"]) == (top["name"], top["top_device_id"])
        per_gpu = c.attribution.filter(
            (pl.col("kind") == top["kind"])
            & (pl.col("name") == top["name"])
            & (pl.col("phase") == top["phase"])
        )["contributor_id"].to_list()
        assert len(per_gpu) == top["devices"] > 1
        await pilot.press("x")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        w = s.last_whatif
        assert w is not None and sorted(w.selected["contributor_id"].to_list()) == sorted(per_gpu)
        ref = predict(c, per_gpu)
        assert abs(w.predicted_ms_per_cycle - ref.predicted_ms_per_cycle) < 1e-9
        await pilot.press("g")
        assert (
            s.gpu == 0 and len(s.table.ids) == c.attribution.filter(pl.col("device_id") == 0).height
        )

    run(body, TracediffApp(c))
