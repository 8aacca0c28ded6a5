"""Shared by the tests (moved from tests/hostile/test_hostile.py, so no test module imports another)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Hashable
from pathlib import Path
from typing import TypeVar

from tests.support.cli import cli_run

TRACEDIFF = Path(sys.executable).with_name("tracediff")


TIMEOUT = 60  # s; every case here finishes in a few seconds, so hitting this is a hang


Result = subprocess.CompletedProcess[str]
K = TypeVar("K", bound=Hashable)


def cli(*args: object, timeout: float = TIMEOUT, **kw: object) -> Result:
    """The `tracediff` script on ARGS; forked from the CLI server (tests/support/cli.py) unless
    the call needs more of subprocess (a preexec_fn, an environment of its own)."""
    if not kw:
        return cli_run(args, timeout=timeout, errors="replace")
    return subprocess.run(
        [str(TRACEDIFF), *map(str, args)],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        **kw,  # type: ignore[call-overload]
    )


def assert_error(r: Result, names: object, *phrases: str, code: int = 1) -> str:
    """Exit `code`, stdout empty, one stderr line `tracediff[ CMD]: error: ...` naming `names`."""
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == code, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("tracediff"), lines[0]  # argparse says `tracediff parse: error:`
    assert ": error: " in lines[0], lines[0]
    if names is not None:
        assert str(names) in lines[0], lines[0]
    for p in phrases:
        assert p in lines[0], lines[0]
    assert r.stdout == ""
    return lines[0]


def cli_each(calls: dict[K, list[object]]) -> dict[K, Result]:
    """`cli` on each ARGV of calls (key -> its call's result), in order: each call a process of
    its own, forked from the CLI server (tests/support/cli.py) with its imports done."""
    return {key: cli(*argv, timeout=300) for key, argv in calls.items()}
