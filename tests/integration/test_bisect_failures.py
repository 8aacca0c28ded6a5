"""`tracediff bisect` when a run fails part-way: in a confirmation (logged and counted), and a
commit's later run (decided on the runs it has, not skipped as a commit that does not run).

Real git repositories and the real nsys (NVTX only), the workload of tests/support/bisect.py
(WORK) with a failure added; split from test_bisect.py so the suite's workers share the load
(--dist loadfile keeps a module on one worker).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bisect import (
    SLOW_MS,
    WORK,
    bisect,
    check_accounting,
    counted,
    nsys_lost,
)
from tests.support.gitrepo import commit_files, per_process_offset

pytestmark = [pytest.mark.nsys, pytest.mark.git]


FLAKY = """\
def in_a_confirmation():  # a process under the nsys writing into OUTDIR/confirm-*/
    pid = os.getppid()
    while pid > 1:
        try:
            if b"/confirm-" in open(f"/proc/{pid}/cmdline", "rb").read():
                return True
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False
flake = os.environ.get("FLAKE")
if flake and not os.path.exists(flake) and in_a_confirmation():
    open(flake, "w").close()
    raise SystemExit("a run that fails once")
"""


def test_a_run_that_fails_in_a_confirmation_is_logged_and_counted(
    tmp_path: Path, nsys: str
) -> None:
    """Two halves in three commits (so fresh interleaved runs are captured), and the first run
    in a confirmation fails (once: a transient nsys or workload failure). Session 7's seed 108
    ran a commit more often than bisect's log and counts said: a confirmation whose capture
    failed was neither logged nor counted (`captures.used` below what ran)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = []
    for i, extra in enumerate((0.0, SLOW_MS, 2 * SLOW_MS)):
        work = WORK.format(extra=extra, fail=False, note=f"v{i}", offset=per_process_offset(2.0))
        work = work.replace("if FAIL:", FLAKY + "if FAIL:")
        shas.append(commit_files(repo, {"work.py": work}, f"commit {i}"))
    counter, flake = tmp_path / "counter.txt", tmp_path / "flaked"
    r = bisect(
        repo, tmp_path / "out", nsys, "--good", shas[0], "--bad", shas[2], SEED="41",
        COUNTER=str(counter), FLAKE=str(flake),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    ran = counted(counter)
    assert flake.exists(), r.stderr  # a confirmation was captured, and its first run failed
    lost = nsys_lost(tmp_path / "out")  # nsys's own failures, retried by capture (under load)
    assert len(ran) <= res["captures"]["used"] <= len(ran) + lost, res["captures"]["by_commit"]
    # the flaky run, nsys's own failures, and another tool's failure that bisect retried (said
    # "retrying once: ..."): a second confirmation's first run failed so at load ~4, session 14
    retried = r.stderr.count("retrying once:")
    assert 1 + lost <= res["captures"]["failed_runs"] <= 1 + lost + retried, r.stderr
    check_accounting(res, ran, skipped=[])
    failed = [e for e in res["steps"] if "confirm_problem" in e]
    assert len(failed) == 1 and "exited with code 1" in failed[0]["confirm_problem"], failed
    assert "warning: 1 confirmation(s) on fresh runs failed part-way" in r.stderr
    assert res["first_bad"] in shas[1:]


FOURTH = """\
here = os.environ["TRACEDIFF_CAPTURE_COMMIT"]
if os.environ.get("FAIL_FOURTH") == here and open(counter).read().split().count(here) == 4:
    raise SystemExit("the fourth run at this commit fails")
"""


def test_a_commit_whose_later_run_fails_is_decided_on_the_runs_it_has(
    tmp_path: Path, nsys: str
) -> None:
    """The culprit's 4th run fails (as an nsys error under load did in a seeded run: "nsys
    produced no report"): it ran 3 times, so it is not a commit that does not run. The old code
    skipped it, and named the commit after it with the culprit among the skipped."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = []
    for i, extra in enumerate((0.0, SLOW_MS, SLOW_MS)):
        work = WORK.format(extra=extra, fail=False, note=f"v{i}", offset=per_process_offset(2.0))
        shas.append(commit_files(repo, {"work.py": work.replace("if FAIL:", FOURTH + "if FAIL:")},
                                 f"commit {i}"))  # fmt: skip
    counter = tmp_path / "counter.txt"
    r = bisect(
        repo, tmp_path / "out", nsys, "--good", shas[0], "--bad", shas[2], SEED="43",
        COUNTER=str(counter), FAIL_FOURTH=shas[1],
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    ran = counted(counter)
    assert ran.count(shas[1]) >= 4 and res["skipped"] == [], r.stderr
    step = next(e for e in res["steps"] if e["commit"] == shas[1] and "problem" in e)
    assert step["runs"] == 3 and "exited with code 1" in step["problem"], step
    assert res["captures"]["failed_runs"] == 1 + nsys_lost(tmp_path / "out")
    check_accounting(res, ran, skipped=[])
    if step["decision"] == "like bad":  # 3 runs told it apart (else: undecided, and said so)
        assert res["first_bad"] == shas[1], r.stderr
    else:
        assert step["decision"] == "undecided: a run failed", step
