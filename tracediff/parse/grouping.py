"""Which files are ranks of one run and which are separate runs, decided from their identities.

Stage: parse (after each file is read, before the join or the run set). Input: the files'
identities (parse/identity.py); output: a decision, warnings, or a one-line refusal.

File names (ranknames.py) are a hint only. Files are ranks of one run when their data says one
job; separate processes with disjoint windows are separate runs. The evidence (`weigh`):

- for one job: windows that all overlap on the UTC clock (files of different hosts: within
  CROSS_HOST_SLACK_NS, their clocks not yet aligned); distinct ranks (Kineto
  `distributedInfo`, the launcher's RANK in an nsys report's environment) under one world size;
- for separate runs: windows (UTC) that do not all overlap; two files of one rank, or of
  different world sizes; every file on the same GPU (UUID) at different times.

Only one kind of evidence: that is the decision. Both (ranks 0..3 of a world size 4, but their
windows days apart: two jobs, or clocks that cannot be aligned) or neither (no time origin, no
rank): refused, naming `--layout`. Two tracers (nsys and Kineto) in one run are refused.
A job whose world size is known and some of whose ranks have no file is refused unless
`allow_missing_ranks` (`--allow-missing-ranks`), and then said in a warning and in the run's
identity (`missing_ranks`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tracediff.base.errors import InputError
from tracediff.parse import identity as idn

Kind = Literal["ranks", "runs", "conflict", "unknown"]
LAYOUT_HINT = (
    "--layout ranks joins the files as one run, --layout runs reads each as a run of a run set"
)
CROSS_HOST_SLACK_NS = 60 * 10**9
"""How far apart two hosts' clocks may place one job's windows (unsynchronised clocks) and the
windows still be taken to overlap; one host's files (or files naming no host) get none."""


class NotOneRun(InputError):
    """The files named as one run's ranks are separate runs by their data. `runs`: the files'
    runs as read (a caller that takes a run set uses them instead of reading them again)."""

    def __init__(self, message: str, hint: str | None, paths: list[Path], runs: list[Any]) -> None:
        super().__init__(message, hint)
        self.paths = paths
        self.runs = runs


@dataclass(frozen=True)
class Decision:
    kind: Kind
    for_ranks: tuple[str, ...] = ()
    for_runs: tuple[str, ...] = ()
    tracers: tuple[str, ...] = field(default=())

    def why(self) -> str:
        parts = list(self.for_ranks if self.kind == "ranks" else self.for_runs)
        if self.kind in ("conflict", "unknown"):
            parts = [*self.for_ranks, *self.for_runs]
        return "; ".join(parts) or "no time origin, rank or GPU identity in the traces"


def _span(ns: int) -> str:
    s = ns / 1e9
    if s >= 86_400 * 365:
        return f"{s / (86_400 * 365.25):.1f} years"
    if s >= 86_400:
        return f"{s / 86_400:.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 1:
        return f"{s:.1f} s"
    return f"{s * 1e3:.1f} ms"


def _windows(ids: list[dict[str, Any]], ranks: list[str], runs: list[str]) -> bool | None:
    """Adds the windows' evidence; True: they all overlap, False: not, None: unknown. Files of
    different hosts (each named) may be CROSS_HOST_SLACK_NS apart: their clocks are aligned only
    later, from their collectives (clocks.py)."""
    ws = [(i["window"]["start_utc_ns"], i["window"]["end_utc_ns"]) for i in ids]
    if any(s is None or e is None for s, e in ws):
        return None
    hosts = [i.get("host") for i in ids]
    slack = CROSS_HOST_SLACK_NS if None not in hosts and len(set(hosts)) > 1 else 0
    if max(s for s, _ in ws) <= min(e for _, e in ws) + slack:
        ranks.append("their time windows overlap" + (" (hosts' clocks apart)" if slack else ""))
        return True
    order = sorted(ws)
    disjoint = all(a[1] + slack < b[0] for a, b in zip(order, order[1:], strict=False))
    span = max(e for _, e in ws) - min(s for s, _ in ws)
    what = "disjoint" if disjoint else "not all overlapping"
    runs.append(
        f"their time windows are {what} ({idn.utc_text(order[0][0])} to "
        f"{idn.utc_text(order[-1][1])} UTC, a {_span(span)} span)"
    )
    return False


def weigh(ids: list[dict[str, Any]]) -> Decision:
    """The evidence of `ids` (one per file) for one job and for separate runs."""
    tracers = tuple(sorted({i["tracer"] for i in ids}))
    ranks: list[str] = []
    runs: list[str] = []
    overlap = _windows(ids, ranks, runs)
    rank_of = [i.get("rank") for i in ids]
    worlds = {int(i["world_size"]) for i in ids if i.get("world_size") is not None}
    if len(worlds) > 1:
        runs.append(f"world sizes {', '.join(map(str, sorted(worlds)))}")
    if None not in rank_of:
        if len(set(rank_of)) == len(rank_of):
            if len(worlds) <= 1:
                ranks.append(f"distinct ranks {_ranges(rank_of)}")  # type: ignore[arg-type]
        else:
            dup = next(r for r in rank_of if rank_of.count(r) > 1)
            runs.append(f"{rank_of.count(dup)} files say rank {dup}")
    uuids = [tuple(sorted(g["uuid"] or "" for g in i["gpus"])) for i in ids]
    if overlap is not True and all(u and all(u) for u in uuids) and len(set(uuids)) == 1:
        runs.append(f"all on {idn.short_gpu(ids[0]['gpus'][0])}")
    if ranks and not runs:
        kind: Kind = "ranks"
    elif runs and not ranks:
        kind = "runs"
    else:
        kind = "conflict" if ranks else "unknown"
    return Decision(kind, tuple(ranks), tuple(runs), tracers)


def _ranges(values: list[int]) -> str:
    """`0-3, 5, 7-127`."""
    vs = sorted(set(values))
    out: list[str] = []
    start = prev = vs[0]
    for v in [*vs[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


def missing_ranks(ids: list[dict[str, Any]]) -> list[int]:
    """The ranks of the files' world size that no file holds ([] when unknown or complete)."""
    worlds = {int(i["world_size"]) for i in ids if i.get("world_size") is not None}
    have = [i.get("rank") for i in ids]
    if len(worlds) != 1 or None in have:
        return []
    return sorted(set(range(worlds.pop())) - {int(str(r)) for r in have})


def check_ranks(
    ids: list[dict[str, Any]],
    paths: list[Path],
    source: Path | str,
    *,
    forced: bool,
    allow_missing_ranks: bool = False,
    runs: list[Any] | None = None,
) -> tuple[list[str], list[int]]:
    """Whether `paths` (their identities `ids`) are one run's ranks: the warnings to say and the
    missing ranks (allowed), or a refusal. `forced`: the user said so (`--layout ranks`, or the
    files given one by one): only data that says otherwise refuses; else the data must say it.
    NotOneRun (carrying `runs`) where the data says separate runs and nothing was forced."""
    warnings: list[str] = []
    if len(ids) < 2:
        return warnings, []
    d = weigh(ids)
    n = len(ids)
    if len(d.tracers) > 1:
        raise InputError(
            f"{source}: files of two tracers ({' and '.join(d.tracers)}) cannot be one run",
            "capture every rank with the same profiler, or compare them as separate runs",
        )
    if d.kind == "runs":
        if forced:
            raise InputError(
                f"{source}: the {n} files are separate runs, not one job's ranks ({d.why()})",
                "--layout runs reads them as a run set; give one job's files to join them",
            )
        raise NotOneRun(
            f"{source}: the names say {n} ranks of one run, the data says {n} separate runs "
            f"({d.why()})",
            "compare, info and export read the folder as a run set (--layout runs); parse each "
            "file by itself",
            paths,
            runs or [],
        )
    if d.kind == "conflict":
        raise InputError(
            f"{source}: the {n} files cannot be one run: {'; '.join(d.for_ranks)}, but "
            f"{'; '.join(d.for_runs)} (two jobs, or clocks that cannot be aligned)",
            "put each job's files in a folder of their own; " + LAYOUT_HINT,
        )
    if d.kind == "unknown":
        if not forced:
            raise InputError(
                f"{source}: cannot tell from the data whether the {n} files are one run's ranks or "
                f"{n} runs (no time origin, rank or GPU identity says)",
                LAYOUT_HINT,
            )
        warnings.append(
            f"{source}: joined as one run as asked; the data cannot confirm the {n} files are "
            "one job's ranks"
        )
    missing = missing_ranks(ids)
    if missing:
        world = next(i["world_size"] for i in ids if i.get("world_size") is not None)
        what = f"rank{'s' if len(missing) > 1 else ''} {_ranges(missing)} of world size {world}"
        if not allow_missing_ranks:
            raise InputError(
                f"{source}: {what} {'have' if len(missing) > 1 else 'has'} no file "
                f"(the {n} files hold ranks {_ranges([int(i['rank']) for i in ids])})",
                "add the missing ranks' files, or pass --allow-missing-ranks to read the ranks "
                "present as the run",
            )
        warnings.append(f"{source}: {what} missing (--allow-missing-ranks): read without them")
    return warnings, missing


KERNEL_SIMILARITY = 0.8
"""Runs of one set share at least this Jaccard similarity of their kernel-name sets (estimated
from the identities' sketches): a run with another autotune pick or a few kernels more still
belongs; different models, batch shapes or code paths do not (README: What tracediff decided)."""
NVTX_SIMILARITY = 0.8
"""The same for the NVTX range names (digits folded), where both runs have some."""


def run_name(folder: Path, run: Path) -> str:
    """A run of a set as messages name it: its capture folder, else its file name."""
    run = Path(run)
    inner = run.parent if run.parent.resolve() != Path(folder).resolve() else run
    return inner.name


def _same_capture(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two identities of one capture (a copy of the same trace): same processes and window."""
    wa, wb = a["window"], b["window"]
    return bool(
        a["process_ids"] == b["process_ids"]
        and wa["start_ns"] == wb["start_ns"]
        and wa["end_ns"] == wb["end_ns"]
        and wa["start_utc_ns"] == wb["start_utc_ns"]
        and a["fingerprint"]["kernels"] == b["fingerprint"]["kernels"]
    )


def check_run_set(
    ids: list[dict[str, Any]],
    names: list[str],
    folder: Path | str,
    *,
    indexed: bool = False,
    forced: bool = False,
) -> list[str]:
    """The runs of one set (`names`: how to name each) are repeats of one workload: refused when
    they are of two tracers or GPU counts, or their kernel or NVTX name sets differ beyond
    KERNEL_SIMILARITY / NVTX_SIMILARITY, or their data says one job's ranks (`forced`: the user
    said runs, `--layout runs`: then a warning); the same capture twice is refused in an index
    (`indexed`) and said in a warning otherwise."""
    warnings: list[str] = []
    if len(ids) < 2:
        return warnings
    hint = "keep one workload's runs in a run set (move the others to a folder of their own)"
    first = ids[0]
    for i, name in zip(ids[1:], names[1:], strict=True):
        if i["tracer"] != first["tracer"]:
            raise InputError(
                f"{folder}: {names[0]} is a {first['tracer']} trace, {name} a {i['tracer']} one: "
                "not repeats of one capture",
                hint,
            )
        ga, gb = first["fingerprint"]["gpu_count"], i["fingerprint"]["gpu_count"]
        if ga != gb:
            raise InputError(
                f"{folder}: runs of different workloads: {names[0]} ran on {ga} GPU(s), {name} "
                f"on {gb}",
                hint,
            )
        ks = idn.similarity(first["fingerprint"]["kernels"], i["fingerprint"]["kernels"])
        if ks < KERNEL_SIMILARITY:
            raise InputError(
                f"{folder}: runs of different workloads: {names[0]} and {name} share "
                f"{ks:.0%} of their kernel names (a run set's runs share >= "
                f"{KERNEL_SIMILARITY:.0%})",
                hint,
            )
        na, nb = idn.nvtx_sketch(first), idn.nvtx_sketch(i)
        if na and nb and (ns := idn.similarity(na, nb)) < NVTX_SIMILARITY:
            raise InputError(
                f"{folder}: runs of different workloads: {names[0]} and {name} share {ns:.0%} "
                f"of their NVTX range names (a run set's runs share >= {NVTX_SIMILARITY:.0%})",
                hint,
            )
    dup = [
        (names[a], names[b])
        for a in range(len(ids))
        for b in range(a + 1, len(ids))
        if _same_capture(ids[a], ids[b])
    ]
    if dup:
        what = f"{dup[0][0]} and {dup[0][1]} are the same capture (same processes and window)"
        if indexed:
            raise InputError(
                f"{folder}: {what}: a run counted twice",
                "list each run once in the index (re-run the capture to rewrite it)",
            )
        warnings.append(f"{folder}: {what}: it counts as {len(dup) + 1} runs")
    else:
        d = weigh(ids)
        if d.kind == "ranks" and forced:
            warnings.append(
                f"{folder}: read as {len(ids)} runs as asked (--layout runs), though their data "
                f"says one job's ranks ({d.why()})"
            )
        elif d.kind == "ranks":
            raise InputError(
                f"{folder}: the {len(ids)} files are one job's ranks by their data ({d.why()}), "
                "not repeated runs",
                "--layout ranks joins them as one run",
            )
    return warnings
