"""The per-GPU split of a contributor, on the real two-GPU nsys-ai pair (mfu_2gpu before/after):
enter on a Σ row (or `p` on any row) lists the contributor on each GPU and its sum over GPUs."""

from __future__ import annotations

import re

import polars as pl
from textual.pilot import Pilot

from tests.support.tui import ready, run
from tracediff.engine.result import Comparison
from tracediff.tui import model as m
from tracediff.tui.app import TracediffApp
from tracediff.tui.drilldown import DrillScreen
from tracediff.tui.gpusplit import GpuSplitScreen

LINE = re.compile(
    r"^\s*(?P<gpu>\S+)\s+(?P<delta>[+-]\d+\.\d{3})(?P<sig>\*?)\s+"
    r"\[(?P<lo>[+-]\d+\.\d{3}),(?P<hi>[+-]\d+\.\d{3})\]\s+(?P<share>\S+)\s+"
    r"(?P<base>\d+\.\d{3})\s+(?P<head>\d+\.\d{3})\s"
)
KEYS = ["kind", "name", "phase"]


def shown(screen: GpuSplitScreen) -> list[dict]:
    """The split screen's lines as the user reads them: GPU, change, CI, base, head (ms)."""
    table = screen.query_one("#split-table")
    out = []
    for i in range(table.row_count):
        hit = LINE.match(str(table.get_row_at(i)[0]))
        assert hit, str(table.get_row_at(i)[0])
        g = hit.groupdict()
        out.append(
            {"gpu": g["gpu"], "sig": g["sig"] == "*"}
            | {k: float(g[k]) for k in ("delta", "lo", "hi", "base", "head")}
        )
    return out


def footer_keys(pilot: Pilot) -> dict[str, str]:
    return {
        k: b.binding.description
        for k, b in pilot.app.screen.active_bindings.items()
        if b.binding.show and b.enabled
    }


def test_enter_on_a_summed_row_lists_each_gpu_and_the_sum(mfu_2gpu: Comparison) -> None:
    c = mfu_2gpu
    across = c.across_gpus

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        assert footer_keys(pilot)["enter"] == "Drill down"
        await pilot.press("g", "home")  # Σ view, from its top row
        assert s.gpu == m.SUMMED and footer_keys(pilot)["enter"] == "Per GPU"
        gpus_seen = set()
        for row in range(6):
            assert s.table.cursor_row == row
            cid = s.table.current()
            await pilot.press("enter")
            split = pilot.app.screen
            assert isinstance(split, GpuSplitScreen)
            lines = shown(split)
            per, total = lines[:-1], lines[-1]
            # the contributor's rows of the engine's per-GPU attribution, one line per GPU
            key = c.attribution.filter(pl.col("contributor_id") == cid).select(KEYS)
            want = c.attribution.join(key, on=KEYS, how="semi")
            assert total["gpu"] == "Σ" and len(per) == want.height
            gpus_seen.add(len(per))
            assert sorted(int(x["gpu"]) for x in per) == sorted(want["device_id"].to_list())
            for x in per:
                r = want.filter(pl.col("device_id") == int(x["gpu"])).row(0, named=True)
                assert x["delta"] == round(r["delta_ms_per_cycle"], 3)
                assert x["sig"] == r["significant"]
            deltas = [abs(x["delta"]) for x in per]
            assert deltas == sorted(deltas, reverse=True)  # biggest |change| first
            # the Σ line is the engine's sum over GPUs, bootstrapped on its own ...
            a = across.join(key, on=KEYS, how="semi").row(0, named=True)
            assert (total["delta"], total["lo"], total["hi"]) == tuple(
                round(a[k], 3) for k in ("delta_ms_per_cycle", "ci95_low", "ci95_high")
            )
            # ... and the GPUs' lines add up to it, within the rounding of what is shown
            for k in ("base", "head", "delta"):
                assert abs(sum(x[k] for x in per) - total[k]) <= 0.0005 * (len(per) + 1) + 1e-9
            await pilot.press("escape")
            assert pilot.app.screen is s
            assert s.table.cursor_row == row and s.table.current() == cid  # where it was
            await pilot.press("down")
        assert 2 in gpus_seen

    run(body, TracediffApp(c))


def test_p_splits_any_row_and_enter_drills_into_one_gpu(mfu_2gpu: Comparison) -> None:
    c = mfu_2gpu

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        assert s.gpu is None and footer_keys(pilot)["p"] == "Per GPU"
        top = s.table.current()
        name = c.attribution.filter(pl.col("contributor_id") == top)["name"][0]
        await pilot.press("p")
        split = pilot.app.screen
        assert isinstance(split, GpuSplitScreen)
        assert str(split.query_one("#split-name").render()) == name
        assert split.ids[0] == top  # the highlighted GPU row changed most
        other = split.ids[1]
        await pilot.press("down", "enter")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        d = pilot.app.screen
        assert isinstance(d, DrillScreen) and d.contributor_id == other and d.drill is not None
        dev = c.attribution.filter(pl.col("contributor_id") == other)["device_id"][0]
        assert f"GPU {dev} " in str(d.query_one("#drill-body").render())
        await pilot.press("escape")
        assert pilot.app.screen is split
        await pilot.press("escape")
        assert pilot.app.screen is s and s.table.current() == top

    run(body, TracediffApp(c))


def test_every_summed_row_is_the_sum_of_its_gpu_rows(mfu_2gpu: Comparison) -> None:
    summed, ids = m.summed_rows(mfu_2gpu)
    assert summed.height == mfu_2gpu.across_gpus.height > 0
    for cid in summed["contributor_id"].to_list():
        per, total = m.gpu_split(mfu_2gpu, summed, cid)
        assert total is not None and sorted(per["contributor_id"]) == sorted(ids[cid])
        for k in ("base_ms_per_cycle", "head_ms_per_cycle", "delta_ms_per_cycle"):
            assert abs(float(per[k].sum()) - total[k]) < 1e-9


def test_per_gpu_key_is_off_on_one_gpu(comparison: Comparison) -> None:
    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        keys = footer_keys(pilot)
        assert "p" not in keys and "e" not in keys  # one GPU, one stream: nothing to split or link
        await pilot.press("p")
        assert pilot.app.screen is s

    run(body, TracediffApp(comparison))
