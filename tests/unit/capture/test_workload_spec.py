"""tracediff/commands/common.py `workload_spec`: the capture spec `capture` and `bisect` build
from the options they share, and each one's usage errors."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.support.cli import cli_run
from tracediff.base.errors import UsageError
from tracediff.commands import bisect, capture, common

SHARED = ["--trace", "cuda,nvtx", "--nsys-arg=--sample=none", "--pythonpath", "src",
          "--no-stacks", "--nvtx-capture", "step", "--capture-range", "nvtx"]  # fmt: skip


def _args(command: str, *argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    (capture if command == "capture" else bisect).add_parser(p)
    return p.parse_args(list(argv))


def test_capture_and_bisect_build_the_same_spec() -> None:
    c = _args("capture", "--commit", "v1", "-o", "out", *SHARED, "--", "python", "b.py")
    b = _args("bisect", "--good", "v1", "--bad", "v2", "-o", "out", *SHARED, "--", "python", "b.py")
    spec = common.workload_spec(c, "v1", "hint")
    assert spec == common.workload_spec(b, "v1", "hint")
    assert spec.command == ["python", "b.py"] and spec.pythonpath == ["src"]
    assert spec.trace == "cuda,nvtx" and spec.extra_nsys_args == ["--sample=none"]
    assert not spec.stacks and spec.repo == Path(".")
    assert spec.capture_range == [
        "--capture-range=nvtx", "--nvtx-capture=step", "--capture-range-end=stop",
    ]  # fmt: skip
    mine = common.workload_spec(c, "v1", "hint", label="L", force=True)
    assert (mine.label, mine.force) == ("L", True)


def test_bisect_needs_a_workload_unless_it_has_a_pool(tmp_path: Path) -> None:
    r = cli_run(["bisect", "--good", "a", "--bad", "b", "-o", str(tmp_path / "o")], timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "no workload given" in r.stderr and "--pool DIR" in r.stderr
    assert not (tmp_path / "o").exists()
    pool = _args("bisect", "--good", "a", "--bad", "b", "-o", "o", "--pool", str(tmp_path))
    assert common.workload_spec(pool, "a", None).command == []
    with pytest.raises(UsageError, match="not both"):
        both = _args("bisect", "--good", "a", "--bad", "b", "-o", "o", "--pool", str(tmp_path),
                     "--preset", "sglang-eagle3", "--", "python", "x.py")  # fmt: skip
        common.workload_spec(both, "a", None)
