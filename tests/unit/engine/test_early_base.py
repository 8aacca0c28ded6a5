"""Base's report reduced before head is read (issue 32, the memory floor): engine/inputs.py
`load_sides(reduce_base=...)` hands base's run to the per-file stage as soon as it is read and
lets its tables go (runs/runfile.py `Reread`), so both sides' events are never held at once.

On real traces: the H200 Kineto pair (cut by its kernel period: base is never read again) and
an H200 trace against a B200 eager one (base's cut holds other ops than head's cycles: every
run is compared whole, a redo that reads base's report again). Either way the comparison is
the one of the runs read and reduced as before.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import orjson
import pytest

from tracediff.engine.compare import compare, reduce_first
from tracediff.engine.inputs import load_sides
from tracediff.report import render
from tracediff.runs.runfile import Reread, Run

DATA = Path(__file__).resolve().parent.parent.parent / "data"
K_GOOD, K_BAD = DATA / "h200/k_good.json.gz", DATA / "h200/k_bad.json.gz"
EAGER = DATA / "kineto/eager_trace.json.gz"  # a B200 eager model: another loop


def _json(base: Path, head: Path, early: bool) -> tuple[dict, list[str], Run]:  # type: ignore[type-arg]
    said: list[str] = []

    def reduce_base(run: Run) -> object:
        said.append("base reduced")
        return reduce_first(run, None)

    sides = load_sides(base, head, "auto", said.append, reduce_base=reduce_base if early else None)
    result = compare(sides.bases, sides.heads, n_boot=50, keep_ops=False, first=sides.first)
    return orjson.loads(render(sides.onto(result), "json", 10)), said, sides.bases[0]


def test_base_is_reduced_before_head_is_read_and_not_read_again() -> None:
    got, said, run = _json(K_GOOD, K_BAD, early=True)
    assert said == [f"reading {K_GOOD}", "base reduced", f"reading {K_BAD}"]
    assert isinstance(run, Reread) and not run.reread
    want, said, run = _json(K_GOOD, K_BAD, early=False)
    assert "base reduced" not in said and not isinstance(run, Reread)
    assert got == want
    assert got["base"]["cycle_method"].startswith("kernel-period:")


def test_a_redo_reads_base_again_for_the_same_answer() -> None:
    got, _, run = _json(K_GOOD, EAGER, early=True)
    assert isinstance(run, Reread) and run.reread  # every run cut whole: base's stage again
    want, _, _ = _json(K_GOOD, EAGER, early=False)
    assert got == want
    assert got["cycle_fallback"] and got["base"]["cycle_method"] == "whole-run"


def test_a_run_file_base_is_kept_as_read(tmp_path: Path) -> None:
    """A run file's tables are read page by page when asked for: nothing to let go early."""
    from tracediff.parse import load
    from tracediff.runs.runfile import write_run

    arrow = tmp_path / "base.arrow"
    write_run(load(K_GOOD), arrow)
    calls: list[Run] = []
    sides = load_sides(arrow, K_BAD, "auto", lambda _m: None, reduce_base=lambda r: calls.append(r))
    assert not calls and sides.first is None and not isinstance(sides.bases[0], Reread)


@pytest.mark.parametrize("labelled", [False, True])
def test_the_early_base_carries_its_final_label(tmp_path: Path, labelled: bool) -> None:
    """Two reports of one name in different folders are told apart after both are read
    (`a/run`, `b/run`): the reduced base says the label the run ends with."""
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    name = "run.json.gz" if labelled else "k.json.gz"
    shutil.copyfile(K_GOOD, a / name)
    shutil.copyfile(K_BAD, b / (name if labelled else "other.json.gz"))
    head = b / (name if labelled else "other.json.gz")
    sides = load_sides(
        a / name, head, "auto", lambda _m: None, reduce_base=partial(reduce_first, cycle=None)
    )
    assert sides.first.info.label == sides.bases[0].label
    assert sides.first.info.label == ("a/run.json" if labelled else "k.json")


def test_heads_report_is_let_go_once_reduced_and_read_again_if_asked() -> None:
    """Once every per-file stage is done, a report's run holds no table through the join
    (runs/runfile.py `let_go`); a table asked for afterwards is the report's, read again. With
    its ops kept (the TUI, what-if), the run keeps its tables."""
    from tracediff.parse import load
    from tracediff.runs.deferred import Deferred

    sides = load_sides(K_GOOD, K_BAD, "auto", lambda _: None)
    head = sides.heads[0]
    compare(sides.bases, sides.heads, n_boot=50, keep_ops=False, first=sides.first)
    assert isinstance(head.tables, Deferred) and dict.__len__(head.tables) == 0
    assert head.table("kernels").equals(load(K_BAD).table("kernels"))
    kept = load_sides(K_GOOD, K_BAD, "auto", lambda _: None)
    compare(kept.bases, kept.heads, n_boot=50, keep_ops=True)
    assert dict.__len__(kept.heads[0].tables) > 0


def test_the_bootstrap_drawn_while_head_is_read_is_the_one_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Base reduced early starts the bootstrap's draws on a thread (statistics/resample.py
    `Ahead`), told head's cycles once head is cut: the compare takes them, and answers as it
    does drawing them itself."""
    from tracediff.engine.statistics import attribute as at

    taken: list[bool] = []
    take = at.take_ahead

    def spy(*key: int) -> object:
        got = take(*key)
        taken.append(got is not None)
        return got

    def answer() -> dict:  # type: ignore[type-arg]
        at._resample_weights.cache_clear()
        sides = load_sides(
            K_GOOD, K_BAD, "auto", lambda _m: None,
            reduce_base=partial(reduce_first, cycle=None, n_boot=50),
        )  # fmt: skip
        got = compare(sides.bases, sides.heads, n_boot=50, keep_ops=False, first=sides.first)
        return orjson.loads(render(sides.onto(got), "json", 10))  # type: ignore[no-any-return]

    monkeypatch.setattr(at, "take_ahead", spy)
    ahead = answer()
    assert taken == [True]
    monkeypatch.setattr(at, "take_ahead", lambda *_key: None)  # drawn in place
    assert answer() == ahead


def test_a_head_run_set_tells_its_runs_cycles_to_the_draws_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Base one run, head a run set: the bootstrap is over base's cycles and all of head's runs'
    (never across runs with one base run): drawn ahead for those, the answer drawn in place."""
    from tracediff.engine.statistics import attribute as at

    samples = DATA.parent.parent / "samples" / "runs"
    base, heads = samples / "good" / "run-01" / "run.arrow", sorted((samples / "bad").glob("run-*"))
    taken: list[tuple[int, ...]] = []
    take = at.take_ahead

    def spy(*key: int) -> object:
        got = take(*key)
        if got is not None:
            taken.append(key)
        return got

    def answer() -> dict:  # type: ignore[type-arg]
        at._resample_weights.cache_clear()
        got = compare(base, [h / "run.arrow" for h in heads], n_boot=100, keep_ops=False)
        return orjson.loads(render(got, "json", 10))  # type: ignore[no-any-return]

    monkeypatch.setattr(at, "take_ahead", spy)
    ahead = answer()
    assert len(heads) >= 2 and taken == [(20, 20 * len(heads), 100, 0)]
    monkeypatch.setattr(at, "take_ahead", lambda *_key: None)
    assert answer() == ahead
