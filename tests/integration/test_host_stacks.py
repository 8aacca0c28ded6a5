"""Host-only runs with nsys function-trace ranges: phases are the user's NVTX ranges, each with
the stack of functions it ran in, and commit suspects work on them (engine/host_stacks.py).

A real git repo (a package whose `cycle` calls `draft` and `verify`, each pushing its own NVTX
range) captured by `tracediff capture` with the real nsys and its default function trace, no GPU.
The head commit slows `verify` inside its body; a commit before it rewords `draft`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.gitrepo import git, make_repo, tracediff

pytestmark = [pytest.mark.nsys, pytest.mark.git]

pytest.importorskip("nvtx")

WORK = """\
import time
import nvtx


def draft():
    nvtx.push_range("draft")
    time.sleep({draft} / 1000)
    nvtx.pop_range()


def verify():
    nvtx.push_range("verify")
    time.sleep({verify} / 1000)
    nvtx.pop_range()


def cycle():
    nvtx.push_range("cycle")
    draft()
    verify()
    nvtx.pop_range()
"""
MAIN = "from pkg import work\nfor _ in range(12):\n    work.cycle()\n"


@pytest.fixture(scope="module")
def captured(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("hoststacks")
    base = {"pkg/__init__.py": "", "main.py": MAIN, "pkg/work.py": WORK.format(draft=2, verify=10)}
    shas = make_repo(
        d / "repo",
        [
            ("base", base),
            ("draft: the same sleep written otherwise", {"pkg/work.py": WORK.format(draft="(1 + 1)", verify=10)}),
            ("verify: slower", {"pkg/work.py": WORK.format(draft="(1 + 1)", verify=20)}),
        ],
    )  # fmt: skip
    for name, sha in (("base", shas[0]), ("head", shas[2])):
        r = tracediff(
            "capture", "--commit", sha, "--repo", str(d / "repo"), "-o", str(d / name),
            "--nsys", nsys, "--", sys.executable, "main.py", timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
    r = tracediff(
        "compare", str(d / "base"), str(d / "head"), "--repo", str(d / "repo"), "--format", "json"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return {"shas": shas, "json": json.loads(r.stdout)}


def test_phases_are_the_user_s_ranges_not_the_function_trace(captured: dict) -> None:
    rows = {r["name"]: r for r in captured["json"]["attribution"]}
    # nsys counts depth per domain: `pkg.work.verify` sat beside `verify` as a second phase
    assert set(rows) == {"draft", "verify", "(outside phases)"}
    assert rows["(outside phases)"]["base_ms_per_cycle"] >= 0
    assert rows["verify"]["delta_ms_per_cycle"] > 3 and rows["verify"]["significant"]


def test_each_phase_carries_the_functions_it_ran_in(captured: dict) -> None:
    rows = {r["name"]: r for r in captured["json"]["attribution"]}
    assert rows["verify"]["sources"] == [
        {"file": "pkg/work.py", "line": None, "function": "verify", "share": 1.0}
    ]
    assert [s["function"] for s in rows["draft"]["sources"]] == ["draft"]
    assert rows["(outside phases)"]["sources"] == []


def test_suspects_rank_the_commit_that_changed_the_slower_phase_s_function(captured: dict) -> None:
    shas, sus = captured["shas"], captured["json"]["suspects"]
    assert captured["json"]["suspects_range"]["from"] == "capture manifests"
    assert sus[0]["commit"] == shas[2], sus
    assert sus[0]["functions"] == ["pkg/work.py:verify"]
    # the heaviest evidence is verify's changed line; draft (whose 2 ms sleep measures a little
    # differently run to run: +2.7 ms once under load) may appear only as a file-level hit, the
    # commit having touched its file (seen in a fresh-clone check at light load too)
    ev = sus[0]["evidence"]
    assert ev[0]["function"] == "verify" and ev[0]["kind"] != "file", ev
    assert {e["function"] for e in ev if e["kind"] != "file"} == {"verify"}, ev
    # the draft commit touched the same file, on another phase's stack: file-level at most
    others = [r for r in sus if r["commit"] == shas[1]]
    assert all(r["score"] < sus[0]["score"] / 2 for r in others), sus


EXTRA = """

def extra():
    nvtx.push_range("extra")
    time.sleep(0.006)
    nvtx.pop_range()
"""


def test_a_file_renamed_in_the_range_keeps_the_commits_that_changed_it_before(
    nsys: str, tmp_path: Path
) -> None:
    """A phase that only head has (so only head-side frames, at the new path): the commit that
    added it changed `pkg/work.py`, which a later commit renamed to `pkg/core.py`. With renames
    read as a deletion and an addition (`git log --no-renames`), the rename commit took the
    blame and the real one was not ranked at all."""
    slower = (
        WORK.format(draft=2, verify=10).replace("    verify()\n", "    verify()\n    extra()\n")
        + EXTRA
    )
    repo = tmp_path / "repo"
    base = {"pkg/__init__.py": "", "main.py": MAIN, "pkg/work.py": WORK.format(draft=2, verify=10)}
    shas = make_repo(repo, [("base", base), ("cycle: an extra phase", {"pkg/work.py": slower})])
    git(repo, "mv", "pkg/work.py", "pkg/core.py")
    (repo / "main.py").write_text(MAIN.replace("import work", "import core as work"))
    git(repo, "commit", "-qam", "rename pkg/work.py to pkg/core.py")
    shas.append(git(repo, "rev-parse", "HEAD"))
    for name, sha in (("base", shas[0]), ("head", shas[2])):
        r = tracediff(
            "capture", "--commit", sha, "--repo", str(repo), "-o", str(tmp_path / name),
            "--nsys", nsys, "--", sys.executable, "main.py", timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
    r = tracediff(
        "compare", str(tmp_path / "base"), str(tmp_path / "head"), "--repo", str(repo),
        "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    rows = {a["name"]: a for a in out["attribution"]}
    assert rows["extra"]["sources"][0]["file"] == "pkg/core.py"  # the head-side path
    sus = out["suspects"]
    assert sus[0]["commit"] == shas[1], sus
    # named at the path that commit changed, hit on the line that defines the phase's function
    assert "pkg/work.py:extra" in sus[0]["functions"]
    ev = {e["function"]: e for e in sus[0]["evidence"]}
    assert ev["extra"]["kind"] == "line" and ev["extra"]["file"] == "pkg/core.py"
    assert any("def extra" in x for x in sus[0]["hunk"])
    # the pure rename moved no line: at most a file-level hit, far behind
    assert all(s["score"] < sus[0]["score"] / 2 for s in sus if s["commit"] == shas[2]), sus
