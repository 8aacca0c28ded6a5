"""Errors raised by the library. Only the CLI turns them into exit codes and stderr lines.

Every error carries a one-line message naming the file and a hint saying what to do.
"""

from __future__ import annotations


class TracediffError(Exception):
    """Base class: a problem the user can act on. `exit_code` 1 = runtime, 2 = usage."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(TracediffError):
    """The command line asks for something impossible (exit 2)."""

    exit_code = 2


class InputError(TracediffError):
    """An input file is missing, unreadable, of the wrong kind, truncated or corrupt."""


class UnsupportedVersionError(InputError):
    """The input was written by a newer tool than this one can read."""


class ToolError(TracediffError):
    """An external tool (nsys, QdstrmImporter, git) is missing or failed."""


class OutputError(TracediffError):
    """An output cannot be written (exists without --force, no space, no permission)."""


class AnalysisError(TracediffError):
    """The data is readable but cannot answer the question (no cycles, nothing to align)."""
