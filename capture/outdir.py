"""OUTDIR of a capture: checked before, created with its parents, published by one rename.

Stage: capture (around the workload). A capture is built in a hidden sibling staging folder and
renamed onto OUTDIR at the end; the rename itself refuses a folder that holds anything, so two
captures racing for one OUTDIR cannot both win, and an existing OUTDIR is replaced only with
`force`. Parents of OUTDIR that did not exist are created, and removed again (when still empty)
if the capture fails before anything is worth keeping. A `--repeat` call's OUTDIR holds run sets
instead: it is resumed when its shape matches, and held under a lock file for the call.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from tracediff.base.errors import OutputError
from tracediff.runs import runset as rs

LOCK = ".capture.lock"


def publish(staging: Path, outdir: Path, force: bool) -> None:
    """Rename the finished staging folder to OUTDIR (replacing it only with force)."""
    old = None
    if outdir.exists() and force:
        old = outdir.with_name(f".{outdir.name}.old-{os.getpid()}")
        os.replace(outdir, old)
    try:
        # no exists() check first: rename(2) itself fails on a folder that holds anything, so
        # two captures racing for one OUTDIR cannot both win (an empty folder is replaced)
        os.rename(staging, outdir)
    except OSError:
        raise OutputError(
            f"{outdir}: appeared during the capture", f"results left in {staging}"
        ) from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def check_outdir(outdir: Path, force: bool) -> None:
    if outdir.exists() and not force:
        raise OutputError(
            f"{outdir}: already exists", "pass --force to replace it, or choose another -o"
        )
    if outdir.exists() and not outdir.is_dir():
        raise OutputError(f"{outdir}: exists and is not a folder", "choose another -o")
    parent = next((p for p in outdir.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise OutputError(f"{outdir}: {parent} is not a folder", "choose another -o")


def make_parents(outdir: Path) -> list[Path]:
    """Create OUTDIR's missing parents; the ones created, deepest first (to undo on failure)."""
    made = [p for p in outdir.absolute().parents if not p.exists()]
    try:
        outdir.absolute().parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{outdir}: cannot create {outdir.parent} ({e.strerror})") from None
    return made


def remove_if_empty(folders: list[Path]) -> None:
    for d in folders:  # deepest first
        with contextlib.suppress(OSError):
            d.rmdir()


@contextlib.contextmanager
def locked(
    outdir: Path, name: str = LOCK, busy: str = "another tracediff capture is writing here"
) -> Iterator[None]:
    """OUTDIR/`name` held for the call: a second call into the same OUTDIR is refused (`busy`
    says what holds it); the lock goes with the process (exit, Ctrl-C, kill)."""
    with open(outdir / name, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise OutputError(
                f"{outdir}: {busy}", "wait for it to end, or choose another -o"
            ) from None
        yield


def prepare_runset_outdir(outdir: Path, grouped: bool, force: bool) -> None:
    """Create a --repeat call's OUTDIR, or check that it holds run sets of the same shape (they
    are then resumed); --force replaces it."""
    mine = outdir / (rs.GROUP_INDEX if grouped else rs.INDEX)
    other = outdir / (rs.INDEX if grouped else rs.GROUP_INDEX)
    if outdir.is_dir() and not force:
        if other.is_file():
            shape = "one run set" if grouped else "several run sets"
            raise OutputError(
                f"{outdir}: holds {shape}; this call writes {'several' if grouped else 'one'}",
                "choose another -o, or pass --force to replace it",
            )
        # lock files (this call's, and bisect's .bisect.lock when bisect captures its ends into
        # its own OUTDIR) are not the user's
        foreign = [
            p for p in outdir.iterdir() if not (p.name.startswith(".") and p.name.endswith(".lock"))
        ]
        if foreign and not mine.is_file():
            raise OutputError(
                f"{outdir}: already exists and is not a run set",
                "pass --force to replace it, or choose another -o",
            )
        return
    check_outdir(outdir, force)
    if outdir.exists():  # --force: the user asked for this folder to be replaced
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
