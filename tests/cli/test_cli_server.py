"""tests/support/cli.py: a call forked from the CLI server gives what a fresh `python -m tracediff`
gives (exit status, stdout, stderr), under the environment and working directory it is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import cli

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "samples" / "runs"


def fresh(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple:
    p = subprocess.run(
        [sys.executable, "-m", "tracediff", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    return p.returncode, p.stdout, p.stderr


def forked(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple:
    assert not cli.FRESH, "TD_TEST_FRESH_PROCESSES is set: nothing is forked"
    p = cli.cli_run(argv, env=env, cwd=cwd, timeout=300)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", str(RUNS / "good"), str(RUNS / "bad"), "--format", "json"],
        ["info", str(RUNS / "good")],
        ["compare", "no-such-base", "no-such-head"],  # exit 1, one line
        ["compare", "--no-such-option"],  # argparse: exit 2
        ["--version"],
    ],
    ids=["compare-json", "info", "missing", "usage", "version"],
)
def test_a_forked_call_gives_what_a_fresh_process_gives(argv: list[str]) -> None:
    got = forked(argv)
    assert got == fresh(argv)
    assert got[0] in (0, 1, 2)


@pytest.mark.nsys
def test_the_environment_and_the_working_directory_reach_the_call(
    tmp_path: Path, nsys: str
) -> None:
    (tmp_path / "g.nsys-rep").symlink_to(ROOT / "tests" / "data" / "h200" / "g_good.nsys-rep")
    argv = ["info", "g.nsys-rep"]  # relative: read from cwd
    plain = forked(argv, env={"TRACEDIFF_NSYS": nsys}, cwd=tmp_path)
    assert plain[0] == 0, plain
    # nsys given no time to export it: refused, as a fresh process refuses it
    env = {"TRACEDIFF_NSYS": nsys, "TRACEDIFF_NSYS_TIMEOUT": "0.001"}
    short = forked(argv, env=env, cwd=tmp_path)
    assert short[0] == 1 and "did not finish within 0.001 s" in short[2], short
    assert short == fresh(argv, env=env, cwd=tmp_path)
    # and the next call does not inherit the last one's environment
    assert forked(argv, env={"TRACEDIFF_NSYS": nsys}, cwd=tmp_path) == plain
