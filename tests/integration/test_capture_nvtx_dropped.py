"""A workload whose NVTX ranges nsys drops: capture warns, compare never cuts on capture's ranges
(issue 30), with the real nsys 2024.2.3 and the real nvtx 0.2.17 (no GPU: `-t nvtx`).

The workload repo has two commits: `base`, and `slow`, whose `verify` sleeps 10 ms longer. Its
loop is marked with `nvtx.annotate` (cycle > draft, verify); `draft` is called twice a cycle.
Under nvtx 0.2.17 nsys 2024.2.3 records none of those ranges, only the function-trace ranges
capture adds for the package (`python:wl.work`). Before the fix, compare cut cycles at
`wl.work.draft` (the most frequent of those) and called the +10 ms "not significant (within
noise)". Under the dev pin (nvtx 0.2.10) the same capture keeps its ranges and says nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli_run

pytestmark = [pytest.mark.nsys, pytest.mark.git]

WORK = """
import time

SLOW_MS = {slow}


def draft():
    time.sleep(0.001)


def verify():
    time.sleep(0.002 + SLOW_MS / 1000)
"""
MAIN = """
import nvtx
from wl.work import draft, verify

for _ in range(12):
    with nvtx.annotate("cycle"):
        with nvtx.annotate("draft"):
            draft()
            draft()
        with nvtx.annotate("verify"):
            verify()
"""


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("nvtxrepo")
    (r / "wl").mkdir()
    (r / "wl" / "__init__.py").write_text("")
    (r / "wl" / "work.py").write_text(WORK.format(slow=0.0))
    (r / "main.py").write_text(MAIN)
    _git(r, "init", "-q", "-b", "main")
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "base")
    _git(r, "tag", "base")
    (r / "wl" / "work.py").write_text(WORK.format(slow=10.0))
    _git(r, "commit", "-qam", "slow")
    _git(r, "tag", "slow")
    return r


def _capture(
    repo: Path, out: Path, nsys: str, pythonpath: str | None, commits: tuple[str, ...]
) -> str:
    """The commits into run sets (base/, slow/) under `out`; capture's stderr."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    refs = [a for c in commits for a in ("--commit", c)]
    cmd = ["capture", "--repo", str(repo), *refs, "-o",
           str(out), "--nsys", nsys, "--", sys.executable, "main.py"]  # fmt: skip
    r = cli_run(cmd, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stderr


def _compare(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = ["compare", str(out / "base"), str(out / "slow"), "--format", "json", *extra]
    return cli_run(cmd, timeout=300)


def _manifest(out: Path, side: str) -> dict:
    return json.loads((out / side / "run-01" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def dropped(
    repo: Path, nsys: str, nvtx_dropped: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("dropped") / "caps"
    return out, _capture(repo, out, nsys, str(nvtx_dropped), ("base", "slow"))


def test_capture_warns_and_records_that_the_workload_s_ranges_were_dropped(
    dropped: tuple[Path, str],
) -> None:
    out, stderr = dropped
    warned = [ln for ln in stderr.splitlines() if "warning:" in ln and "imports nvtx" in ln]
    # said once as it happens and once in the closing summary, though both runs have it
    assert len(warned) == 2 and warned[-1].startswith("tracediff: warning:"), stderr[-3000:]
    assert "nvtx 0.2.17" in warned[0] and "pin nvtx==0.2.10" in warned[0]
    for side in ("base", "slow"):
        st = _manifest(out, side)["nvtx"]
        assert st["nvtx_version"] == "0.2.17"
        assert st["workload_imports"] == ["main.py"]
        assert st["own_events"] == 0 and st["tool_ranges"] > 0  # capture's function trace only
        assert "0.2.12 and later" in st["problem"]


def test_compare_never_cuts_at_capture_s_ranges_nor_calls_the_regression_noise(
    dropped: tuple[Path, str],
) -> None:
    out, _ = dropped
    r = _compare(out)
    # no GPU work and no range of the workload's own: no markerless rule exists, so it refuses
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracediff: error:"), r.stderr
    assert "no NVTX range of the workload's own" in lines[0] and "pin nvtx==0.2.10" in lines[0]
    assert "noise" not in r.stderr


def test_an_explicit_function_range_is_cut_with_a_warning_and_finds_the_regression(
    dropped: tuple[Path, str],
) -> None:
    out, _ = dropped
    r = _compare(out, "--cycle", "python:wl.work:wl.work.verify")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["base"]["cycle_method"] == "nvtx:python:wl.work:wl.work.verify"
    delta = doc["delta_ms_per_cycle"]
    assert delta["significant"] is True and delta["mean"] > 5.0  # +10 ms slept
    assert any("a function-trace range that tracediff capture adds" in w for w in doc["warnings"])


def test_with_the_dev_pin_the_ranges_are_kept_and_nothing_is_said(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    pytest.importorskip("nvtx")  # the dev pin, 0.2.10, in this interpreter
    out = tmp_path / "caps"
    stderr = _capture(repo, out, nsys, None, ("base",))  # (compare at them: capture-hostonly)
    assert "imports nvtx" not in stderr
    st = json.loads((out / "manifest.json").read_text())["nvtx"]  # one commit: OUTDIR is its run
    assert st["nvtx_version"] == "0.2.10" and st["workload_imports"] == ["main.py"]
    assert st["own_events"] == 36 and st["problem"] is None  # 12 cycles x cycle, draft, verify
