"""`tracediff bisect` from a pool: plain reports captured by `tracediff capture` (.qdstrm on a GPU host
without the importer), and a pool beside the workload command.

Split from test_bisect.py (issue 29: one module runs on one pytest-xdist worker under --dist
loadfile, and test_bisect.py was the suite's longest pole). Real git repositories built here and
the real nsys, as test_bisect.py's docstring says; the workload appends the commit it ran at to a
counter file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.bisect import (
    FIVE,
    bisect,
    build_repo,
    confirmed,
    counted,
    last_runs,
    nsys_lost,
)
from tests.support.gitrepo import (
    target_only_nsys,
    tracediff,
)

pytestmark = [pytest.mark.nsys, pytest.mark.git]


def test_pool_of_qdstrm_runs_gives_the_live_answer(tmp_path: Path, nsys: str) -> None:
    """--pool: every commit captured ahead of time by `capture --repeat --commit ...` with an nsys
    that can only write .qdstrm (as on the lent H200), then bisected here without a workload
    command: the live answer (the culprit, and no other: the live bisect of these five commits,
    with the same noise, is test_a_pool_and_the_workload_command_together's; the pool test no
    longer runs one of its own), nothing captured, the runs imported."""
    repo = tmp_path / "repo"
    repo.mkdir()
    # good, red herring, broken, culprit, bad; less noise than above: this tests the pool
    shas = build_repo(repo, FIVE, noise=2.0)
    # the pool: every commit that runs (a failing run stops capture --repeat), 6 runs each,
    # interleaved, written as .qdstrm + manifest only (no importer beside that nsys)
    pool = tmp_path / "pool"
    target = target_only_nsys(nsys, tmp_path)
    refs = [a for s in shas if s != shas[2] for a in ("--commit", s)]
    cap = tracediff(
        "capture", "--repo", str(repo), *refs, "--repeat", "6", "-o", str(pool),
        "--nsys", str(target), "--", sys.executable, "work.py",
        env={"COUNTER": str(tmp_path / "pool.txt"), "SEED": "22"}, timeout=900,
    )  # fmt: skip
    assert cap.returncode == 0, cap.stderr
    assert len(list(pool.glob("*/run-*/report.qdstrm"))) == 24
    assert not list(pool.glob("*/run-*/run.arrow"))
    before = sorted(p.relative_to(pool) for p in pool.rglob("*"))
    counter = tmp_path / "bisect.txt"
    r = bisect(
        repo, tmp_path / "out", nsys, "--good", shas[0], "--bad", shas[-1], "--pool", str(pool),
        command=False, COUNTER=str(counter), TRACEDIFF_NSYS=nsys,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["first_bad"] == shas[3], r.stderr
    assert [c["commit"] for c in res["culprits"]] == [shas[3]]
    assert not counter.exists() and res["captures"]["captured_now"] == 0  # nothing ran here
    assert res["captures"]["from_pool"] == res["captures"]["used"] >= 8
    assert res["steps"][0]["from_pool"] == res["steps"][0]["runs"]
    assert min(res["steps"][0]["runs"]) >= 4
    # the broken commit is not in the pool: gone around, said so
    assert res["pool_exhausted"] == [shas[2]]
    gone = [e for e in res["steps"] if e["commit"] == shas[2]]
    assert [e["decision"] for e in gone] == ["undecided: pool exhausted"]
    assert "undecided: pool exhausted" in r.stderr
    assert all(e["from_pool"] == e["runs"] for e in res["steps"][1:])
    # each run taken was imported from its .qdstrm into OUTDIR; the pool is untouched
    taken = list((tmp_path / "out").glob("*/pool-*/run.arrow"))
    assert len(taken) == res["captures"]["used"]
    assert sorted(p.relative_to(pool) for p in pool.rglob("*")) == before
    # the same command again: nothing imported twice, the same answer
    again = bisect(
        repo, tmp_path / "out", nsys, "--good", shas[0], "--bad", shas[-1], "--pool", str(pool),
        command=False, TRACEDIFF_NSYS=nsys,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["first_bad"] == res["first_bad"]


def test_a_pool_and_the_workload_command_together(tmp_path: Path, nsys: str) -> None:
    """--pool DIR with `-- CMD`: the pool's runs are used first, and the runs it lacks (the commits
    it does not hold, or more runs than it has) are captured here with the same command."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shas = build_repo(repo, FIVE, noise=2.0)  # good, red herring, broken, culprit, bad
    pool = tmp_path / "pool"
    cap = tracediff(
        "capture", "--repo", str(repo), "--commit", shas[0], "--commit", shas[-1],
        "--repeat", "4", "-o", str(pool), "--nsys", nsys, "--", sys.executable, "work.py",
        env={"COUNTER": str(tmp_path / "pool.txt"), "SEED": "31"}, timeout=900,
    )  # fmt: skip
    assert cap.returncode == 0, cap.stderr
    counter = tmp_path / "bisect.txt"
    r = bisect(
        repo, tmp_path / "out", nsys, "--good", shas[0], "--bad", shas[-1], "--pool", str(pool),
        COUNTER=str(counter), SEED="32",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["first_bad"] == shas[3], r.stderr
    ran = counted(counter)
    # the commits between: not in the pool, every run captured here (besides fresh interleaved
    # runs that measured a share or confirmed a range, when there were any)
    confirm = confirmed(res["steps"])
    ends = res["steps"][0]
    # the ends: the pool's 4 runs each, and only what they needed beyond that captured here
    assert ends["from_pool"] == [4, 4]
    pooled = {shas[0]: 4, shas[-1]: 4}
    steps = [e for e in res["steps"][1:] if e["decision"].startswith("like")]
    assert steps and all(e["from_pool"] == 0 for e in steps)
    shared = last_runs(res["steps"], "share_runs")  # an undecided share's runs, captured here
    assert all(
        ran.count(s) - confirm.get(s, 0) - shared.get(s, 0) == k - pooled.get(s, 0)
        for s, k in last_runs(res["steps"]).items()
        if s != shas[2]
    )
    assert ran.count(shas[2]) == 1 and [s["commit"] for s in res["skipped"]] == [shas[2]]
    cap_ = res["captures"]
    # (captured_now: the runs that finished; the broken commit's failed run is counted apart, and
    # ran its workload; an attempt where nsys failed on its own and was retried may not have: one
    # did not, under load, in session 12's suite)
    assert cap_["from_pool"] == 8
    assert cap_["captured_now"] + 1 <= len(ran) <= cap_["captured_now"] + cap_["failed_runs"]
    assert 8 + len(ran) <= cap_["used"] <= 8 + len(ran) + nsys_lost(tmp_path / "out")
