"""WAL-mode SQLite exports: the changes still in `REPORT.sqlite-wal` applied before reading.

Stage: parse (nsys SQLite), before the readers. Input: an export's path; output: the path to
read (the export itself, or a checkpointed copy in a temp folder).

A database in WAL mode (header bytes 18-19 = 2) keeps its latest commits in the `-wal` file beside
it until a checkpoint copies them in. Both readers see only the main file (the page decoder reads
it directly; SQLite is opened with `immutable=1`, which ignores the log), so an export with a
non-empty log was read stale (#17). The log is applied on a copy of the two files, never on the
user's: SQLite would otherwise write the checkpoint and a `-shm` file beside their export. The
copy costs the export's size in the temp folder, once, only for such files.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from tracediff.errors import InputError

COPY_NAME = "export.sqlite"
WAL_HEADER = 32  # bytes; a log of only its header holds no change


def pending_log(path: Path, header: bytes) -> Path | None:
    """The `-wal` file whose changes the main file lacks, or None."""
    if len(header) < 20 or 2 not in (header[18], header[19]):
        return None
    wal = path.with_name(path.name + "-wal")
    try:
        return wal if wal.is_file() and wal.stat().st_size > WAL_HEADER else None
    except OSError:
        return None


def applied_copy(path: Path, wal: Path, src: str) -> Path:
    """A temp folder holding `COPY_NAME`: the export with `wal` checkpointed into it, in rollback
    journal mode (header bytes 18-19 = 1). The caller removes the folder."""
    tmp = Path(tempfile.mkdtemp(prefix="tracediff-wal-"))
    try:
        db = tmp / COPY_NAME
        shutil.copyfile(path, db)
        shutil.copyfile(wal, tmp / (COPY_NAME + "-wal"))
        con = sqlite3.connect(db)
        try:
            # PASSIVE reports the log's valid frames; SQLite skips a damaged log without a word,
            # which would read the export stale again, so no valid frame is an error
            busy, frames, done = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            mode = con.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        finally:
            con.close()
        if frames <= 0:
            raise sqlite3.DatabaseError("no valid frame: the log is damaged or not this file's")
        if busy or done != frames or str(mode).lower() != "delete":
            raise sqlite3.OperationalError("the checkpoint did not complete")
    except (OSError, sqlite3.Error) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(
            f"{src}: its write-ahead log {wal.name} holds changes that cannot be applied ({e})",
            "export the report again, or close the program writing it and retry",
        ) from None
    return tmp
