"""SQLite exports with a log beside them: a WAL's commits applied, a hot journal rolled back.

Stage: parse (nsys SQLite), before the readers. Input: an export's path; output: the path to
read (the export itself, or a checkpointed copy in a temp folder).

A database in WAL mode (header bytes 18-19 = 2) keeps its latest commits in the `-wal` file beside
it until a checkpoint copies them in. Both readers see only the main file (the page decoder reads
it directly; SQLite is opened with `immutable=1`, which ignores the log), so an export with a
non-empty log was read stale (#17). The log is applied on a copy of the two files, never on the
user's: SQLite would otherwise write the checkpoint and a `-shm` file beside their export. The
copy costs the export's size in the temp folder, once, only for such files.

A rollback journal (`REPORT.sqlite-journal` starting with the journal magic) is the same class
the other way round: a writer stopped inside a transaction, so the main file holds pages of an
uncommitted change (half the kernels of a copy taken then were missing). Opening the copy with
SQLite rolls it back to the last commit, as SQLite would for any reader.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from tracediff.base.errors import InputError

COPY_NAME = "export.sqlite"
WAL_HEADER = 32  # bytes; a log of only its header holds no change
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # a hot journal; zeroed once committed


def pending_log(path: Path, header: bytes) -> Path | None:
    """The `-wal` file whose changes the main file lacks, or the hot `-journal` whose change
    it holds half-written; None when neither is beside it."""
    journal = path.with_name(path.name + "-journal")
    try:
        with open(journal, "rb") as f:
            if f.read(len(JOURNAL_MAGIC)) == JOURNAL_MAGIC:
                return journal
    except OSError:
        pass
    if len(header) < 20 or 2 not in (header[18], header[19]):
        return None
    wal = path.with_name(path.name + "-wal")
    try:
        return wal if wal.is_file() and wal.stat().st_size > WAL_HEADER else None
    except OSError:
        return None


def applied_copy(path: Path, wal: Path, src: str) -> Path:
    """A temp folder holding `COPY_NAME`: the export with `wal` checkpointed into it, in rollback
    journal mode (header bytes 18-19 = 1), or with its hot journal rolled back. The caller
    removes the folder."""
    tmp = Path(tempfile.mkdtemp(prefix="tracediff-wal-"))
    try:
        db = tmp / COPY_NAME
        shutil.copyfile(path, db)
        if wal.name.endswith("-journal"):
            shutil.copyfile(wal, tmp / (COPY_NAME + "-journal"))
            con = sqlite3.connect(db)
            try:  # the first read of a database with a hot journal rolls it back
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                con.close()
            left = tmp / (COPY_NAME + "-journal")
            if left.exists() and left.read_bytes()[:8] == JOURNAL_MAGIC:
                raise sqlite3.OperationalError("the journal was not rolled back")
            return tmp
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
        what = "rollback journal" if wal.name.endswith("-journal") else "write-ahead log"
        raise InputError(
            f"{src}: its {what} {wal.name} holds changes that cannot be applied ({e})",
            "export the report again, or close the program writing it and retry",
        ) from None
    return tmp
