"""Warnings and environment differences: one line on the main screen, the whole list behind `w`.

Stage: presentation. Input: a `Comparison`'s `env_diffs` and `warnings`; output: the notes as
text with file paths shortened (a warning names its input file, often by an absolute path that
would fill the row), and the one-line count the main screen shows under the verdict.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from rich.text import Text
from textual.widgets import Static

from tracediff.engine.result import Comparison
from tracediff.report.text import safe

_SEG = r"[^\s/:;,'\"()\[\]{}<>]+"
# an absolute path, or a relative one of three parts or more ("ms/cycle" is no path)
_PATH = re.compile(rf"(?<![\w.~/-])(?:/(?:{_SEG}/)+{_SEG}|(?:{_SEG}/){{2,}}{_SEG})")


def short_path(path: str, cwd: str | None = None, name_only: bool = False) -> str:
    """`path` relative to `cwd` (the working directory) when it lies under it, else its last two
    parts after `…/`; `name_only`: the file name alone."""
    parts = path.rstrip("/").split("/")
    if name_only:
        return parts[-1] if len(parts) > 1 else path
    if path.startswith("/"):
        here = cwd if cwd is not None else os.getcwd()
        p = Path(path)
        if p.is_relative_to(here) and p != Path(here):
            return str(p.relative_to(here))
        if len(parts) > 3:
            return "…/" + "/".join(parts[-2:])
    return path


def shorten_paths(text: str, cwd: str | None = None, name_only: bool = False) -> str:
    """Every file path in `text` shortened by `short_path`."""
    return _PATH.sub(lambda mt: short_path(mt.group(0), cwd, name_only), text)


def notes(c: Comparison) -> list[str]:
    """Environment differences first (check them before trusting the diff), then warnings."""
    env = [f"environment differs: {d.key}: {d.base!r} → {d.head!r}" for d in c.env_diffs]
    return [safe(n) for n in env + [str(w) for w in c.warnings]]  # inert: no raw ESC, newline


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def notes_line(c: Comparison) -> Text:
    """One line: how many notes there are, `w` to read them, the first one (file names only)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    n_env, n_warn = len(c.env_diffs), len(c.warnings)
    if not n_env and not n_warn:
        return t
    counts = [
        _count(n, what) for n, what in ((n_env, "environment difference"), (n_warn, "warning")) if n
    ]
    t.append("⚠ " + ", ".join(counts), "bold #ffaf00")
    t.append(" (w: read them) ", "#8a8a8a")
    t.append(shorten_paths(notes(c)[0], name_only=True), "#ffaf00")
    return t


class NotesLine(Static):
    """Under the verdict: the notes collapsed to one line (hidden when there are none)."""

    def __init__(self, comparison: Comparison, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(notes_line(comparison), id=id)
        self.count = len(comparison.env_diffs) + len(comparison.warnings)

    def on_mount(self) -> None:
        self.display = self.count > 0
