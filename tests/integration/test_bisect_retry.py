"""A capture whose nsys fails on its own (no report) is retried once, not one whose workload fails.

Under load on the shared 2-core machine nsys sometimes writes no report ("Local Endpoint is not
available", "Connection to Agent lost"): 5 of 20 seeded bisections stopped on it in session 8, four
of them at an end, which ends the bisection. Such a failure cannot be produced on demand, so the
real nsys is wrapped by a script that fails its Nth `profile` call the way nsys does (exit 1,
no report, nothing run) and otherwise execs the real nsys; every capture is the real nsys's. The
retry is capture's own (capture/runner.nsys_lost); bisect counts the failed attempt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bisect import SLOW_MS, bisect, build_repo, check_accounting, counted, nsys_lost
from tests.support.capture import WORK, capture, flaky_nsys
from tests.support.gitrepo import commit_files

pytestmark = [pytest.mark.nsys, pytest.mark.git]


def test_an_nsys_failure_at_an_end_is_retried_once_and_counted(tmp_path: Path, nsys: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    # good and the culprit, nothing between: the retry is at an end (the ends are the run sets
    # every bisection captures first; a step's capture goes through the same retrying call)
    shas = build_repo(
        repo, [("good", 0.0, False, "v1"), ("the culprit", SLOW_MS, False, "v2")], noise=2.0
    )
    wrapped, calls = flaky_nsys(nsys, tmp_path / "nsys", fail_at=(3,))  # an end's second round
    counter = tmp_path / "counter.txt"
    r = bisect(repo, tmp_path / "out", str(wrapped), "--good", shas[0], "--bad", shas[1],
               COUNTER=str(counter), SEED="7")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "retrying once:" in r.stderr and "Local Endpoint is not available" in r.stderr
    res = json.loads(r.stdout)
    assert res["first_bad"] == shas[1]
    ran = counted(counter)
    cap = res["captures"]
    # the wrapper's failed call ran nothing; nsys may also fail on its own under load (a fresh
    # clone's suite, session 14: failed_runs 2), retried the same way and counted alike, and such
    # an attempt may or may not have run the workload
    lost = nsys_lost(tmp_path / "out")
    assert cap["failed_runs"] == lost >= 1, r.stderr
    assert cap["finished_runs"] <= len(ran) <= cap["finished_runs"] + lost - 1
    assert cap["used"] == cap["finished_runs"] + lost == int(calls.read_text())
    assert sum(k["failed"] for k in cap["by_commit"].values()) == lost
    # the seeded tests' accounting holds with a failed attempt that ran no workload (seed 114
    # failed it so: it asked every counted attempt to have run the workload)
    check_accounting(res, ran, skipped=[])


def test_a_workload_that_fails_is_not_retried(tmp_path: Path, nsys: str) -> None:
    """A workload that exits non-zero under nsys leaves a report: capture keeps it and does not
    run the workload again (one capture through the wrapper that never fails, so the retry is
    what is tested, not the wrapper). That bisect skips such a commit after its one run is
    test_bisect.test_seven_commits' (the broken commit, with the plain nsys)."""
    repo = tmp_path / "repo"
    commit_files(repo, {"work.py": WORK.format(verify_s=0.001)}, "broken", tag="broken")
    wrapped, calls = flaky_nsys(nsys, tmp_path / "nsys", fail_at=())
    out = tmp_path / "out"
    r = capture(repo, "broken", out, nsys=str(wrapped), env={"CYCLES": "2", "EXIT_CODE": "3"})
    assert r.returncode == 1 and "exited with code 3" in r.stderr, r.stderr
    assert "retrying once" not in r.stderr and int(calls.read_text()) == 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["workload_exit_code"] == 3 and not manifest.get("nsys_failed_attempts")
    assert (out / "report.nsys-rep").exists()
