"""`compare(base, head)`: segment both runs into cycles, align them, attribute the change.

Stage: engine front door. Input: two runs or run sets (open `Run`s or their paths); output: a
`Comparison` (engine/result.py). Each run goes through the per-file stage on its own
(engine/pipeline/reduce.py: cut by base's first run's rule, engine/cycle/find.py; aligned to the side's
template, engine/cycle/align.py; reduced to per cycle × device × contributor sums), on an executor
(engine/pipeline/executor.py: in this process, one run at a time, by default), and the driver joins the
reduced tables (engine/pipeline/join.py: critical GPU, statistics engine/statistics/stats.py, verdict
engine/statistics/verdict.py, tables engine/tables.py). So a run set costs the memory of its largest run
plus the tables, not of all its runs. Runs without GPU operations go to engine/hostonly.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine import tables as tb
from tracediff.engine.cycle import align as al
from tracediff.engine.cycle import correspond
from tracediff.engine.cycle import find as cycles
from tracediff.engine.cycle.ranges import NO_OWN_RANGES
from tracediff.engine.cycle.segmentation import CycleRule
from tracediff.engine.env import env_diffs
from tracediff.engine.ops import gpu_ops_counted
from tracediff.engine.pipeline import eventslices as slices
from tracediff.engine.pipeline import executor as ex
from tracediff.engine.pipeline.join import join
from tracediff.engine.pipeline.reduce import FileTask, Reduced
from tracediff.engine.result import Comparison, ReplayInputs
from tracediff.engine.statistics import attribute as at
from tracediff.engine.statistics.resample import tell_head
from tracediff.runs.runfile import Reread, Run, let_go

if TYPE_CHECKING:
    from tracediff.engine.pipeline.rankrun import RankRun

    Source = Run | Path | RankRun
    """A run as compare takes it: open, its path, or a run of rank files (engine/inputs.py)."""

__all__ = ["compare", "env_diffs", "reduce_first"]


def compare(
    base: Run | Path | Sequence[Source],
    head: Run | Path | Sequence[Source],
    *,
    cycle: str | None = None,
    n_boot: int = 1000,
    progress: Callable[[str], None] | None = None,
    labels: tuple[str | None, str | None] = (None, None),
    executor: ex.Executor | None = None,
    keep_ops: bool = True,
    first: Reduced | None = None,
) -> Comparison:
    """Compare two runs cycle by cycle. Raises AnalysisError when the runs cannot be compared.

    Either side may be a run set: several runs of one workload (engine/runsets.py). Every run is
    cut by base's first run's rule, the runs' cycles are aligned together, and with >= 2 runs a
    side each run's mean is one sample of the statistics. `labels`: the sides' names for run
    sets (the user's folder names). A run is an open `Run` or the path of one; each is reduced
    on its own (engine/pipeline/reduce.py, on `executor`: in-process by default), one at a time, and
    the driver joins the reduced tables (engine/pipeline/join.py). `keep_ops` False: nothing
    will read one run's ops (a report alone: no TUI, what-if, export), so none are kept; the
    events are then built from the files again if asked for, as for run sets. `first`: base's
    first run already reduced as this starts it with `keep_ops` False (`reduce_first`, before
    head was read: engine/inputs.py)."""
    say = progress or ex.quiet
    run_ex = executor or ex.InProcess()
    bases: list[Source] = [base] if isinstance(base, (Run, Path)) else list(base)
    heads: list[Source] = [head] if isinstance(head, (Run, Path)) else list(head)
    # one run a side keeps its ops (replay, TUI); a run of rank files never gathers them here
    single = len(bases) == 1 and len(heads) == 1
    one = keep_ops and single and not any(_ranked(s) for s in bases + heads)
    say("collecting GPU operations")
    if first is None or one:
        ahead = n_boot if len(bases) == 1 else 0  # base's cycles: the bootstrap's
        task = FileTask("base", 0, bases[0], None, cycle, keep_ops=one, bootstrap=ahead)
        first = run_ex.run_one(task, say)
    if first.no_ops:
        return _host_or_refuse(bases, heads, cycle, n_boot, labels)
    # what the tracer check reads (metadata) a run of rank files not read here has too
    given: list[Any] = [s for s in bases + heads if isinstance(s, Run) or _ranked(s)]
    every_run = len(given) == len(bases) + len(heads)
    tracers = None
    if every_run:  # before any cut is refused: runs of two tracers are refused for that
        tracers = correspond.check_tracers(given[: len(bases)], given[len(bases) :], cycle)
    _refused(first)
    rule = first.rule
    templates = {d: t[0] for d, t in first.tops.items()}
    rest = [FileTask(s, i, r, rule, templates=templates, keep_ops=one, bootstrap=n_boot * single)
            for s, runs in (("base", bases), ("head", heads)) for i, r in enumerate(runs)
            if s == "head" or i]  # fmt: skip
    done = [first, *run_ex.map(rest, say)]
    if not every_run:  # read by the per-file stage: their metadata came back with it
        tracers = correspond.check_tracers(*_infos(done), cycle)
    for p in done:
        _refused(p)
    # why no range cut them holds whatever they are cut by next (whole runs, a redo below)
    notes = {(p.side, p.index): [w for w in p.seg_warnings if w.startswith(NO_OWN_RANGES)]
             for p in done}  # fmt: skip
    done, fallback = _cut_or_whole(done, bases, heads, one, run_ex, say)
    tell_head(None if fallback else _cycles(done, "head"))  # (where head's run did not: a run set)
    done, tpl = _final_templates(done, bases, heads, run_ex, say)
    done, carry = _carried(done, bases, heads, tpl, one, run_ex, say)
    for p in done:
        p.seg_warnings += [w for w in notes[(p.side, p.index)] if w not in p.seg_warnings]
    if not one:  # every per-file stage is done: the runs read here need not be held
        _let_go([*bases, *heads])
    parts_b = [p for p in done if p.side == "base"]
    parts_h = [p for p in done if p.side == "head"]
    ops = _kept_ops(parts_b, parts_h) if one else None
    replay = ReplayInputs()
    if ops is not None:
        rb, rh = (_open(s[0]) for s in (bases, heads))
        replay = ReplayInputs(
            ops=ops,
            head_api=rh.table("api_calls"),
            base_events=rb.table("cuda_events"),
            head_events=rh.table("cuda_events"),
        )

    def events(cyc: pl.DataFrame, attribution: pl.DataFrame) -> pl.DataFrame:
        every = ops
        if every is None:  # run sets: each run's ops again, only when the TUI asks for them
            again = [replace(_task_of(p, bases, heads, tpl, carry), keep_ops=True) for p in done]
            got = list(ex.InProcess().map(again, ex.quiet))
            every = _kept_ops(
                [p for p in got if p.side == "base"], [p for p in got if p.side == "head"]
            )
        return tb.events(every, cyc, attribution)

    def events_slice(cyc: pl.DataFrame, attribution: pl.DataFrame) -> slices.SliceFn:
        """The TUI's events: of the GPUs and cycles it shows, built when it shows them."""
        if ops is not None:
            return slices.from_ops(ops, cyc, attribution)
        return slices.FileSlices(
            done, lambda p: _task_of(p, bases, heads, tpl, carry), run_ex, cyc, attribution
        )

    return join(
        parts_b, parts_h, n_boot, labels, events, replay, say, fallback, tracers, events_slice
    )


def reduce_first(run: Run, cycle: str | None, n_boot: int = 1000) -> Reduced | None:
    """Base's first run through the per-file stage in this process as `compare(keep_ops=False)`
    starts it (its `first`); None where it has no GPU operations (engine/hostonly.py reads the run).
    Base being one run, the bootstrap over its cycles will be drawn: the draws start once it is
    cut, on a thread (statistics/resample.py `Ahead`), and go on while head is read."""
    got = ex.InProcess().run_one(FileTask("base", 0, run, None, cycle, bootstrap=n_boot))
    return None if got.no_ops else got


def _cycles(done: list[Reduced], side: str) -> int:
    """The cycles of a side's reduced runs the bootstrap resamples (engine/pipeline/join.py
    `cycle_times`: those their cycle tables hold), for its draws ahead (FileTask.bootstrap)."""
    return sum(p.cyc["cycle"].n_unique() for p in done if p.side == side and "cycle" in p.cyc)


def _cut_or_whole(
    done: list[Reduced],
    bases: list[Source],
    heads: list[Source],
    one: bool,
    run_ex: ex.Executor,
    say: Callable[[str], None],
) -> tuple[list[Reduced], str | None]:
    """The files as base's rule cut them, or, where it did not fit one of them or the runs'
    cycles do not correspond, every run again as one cycle, with why (the fallback). Never a
    per-cycle verdict from two cuts."""
    first, rule = done[0], done[0].rule
    mismatch = next((p for p in done if p.mismatch is not None), None)
    others = [(_run_name(p.side, p.index, len(bases if p.side == "base" else heads)), p.per_cycle)
              for p in done[1:]]  # fmt: skip
    why = None if mismatch else correspond.cut_fallback(rule, first.per_cycle, others)
    if mismatch is None and why is None:
        if note := correspond.range_note(rule, first.per_cycle, others):
            done[len(bases)].seg_warnings.append(note)  # the cut holds; few ops in common
        return done, None
    done = _whole(bases, heads, one, run_ex, say)
    if mismatch is not None:
        fallback = f"not cut as base is ({rule.label}): {mismatch.mismatch}"
        done[len(bases)].seg_warnings.append(
            f"{fallback}; compared the whole runs as one cycle each (pass --cycle NAME with "
            "an NVTX range both runs have)"
        )
        return done, fallback
    assert why is not None
    done[len(bases)].seg_warnings.append(
        f"{why}; compared the whole runs as one cycle each (capture with NVTX ranges "
        "around each cycle and pass --cycle NAME)"
    )
    return done, why


def _refused(p: Reduced) -> None:
    """Raise the refusal of a run that could not be cut."""
    if p.error is not None:
        raise AnalysisError(*p.error)


def _infos(done: list[Reduced]) -> tuple[list[Run], list[Run]]:
    return [p.info for p in done if p.side == "base"], [p.info for p in done if p.side == "head"]


def _run_name(side: str, i: int, n: int) -> str:
    return side if n == 1 else f"{side} run {i + 1}"


def _ranked(source: object) -> bool:
    from tracediff.engine.pipeline.rankrun import RankRun

    return isinstance(source, RankRun)


def _carried(
    done: list[Reduced],
    bases: list[Source],
    heads: list[Source],
    tpl: dict[int, al.DeviceTemplate],
    one: bool,
    run_ex: ex.Executor,
    say: Callable[[str], None],
) -> tuple[list[Reduced], dict[tuple[int, int], str]]:
    """Where head renamed an op in every cycle, base's runs again, base's ops in its slot
    taking head's name; and what was carried (align.carried)."""
    carry = al.carried([p.slot_changes for p in done if p.side == "head"])
    if not carry:
        return done, carry
    again = [replace(_task_of(p, bases, heads, tpl, carry), keep_ops=one)
             for p in done if p.side == "base"]  # fmt: skip
    redone = {p.index: p for p in run_ex.map(again, say)}
    return [redone[p.index] if p.side == "base" else p for p in done], carry


def _let_go(sources: list[Source]) -> None:
    """Runs parsed from reports in this process, reduced: their tables let go, read again from
    the report only if something asks for them (runs/runfile.let_go; the TUI's events of a run
    set). A run file's tables are memory-mapped pages: kept, as are runs read from elsewhere."""
    from tracediff.parse import load

    for source in sources:
        if not isinstance(source, Run) or isinstance(source, Reread):
            continue
        where = source.metadata.get("source")
        if source.metadata.get("run_file") or not where or not Path(where).is_file():
            continue
        path = Path(where)
        let_go(source, functools.partial(load, path))


def _open(source: Source) -> Run:
    from tracediff.engine.pipeline.rankrun import RankRun
    from tracediff.parse import load

    if isinstance(source, RankRun):
        return source.open()
    return source if isinstance(source, Run) else load(source)


def _host_or_refuse(
    bases: list[Source],
    heads: list[Source],
    cycle: str | None,
    n_boot: int,
    labels: tuple[str | None, str | None],
) -> Comparison:
    """Base's first run has no GPU operations: host-only runs (NVTX, no CUDA trace) when head's
    first has none either, else refused as base."""
    from tracediff.engine.hostonly import compare_host  # host-only runs: NVTX, no CUDA trace

    rb, rh = _open(bases[0]), _open(heads[0])
    if gpu_ops_counted(rh)[0].height:
        cycles.refuse_no_ops(rb)
    one = len(bases) == 1 and len(heads) == 1
    if one:
        return compare_host(rb, rh, cycle, n_boot, labels)
    return compare_host(
        [rb, *(_open(r) for r in bases[1:])], [rh, *(_open(r) for r in heads[1:])],
        cycle, n_boot, labels,
    )  # fmt: skip


def _whole(
    bases: list[Source], heads: list[Source], one: bool, run_ex: ex.Executor,
    say: Callable[[str], None],
) -> list[Reduced]:  # fmt: skip
    """Every run cut as one cycle (base's rule did not fit one of them)."""
    tasks = [
        FileTask(s, i, r, CycleRule.whole(), whole=True, keep_ops=one)
        for s, runs in (("base", bases), ("head", heads))
        for i, r in enumerate(runs)
    ]
    first = run_ex.run_one(tasks[0])
    templates = {d: t[0] for d, t in first.tops.items()}
    for t in tasks[1:]:
        t.templates = templates
    return [first, *run_ex.map(tasks[1:], say)]


def _final_templates(
    done: list[Reduced],
    bases: list[Source],
    heads: list[Source],
    run_ex: ex.Executor,
    say: Callable[[str], None],
) -> tuple[list[Reduced], dict[int, al.DeviceTemplate]]:
    """Each device's template is base's most frequent cycle over all its runs (ties: the first
    seen): the files were aligned to base's first run's, which it nearly always is. A file
    aligned to another is reduced again to the right one, so the answer is the same as aligning
    every run at once. Returns the files and the templates."""
    base_p = [p for p in done if p.side == "base"]
    head_p = [p for p in done if p.side == "head"]
    final = al.choose_templates([p.seq_stats for p in base_p], [p.seq_stats for p in head_p])
    tpl: dict[int, al.DeviceTemplate] = {}
    for d, hv in final.items():
        found = _find(done, d, hv)
        if found is None:  # not among any file's most frequent: read it from a file that has it
            holder = next(p for p in done if (p.seq_stats["hash"] == hv).any())
            t = replace(_task_of(holder, bases, heads, {}), template_of=(d, hv))
            found = run_ex.run_one(t).template
            assert found is not None
        tpl[d] = found
    wrong = [p for p in done if any(final[d] != h for d, h in p.used.items())]
    if not wrong:
        return done, tpl
    say(f"aligning {len(wrong)} run(s) again to the side's template")
    again = [replace(_task_of(p, bases, heads, tpl), keep_ops=p.ops is not None) for p in wrong]
    redone = {(p.side, p.index): p for p in run_ex.map(again, say)}
    return [redone.get((p.side, p.index), p) for p in done], tpl


def _task_of(
    p: Reduced,
    bases: list[Source],
    heads: list[Source],
    tpl: dict[int, al.DeviceTemplate],
    carry: dict[tuple[int, int], str] | None = None,
) -> FileTask:
    """The task of a reduced file again: its run, its rule, these templates (and for base's
    files, head's renames to carry)."""
    src = (bases if p.side == "base" else heads)[p.index]
    t = FileTask(p.side, p.index, src, p.rule, whole=p.rule.kind == "whole", templates=tpl)
    if p.side == "base" and carry:
        t.carry = carry
    return t


def _find(done: list[Reduced], device: int, hash_: int) -> al.DeviceTemplate | None:
    for p in done:
        for t in p.tops.get(device, []):
            if t.hash == hash_:
                return t
    return None


def _kept_ops(parts_b: list[Reduced], parts_h: list[Reduced]) -> pl.DataFrame:
    """Both sides' aligned ops in one frame, cycles renumbered across runs, collectives split
    into wait and transfer (what the replay and the TUI's events read)."""
    frames = []
    for parts in (parts_b, parts_h):
        off = 0
        for p in parts:
            assert p.ops is not None
            frames.append(p.ops.with_columns(pl.col("cycle") + off) if off else p.ops)
            off += p.n_cycles
    same = all(f.schema == frames[0].schema for f in frames)
    ops = pl.concat(frames, how="vertical" if same else "diagonal_relaxed")
    return at.collective_split(ops)
