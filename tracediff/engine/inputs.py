"""Both sides of a comparison read from what the user gave: `load_sides` and its typed `Sides`.

Stage: engine input (before engine/compare.py). Input: the two paths the user gave (a run file,
a report, a folder of rank files, a run set), the layout, an optional device map and cluster;
output: `Sides`, each side's runs (read, or a run of rank files planned on a cluster's workers),
the sides' labels, the GPU match of head's first run and what was decided each side is
(parse/decided.py). The commands `compare` and `bisect --html` read their sides here, and
`Sides.onto` gives the comparison what was read (`device_map`, `inputs`, the decisions'
warnings).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from tracediff.engine.pipeline.rankrun import RankRun
from tracediff.engine.result import Comparison
from tracediff.parse.ranks.gpus import DeviceMatch
from tracediff.runs.runfile import Run

SideRuns = list[Run | RankRun]
"""One side's runs: read (`Run`), or a run of rank files planned on a cluster (`RankRun`)."""


class Scanner(Protocol):
    """What `load_sides` needs of a cluster (engine/pipeline/cluster.py): round 1 of
    engine/pipeline/rankunit.py, every rank file's scan."""

    def scan(
        self, items: Sequence[tuple[str, bool]], sides: Sequence[str], say: Callable[[str], None]
    ) -> list[Any]: ...


@dataclass(frozen=True)
class Early:
    """Base's run reduced as soon as it was read (`load_sides`' `reduce_base`), and what the
    checks of both sides read of its tables, taken before they went."""

    first: Any
    gpus: list[Any]  # parse/ranks/gpus.py gpus_of
    kernels: int  # parse/sanity.py kernel_count


@dataclass(frozen=True)
class Sides:
    """Both sides as `load_sides` read them."""

    bases: SideRuns
    heads: SideRuns
    labels: tuple[str | None, str | None]
    """The sides' names where a side is a run set (its folder's name, told apart from the
    other's); (None, None) for one run a side (the runs carry their labels)."""
    device_match: DeviceMatch
    """How head's first run's GPUs were matched to base's (parse/ranks/gpus.py)."""
    inputs: dict[str, Any]
    """What was decided each side is (parse/decided.py): `base` / `head` each {line, runs,
    run_set, identities}, `allow_missing_ranks`, and `warnings`: what the decisions gave."""
    first: Any = None
    """What `load_sides`' `reduce_base` made of base's run before head was read (the per-file
    stage's `Reduced`, its `info` as the run's metadata ended); None where it was not called.
    `bases[0]` then holds no tables (runs/runfile.py `Reread`)."""

    def onto(self, result: Comparison) -> Comparison:
        """`result` with what was read of its runs: the GPU match (`device_map`), what was
        decided each side is (`inputs`), and the decisions' warnings before the engine's."""
        return replace(
            result,
            device_map=tuple(self.device_match.rows()),
            inputs=self.inputs,
            warnings=(*self.inputs["warnings"], *result.warnings),
        )


def distinct_labels(base: Path, head: Path, base_label: str, head_label: str) -> tuple[str, str]:
    """Labels that tell the sides apart: two different files that share a label (`a/run.sqlite`
    and `b/run.sqlite` are both "run") are prefixed with their nearest parent folders that differ
    (`a/run`, `b/run`). The same file on both sides keeps its label."""
    if base_label != head_label:
        return base_label, head_label
    pb, ph = base.resolve().parent.parts, head.resolve().parent.parts
    if base.resolve() == head.resolve() or pb == ph:
        return base_label, head_label
    for i in range(1, max(len(pb), len(ph)) + 1):
        if pb[-i:] != ph[-i:]:  # the shortest tails of the two folders that differ
            return "/".join((*pb[-i:], base_label)), "/".join((*ph[-i:], head_label))
    return base_label, head_label  # pragma: no cover (differing folders differ in some tail)


def load_sides(
    base: Path,
    head: Path,
    layout: str,
    say: Callable[[str], None],
    device_map: str | None = None,
    cluster: Scanner | None = None,
    allow_missing_ranks: bool = False,
    reduce_base: Callable[[Run], Any] | None = None,
) -> Sides:
    """Each side's runs (one, or a run set's: parse/sides.py), read and checked against their
    data (parse/grouping.py: ranks or runs, one workload), their GPUs matched to base's first
    run's (parse/ranks/gpus.py); the sides' labels where a side is a run set (its folder's name, told
    apart from the other's); the GPU match of head's first run; what was decided (`inputs`:
    parse/decided.py, each side's line and identities, and the warnings the decisions gave).
    `cluster` (engine/pipeline/cluster.py): a run of several rank files is not read here but scanned on
    its workers (engine/pipeline/rankunit.py), file by file, and reduced there later.
    `reduce_base`: where base is one report read here, its run goes to it before head is read;
    what it returns (None: keep the run) is `Sides.first`, and the run's tables are let go
    (`_early`), so both sides' events are never held at once."""
    from tracediff.parse import grouping, load
    from tracediff.parse import identity as idn
    from tracediff.parse.decided import Decided, decide, describe
    from tracediff.parse.ranks import gpus
    from tracediff.parse.sanity import check_pair, kernel_count
    from tracediff.parse.sides import resolve

    given = gpus.parse_device_map(device_map) if device_map is not None else None
    decided: dict[str, Decided] = {}
    for name, path in (("base", base), ("head", head)):
        if cluster is None:
            decided[name] = decide(
                path,
                layout,  # type: ignore[arg-type]
                say=say,
                allow_missing_ranks=allow_missing_ranks,
            )
        else:
            decided[name] = Decided(resolve(path, layout), None, [])  # type: ignore[arg-type]
    ranked = _ranked(cluster, decided, layout, say, allow_missing_ranks)
    runs: dict[str, SideRuns] = {}
    notes: list[str] = []
    early: Early | None = None
    for name, d in decided.items():
        side = d.side
        notes += [f"{name}: {w}" for w in d.warnings]
        runs[name] = list(d.runs or [])
        for i, path in enumerate(side.runs[len(runs[name]) :], start=len(runs[name])):
            if (name, i) in ranked:
                runs[name].append(ranked[name, i])
                continue
            say(
                f"reading {path}"
                + (f" ({name} run {i + 1}/{len(side.runs)})" if side.is_run_set else "")
            )
            run = load(path, layout=layout, say=say, allow_missing_ranks=allow_missing_ranks)  # type: ignore[arg-type]
            if name == "base" and reduce_base is not None and len(side.runs) == 1:
                early, run = _early(run, path, reduce_base)
            runs[name].append(run)
        if side.is_run_set:
            notes += [
                f"{name}: {w}"
                for w in grouping.check_run_set(
                    [idn.of(r) for r in runs[name]],  # type: ignore[arg-type]  # a RankRun quacks
                    [grouping.run_name(side.path, p) for p in side.runs],
                    side.path,
                    indexed=side.indexed,
                    forced=layout == "runs",
                )
            ]
    ref = early.gpus if early is not None else None
    bases, heads, dmatch = gpus.align_sides(runs["base"], runs["head"], given, ref)
    kb = [early.kernels if early is not None and not i else kernel_count(b)
          for i, b in enumerate(bases)]  # fmt: skip
    kh = [kernel_count(h) for h in heads]
    for b, nb in zip(bases, kb, strict=True):
        for h, nh in zip(heads, kh, strict=True):
            check_pair(b, h, (nb, nh))
    sb, sh = decided["base"].side, decided["head"].side
    inputs = {
        "base": describe("base", bases, sb.is_run_set),
        "head": describe("head", heads, sh.is_run_set),
        "allow_missing_ranks": allow_missing_ranks,
        "warnings": notes,
    }
    if not sb.is_run_set and not sh.is_run_set:
        bases[0].metadata["label"], heads[0].metadata["label"] = distinct_labels(
            base, head, bases[0].label, heads[0].label
        )
        return Sides(bases, heads, (None, None), dmatch, inputs, _first(early, bases[0]))
    name_b, name_h = (p.resolve().name if p.is_dir() else bases[0].label for p in (base, head))
    labels = distinct_labels(base, head, name_b, name_h)
    return Sides(bases, heads, labels, dmatch, inputs, _first(early, bases[0]))


def _first(early: Early | None, run: Any) -> Any:
    """`early`'s reduced run with the run's metadata and warnings as they end (its label), as
    the per-file stage would have copied them reducing it now."""
    if early is None:
        return None
    return replace(early.first, info=Run({}, dict(run.metadata), list(run.warnings)))


def _early(run: Run, path: Path, reduce_base: Callable[[Run], Any]) -> tuple[Early | None, Run]:
    """Base's run, read from a report (a run file is read lazily, page by page: it is kept),
    given to `reduce_base` before head is read; where it took it, the run without its tables
    (read from `path` again if a redo of its per-file stage asks for them) and what the sides'
    checks read of them (its GPUs, its kernels)."""
    from tracediff.parse import load
    from tracediff.parse.ranks.gpus import gpus_of
    from tracediff.parse.sanity import kernel_count
    from tracediff.runs.runfile import Reread

    if run.metadata.get("run_file") or not path.is_file():
        return None, run
    gpus, kernels = gpus_of(run), kernel_count(run)
    first = reduce_base(run)
    if first is None:
        return None, run
    return Early(first, gpus, kernels), Reread(run, lambda: load(path))


def _ranked(
    cluster: Scanner | None,
    decided: dict[str, Any],
    layout: str,
    say: Callable[[str], None],
    allow_missing_ranks: bool = False,
) -> dict[tuple[str, int], Any]:
    """The runs of several rank files, scanned on the cluster's workers (engine/pipeline/rankunit.py),
    by (side, run index); {} without a cluster. A side that is one folder whose files turn out
    to be separate runs (parse/grouping.py) becomes the run set of them (`decided` is updated)."""
    if cluster is None:
        return {}
    from tracediff.engine.pipeline import rankunit
    from tracediff.parse import grouping
    from tracediff.parse.decided import Decided
    from tracediff.parse.sides import Side, rank_files

    found: dict[tuple[str, int], list[Path]] = {}
    for name, d in decided.items():
        for i, path in enumerate(d.side.runs):
            if path.is_dir() and layout != "runs" and not any(path.glob("*.parquet")):
                files = rank_files(path, layout)  # type: ignore[arg-type]
                if files is not None and len(files) > 1:
                    found[name, i] = files
    if not found:
        return {}
    flat = [(k, str(f)) for k, fs in found.items() for f in fs]
    # base's first run finds the cycle range: its files count each range's ops as they scan
    items = [(f, k == ("base", 0)) for k, f in flat]
    scans = cluster.scan(items, [k[0] for k, _ in flat], say)
    out: dict[tuple[str, int], Any] = {}
    at = 0
    for k, fs in found.items():
        got = scans[at : at + len(fs)]
        scans[at : at + len(fs)] = [None] * len(fs)  # freed once its run is planned
        at += len(fs)
        side = decided[k[0]].side
        try:
            rr = rankunit.plan_run(
                [str(f) for f in fs],
                got,
                side.runs[k[1]],
                forced=layout == "ranks",
                allow_missing_ranks=allow_missing_ranks,
            )
        except grouping.NotOneRun as e:
            if side.is_run_set:
                raise
            decided[k[0]] = Decided(
                Side(side.path, tuple(e.paths), True),
                None,
                [f"{e.message}: read as a run set of {len(fs)} runs (--layout runs says so)"],
            )
            continue
        if rr.metadata.get("gpus"):  # else (no GPU work): read here as before
            out[k] = rr
    return out
