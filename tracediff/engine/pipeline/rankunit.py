"""A rank file as the unit of work: one run of many rank files read, cut and reduced file by file.

Stage: engine (the per-file stage for runs of several rank files; engine/pipeline/reduce.py does one
file or one joined run). Used with `--scheduler` (engine/pipeline/cluster.py spreads the files over the
workers) so that no process holds a whole run of hundreds of ranks. Input: each side's rank
folders; output: the `Reduced` of each run, the same tables the joined run's reduction gives,
so engine/pipeline/join.py's driver join is unchanged.

The work, in rounds (each a map over files; only small tables come back):

1. `scan` (every file): read it; its facts for the join (parse/ranks/combine.py `FileFacts`: GPUs,
   processes, NCCL end times, warnings, metadata), its record counts (parse/sanity.py) and its
   host ranges. The driver decides the join as parse/ranks/combine.py does (`plan_runs`: clock shifts
   and cross-host offsets, device and process ids) and matches GPUs to base's (parse/ranks/gpus.py,
   from the GPU identities alone): the driver never reads a report.
2. Base's first run without a rule: the driver numbers each candidate host range's cycles
   across the run's processes (engine/cycle/ranges.py `candidates`), each file counts the ops they
   launched (`probe`), and the driver picks the range as the joined run's cut would. Without a
   range that fits, every file finds its GPUs' kernel periods (each GPU's own: engine/cycle/period.py)
   and the driver collects them into the rule.
3. `reduce` (every file): read it again, place it on the run's clock and ids, cut it (host
   ranges: at the cycles the driver numbered for its processes), align each GPU to the side's
   template (base's first run: to its own most frequent sequence) and reduce. The driver puts
   the files' tables together (`merge`) and says the cut's warnings from the summed counts.

A worker holds one file's parse and its tables at a time. On a Dask worker the scan keeps the
file's parse as a run file in the worker's scratch folder and the file's later rounds are sent
to that worker first, which reads it back instead of parsing the report again
(engine/pipeline/rankcache.py; a task run elsewhere parses the file).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine.cycle import find as cycles
from tracediff.engine.cycle import ranges as rg
from tracediff.engine.cycle.period import RuleMismatch, by_kernel_period
from tracediff.engine.cycle.segmentation import CycleRule, Segmentation, no_phases, no_ranges
from tracediff.engine.ops import gpu_ops_counted
from tracediff.engine.pipeline import rankcache
from tracediff.engine.pipeline import rankmerge as rm
from tracediff.engine.pipeline.rankrun import RankFile, RankRun
from tracediff.engine.pipeline.reduce import FileTask, Reduced, reduce_cut, refusal
from tracediff.parse import sanity
from tracediff.parse.ranks import combine as jn
from tracediff.runs.runfile import Run

Each = Callable[[int, Any], Any]


class Map(Protocol):
    """How a round runs: map(fn, items, sides, verb, each) -> results in item order
    (engine/pipeline/cluster.py on the workers, `local_map` here); `verb` names the progress line
    ("read", "reduced"); `each(i, result)`, where given, is kept in place of item i's result,
    called as each comes back (engine/pipeline/rankmerge.py keeps a file's tables small that way)."""

    def __call__(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        sides: Sequence[str],
        verb: str,
        each: Each | None = None,
    ) -> list[Any]: ...


@dataclass
class Scanned:
    """One file's scan (round 1)."""

    facts: jn.FileFacts
    counts: dict[str, sanity.Counts]
    ranges: pl.DataFrame
    kernels: int
    coverage: dict[tuple[str | None, str], int] | None = None  # base's first run: `covered`
    n_ops: int = 0
    worker: str | None = None  # the Dask worker that read it (and kept its parse: rankcache)


PROBE_KEYS = 64
"""Base's first run: a file with at most this many range names counts each one's coverage in
its scan (else the driver asks in a round of its own)."""


def scan(item: str | tuple[str, bool]) -> Scanned:
    """Round 1 on a worker: the file's facts, counts and host ranges (module doc); `item`: the
    path, or (path, whether the file is of base's first run: then also `covered`)."""
    from tracediff.parse import load

    path, probe = (item, False) if isinstance(item, str) else item
    run = load(Path(path))
    kept = rankcache.keep(path, run)  # on a Dask worker: for the reduce round (rankcache.py)
    rng = rg.read_ranges(run)
    rng = rng.with_columns(pl.col(c).cast(pl.String) for c, t in rng.schema.items()
                           if isinstance(t, (pl.Categorical, pl.Enum)))  # fmt: skip
    facts = jn.facts_of(run)
    counts = sanity.counts(run)  # (load's check counted them: kept with the run)
    out = Scanned(facts, counts, rng, counts["kernels"].height)
    if probe and rng.height:
        out.coverage, out.n_ops = covered(run, rng)
    out.worker = rankcache.worker() if kept else None
    return out


def covered(run: Run, rng: pl.DataFrame) -> tuple[dict[tuple[str | None, str], int] | None, int]:
    """Per range name of the file, how many of its ops that name's outermost ranges launched
    (the run's candidates' coverage where the driver's numbering keeps every such range), and
    its op count; None past PROBE_KEYS names."""
    keys = rng.select("domain", "key").unique().rows()
    if len(keys) > PROBE_KEYS:
        return None, 0
    ops, _ = gpu_ops_counted(run)
    one = pl.lit(0, pl.Int64).alias("cycle")  # (the count does not need the numbering)
    return {
        (d, k): rg.coverage(ops, rg.outermost(rg.exact(rng, (d, k))).with_columns(one))
        for d, k in keys
    }, ops.height


def plan_run(
    files: list[str],
    scans: list[Scanned],
    source: Path,
    *,
    forced: bool = False,
    allow_missing_ranks: bool = False,
) -> RankRun:
    """The driver's join of one run's scanned files (parse/ranks/combine.py `plan`, parse/load.py
    `load_files`' checks, parse/grouping.py's: NotOneRun where the files are separate runs),
    without their tables."""
    from tracediff.parse import grouping
    from tracediff.parse import identity as idn
    from tracediff.parse.load import files_of_run

    paths, ranks, _ = files_of_run([Path(f) for f in files], source)
    ids = [idn.of_metadata(s.facts.metadata) for s in scans]
    notes, missing = grouping.check_ranks(
        [i for i in ids if i is not None],
        paths,
        source,
        forced=forced,
        allow_missing_ranks=allow_missing_ranks,
    )
    p = jn.plan([s.facts for s in scans], ranks, source)
    p.warnings[:0] = notes
    if missing and p.metadata.get("identity"):
        p.metadata["identity"]["missing_ranks"] = missing
    counts: dict[str, sanity.Counts] = {}
    for s in scans:
        for t, c in s.counts.items():
            counts[t] = counts.get(t, sanity.Counts()) + c
    warnings = p.warnings + sanity.check_counts(counts, str(source))
    shifted = [
        s.ranges.with_columns(
            pl.col("start_ns") + p.shifts[i],
            pl.col("end_ns") + p.shifts[i],
            pl.col("process_id") + p.pid_offsets[i],
        )
        for i, s in enumerate(scans)
    ]
    ranges = pl.concat(shifted, how="diagonal_relaxed") if shifted else pl.DataFrame()
    cover = [s.coverage for s in scans]
    rfiles = [
        RankFile(
            str(f), p.shifts[i], p.pid_offsets[i], p.ids[i],
            tuple(sorted(x + p.pid_offsets[i] for x in scans[i].facts.pids)), scans[i].worker,
        )
        for i, f in enumerate(paths)
    ]  # fmt: skip
    rr = RankRun(rfiles, p.metadata, warnings, ranges, sum(s.kernels for s in scans))
    if all(c is not None for c in cover):
        rr.coverage = (cover, sum(s.n_ops for s in scans))  # type: ignore[assignment]
    return rr


@dataclass
class Sub:
    """One file's task in rounds 2 and 3."""

    task: FileTask  # the run's task; its source: the run `slim` to this file, its templates
    i: int  # the file's place in the run
    mode: str  # "probe" | "whole" | "find" (kernel periods) | "period" | "range"
    cyc: pl.DataFrame = field(default_factory=pl.DataFrame)  # range: its processes' cycles
    phases: pl.DataFrame = field(default_factory=pl.DataFrame)
    cands: list[pl.DataFrame] = field(default_factory=list)  # probe: each candidate's cycles
    rule: CycleRule | None = None  # range: the rule (found on the run, or the task's)


def _open(sub: Sub) -> Run:
    rr: RankRun = sub.task.source
    return rr.placed(0, rankcache.load(rr.files[0].path))  # kept by its scan, else parsed


def reduce_sub(sub: Sub) -> Reduced | tuple[int, list[int]]:
    """Rounds 2 and 3 on a worker, one file (module doc)."""
    task, rr = sub.task, sub.task.source
    run = _open(sub)
    ops, dropped = gpu_ops_counted(run)
    run.release()
    if sub.mode == "probe":
        return ops.height, [rg.coverage(ops, c) for c in sub.cands]
    out = Reduced(task.side, task.index, Run(tables={}, metadata={}), dropped=dropped)
    if ops.height == 0:
        out.no_ops = True
        return out
    try:
        if sub.mode == "whole":
            seg = cycles.whole(ops)
        elif sub.mode in ("find", "period"):
            rule = task.rule if sub.mode == "period" else None
            seg = by_kernel_period(ops, run.path, rule, rr.devices, some=rule is None)
        else:
            assert sub.rule is not None
            tagged, n_other = rg.tag(ops, sub.cyc, sub.phases)
            out.range_counts = (ops.height, tagged.height, n_other)
            seg = Segmentation(tagged, no_ranges(), no_phases(), sub.rule)
    except RuleMismatch as e:
        out.mismatch = e.message
        return out
    except AnalysisError as e:
        e = refusal(task, e)
        out.error = (e.message, e.hint)
        return out
    del ops
    if seg.ops.height == 0:  # finding: none of its GPUs repeats (the driver judges the run)
        out.rule, out.seg_warnings = seg.rule, list(seg.warnings)
        return out
    out = reduce_cut(task, out, run, seg)
    if out.long.height:
        out.long = out.long.with_columns(pl.col("kind", "name", "phase").cast(pl.Categorical))
    return out


def _slim(task: FileTask, i: int) -> FileTask:
    """The task of file i alone: the run slimmed to it, the templates of its GPUs."""
    rr: RankRun = task.source
    mine = _devices(rr, i)
    return replace(
        task,
        source=rr.slim(i),
        templates={d: v for d, v in task.templates.items() if d in mine},
        carry={k: v for k, v in task.carry.items() if k[0] in mine},
    )


def _devices(rr: RankRun, i: int) -> set[int]:
    """File i's GPUs, under the ids the engine sees."""
    return {rr.relabel.get(d, d) for d in rr.files[i].ids.values()}


def reduce_runs(tasks: Sequence[FileTask], run_map: Map) -> list[Reduced]:
    """Each task's run (a RankRun) reduced file by file through `run_map` (module doc); the
    files of all tasks go in one round."""
    plans: list[tuple[FileTask, list[Sub], Any]] = []
    done: dict[int, Reduced] = {}
    for k, t in enumerate(tasks):
        got = _subs(t, run_map)
        if isinstance(got, Reduced):
            done[k] = got
        else:
            ss, ctx = got
            rr: RankRun = t.source
            if t.template_of is not None:  # only the file that holds the GPU can say it
                ss = [s for s in ss if t.template_of[0] in _devices(rr, s.i)]
            if t.only is not None:  # the TUI's events of one GPU: its file only
                ss = [s for s in ss if t.only[0] in _devices(rr, s.i)]
            plans.append((t, ss, ctx))
    subs = [s for _, ss, _ in plans for s in ss]
    leaders = [rm.Leaders(len(ss)) for _, ss, _ in plans]
    at = [(k, j) for k, (_, ss, _) in enumerate(plans) for j in range(len(ss))]

    def each(n: int, got: Any) -> Any:  # kept small as it comes back (engine/pipeline/rankmerge.py)
        k, j = at[n]
        return leaders[k].arrived(j, got)

    if subs:  # the results are the Leaders' parts
        run_map(reduce_sub, subs, [s.task.side for s in subs], "reduced", each)
    out = []
    k_plan = iter(zip(plans, leaders, strict=True))
    for k, t in enumerate(tasks):
        if k in done:
            out.append(done[k])
            continue
        (_, _, ctx), ld = next(k_plan)
        parts, lead, coll = ld.handed()
        merged = rm.merge(t, ctx, parts, lead, coll)
        del parts
        if merged is None:  # no GPU's kernels repeat: the whole run is one cycle
            again = replace(t, rule=CycleRule.whole(), whole=True)
            merged = reduce_runs([again], run_map)[0]
            merged.seg_warnings.append(
                "no cycle markers and no repeating kernel sequence: compared the whole run as "
                "one cycle"
            )
            merged.rule = CycleRule.whole()
        out.append(merged)
    return out


def in_process(task: FileTask) -> Reduced:
    return reduce_runs([task], local_map)[0]


def local_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    sides: Sequence[str],
    verb: str,
    each: Each | None = None,
) -> list[Any]:
    if each is None:
        return [fn(x) for x in items]
    return [each(i, fn(x)) for i, x in enumerate(items)]


def _subs(task: FileTask, run_map: Map) -> Reduced | tuple[list[Sub], rm.Ctx]:
    """The run's file tasks and the driver's decisions (module doc), or the run's refusal."""
    rr: RankRun = task.source
    n = len(rr.files)
    rule = task.rule if task.rule is not None else cycles.user_rule(task.cycle)
    if task.whole or (rule is not None and rule.kind == "whole"):
        ctx = rm.Ctx("whole", CycleRule.whole())
        return [Sub(_slim(task, i), i, "whole") for i in range(n)], ctx
    if rule is not None and rule.kind == "kernel-period":
        return [Sub(_slim(task, i), i, "period") for i in range(n)], rm.Ctx("period", rule)
    try:
        if rule is None:
            rule = _found_range(task, rr, run_map)
            if rule is None:
                notes = [w for w in [rg.markerless_note(rr.ranges)] if w]
                subs = [Sub(_slim(task, i), i, "find") for i in range(n)]
                return subs, rm.Ctx("find", notes=notes)
            cyc, moved = rg.cut_at(rr.ranges, rule, rr.path)
        else:
            if rr.ranges.height == 0:
                raise AnalysisError(
                    f"{rr.path}: no NVTX ranges or annotations to cut cycles at",
                    "drop --cycle to cut cycles from the kernel sequence",
                )
            cyc, moved = rg.cut_at(rr.ranges, rule, rr.path)
    except AnalysisError as e:
        out = rm.empty(task)
        e = refusal(task, e)
        out.error = (e.message, e.hint)
        return out
    phases = rg.phases_in(rr.ranges, cyc)
    rng, ph = rg.host_ranges(cyc, phases)
    subs = []
    for i in range(n):
        pids = _pids(rr, i)
        mine = pl.col("process_id").is_in(pids)
        subs.append(
            Sub(_slim(task, i), i, "range", cyc.filter(mine), phases.filter(mine), rule=rule)
        )
    notes = [w for w in [rg.tool_cut_note(cyc, rule.label[len("nvtx:") :])] if w]
    return subs, rm.Ctx("range", rule, moved, rng, ph, notes=notes)


def _pids(rr: RankRun, i: int) -> list[int]:
    return list(rr.files[i].pids)


def _found_range(task: FileTask, rr: RankRun, run_map: Map) -> CycleRule | None:
    """Base's first run: the host range the joined run's cut would find (engine/cycle/ranges.py
    `best`), from each file's coverage of every candidate; None: none fits."""
    if rr.ranges.height == 0:
        return None
    cands = rg.candidates(rr.ranges)
    if not cands:
        return None
    whole = [rg.outermost(rg.exact(rr.ranges, key)).height == c.height for key, _, c in cands]
    if rr.coverage is not None and all(whole):  # the scans counted these very ranges
        per_file, n_ops = rr.coverage
        covered = [sum(f.get(key, 0) for f in per_file) for key, _, _ in cands]
        k = rg.best(cands, covered, n_ops) if n_ops else None
        return None if k is None else CycleRule.range_at(cands[k][0])
    subs = []
    for i in range(len(rr.files)):
        mine = pl.col("process_id").is_in(_pids(rr, i))
        cs = [c.filter(mine) for _, _, c in cands]
        subs.append(Sub(_slim(replace(task, templates={}), i), i, "probe", cands=cs))
    got = run_map(reduce_sub, subs, [task.side] * len(subs), "probed")
    n_ops = sum(g[0] for g in got)
    covered = [sum(g[1][k] for g in got) for k in range(len(cands))]
    if n_ops == 0:
        return None
    k = rg.best(cands, covered, n_ops)
    return None if k is None else CycleRule.range_at(cands[k][0])
