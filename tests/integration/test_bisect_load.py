"""`tracediff bisect` under load (issue 31): two CPU-bound processes beside it on the 2-core
machine, default options, real git and nsys (NVTX only).

Opt-in sweeps (marker `slow`; each seed is one whole bisection, 1-4 min at load 4-6):
    pytest -m slow tests/integration/test_bisect_load.py -k culprit     (20 seeds)
    ... -k equal (30 seeds)        ... -k two (3 seeds)        -k "culprit and 200" (one seed)
BISECT_REPORT=FILE appends one JSON line a seed (the README's figures are counted from it).

The workload: 20 cycles a run, `verify` ~19 ms (10 ms + a per-process offset uniform in 0-6 ms,
seeded by SEED and the count of processes, + whatever the load adds), the culprit adds 10 ms;
a red herring rewrites a path never taken. The load: two `python` busy loops, each bounded in
time (they exit by themselves) and ended by PID when the test ends.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.gitrepo import commit_files, per_process_offset

WORK = """\
import os, random, time
import nvtx

EXTRA_MS = {extra}  # what this commit adds to verify
# {note}
{offset}
def rare_path():  # never taken
    return {herring}

for _ in range(int(os.environ.get("CYCLES", "20"))):
    nvtx.push_range("cycle")
    nvtx.push_range("draft"); time.sleep(0.002); nvtx.pop_range()
    nvtx.push_range("verify"); time.sleep((10 + offset_ms + EXTRA_MS) / 1000); nvtx.pop_range()
    nvtx.pop_range()
"""
NOISE_MS, SLOW_MS = 6.0, 10.0
LOAD_S = 1800  # each busy loop's own bound


def build(root: Path, extras: list[float], herring_at: int | None = None) -> list[str]:
    """One commit per extra (ms added to verify); the commit at `herring_at` rewrites the path
    never taken. Returns the hashes."""
    shas = []
    herring = 0
    for i, extra in enumerate(extras):
        if i == herring_at:
            herring = 1
        work = WORK.format(
            extra=extra, note=f"v{i}", offset=per_process_offset(NOISE_MS), herring=herring
        )
        shas.append(commit_files(root, {"work.py": work}, f"commit {i} (+{extra} ms)"))
    return shas


@pytest.fixture
def load() -> Iterator[list[int]]:
    """Two CPU-bound processes for the test's length (each exits by itself after LOAD_S);
    ended by PID."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import time\nend = time.time() + {LOAD_S}\nwhile time.time() < end:\n    pass\n",
            ],
        )  # fmt: skip
        for _ in range(2)
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait(30)


def run(repo: Path, out: Path, nsys: str, good: str, bad: str, seed: int) -> tuple[int, dict, str]:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "tracediff", "bisect", "--repo", str(repo), "-o", str(out),
         "--nsys", nsys, "--format", "json", "--good", good, "--bad", bad,
         "--", sys.executable, "work.py"],
        capture_output=True, text=True, timeout=3600,
        env={**os.environ, "SEED": str(seed), "COUNTER": str(out.parent / "counter.txt")},
    )  # fmt: skip
    res = json.loads(r.stdout) if r.returncode == 0 else {}
    res["_wall"] = time.monotonic() - t0
    return r.returncode, res, r.stderr


def capture_seconds(out: Path) -> float:
    """The captures' own time: every run's start to end in OUTDIR's run sets."""
    total = 0.0
    for index in out.rglob("runset.json"):
        for entry in json.loads(index.read_text())["runs"]:
            if entry.get("start_utc") and entry.get("end_utc"):
                a, b = (datetime.fromisoformat(entry[k]) for k in ("start_utc", "end_utc"))
                total += (b - a).total_seconds()
    return total


def report(kind: str, seed: int, rc: int, res: dict, out: Path, **more: object) -> None:
    if not os.environ.get("BISECT_REPORT"):
        return
    cap = res.get("captures", {})
    own = capture_seconds(out)
    line = {
        "kind": kind, "seed": seed, "rc": rc, "load": os.getloadavg()[0],
        "captures": cap.get("used"), "bound": cap.get("bound"), "wall_s": round(res["_wall"], 1),
        "capture_s": round(own, 1), "first_bad": res.get("first_bad"),
        "ends": (res.get("steps") or [{}])[0].get("runs"), **more,
        # where the captures went, and what each step decided
        "parts": {k: cap.get(k) for k in ("extra_runs", "confirm_runs", "fresh_runs", "failed_runs")},
        "decisions": [e.get("decision") for e in res.get("steps", [])],
    }  # fmt: skip
    with open(os.environ["BISECT_REPORT"], "a") as f:
        f.write(json.dumps(line) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200, 200 + 20))
def test_under_load_the_culprit_is_named(
    tmp_path: Path, nsys: str, load: list[int], seed: int
) -> None:
    repo = tmp_path / "repo"
    extras = [0.0, 0.0, 0.0, 0.0, 0.0, SLOW_MS, SLOW_MS, SLOW_MS]  # 7 commits after GOOD
    shas = build(repo, extras, herring_at=2)
    rc, res, err = run(repo, tmp_path / "out", nsys, shas[0], shas[-1], seed)
    report("culprit", seed, rc, res, tmp_path / "out", right=res.get("first_bad") == shas[5])
    assert rc == 0, err
    assert res["first_bad"] == shas[5], err
    n, commits = 4, len(shas) - 1
    assert res["captures"]["bound"] == 2 * n + math.ceil(math.log2(commits)) * n


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(300, 300 + 30))
def test_under_load_equal_commits_name_no_culprit(
    tmp_path: Path, nsys: str, load: list[int], seed: int
) -> None:
    repo = tmp_path / "repo"
    shas = build(repo, [0.0] * 8, herring_at=2)
    rc, res, err = run(repo, tmp_path / "out", nsys, shas[0], shas[-1], seed)
    report("equal", seed, rc, res, tmp_path / "out", said=err.strip().splitlines()[-1][:160])
    assert rc == 5, err  # nothing to bisect, or not decided: never a first bad commit
    assert "nothing to bisect" in err or "not decided" in err


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(400, 400 + 3))
def test_under_load_two_culprits_are_both_found(
    tmp_path: Path, nsys: str, load: list[int], seed: int
) -> None:
    repo = tmp_path / "repo"
    half = SLOW_MS
    shas = build(repo, [0.0, 0.0, half, half, half, 2 * half, 2 * half, 2 * half])
    rc, res, err = run(repo, tmp_path / "out", nsys, shas[0], shas[-1], seed)
    found = {c["commit"] for c in res.get("culprits", [])}
    report("two", seed, rc, res, tmp_path / "out", found=sorted(found & {shas[2], shas[5]}))
    assert rc == 0, err
    assert {shas[2], shas[5]} <= found, err
