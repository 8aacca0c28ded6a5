"""Input dispatch: run file, nsys report (.sqlite/.nsys-rep/.qdstrm/parquetdir), Kineto trace,
or a folder / list of one run's per-rank files.

Stage: parse. Input: a path (or paths); output: a `Run`. Detection is by content (magic bytes),
with the extension only as a tie-breaker, so a renamed file is still read correctly. Several
files of one run are read in parallel (pool.py) and joined into one run (ranks/combine.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tracediff.base.errors import InputError
from tracediff.parse import identity
from tracediff.parse.sanity import check_run
from tracediff.runs.runfile import MAGIC as RUN_MAGIC
from tracediff.runs.runfile import Run, read_run

if TYPE_CHECKING:
    from tracediff.parse.pool import Executor

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"  # .nsys-rep/.qdrep, whatever the file is named
QDSTRM_MARK = b"NVIDIA Nsight Systems"  # a .qdstrm's header, after an 8-byte prefix


def detect(path: Path) -> str:
    """Return one of: run, nsys-sqlite, nsys-rep, qdstrm, parquetdir, kineto, ranks (a folder
    of one run's per-rank files)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file", "check the path")
    if path.is_dir():
        if any(path.glob("*.parquet")):
            return "parquetdir"
        from tracediff.parse.sides import rank_files

        if rank_files(path) is not None:
            return "ranks"
        raise InputError(
            f"{path}: is a directory, not a report",
            "give a report file, an `nsys export --type parquetdir` folder, or a folder of one "
            "run's per-rank files (README: One run from many files)",
        )
    if not path.is_file():  # a FIFO would block open() forever, and every reader re-reads its input
        raise InputError(
            f"{path}: not a regular file (a pipe, socket or device)",
            "save the data to a file first",
        )
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise InputError(
            f"{path}: cannot read: {e.strerror}", "check the path and permissions"
        ) from None
    if not head:
        raise InputError(f"{path}: file is empty", "give a report or trace with data in it")
    if head.startswith(RUN_MAGIC):
        return "run"
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(NSYS_REP_MAGIC):  # a report renamed .sqlite is still a report (#17)
        return "nsys-rep"
    if QDSTRM_MARK in head[:40]:
        return "qdstrm"
    name = path.name.lower()
    if name.endswith(".nsys-rep") or name.endswith(".qdrep"):
        return "nsys-rep"
    if name.endswith(".qdstrm"):
        return "qdstrm"
    if (
        head[:2] == b"\x1f\x8b"
        or head.lstrip()[:1] in (b"{", b"[")
        or name.endswith((".json", ".json.gz"))
    ):
        _refuse_own_trace(path, head)
        return "kineto"
    raise InputError(
        f"{path}: unrecognised file type",
        "give a .nsys-rep, .sqlite, .qdstrm, parquetdir folder, Kineto .json[.gz] or tracediff .arrow",
    )


OWN_TRACE_MARK = b'"tracediff_version"'
"""In the first bytes of every `compare --perfetto` trace (its otherData comes first)."""


def _refuse_own_trace(path: Path, head: bytes) -> None:
    """tracediff's own Perfetto output is Chrome JSON as Kineto's is, and read as a (meaningless)
    profile before (#17): it holds both runs, cycle-aligned, not one capture."""
    import gzip
    import zlib

    try:
        with gzip.open(path, "rb") if head[:2] == b"\x1f\x8b" else open(path, "rb") as f:
            start = f.read(256)
    except (OSError, EOFError, zlib.error):
        return  # unreadable: the Kineto reader says why
    if OWN_TRACE_MARK in start:
        raise InputError(
            f"{path}: a tracediff Perfetto trace (written by `compare --perfetto`), not a profile",
            "compare the runs it was made from; open this file in ui.perfetto.dev",
        )


def load(
    path: Path,
    *,
    layout: Literal["auto", "runs", "ranks"] = "auto",
    say: Callable[[str], None] | None = None,
    workers: int | None = None,
    executor: Executor | None = None,
    allow_missing_ranks: bool = False,
) -> Run:
    """Read any supported input into a Run.

    A report with a tracediff capture manifest beside it (`manifest.json` in the same folder, as
    `tracediff capture` leaves when it could not import the report on the GPU host) gets that
    manifest attached, so importing later loses nothing. A folder of one run's per-rank files
    (sides.rank_files; `layout="ranks"`: every report in the folder) is read as one run; `say`
    gets a progress line per file; `executor` (pool.py) reads its files instead of the local pool.
    Whether such files are one run is decided from their data (grouping.py): files named as ranks
    that are separate runs raise grouping.NotOneRun (with the runs read), unless `layout="ranks"`,
    which then refuses; `allow_missing_ranks` reads a job with some ranks' files missing.
    """
    path = Path(path)
    if path.is_dir() and layout != "runs" and not any(path.glob("*.parquet")):
        from tracediff.parse.sides import rank_files

        files = rank_files(path, layout)
        if files is not None:
            return load_files(
                files,
                source=path,
                say=say,
                workers=workers,
                executor=executor,
                forced=layout == "ranks",
                allow_missing_ranks=allow_missing_ranks,
            )
    kind = detect(path)
    if kind == "run":
        run = read_run(path)
        check_run(run, str(path))
        identity.of(run)  # a run file from before identities: derived from its tables
        return run
    run = _read_report(path, kind)
    check_run(run, str(path))
    if "manifest" not in run.metadata:
        manifest = _manifest_beside(path)
        if manifest is not None:
            run.metadata["manifest"] = manifest
            run.metadata.setdefault("label", manifest.get("label"))
    run.metadata["identity"] = identity.identify(run)  # the tables just read: the same pass
    return run


def load_files(
    paths: list[Path],
    *,
    source: Path | None = None,
    say: Callable[[str], None] | None = None,
    workers: int | None = None,
    executor: Executor | None = None,
    forced: bool = True,
    allow_missing_ranks: bool = False,
) -> Run:
    """One run from several files of it (one per rank, process or node; ranks/combine.py), read in
    parallel (pool.py). `source`: the folder they came from (names the run). The files are
    joined in the order given; ranks come from the traces, else from the names (ranknames.py).
    `executor`: a pool.Executor to read them with (pool.OnDask for `--scheduler`); default: a
    local pool sized by the files (pool.executor_for). Their data must say one job
    (grouping.check_ranks; `forced`: the user named them one run, only contrary data refuses)."""
    from tracediff.parse import grouping, pool
    from tracediff.parse.ranks import combine as join

    paths, ranks, kinds = files_of_run(paths, source)
    sizes = [] if "run" in kinds else [p.stat().st_size if p.is_file() else 0 for p in paths]
    if executor is None:
        executor = pool.executor_for(sizes, workers)
    runs = pool.read_all(paths, load, executor, say)
    src = source if source is not None else common_folder(paths)
    notes, missing = grouping.check_ranks(
        [identity.of(r) for r in runs],
        paths,
        src,
        forced=forced,
        allow_missing_ranks=allow_missing_ranks,
        runs=runs,
    )
    run = join.join(runs, ranks, src)
    run.warnings[:0] = notes
    if missing and run.metadata.get("identity"):
        run.metadata["identity"]["missing_ranks"] = missing
    check_run(run, str(src))
    return run


def files_of_run(
    paths: list[Path], source: Path | None
) -> tuple[list[Path], list[int | None], list[str]]:
    """The files of one run checked (none twice, none a folder), the rank each one's name says
    (ranknames.py) and each one's kind (`detect`)."""
    from tracediff.parse.ranks import ranknames as rn

    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError(f"{source}: no files to read", "give the files of one run")
    seen = {p.resolve() for p in paths}
    if len(seen) != len(paths):
        raise InputError(
            f"{paths[0]}: a file is given twice among the {len(paths)} files of one run",
            "give each rank's file once",
        )
    names = rn.group(paths)
    ranks: list[int | None] = [None] * len(paths)
    if len(names.groups) == 1 and not names.plain:
        order = {n.path: k for k, n in enumerate(names.groups[0])}
        for i, p in enumerate(paths):
            ranks[i] = rn.rank_of_name(names.groups[0], order[p])
    kinds = [detect(p) for p in paths]
    for p, k in zip(paths, kinds, strict=True):
        if k == "ranks":
            raise InputError(f"{p}: is a folder of per-rank files", "give its files, or it alone")
    return paths, ranks, kinds


def common_folder(paths: list[Path]) -> Path:
    import os

    return Path(os.path.commonpath([str(p.resolve().parent) for p in paths]))


def _read_report(path: Path, kind: str) -> Run:
    """`path` read by its reader, the garbage collector paused meanwhile (as the Kineto reader
    pauses it): a reader's frames and arrays form no reference cycles, yet its allocations and
    its modules' imports set off full passes over every object the process holds (a `.sqlite`
    side at 0.9 M kernels: ~10 passes, 0.04-0.05 CPU-s)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_with(path, kind)
    finally:
        if was_enabled:
            gc.enable()


def _read_with(path: Path, kind: str) -> Run:
    if kind == "nsys-sqlite":
        from tracediff.parse.nsys.reader import read_nsys_sqlite

        return read_nsys_sqlite(path)
    if kind in ("nsys-rep", "qdstrm", "parquetdir"):
        from tracediff.parse.nsys import cli

        return cli.read_report(path, kind)
    if kind == "kineto":
        from tracediff.parse.kineto import read_kineto

        return read_kineto(path)
    raise AssertionError(kind)


def _manifest_beside(path: Path) -> dict[str, Any] | None:
    import orjson

    cand = (path if path.is_dir() else path.parent) / "manifest.json"
    try:
        data = orjson.loads(cand.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and "manifest_version" in data else None
