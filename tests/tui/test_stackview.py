"""The TUI's code view (key `c`): the selected contributor's launch stacks and suspect commits.

Real data: the H200 minispec eager captures at base and at the last commit (PyTorch profiler,
with_stack=True; tests/data/h200-suspects) ranked against the repository they ran at (rebuilt by
tools/device/suspects_repo.py), and the bundled nsys pair (no stacks). Real key presses.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from textual.pilot import Pilot

from tests.support.tui import ready, run
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load
from tracediff.suspects import Suspects
from tracediff.suspects.rank import rank
from tracediff.tui.app import TracediffApp
from tracediff.tui.screens import StackScreen

pytestmark = [pytest.mark.git]

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "h200-suspects"


@pytest.fixture(scope="module")
def minispec(minispec_repo: tuple[Path, dict[str, str]]) -> tuple[Comparison, Suspects, str]:
    dest, sha = minispec_repo
    c = compare(
        load(DATA / "kineto" / "c1_base_eager.json.gz"),
        load(DATA / "kineto" / "c5_unused_eager.json.gz"),
        n_boot=50,
    )
    return (
        c,
        rank(c.launch_stacks, c.attribution, dest, sha["base"], sha["unused"], "x"),
        sha["culprit"],
    )


async def _open_on(pilot: Pilot, cid: str) -> StackScreen:
    s = await ready(pilot)
    for key in ["down"] * len(s.table.ids) + ["up"] * len(s.table.ids):
        if s.table.current() == cid:
            break
        await pilot.press(key)
    assert s.table.current() == cid
    await pilot.press("c")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, StackScreen)
    return screen


def test_c_shows_the_stack_and_the_culprit_commit(minispec) -> None:  # type: ignore[no-untyped-def]
    c, s, culprit = minispec
    # the largest kernel row launched from code: the fp32 casts of layers.mlp
    launched = c.attribution.filter(
        pl.col("contributor_id").is_in(c.launch_stacks["contributor_id"].unique().implode())
    )
    cid = launched["contributor_id"][0]

    async def body(pilot: Pilot) -> None:
        screen = await _open_on(pilot, cid)
        text = screen.body.plain
        assert "minispec/layers.py:18 mlp" in text, text
        assert "minispec/model.py" in text and "bench.py" in text  # the whole stack
        assert text.index("suspect commits") < text.index(culprit[:12])
        after = text[text.index("suspect commits") :]
        assert after.splitlines()[1].strip().startswith(culprit[:12])  # first of its suspects
        assert '+    h = F.gelu(x.float() @ p["up"].float())' in after  # its diff
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(pilot.app.screen, StackScreen)

    run(body, TracediffApp(c, suspects=s))


def test_says_why_without_repo_and_for_a_gap(minispec) -> None:  # type: ignore[no-untyped-def]
    c, _, _ = minispec
    launched = c.launch_stacks["contributor_id"].unique().implode()
    cid = c.attribution.filter(pl.col("contributor_id").is_in(launched))["contributor_id"][0]
    gap = c.attribution.filter(pl.col("kind") == "gap")["contributor_id"][0]

    async def body(pilot: Pilot) -> None:
        text = (await _open_on(pilot, cid)).body.plain
        assert "not ranked: give compare --repo DIR" in text
        await pilot.press("escape")
        await pilot.pause()
        text = (await _open_on(pilot, gap)).body.plain
        assert "not launched by code" in text

    run(body, TracediffApp(c))


def test_says_why_for_runs_without_stacks(comparison: Comparison) -> None:
    cid = comparison.attribution.filter(pl.col("kind") == "kernel")["contributor_id"][0]

    async def body(pilot: Pilot) -> None:
        text = (await _open_on(pilot, cid)).body.plain
        assert "carry no launch stacks" in text and "with_stack=True" in text

    run(body, TracediffApp(comparison))
