"""`tracediff capture --repeat N`: run sets, interleaved commits and variants, resume, refusals.

Real git repositories and the real nsys (NVTX only). The workload appends the commit and variant it
ran as to a counter file, so the order the runs really ran in is known independently of what
tracediff recorded; `HANG_AT=k` makes the k-th invocation loop until it is stopped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.capture import ranges
from tests.support.cli import cli_run
from tests.support.gitrepo import git, make_repo, signalled
from tracediff.parse import sides
from tracediff.parse.sides import resolve
from tracediff.runs import runset as rs

pytestmark = [pytest.mark.nsys, pytest.mark.git]

WORK = """\
import os, sys, time
import nvtx

SCALE = {scale}
variant = sys.argv[1] if len(sys.argv) > 1 else "good"
verify_s = {{"good": 0.004, "slow": 0.040}}[variant] * SCALE
n, hang = 0, int(os.environ.get("HANG_AT", "-1"))
if os.environ.get("COUNTER"):
    with open(os.environ["COUNTER"], "a") as f:
        f.write(os.environ["TRACEDIFF_CAPTURE_COMMIT"][:12] + " " + variant + "\\n")
    with open(os.environ["COUNTER"]) as f:
        n = len(f.read().splitlines())
if os.environ.get("PIDFILE"):
    with open(os.environ["PIDFILE"], "w") as f:
        f.write(str(os.getpid()))
i = 0
while i < int(os.environ.get("CYCLES", "3")) or n == hang:
    nvtx.push_range("cycle")
    nvtx.push_range("verify"); time.sleep(verify_s); nvtx.pop_range()
    nvtx.pop_range()
    i += 1
    if i == 2 and n == hang:
        print("HANG", flush=True)
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Commits `a` and `b` (b: verify twice as long)."""
    r = tmp_path_factory.mktemp("rsrepo")
    make_repo(
        r,
        [("a", {"work.py": WORK.format(scale=1)}), ("b", {"work.py": WORK.format(scale=2)})],
        tags=True,
    )
    return r


def cmd(repo: Path, out: Path, nsys: str, *extra: str, workload: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tracediff",
        "capture",
        "--repo",
        str(repo),
        "-o",
        str(out),
        "--nsys",
        nsys,
        *extra,
        "--",
        sys.executable,
        "work.py",
        *workload,
    ]


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """A `cmd` line run to the end: forked with tracediff's imports done (tests/support/cli.py);
    `signalled` runs the ones that are stopped part-way as processes of their own."""
    assert argv[:3] == [sys.executable, "-m", "tracediff"], argv
    return cli_run(argv[3:], env=env, timeout=300)


def counted(counter: Path) -> list[str]:
    return counter.read_text().splitlines() if counter.exists() else []


@pytest.fixture(scope="module")
def two(repo: Path, nsys: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list]:
    """`--commit a --commit b --repeat 2`, and the command that made it."""
    d = tmp_path_factory.mktemp("two")
    out, counter = d / "runs", d / "counter.txt"
    argv = cmd(repo, out, nsys, "--commit", "a", "--commit", "b", "--repeat", "2")
    r = run(argv, COUNTER=str(counter))
    assert r.returncode == 0, r.stderr
    return out, counter, [argv, r]


def test_two_commits_are_captured_interleaved_into_two_run_sets(
    repo: Path, two: tuple[Path, Path, list]
) -> None:
    out, counter, (_, r) = two
    a, b = (git(repo, "rev-parse", t)[:12] for t in ("a", "b"))
    # what really ran, in order: A B B A
    assert counted(counter) == [f"{a} good", f"{b} good", f"{b} good", f"{a} good"]
    group = rs.read_group_index(out)
    assert group["order"] == [["a", "run-01"], ["b", "run-01"], ["b", "run-02"], ["a", "run-02"]]
    assert set(group["sets"]) == {"a", "b"} and group["sets"]["b"]["commit"].startswith(b)
    starts = {}
    for name, sha in (("a", a), ("b", b)):
        index = rs.read_index(out / name)
        assert index["commit"].startswith(sha) and index["repeat"] == 2
        assert [x["status"] for x in index["runs"]] == ["ok", "ok"]
        assert [x["name"] for x in index["runs"]] == ["run-01", "run-02"]
        for x in index["runs"]:
            m = json.loads((out / name / x["path"] / "manifest.json").read_text())
            assert m["git"]["commit"].startswith(sha) and m["workload_exit_code"] == 0
            # probed once per commit in the call, recorded in every run's manifest
            assert m["workload_python"]["nvtx_version"] == "0.2.10"
            starts[(name, x["name"])] = x["start_utc"]
        # the compare-side reader and this module list the same runs
        runs = sides.list_runs(out / name)
        assert runs == list(resolve(out / name).runs) and len(runs) == 2
        assert [p.parent for p in runs] == rs.finished_runs(out / name)
    assert sorted(starts, key=starts.__getitem__) == [tuple(x) for x in group["order"]]
    assert "[3/4] b run 2/2" in r.stderr and "next: tracediff compare" in r.stderr


def test_a_second_identical_call_reuses_every_run(
    two: tuple[Path, Path, list], tmp_path: Path
) -> None:
    out, counter, (argv, _) = two
    before = {p: p.stat().st_mtime_ns for p in out.rglob("run.arrow")}
    r = run(argv, COUNTER=str(counter))
    assert r.returncode == 0, r.stderr
    assert "(0 captured, 4 reused)" in r.stderr and len(counted(counter)) == 4
    assert {p: p.stat().st_mtime_ns for p in out.rglob("run.arrow")} == before


def test_another_workload_or_commit_is_never_mixed_in(
    repo: Path, nsys: str, two: tuple[Path, Path, list]
) -> None:
    out, counter, _ = two
    index_before = (out / "a" / "runset.json").read_text()
    other_cmd = cmd(
        repo, out, nsys, "--commit", "a", "--commit", "b", "--repeat", "2", workload=("slow",)
    )
    other_commit = cmd(repo, out / "a", nsys, "--commit", "b", "--repeat", "2")
    same_cmd = cmd(repo, out, nsys, "--commit", "a", "--commit", "b", "--repeat", "2")
    for argv, word, env in (
        (other_cmd, "workload (command was", {}),
        (other_commit, "another commit", {}),
        (same_cmd, 'env NCCL_ALGO was "<unset>", now "Tree"', {"NCCL_ALGO": "Tree"}),
    ):
        r = run(argv, COUNTER=str(counter), **env)
        assert r.returncode == 1, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and word in r.stderr, r.stderr
        assert "--force" in r.stderr
    assert len(counted(counter)) == 4 and (out / "a" / "runset.json").read_text() == index_before


def test_ctrl_c_keeps_finished_runs_and_the_same_command_resumes(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    out, counter = tmp_path / "set", tmp_path / "counter.txt"
    argv = cmd(repo, out, nsys, "--commit", "a", "--repeat", "3")
    rc, err = signalled(argv, "HANG", signal.SIGINT, {"COUNTER": str(counter), "HANG_AT": "2"})
    assert rc == 130, err
    assert err.strip().splitlines()[-1] == (
        f"tracediff: error: a run 2/3 was interrupted; its partial capture is in {out / 'run-02'}, "
        "not counted; 1 finished run kept: run the same command again to resume"
    )
    index = rs.read_index(out)
    assert [(x["name"], x["status"]) for x in index["runs"]] == [
        ("run-01", "ok"),
        ("run-02", "interrupted"),
    ]
    assert len(sides.list_runs(out)) == 1  # the partial run is not a sample
    first = (out / "run-01" / "run.arrow").stat().st_mtime_ns
    r = run(argv, COUNTER=str(counter))
    assert r.returncode == 0, r.stderr
    assert "resuming: 1 of 3 runs already captured" in r.stderr
    assert (out / "run-01" / "run.arrow").stat().st_mtime_ns == first
    assert len(counted(counter)) == 4  # 1 finished + 1 interrupted + 2 now
    index = rs.read_index(out)
    assert [(x["name"], x["status"]) for x in index["runs"]] == [
        ("run-01", "ok"),
        ("run-02", "ok"),
        ("run-03", "ok"),
    ]
    # the interrupted attempt of run-02 is counted on the slot that replaced it (4 ran, 3 kept),
    # and so is an nsys attempt capture retried in it (nsys's own failure, seen under load: a
    # suite of session 23 counted 2 here)
    lost = (err + r.stderr).count("retrying once: nsys produced no report")
    assert [x.get("failed_attempts", 0) for x in index["runs"]] == [0, 1 + lost, 0], err
    assert all(ranges(p, "cycle").height == 3 for p in sides.list_runs(out))


def test_a_killed_call_is_resumed_and_its_leftovers_cleared(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    out, counter, pidfile = tmp_path / "set", tmp_path / "counter.txt", tmp_path / "pid"
    argv = cmd(repo, out, nsys, "--commit", "b", "--repeat", "2")
    env = {"COUNTER": str(counter), "HANG_AT": "1", "PIDFILE": str(pidfile)}
    rc, err = signalled(argv, "HANG", signal.SIGKILL, env)
    assert rc == -signal.SIGKILL, err
    # nsys runs on in its own session: end the workload, let nsys write into the staging folder
    workload = int(pidfile.read_text())
    tree = Path(os.readlink(f"/proc/{workload}/cwd"))  # the killed call's worktree
    owners = [int(p) for p in (tree.parent / "owner.pid").read_text().split()]
    os.kill(workload, signal.SIGKILL)
    deadline = time.monotonic() + 90
    while not list(out.glob(".run-01.capture-*/report.nsys-rep")) or any(
        Path(f"/proc/{p}").exists() and "zombie" not in _state(p) for p in owners
    ):
        assert time.monotonic() < deadline, list(out.iterdir())
        time.sleep(0.5)
    assert [x["status"] for x in rs.read_index(out)["runs"]] == ["running"]
    assert str(tree) in git(repo, "worktree", "list")  # left registered by the killed call
    r = run(argv, COUNTER=str(counter))
    assert r.returncode == 0, r.stderr
    assert [x["status"] for x in rs.read_index(out)["runs"]] == ["ok", "ok"]
    assert not list(out.glob(".run-*")), list(out.iterdir())
    assert len(sides.list_runs(out)) == 2 and len(counted(counter)) == 3
    # the dead call's worktree is removed by the next capture in the repo
    assert not tree.parent.exists() and str(tree) not in git(repo, "worktree", "list")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0]
    except (OSError, IndexError):
        return "zombie"


def test_variants_are_run_sets_of_one_commit_interleaved(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    out, counter = tmp_path / "v", tmp_path / "counter.txt"
    argv = cmd(
        repo,
        out,
        nsys,
        "--commit",
        "a",
        "--repeat",
        "2",
        "--variants",
        "good,slow",
        workload=("{variant}",),
    )
    r = run(argv, COUNTER=str(counter))
    assert r.returncode == 0, r.stderr
    assert [ln.split()[1] for ln in counted(counter)] == ["good", "slow", "slow", "good"]
    assert sorted(rs.read_group_index(out)["sets"]) == ["good", "slow"]
    verify = {
        v: [ranges(p, "verify")["duration_ns"].median() for p in sides.list_runs(out / v)]
        for v in ("good", "slow")
    }
    assert min(verify["slow"]) > max(verify["good"]) + 10e6, verify  # 40 vs 4 ms asleep
    assert rs.read_index(out / "slow")["workload"]["command"][-1] == "slow"
    assert f"next: tracediff compare {out / 'good'} {out / 'slow'}" in r.stderr


@pytest.mark.parametrize(
    ("extra", "workload", "message"),
    [
        (["--commit", "a", "--repeat", "0"], (), "--repeat 0: needs at least 1 run"),
        (["--commit", "a", "--variants", "x,y"], (), "needs {variant} in the command"),
        (["--commit", "a", "--commit", "a"], (), "given twice"),
        (["--commit", "a", "--commit", "b", "--label", "L"], (), "--label names one run set"),
        (["--commit", "a", "--variants", "x,../y"], ("{variant}",), "cannot name a folder"),
    ],
)
def test_usage_errors(
    repo: Path, nsys: str, tmp_path: Path, extra: list[str], workload: tuple, message: str
) -> None:
    r = run(cmd(repo, tmp_path / "o", nsys, *extra, workload=workload))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_a_folder_that_is_not_a_run_set_is_refused(repo: Path, nsys: str, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run(cmd(repo, out, nsys, "--commit", "a", "--repeat", "2"))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "is not a run set" in r.stderr and sorted(os.listdir(out)) == ["keep.txt"]


def test_reports_left_unimported_are_listed_once_and_import_later(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    """A GPU host with nsys's target package only: every run keeps its .qdstrm; one warning
    (not one per run) gives the loop that imports them, and that loop works here."""
    from tests.integration.test_capture_qdstrm import target_only_nsys

    out = tmp_path / "set"
    r = run(cmd(repo, out, str(target_only_nsys(nsys, tmp_path)), "--commit", "a", "--repeat", "2"))
    assert r.returncode == 0, r.stderr
    hint = [ln for ln in r.stderr.splitlines() if "no run file" in ln]
    assert len(hint) == 1 and hint[0].startswith("tracediff: warning: 2 runs"), r.stderr
    index = rs.read_index(out)
    assert [(x["status"], x["run_file"], x["report"]) for x in index["runs"]] == [
        ("ok", None, "run-01/report.qdstrm"),
        ("ok", None, "run-02/report.qdstrm"),
    ]
    assert [p.name for p in sides.list_runs(out)] == ["report.qdstrm", "report.qdstrm"]
    loop = hint[0].split("is: ", 1)[1]
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["bash", "-c", loop],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    runs = sides.list_runs(out)
    assert [p.name for p in runs] == ["run.arrow", "run.arrow"]
    assert all(ranges(p, "cycle").height == 3 for p in runs)


def test_uncommitted_edits_are_announced_once_per_call(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    (repo / "work.py").write_text(WORK.format(scale=5))
    try:
        r = run(cmd(repo, tmp_path / "set", nsys, "--commit", "b", "--repeat", "2"))
    finally:
        git(repo, "checkout", "-q", "--", "work.py")
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "uncommitted changes" in ln]
    # before the first run and again at the end: not once per run
    assert len(warned) == 2 and "NOT profiled" in warned[-1], r.stderr
    assert warned[0].startswith("tracediff: [1/2] b run 1/2")


def test_a_larger_repeat_adds_runs_to_the_run_set(repo: Path, nsys: str, tmp_path: Path) -> None:
    out, counter = tmp_path / "set", tmp_path / "counter.txt"
    r = run(cmd(repo, out, nsys, "--commit", "a", "--repeat", "2"), COUNTER=str(counter))
    assert r.returncode == 0, r.stderr
    first = {p: p.stat().st_mtime_ns for p in out.rglob("run.arrow")}
    r = run(cmd(repo, out, nsys, "--commit", "a", "--repeat", "3"), COUNTER=str(counter))
    assert r.returncode == 0, r.stderr
    assert "(1 captured, 2 reused)" in r.stderr and "[1/1] a run 3/3" in r.stderr
    assert len(counted(counter)) == 3 and rs.read_index(out)["repeat"] == 3
    assert all(p.stat().st_mtime_ns == t for p, t in first.items())
    assert [p.parent.name for p in sides.list_runs(out)] == ["run-01", "run-02", "run-03"]


def test_a_resume_compares_the_environment_the_runs_ran_with(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    """The run set's workload env and every run's manifest env are one thing (the per-call worktree
    path named, not spelled). A second process with another unrelated variable resumes; one whose
    CUDA_HOME differs from what the runs ran with is refused, naming the run and the variable.
    The index is first rewritten as tracediff before 2026-12-01 10:56 wrote it (workload env {}
    beside manifests holding the caller's CUDA_*: samples/runs/*/runset.json are such indexes):
    the H200 resume was refused from the very same shell ('env CUDA_HOME was "<unset>"')."""
    out, counter = tmp_path / "set", tmp_path / "counter.txt"
    env = {"COUNTER": str(counter), "CUDA_HOME": "/opt/cuda-12.4"}
    r = run(cmd(repo, out, nsys, "--commit", "a", "--repeat", "2"), **env)
    assert r.returncode == 0, r.stderr
    index = rs.read_index(out)
    m = json.loads((out / "run-01" / "manifest.json").read_text())
    assert m["env"]["CUDA_HOME"] == "/opt/cuda-12.4" and m["cwd"] in m["env"]["PYTHONPATH"]
    recorded = index["workload"]["env"]
    assert recorded["CUDA_HOME"] == "/opt/cuda-12.4"
    assert recorded["PYTHONPATH"].split(os.pathsep)[0] == "<worktree>"
    assert {**m["env"], "PYTHONPATH": m["env"]["PYTHONPATH"].replace(m["cwd"], "<worktree>")} == (
        recorded
    )
    index["workload"]["env"] = {}  # an index written by an older tracediff
    rs.write_index(out, index)

    r = run(cmd(repo, out, nsys, "--commit", "a", "--repeat", "3"), **env, CALIB_UNRELATED="yes")
    assert r.returncode == 0, r.stderr
    assert "(1 captured, 2 reused)" in r.stderr and len(counted(counter)) == 3
    assert rs.read_index(out)["workload"]["env"] == recorded  # rewritten as this tracediff does
    assert [x["status"] for x in rs.read_index(out)["runs"]] == ["ok"] * 3

    before = (out / "runset.json").read_text()
    argv = cmd(repo, out, nsys, "--commit", "a", "--repeat", "4")
    r = run(argv, COUNTER=str(counter), CUDA_HOME="/usr/local/cuda")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (
        'another workload (run-01: env CUDA_HOME was "/opt/cuda-12.4", now "/usr/local/cuda")'
        in r.stderr
    ), r.stderr
    assert str(out / "run-01" / "manifest.json") in r.stderr and "--force" in r.stderr
    assert len(counted(counter)) == 3 and (out / "runset.json").read_text() == before
