"""Shared by the tests (moved from tests/integration/test_bisect.py, so no test module imports another)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.cli import cli_run
from tests.support.gitrepo import (
    commit_files,
    per_process_offset,
)

WORK = """\
import os, random, time
import nvtx

EXTRA_MS = {extra}  # what this commit adds to verify
FAIL = {fail}
# {note}
{offset}if FAIL:
    raise SystemExit("this commit does not run")
for _ in range(int(os.environ.get("CYCLES", "12"))):
    nvtx.push_range("cycle")
    nvtx.push_range("draft"); time.sleep(0.002); nvtx.pop_range()
    nvtx.push_range("verify"); time.sleep((10 + offset_ms + EXTRA_MS) / 1000); nvtx.pop_range()
    nvtx.pop_range()
"""


# SLOW_MS was 8 (session 14: the seven-commit test's culprit share came out -0.06 at load 9-10,
# a share being measured between two steps' run sets captured minutes apart, whose sleeps
# overshoot by what the load does then): 12 is twice the per-process noise's range
NOISE_MS, SLOW_MS = 6.0, 12.0


def build_repo(
    root: Path, commits: list[tuple[str, float, bool, str]], noise: float = NOISE_MS
) -> list[str]:
    """commits: (subject, extra ms, fails, note); the first is GOOD. Returns the shas."""
    shas = []
    for i, (subject, extra, fail, note) in enumerate(commits):
        if note == "notes":  # a commit that does not touch work.py
            files = {"NOTES": f"note {i}\n"}
        else:
            files = {
                "work.py": WORK.format(
                    extra=extra, fail=fail, note=note, offset=per_process_offset(noise)
                )
            }
        shas.append(commit_files(root, files, subject))
    return shas


def bisect(
    repo: Path, out: Path, nsys: str, *extra: str, command: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    argv = bisect_argv(repo, out, nsys, *extra, command=command)
    return cli_run(argv[3:], env=env, timeout=1200)


def bisect_argv(repo: Path, out: Path, nsys: str, *extra: str, command: bool = True) -> list[str]:
    return [
        sys.executable, "-m", "tracediff", "bisect", "--repo", str(repo), "-o", str(out),
        "--nsys", nsys, "--format", "json", *extra,
        *(["--", sys.executable, "work.py"] if command else []),
    ]  # fmt: skip


def counted(counter: Path) -> list[str]:
    return counter.read_text().splitlines() if counter.exists() else []


def nsys_lost(out: Path) -> int:
    """nsys attempts in OUTDIR that failed on their own and that capture retried (each run's
    manifest `nsys_failed_attempts`): counted in `captures.used` and `failed_runs`, though the
    workload may not have run (nsys can fail before starting it: seen under load)."""
    return sum(
        len(json.loads(m.read_text()).get("nsys_failed_attempts") or [])
        for m in out.rglob("manifest.json")
    )


def retried(out: Path) -> int:
    """Attempts in OUTDIR whose workload may have run without leaving a run: nsys's own failures
    that capture retried (nsys_lost) and the tool failures bisect retried itself, resuming the run
    set (each run's `failed_attempts` in its runset.json)."""
    again = sum(
        r.get("failed_attempts") or 0
        for f in out.rglob("runset.json")
        for r in json.loads(f.read_text()).get("runs", [])
    )
    return nsys_lost(out) + again


def ran_at_least(ran: list[str], want: dict[str, int], out: Path) -> None:
    """The workload ran `want[sha]` times at each commit, and more only by OUTDIR's retried
    attempts (a transient nsys failure under load: a suite at load ~4 saw one)."""
    assert all(ran.count(s) >= k for s, k in want.items()), (ran, want)
    assert len(ran) <= sum(want.values()) + retried(out), (ran, want, retried(out))


def last_runs(steps: list[dict], key: str = "runs") -> dict[str, int]:
    """The runs each commit had (key "runs": in its own run set; "share_runs": an undecided
    share's extra runs) when a step last named it."""
    last: dict[str, int] = {}
    for e in steps:
        if key not in e:
            continue
        pair = isinstance(e[key], list)
        shas = (e.get("against"), e["commit"]) if pair else (e["commit"],)
        last.update(zip(shas, e[key] if pair else [e[key]], strict=True))
    return last


def confirmed(steps: list[dict]) -> dict[str, int]:
    """Fresh interleaved runs (confirmations, shares measured again) by commit, as logged: each
    confirmation folder's last count (a later step may reuse one)."""
    last: dict[tuple[str, str], int] = {}
    for e in steps:
        if "confirm_runs" not in e:
            continue
        for sha, k in zip((e.get("against"), e["commit"]), e["confirm_runs"], strict=True):
            last[e["confirm_folder"], sha] = k
    out: dict[str, int] = {}
    for (_, sha), k in last.items():
        out[sha] = out.get(sha, 0) + k
    return {s: k for s, k in out.items() if k}


def check_accounting(res: dict, ran: list[str], skipped: list[str]) -> None:
    """bisect's captures against the counter of what ran: per commit (its run set, its
    confirmations, its failed runs), in all, and against the runs each step logged last.

    Every finished run ran the workload once; a failed attempt may have (the workload exited
    non-zero, nsys wrote no report after it) or not (nsys failed before starting it: retried
    once, tracediff/bisect/bisection.py; seed 114 at load 3, session 9): per commit the workload
    ran at least its finished runs and at most those plus its failed attempts."""
    cap = res["captures"]
    by = cap["by_commit"]
    # (fresh_runs: a step's ends, captured interleaved with the step's commit)
    done = {
        s: k["runs"] + k["share_runs"] + k["confirm_runs"] + k.get("fresh_runs", 0)
        for s, k in by.items()
    }
    for s in set(ran) | set(by):
        assert done.get(s, 0) <= ran.count(s) <= done.get(s, 0) + by.get(s, {}).get("failed", 0)
    assert cap["finished_runs"] <= len(ran) <= cap["used"]
    assert cap["used"] == cap["finished_runs"] + cap["failed_runs"]
    assert cap["confirm_runs"] == sum(k["confirm_runs"] for k in by.values())
    assert cap.get("fresh_runs", 0) == sum(k.get("fresh_runs", 0) for k in by.values())
    last = {s: k for s, k in last_runs(res["steps"]).items() if s not in skipped}
    assert last == {s: by[s]["runs"] for s in last}
    # an undecided share's extra runs (the last count logged) are extra runs, as a step's are
    shared = {s: k for s, k in last_runs(res["steps"], "share_runs").items() if k}
    assert shared == {s: k["share_runs"] for s, k in by.items() if k["share_runs"]}
    assert cap["extra_runs"] == sum(shared.values()) + sum(  # with the runs beyond N = 4
        max(k["runs"] - 4, 0) for s, k in by.items() if s not in skipped
    )
    assert confirmed(res["steps"]) == {
        s: k["confirm_runs"] for s, k in by.items() if k["confirm_runs"]
    }
    # a step captures one fresh run of each end per 4 of its commit's runs (issue 31:
    # N of one end had cost 2N + 3 x 2N = 32 captures for a lone culprit at N = 4, against 30)
    stepped = [e for e in res["steps"] if e.get("fresh_good_runs")]
    for e in stepped:
        assert e["fresh_good_runs"] == e["fresh_bad_runs"] == -(-e["runs"] // 4), e
    fresh = sum(e["fresh_good_runs"] + e["fresh_bad_runs"] for e in last_step(stepped))
    assert fresh == cap.get("fresh_runs", 0)


def last_step(entries: list[dict]) -> list[dict]:
    """The last logged entry of each commit (a step resumed or looked at again logs anew)."""
    return list({e["commit"]: e for e in entries}.values())


# The commit lists of tests/integration/test_bisect*.py: (message, ms added to verify, broken, note)
SEVEN = [
    ("good: baseline", 0.0, False, "v1"),
    ("docs: notes", 0.0, False, "notes"),
    ("refactor verify (red herring: same speed)", 0.0, False, "v2 refactored"),
    ("broken: does not run", 0.0, True, "v3 broken"),
    ("fix the break", 0.0, False, "v4 fixed"),
    ("verify: extra pass (the culprit)", SLOW_MS, False, "v5 slower"),
    ("docs: more notes", SLOW_MS, False, "notes"),
    ("bump (bad)", SLOW_MS, False, "notes"),
]


THREE = [SEVEN[0], SEVEN[5], SEVEN[7]]  # good, the culprit, bad: one step between the ends


FIVE = [SEVEN[0], SEVEN[2], SEVEN[3], SEVEN[5], ("bump (bad)", SLOW_MS, False, "notes")]
