"""`tracediff capture` command line: usage errors, nsys capture-range options, preset command."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

from capture.presets import sglang_eagle3
from tests.support.capture import capture, flaky_nsys
from tests.support.cli import cli_run
from tracediff.base.errors import UsageError
from tracediff.commands import capture as cmd
from tracediff.commands import common
from tracediff.runs.runfile import read_run

pytestmark = [pytest.mark.nsys, pytest.mark.git]


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cmd.add_parser(p)
    return p.parse_args(["--commit", "HEAD", "-o", "out", *argv])


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return cli_run(["capture", *argv], timeout=120)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], []),
        (
            ["--capture-range", "cudaProfilerApi"],
            ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"],
        ),
        (
            ["--capture-range", "nvtx", "--nvtx-capture", "bench"],
            ["--capture-range=nvtx", "--nvtx-capture=bench", "--capture-range-end=stop"],
        ),
        (["--delay", "60", "--duration", "70"], ["--delay=60", "--duration=70"]),
    ],
)
def test_capture_range_options(argv: list[str], expected: list[str]) -> None:
    assert common.capture_range_args(parse(*argv), []) == expected


def test_preset_range_applies_only_when_none_is_given() -> None:
    preset = ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    assert common.capture_range_args(parse(), preset) == preset
    assert common.capture_range_args(parse("--capture-range", "none"), preset) == []
    assert common.capture_range_args(parse("--duration", "5"), preset) == ["--duration=5"]
    with pytest.raises(UsageError, match="needs --nvtx-capture"):
        common.capture_range_args(parse("--capture-range", "nvtx"), [])


def test_preset_command() -> None:
    a = parse(
        "--preset",
        "sglang-eagle3",
        "--model",
        "M",
        "--draft-model",
        "D",
        "--tp",
        "2",
        "--python",
        "/py",
        "--port",
        "31000",
        "--server-arg=--dtype=float16",
        "--bench",
        "serving",
    )
    built = sglang_eagle3.build(a)
    c = built["command"]
    assert c[:3] == ["/py", sglang_eagle3.__file__, "--driver"]
    server = json.loads(c[c.index("--server-args") + 1])
    assert server[:4] == ["--model-path", "M", "--speculative-algorithm", "EAGLE3"]
    assert server[server.index("--tp-size") + 1] == "2" and server[-1] == "--dtype=float16"
    bench = json.loads(c[c.index("--bench-args") + 1])
    assert c[c.index("--bench-module") + 1] == "sglang.bench_serving"
    assert bench[bench.index("--base-url") + 1] == "http://127.0.0.1:31000"
    assert built["pythonpath"] == ["python"] and built["nvtx_shim"] == "sglang-eagle"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preset", "sglang-eagle3", "--model", "M"], "needs --model and --draft-model"),
        (
            [
                "--preset",
                "sglang-eagle3",
                "--model",
                "M",
                "--draft-model",
                "D",
                "--",
                "python",
                "x.py",
            ],
            "either --preset or `-- COMMAND`",
        ),
        ([], "no workload given"),
        (["--capture-range", "nvtx", "--", "python", "x.py"], "needs --nvtx-capture"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv: list[str], message: str, tmp_path: Path) -> None:
    r = run_cli("--commit", "HEAD", "-o", str(tmp_path / "o"), *argv)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr
    assert not (tmp_path / "o").exists()


def test_nvtx_capture_range_with_real_nsys(repo: Path, nsys: str, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "nv"
    r = capture(repo, "base", out, "--capture-range", "nvtx", "--nvtx-capture", "verify", nsys=nsys)
    assert r.returncode == 0, r.stderr  # the workload ran to the end: not killed at range end
    names = pl.from_arrow(read_run(out / "run.arrow").table("nvtx_ranges"))["name"].to_list()
    assert names == ["verify"]  # collection opened and closed with the first verify range


def test_nsys_losing_its_agent_is_retried_once(repo: Path, nsys: str, tmp_path: Path) -> None:  # noqa: F811
    """nsys's own failure before any report (seen under load in a fresh-clone suite: "Connection
    to Agent lost") is retried once inside the capture: the run is captured, the failed attempt
    is kept in the manifest and its log beside capture.log."""
    wrapped, calls = flaky_nsys(nsys, tmp_path / "nsys", fail_at=(1,))
    out = tmp_path / "o"
    r = capture(repo, "base", out, nsys=str(wrapped))
    assert r.returncode == 0, r.stderr
    assert "retrying once: nsys produced no report (exit 1): Local Endpoint" in r.stderr
    assert int(calls.read_text()) == 2
    m = json.loads((out / "manifest.json").read_text())
    assert m["nsys_failed_attempts"] == ["Local Endpoint is not available"]
    assert "Local Endpoint" in (out / "capture.attempt-1.log").read_text()
    assert "Local Endpoint" not in (out / "capture.log").read_text()
    assert read_run(out / "run.arrow").table("nvtx_ranges").num_rows > 0
    # the retry has a session name of its own (the failed nsys may have left its session behind)
    session = [a for a in m["nsys_command"] if a.startswith("--session-new=")]
    first = (out / "capture.attempt-1.log").read_text()
    assert len(session) == 1 and "--session-new=tracediff-" in first and session[0] not in first


def test_nsys_failing_twice_is_one_error(repo: Path, nsys: str, tmp_path: Path) -> None:  # noqa: F811
    wrapped, calls = flaky_nsys(nsys, tmp_path / "nsys", fail_at=(1, 2))
    out = tmp_path / "o"
    r = capture(repo, "base", out, nsys=str(wrapped))
    assert r.returncode == 1, r.stderr
    assert int(calls.read_text()) == 2  # one retry, not more
    last = r.stderr.strip().splitlines()[-1]
    assert "nsys produced no report (exit 1, and on its retry): Local Endpoint" in last
    assert not out.exists() and not list(tmp_path.glob(".o.capture-*"))  # nothing half-made
