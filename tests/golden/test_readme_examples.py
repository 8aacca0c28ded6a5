"""The README's example outputs are the real outputs (issue 17, "Must hold").

Every indented README block whose first line is `$ tracediff ...` is run (the real CLI, in this
process, from the repository root) and the lines under it must be its output, line for line, in
order; a line `...` stands for any number of output lines. So an example cannot drift from what
the tool prints: change the output and this test names the block to update.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
from pathlib import Path

import pytest

from tracediff.cli import main

ROOT = Path(__file__).resolve().parents[2]
INDENT = "    "


def examples(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected lines) of every `$ tracediff` block."""
    found = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith(f"{INDENT}$ tracediff "):
            continue
        body = []
        for nxt in lines[i + 1 :]:
            if not nxt.startswith(INDENT) or nxt.startswith(f"{INDENT}$ "):
                break
            body.append(nxt[len(INDENT) :].rstrip())
        found.append((line[len(INDENT) + 2 :], body))
    return found


def matches(expected: list[str], actual: list[str]) -> str | None:
    """None when `expected` (with `...` gaps) is `actual`; else the first line that is not."""
    at, gap = 0, False
    for want in expected:
        if want == "...":
            gap = True
            continue
        while gap and at < len(actual) and actual[at] != want:
            at += 1
        if at >= len(actual) or actual[at] != want:
            return want
        at, gap = at + 1, False
    return None if gap or at == len(actual) else f"(output goes on: {actual[at]!r})"


EXAMPLES = examples((ROOT / "README.md").read_text())


def test_the_readme_has_examples_to_check() -> None:
    assert len(EXAMPLES) >= 4
    # `make demo`'s pair is among them
    assert any("samples/runs/good samples/runs/bad" in cmd for cmd, _ in EXAMPLES)


def test_matching_rule_can_fail() -> None:
    assert matches(["a", "...", "c"], ["a", "b", "c"]) is None
    assert matches(["a", "c"], ["a", "b", "c"]) == "c"
    assert matches(["a"], ["a", "b"]) is not None  # a cut example says so with "..."
    assert matches(["a", "..."], ["a", "b"]) is None


@pytest.mark.parametrize("command,expected", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_readme_example_is_the_real_output(command: str, expected: list[str]) -> None:
    out = io.StringIO()
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = main(shlex.split(command)[1:])
    finally:
        os.chdir(cwd)
    assert rc == 0
    actual = [line.rstrip() for line in out.getvalue().splitlines()]
    bad = matches(expected, actual)
    assert bad is None, f"README example `{command}`: {bad!r} is not the output"
