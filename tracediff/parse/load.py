"""Input dispatch: run file, nsys report (.sqlite/.nsys-rep/.qdstrm/parquetdir) or Kineto trace.

Stage: parse. Input: a path; output: a `Run`. Detection is by content (magic bytes), with the
extension only as a tie-breaker, so a renamed file is still read correctly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracediff.errors import InputError
from tracediff.parse.sanity import check_run
from tracediff.runfile import MAGIC as RUN_MAGIC
from tracediff.runfile import Run, read_run

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"  # .nsys-rep/.qdrep, whatever the file is named
QDSTRM_MARK = b"NVIDIA Nsight Systems"  # a .qdstrm's header, after an 8-byte prefix


def detect(path: Path) -> str:
    """Return one of: run, nsys-sqlite, nsys-rep, qdstrm, parquetdir, kineto."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file", "check the path")
    if path.is_dir():
        if any(path.glob("*.parquet")):
            return "parquetdir"
        raise InputError(
            f"{path}: is a directory, not a report",
            "give a report file, or an `nsys export --type parquetdir` folder",
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


def load(path: Path, *, progress: bool = False) -> Run:
    """Read any supported input into a Run.

    A report with a tracediff capture manifest beside it (`manifest.json` in the same folder, as
    `tracediff capture` leaves when it could not import the report on the GPU host) gets that
    manifest attached, so importing later loses nothing.
    """
    path = Path(path)
    kind = detect(path)
    if kind == "run":
        run = read_run(path)
        check_run(run, str(path))
        return run
    run = _read_report(path, kind)
    check_run(run, str(path))
    if "manifest" not in run.metadata:
        manifest = _manifest_beside(path)
        if manifest is not None:
            run.metadata["manifest"] = manifest
            run.metadata.setdefault("label", manifest.get("label"))
    return run


def _read_report(path: Path, kind: str) -> Run:
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
