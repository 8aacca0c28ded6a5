"""OUTDIR of a capture: checked before, created with its parents, published by one rename.

Stage: capture (around the workload). A capture is built in a hidden sibling staging folder and
renamed onto OUTDIR at the end; the rename itself refuses a folder that holds anything, so two
captures racing for one OUTDIR cannot both win, and an existing OUTDIR is replaced only with
`force`. Parents of OUTDIR that did not exist are created, and removed again (when still empty)
if the capture fails before anything is worth keeping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from tracediff.errors import OutputError


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
