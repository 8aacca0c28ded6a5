"""Publishing outputs safely: every file or folder a command writes goes through here.

Stage: output (run files, Parquet exports, Perfetto traces). Input: a finished temp file or
folder beside its target; output: the target, or nothing.

Three rules (issue #17):
- an input is never an output: a target that is, resolves to, or (a folder) holds an input is
  refused before any work (`refuse_inputs`);
- creation is exclusive: without --force the temp is moved to the target with renameat2's
  RENAME_NOREPLACE (or a hard link, for a file on a filesystem without it), so of two commands
  writing the same new path one fails, instead of both passing an exists() check and the second
  replacing the first;
- a failed command leaves nothing it created: a `Transaction` holds what was published (and the
  earlier outputs --force moved aside) until the command ends, and puts everything back if it
  fails after the first of several outputs was published.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from tracediff.base.errors import OutputError

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _libc_renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28 / not Linux
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _libc_renameat2()


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(os.path.abspath(a)).resolve() == Path(os.path.abspath(b)).resolve()


def overlaps(out: Path, other: Path) -> bool:
    """Whether writing `out` touches `other`: the same file (by inode, or the same path once
    links are resolved, existing or not), or a folder that holds it."""
    target = Path(os.path.abspath(out)).resolve()
    src = Path(os.path.abspath(other)).resolve()
    return target == src or target in src.parents or (Path(other).exists() and _same(out, other))


def refuse_inputs(out: Path, inputs: Iterable[Path], what: str = "output") -> None:
    """Raise OutputError if `out` is one of `inputs`, a folder that holds one (a folder output
    replaces its content), or inside an input folder (a run set's runset.json, a run's file; a
    new file changes what the folder holds: a rank folder no longer reads as one run): the user's
    data is never an output."""
    out = Path(out)
    target = Path(os.path.abspath(out)).resolve()
    for inp in inputs:
        inp = Path(inp)
        if inp.exists() and overlaps(out, inp):
            raise OutputError(
                f"{out}: the {what} would overwrite the input {inp}",
                "give the output another name",
            )
        if inp.is_dir() and Path(os.path.abspath(inp)).resolve() in target.parents:
            raise OutputError(
                f"{out}: the {what} would be written inside the input folder {inp}",
                "write it outside the folders being read",
            )


def _no_replace(tmp: Path, out: Path) -> None:
    """Move `tmp` to `out`, failing with FileExistsError if `out` exists (atomically)."""
    if _renameat2 is not None:
        rc = _renameat2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(out), _RENAME_NOREPLACE)  # type: ignore[operator]
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), str(out))
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(out))
    if tmp.is_dir():  # rename fails onto a non-empty folder or a file; an empty folder is replaced
        if out.exists() or out.is_symlink():
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(out))
        os.rename(tmp, out)
    else:
        os.link(tmp, out)  # EEXIST if the name is taken, atomically
        os.unlink(tmp)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


class Transaction:
    """Outputs published by one command: kept when it ends well (`commit`), removed, and the
    earlier outputs that --force moved aside put back, when it fails (`rollback`)."""

    def __init__(self) -> None:
        self._done: list[tuple[Path, Path | None]] = []  # (published target, its old content)

    def publish(self, tmp: Path, out: Path, *, force: bool) -> None:
        """Move the finished `tmp` to `out`. Without `force`, `out` must not exist, checked
        atomically with the move; with it, the old `out` is moved aside until commit."""
        tmp, out = Path(tmp), Path(out)
        backup = None
        try:
            if force and (out.exists() or out.is_symlink()):
                backup = tmp.with_name(tmp.name + ".old")
                os.replace(out, backup)
            _no_replace(tmp, out)
        except FileExistsError:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.replace(backup, out)
            raise OutputError(
                f"{out}: already exists (another command created it meanwhile)",
                "pass --force to overwrite it",
            ) from None
        except OSError as e:
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.replace(backup, out)
            raise OutputError(
                f"{out}: cannot write: {e.strerror or e}", "check free space and permissions"
            ) from None
        self._done.append((out, backup))

    def commit(self) -> None:
        for _, backup in self._done:
            if backup is not None:
                _remove(backup)
        self._done.clear()

    def rollback(self) -> None:
        for out, backup in reversed(self._done):
            _remove(out)
            if backup is not None:
                with contextlib.suppress(OSError):
                    os.replace(backup, out)
        self._done.clear()

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.rollback()


def publish(tmp: Path, out: Path, *, force: bool, txn: Transaction | None = None) -> None:
    """Publish `tmp` as `out` within `txn`, or on its own (committed at once)."""
    if txn is not None:
        txn.publish(tmp, out, force=force)
        return
    with Transaction() as own:
        own.publish(tmp, out, force=force)
