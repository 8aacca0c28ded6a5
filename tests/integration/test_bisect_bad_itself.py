"""`tracediff bisect` naming BAD itself (every step like good): only when fresh interleaved runs of
BAD and its parent show its change again (tracediff/bisect/search.bad_itself; issue 31's seed 300,
equal commits under load, where the ends' test called a change that was not there and BAD was
named). Real git and nsys (NVTX only).

The workload: GOOD, X, BAD. BAD adds SLOW_MS to `verify`; "transient": only while no commit but
GOOD and BAD has run (the ends' runs, as a load that hit BAD's runs alone would), so the ends
differ, X comes out like good, and BAD's fresh runs against X show nothing; "real": always.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bisect import bisect, counted
from tests.support.gitrepo import commit_files, per_process_offset

pytestmark = [pytest.mark.nsys, pytest.mark.git]

WORK = """\
import os, random, time
import nvtx

EXTRA_MS = {extra}  # what this commit adds to verify
TRANSIENT = {transient}  # only while GOOD and BAD alone have run
# {note}
{offset}
if TRANSIENT and counter:
    with open(counter) as f:
        if len(set(f.read().splitlines())) > 2:
            EXTRA_MS = 0
for _ in range(12):
    nvtx.push_range("cycle")
    nvtx.push_range("verify"); time.sleep((10 + offset_ms + EXTRA_MS) / 1000); nvtx.pop_range()
    nvtx.pop_range()
"""
SLOW_MS = 20.0


@pytest.mark.parametrize("kind", ["transient", "real"])
def test_bad_is_named_only_when_its_fresh_runs_show_its_change(
    tmp_path: Path, nsys: str, kind: str
) -> None:
    repo = tmp_path / "repo"
    shas = [
        commit_files(
            repo,
            {
                "work.py": WORK.format(
                    extra=extra,
                    transient=kind == "transient",
                    note=note,
                    offset=per_process_offset(1.0),
                )
            },
            note,
        )
        for extra, note in ((0.0, "good"), (0.0, "x: same speed"), (SLOW_MS, "bad"))
    ]
    counter = tmp_path / "counter.txt"
    r = bisect(
        repo, tmp_path / "out", nsys, "--good", shas[0], "--bad", shas[2],
        COUNTER=str(counter), SEED="1",
    )  # fmt: skip
    state = json.loads((tmp_path / "out" / "bisect.json").read_text())
    again = [
        e
        for e in state["log"]
        if e.get("decision") == "culprit's share on fresh interleaved runs"
        and e["commit"] == shas[2]
    ]
    ran = counted(counter)
    assert ran.count(shas[1]) >= 4, r.stderr  # X was a step
    assert state["log"][0]["decision"] == "regression", r.stderr
    if kind == "transient":
        # the ends differed, X came out like good; BAD's fresh runs against X, 4 then 8 a side,
        # showed nothing: not decided, no commit named
        assert r.returncode == 5 and r.stdout == "", r.stderr
        last = r.stderr.strip().splitlines()
        assert "not decided" in "\n".join(last[-3:]) and "every step came out like good" in (
            r.stderr
        )
        assert [e["confirm_runs"] for e in again] == [[4, 4], [8, 8]], r.stderr
        assert all(e["against"] == shas[1] for e in again)
        assert all(abs(e["delta_ms_per_cycle"]) < SLOW_MS / 2 for e in again), again
        # 8 fresh runs a side: X's and BAD's counts include them
        assert ran.count(shas[2]) >= 4 + 8
    else:
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        assert res["first_bad"] == shas[2] and res["first_bad_confirmed"] is True
        c = res["culprits"][0]
        assert c["measured_on"] == "fresh interleaved runs" and c["parent"] == shas[1]
        assert c["delta_ms_per_cycle"] > SLOW_MS / 2
        # seen at N fresh runs a side: not taken further
        assert [e["confirm_runs"] for e in again] == [[4, 4]], r.stderr
