"""Writing the HTML page: atomically, never over a file without --force, never over an input.

Stage: output. Input: the page (a string) and its path; output: the file (tracediff.base.outputs
publishes it: a failed command leaves nothing it created).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from tracediff.base import outputs
from tracediff.base.errors import OutputError
from tracediff.export.parquet import current_umask


def check_html_output(out: Path, *, force: bool) -> Path:
    """Raise OutputError unless `out` can be written (checked before the work); its folder."""
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise OutputError(f"{out}: is a folder", "give a file name such as report.html")
    if out.exists() and not force:
        raise OutputError(f"{out}: already exists", "pass --force to overwrite it")
    if not parent.is_dir():
        raise OutputError(f"{out}: folder {parent} does not exist", "create it first")
    return parent


def write_html(
    page: str, out: Path, *, force: bool = False, txn: outputs.Transaction | None = None
) -> int:
    """Write `page` at `out`; returns its size in bytes."""
    out = Path(out)
    parent = check_html_output(out, force=force)
    data = page.encode("utf-8")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent)
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; a page is a plain file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        outputs.publish(Path(tmp), out, force=force, txn=txn)
    except OSError as e:
        raise OutputError(
            f"{out}: cannot write: {e.strerror or e}", "check free space and permissions"
        ) from None
    finally:
        if tmp and os.path.exists(tmp):
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return len(data)
