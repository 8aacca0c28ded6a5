"""`tracediff capture` says what it profiled and names only what exists (issue 17, capture bullet).

Real git repositories and the real nsys (NVTX only, no GPU needed): the commit difference between
two captures is not an environment difference; warnings name the published report, not the
deleted staging folder; a failed workload is neither followed by `next: tracediff compare` nor
taken as the next capture's baseline; uncommitted edits are announced (or applied on request);
-o's missing parents are created.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.capture import WORK, capture, ranges
from tests.support.cli import cli_run
from tests.support.gitrepo import commit_files, git
from tracediff.runs.runfile import read_run

pytestmark = [pytest.mark.nsys, pytest.mark.git]


def compare_json(base: Path, head: Path) -> dict:
    r = cli_run(["compare", "--format", "json", str(base), str(head)], timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def pair(repo: Path, nsys: str, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    """base and slow, captured side by side."""
    out = tmp_path_factory.mktemp("pair")
    for ref in ("base", "slow"):
        r = capture(repo, ref, out / ref, nsys=nsys, env={"CYCLES": "4"})
        assert r.returncode == 0, r.stderr
    return out


def test_missing_parents_of_o_are_created(repo: Path, nsys: str, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "not" / "yet" / "there"
    r = capture(repo, "base", out, nsys=nsys, env={"CYCLES": "2"})
    assert r.returncode == 0, r.stderr
    assert (out / "run.arrow").is_file() and not list(out.parent.glob(".*")), "staging left"
    # a capture that fails before the workload removes the parents it made
    r = capture(repo, "no-such-ref", tmp_path / "new" / "x", nsys=nsys)
    assert r.returncode == 2 and not (tmp_path / "new").exists()


def test_commit_difference_is_not_an_environment_difference(pair: Path) -> None:
    report = compare_json(pair / "base" / "run.arrow", pair / "slow" / "run.arrow")
    keys = [d["key"] for d in report["environment"]]
    assert not [k for k in keys if k.startswith("manifest.git.")], keys
    # the commits do differ, in the runs themselves
    b, h = (read_run(pair / s / "run.arrow").metadata for s in ("base", "slow"))
    assert b["manifest"]["git"]["commit"] != h["manifest"]["git"]["commit"]


def test_a_real_environment_difference_is_still_flagged(
    repo: Path,  # noqa: F811
    nsys: str,
    pair: Path,
    tmp_path: Path,
) -> None:
    r = capture(
        repo, "slow", tmp_path / "nccl", nsys=nsys, env={"CYCLES": "4", "NCCL_ALGO": "Ring"}
    )
    assert r.returncode == 0, r.stderr
    report = compare_json(pair / "base" / "run.arrow", tmp_path / "nccl" / "run.arrow")
    diffs = {d["key"]: (d["base"], d["head"]) for d in report["environment"]}
    assert diffs.get("manifest.env.NCCL_ALGO") == (None, "Ring"), diffs


def test_warnings_and_manifest_name_the_published_report(pair: Path) -> None:
    run = read_run(pair / "base" / "run.arrow")
    text = json.dumps(run.warnings) + json.dumps(run.metadata["manifest"]["nsys_command"])
    assert run.warnings, "no GPU here: the parser warns that the report has no kernels"
    assert ".capture-" not in text, text  # the staging folder, renamed to OUTDIR
    for path in re.findall(r"(/[^\s:\"']+\.nsys-rep)", json.dumps(run.warnings)):
        assert Path(path).is_file(), path
    out = next(a for a in run.metadata["manifest"]["nsys_command"] if a.startswith("--output="))
    assert Path(out.removeprefix("--output=") + ".nsys-rep").is_file()
    # nsys's own "Generated: ..." line, echoed and logged, names the published report too
    log = (pair / "base" / "capture.log").read_text()
    assert ".capture-" not in log and str(pair / "base" / "report.nsys-rep") in log, log


def test_failed_workload_is_no_baseline_and_prints_no_next(
    repo: Path,  # noqa: F811
    nsys: str,
    tmp_path: Path,
) -> None:
    ok = capture(repo, "base", tmp_path / "a_ok", nsys=nsys, env={"CYCLES": "2"})
    assert ok.returncode == 0, ok.stderr
    bad = capture(
        repo, "slow", tmp_path / "b_bad", nsys=nsys, env={"CYCLES": "2", "EXIT_CODE": "3"}
    )
    assert bad.returncode == 1 and (tmp_path / "b_bad" / "run.arrow").is_file()
    assert "next: tracediff compare" not in bad.stderr, bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("tracediff: error: the workload exited")
    # b_bad is the newest sibling, but a failed run: the suggestion skips it
    head = capture(repo, "slow", tmp_path / "c_head", nsys=nsys, env={"CYCLES": "2"})
    assert head.returncode == 0, head.stderr
    nxt = [ln for ln in head.stderr.splitlines() if ln.startswith("next: tracediff compare")]
    assert nxt == [
        f"next: tracediff compare {tmp_path / 'a_ok' / 'run.arrow'} "
        f"{tmp_path / 'c_head' / 'run.arrow'}"
    ], head.stderr


@pytest.fixture()
def dirty_repo(tmp_path: Path) -> Path:
    """One commit (verify 10 ms) and an uncommitted edit that makes verify 60 ms."""
    r = tmp_path / "repo"
    commit_files(r, {"work.py": WORK.format(verify_s=0.010)}, "base")
    (r / "work.py").write_text(WORK.format(verify_s=0.060))
    (r / "notes.txt").write_text("untracked")
    return r


def test_dirty_tree_is_announced_and_not_profiled(
    dirty_repo: Path, nsys: str, tmp_path: Path
) -> None:
    r = capture(dirty_repo, "HEAD", tmp_path / "c", nsys=nsys, env={"CYCLES": "3"})
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "uncommitted changes" in ln]
    # said before the workload starts and again at the end, naming the count (1 tracked file)
    assert len(warned) == 2 and all("1 file with uncommitted" in w for w in warned), r.stderr
    assert "NOT profiled" in warned[-1] and "--include-uncommitted" in warned[-1]
    assert ranges(tmp_path / "c" / "run.arrow", "verify")["duration_ns"].median() < 40e6
    assert git(dirty_repo, "status", "--porcelain") == "M work.py\n?? notes.txt".strip()


def test_include_uncommitted_profiles_the_edit(dirty_repo: Path, nsys: str, tmp_path: Path) -> None:
    r = capture(
        dirty_repo, "HEAD", tmp_path / "c", "--include-uncommitted", nsys=nsys, env={"CYCLES": "3"}
    )
    assert r.returncode == 0, r.stderr
    assert ranges(tmp_path / "c" / "run.arrow", "verify")["duration_ns"].median() > 50e6
    m = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert m["git"]["uncommitted_included"] is True and m["git"]["dirty_files"] == 1
    said = [ln for ln in r.stderr.splitlines() if "applied to the worktree" in ln]
    assert said and "1 untracked file not copied" in said[-1], r.stderr
    # the user's checkout is untouched
    assert "0.06" in (dirty_repo / "work.py").read_text()
    assert git(dirty_repo, "worktree", "list").count("\n") == 0


def test_include_uncommitted_needs_head(dirty_repo: Path, nsys: str, tmp_path: Path) -> None:
    git(dirty_repo, "stash", "-q")
    (dirty_repo / "work.py").write_text(WORK.format(verify_s=0.020))
    git(dirty_repo, "commit", "-qam", "second")
    (dirty_repo / "work.py").write_text(WORK.format(verify_s=0.030))
    r = capture(dirty_repo, "HEAD~1", tmp_path / "c", "--include-uncommitted", nsys=nsys)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not the checked-out HEAD" in r.stderr and not (tmp_path / "c").exists()
