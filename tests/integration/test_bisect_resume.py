"""`tracediff bisect` resumed: after Ctrl-C, and with a larger --repeat / --max-runs on the same
-o (every capture reused).

Split from test_bisect.py (issue 29: one module runs on one pytest-xdist worker under --dist
loadfile, and test_bisect.py was the suite's longest pole). Real git repositories built here and
the real nsys, as test_bisect.py's docstring says; the workload appends the commit it ran at to a
counter file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.bisect import (
    SEVEN,
    THREE,
    bisect,
    bisect_argv,
    build_repo,
    counted,
    ran_at_least,
)

pytestmark = [pytest.mark.nsys, pytest.mark.git]


def test_ctrl_c_leaves_a_state_the_same_command_resumes(tmp_path: Path, nsys: str) -> None:
    """Interrupted during the step's captures (past the ends, which the resumed run reuses);
    three commits with less noise than SEVEN's: this tests the state, not the search."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = build_repo(repo, THREE, noise=2.0)
    out, counter = tmp_path / "out", tmp_path / "counter.txt"
    env = {**os.environ, "COUNTER": str(counter), "SEED": "5"}
    argv = bisect_argv(repo, out, nsys, "--good", shas[0], "--bad", shas[-1])
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    seen = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if "step 1:" in line:  # past the ends: interrupt during the step's captures
                # meanwhile a second bisect on the same OUTDIR is refused, touching nothing
                other = bisect(repo, out, nsys, "--good", shas[0], "--bad", shas[-1])
                time.sleep(1.5)
                os.killpg(proc.pid, signal.SIGINT)
                break
        rest = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, "".join(seen) + rest
    assert other.returncode == 1 and other.stdout == "", other.stderr
    assert other.stderr.strip().splitlines() == [
        f"tracediff: error: {out}: another tracediff bisect is running on this folder "
        "(wait for it to end, or choose another -o)"
    ]
    assert "run the same command again" in rest.strip().splitlines()[-1], rest
    before = len(counted(counter))
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1200, env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["first_bad"] == shas[1], r.stderr
    assert res["captures"]["reused"] >= 8 and "resuming" in r.stderr
    # nothing captured twice but the interrupted run (and an attempt that failed and was tried
    # again, which may have run the workload: one did at load 10, session 13)
    now, failed = res["captures"]["captured_now"], res["captures"]["failed_runs"]
    assert before + now <= len(counted(counter)) <= before + now + failed, r.stderr


def test_a_larger_repeat_or_max_runs_on_the_same_outdir_reuses_every_capture(
    tmp_path: Path, nsys: str
) -> None:
    """Issue 31: the tool's own advice (more runs) on the same -o was refused ("holds a
    bisection with other settings"), throwing the captures away. Two equal commits: 2 runs a
    side, then --max-runs 4 (2 more each, nothing captured twice), then --repeat 4 --max-runs 4
    (nothing new: 4 a side exist); a smaller --repeat is refused, touching nothing."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = build_repo(repo, [SEVEN[0], SEVEN[1]], noise=2.0)
    out, counter = tmp_path / "out", tmp_path / "counter.txt"
    env = {"COUNTER": str(counter), "SEED": "61"}
    first = bisect(
        repo, out, nsys, "--good", shas[0], "--bad", shas[1], "--repeat", "2", "--max-runs", "2",
        **env,
    )  # fmt: skip
    assert first.returncode == 5, first.stderr
    ran_at_least(counted(counter), {shas[0]: 2, shas[1]: 2}, out)
    more = bisect(
        repo, out, nsys, "--good", shas[0], "--bad", shas[1], "--repeat", "2", "--max-runs", "4",
        **env,
    )  # fmt: skip
    assert more.returncode == 5, more.stderr
    assert "resuming" in more.stderr
    ran_at_least(counted(counter), {shas[0]: 4, shas[1]: 4}, out)
    ran = len(counted(counter))
    state = json.loads((out / "bisect.json").read_text())
    assert state["max_runs"] == 4 and state["log"][0]["runs"] == [4, 4]
    assert state["wall_s_before"] > 0
    again = bisect(
        repo, out, nsys, "--good", shas[0], "--bad", shas[1], "--repeat", "4", "--max-runs", "4",
        **env,
    )  # fmt: skip
    assert again.returncode == 5, again.stderr
    assert len(counted(counter)) == ran  # nothing captured: 4 a side were there
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    less = bisect(repo, out, nsys, "--good", shas[0], "--bad", shas[1], "--repeat", "2", **env)
    assert less.returncode == 1 and "holds a bisection with more runs" in less.stderr
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
