"""`tracediff bisect` retries a capture once where nsys itself failed (no report), not where the
workload failed.

Under load on the shared 2-core machine nsys sometimes writes no report ("Local Endpoint is not
available", "nsys produced no report"): 5 of 20 seeded bisections stopped on it in session 8, four
of them at an end, which ends the bisection. Such a failure cannot be produced on demand, so the
real nsys is wrapped by a script that fails its Nth `profile` call once the way nsys does (exit 1,
no report, nothing run) and otherwise execs the real nsys; every capture is the real nsys's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bisect import SLOW_MS, bisect, build_repo, check_accounting, counted

pytestmark = [pytest.mark.nsys, pytest.mark.git]

WRAPPER = """\
#!/bin/sh
if [ "$1" = profile ]; then
    n=$(($(cat "{calls}" 2>/dev/null || echo 0) + 1))
    echo "$n" > "{calls}"
    if [ "$n" = "{fail_at}" ]; then
        echo "Local Endpoint is not available" >&2
        exit 1
    fi
fi
exec "{real}" "$@"
"""


def flaky_nsys(nsys: str, where: Path, fail_at: int) -> tuple[Path, Path]:
    """A wrapper of the real nsys failing its fail_at-th profile call; (wrapper, call counter).
    QdstrmImporter is linked beside it (capture looks for it beside the nsys it runs)."""
    where.mkdir()
    calls = where / "calls"
    w = where / "nsys"
    w.write_text(WRAPPER.format(calls=calls, fail_at=fail_at, real=Path(nsys).resolve()))
    w.chmod(0o755)
    importer = Path(nsys).resolve().parent / "QdstrmImporter"
    if importer.exists():
        (where / "QdstrmImporter").symlink_to(importer)
    return w, calls


def test_an_nsys_failure_at_an_end_is_retried_once_and_counted(tmp_path: Path, nsys: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    # good and the culprit, nothing between: the retry is at an end (the ends are the run sets
    # every bisection captures first; a step's capture goes through the same retrying call)
    shas = build_repo(
        repo, [("good", 0.0, False, "v1"), ("the culprit", SLOW_MS, False, "v2")], noise=2.0
    )
    wrapped, calls = flaky_nsys(nsys, tmp_path / "nsys", fail_at=3)  # an end's second round
    counter = tmp_path / "counter.txt"
    r = bisect(repo, tmp_path / "out", str(wrapped), "--good", shas[0], "--bad", shas[1],
               COUNTER=str(counter), SEED="7")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "retrying once:" in r.stderr and "Local Endpoint is not available" in r.stderr
    res = json.loads(r.stdout)
    assert res["first_bad"] == shas[1]
    ran = counted(counter)
    cap = res["captures"]
    # the failed call ran nothing: every workload run is a finished run, plus one failed attempt
    assert cap["failed_runs"] == 1 and cap["finished_runs"] == len(ran)
    assert cap["used"] == len(ran) + 1 == int(calls.read_text())
    assert sum(k["failed"] for k in cap["by_commit"].values()) == 1
    # the seeded tests' accounting holds with a failed attempt that ran no workload (seed 114
    # failed it so: it asked every counted attempt to have run the workload)
    check_accounting(res, ran, skipped=[])


def test_a_workload_that_fails_is_not_retried(tmp_path: Path, nsys: str) -> None:
    """The broken commit runs once (the seven-commit test asserts as much with the plain nsys);
    here through the wrapper that never fails, so the retry is what is tested, not the wrapper.
    The broken commit is the only one between the ends: its one failed run is the probe."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = build_repo(
        repo,
        [
            ("good", 0.0, False, "v1"),
            ("broken", 0.0, True, "v2"),
            ("fixed, slower", SLOW_MS, False, "v3"),
        ],
        noise=2.0,
    )
    wrapped, _ = flaky_nsys(nsys, tmp_path / "nsys", fail_at=0)
    counter = tmp_path / "counter.txt"
    r = bisect(repo, tmp_path / "out", str(wrapped), "--good", shas[0], "--bad", shas[2],
               COUNTER=str(counter), SEED="7")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "retrying once" not in r.stderr
    res = json.loads(r.stdout)
    assert counted(counter).count(shas[1]) == 1
    assert [s["commit"] for s in res["skipped"]] == [shas[1]]
    assert res["first_bad"] == shas[2]
