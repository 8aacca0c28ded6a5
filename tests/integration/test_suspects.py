"""Commit suspects (issue 19: `compare --repo DIR [--commits A..B]`) on real launch stacks.

The pair: the real TraceLens SGLang traces (Qwen3-8B on MI300, with_stack=True), decode as base
and prefill+decode as head: the prefill GEMMs are the largest change. The repository is real git,
built here with Python files where those stacks point (tests/support/suspects_repo.py), and commits that
touch, in order: a sibling function of the launching function's file (not on any stack), the
caller's line that calls the launching function, the launching function's body (the culprit), an
`if` branch of the launching function that holds none of its stack calls, and a file off the
stacks. The launching function is found from the stacks, not named here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

from tests.support import suspects_repo as sr
from tests.support.cli import cli_run
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.runs.runfile import write_run
from tracediff.suspects.rank import rank

pytestmark = [pytest.mark.git]

DATA = Path(__file__).resolve().parents[1] / "data" / "kineto"
PREFIX = "/sgl-workspace/sglang/python/"


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("suspects")
    b = load(DATA / "sglang_Qwen3-8B_decode.json.gz")
    h = load(DATA / "sglang_Qwen3-8B_prefilldecode.json.gz")
    write_run(b, tmp / "base.arrow")
    write_run(h, tmp / "head.arrow")
    c = compare(b, h, n_boot=10)
    ls = c.launch_stacks
    # the contributor that moved most among those launched from the repo's code
    ours = ls.filter(pl.col("file").str.starts_with(PREFIX))
    att = c.attribution.filter(pl.col("contributor_id").is_in(ours["contributor_id"].implode()))
    top = att.sort(pl.col("delta_ms_per_cycle").abs(), descending=True)["contributor_id"][0]
    chain = (
        ours.filter(pl.col("contributor_id") == top)
        .sort("share", "stack_id", "depth", descending=[True, False, False])
        .filter(pl.col("stack_id") == pl.first("stack_id"))
    )
    launcher, caller = chain.row(0, named=True), chain.row(1, named=True)
    lpath = "python/" + launcher["file"][len(PREFIX) :]
    cpath = "python/" + caller["file"][len(PREFIX) :]
    repo = tmp / "sglang"
    files = sr.frame_files(ls, PREFIX)
    shas = {"base": sr.build(repo, files)}
    last = max(files[lpath])
    L = launcher["line"]
    body = sr.line_of(repo, lpath, L, "_x = 0")
    assert body < sr.line_of(repo, lpath, L, "return _x")  # the launcher has its whole body
    shas["sibling"] = sr.edit(
        repo, lpath, last + 40, "def sibling_helper():\n    return 1", "sibling", 1
    )
    call = sr.line_of(repo, cpath, caller["line"], f"{launcher['function']}()")
    shas["caller"] = sr.edit(
        repo, cpath, call, f"        {launcher['function']}()  # x", "caller", 2
    )
    shas["culprit"] = sr.edit(repo, lpath, body, "        _x = 1", "culprit", 3)
    unused = sr.line_of(repo, lpath, L, "pass  # unused")
    shas["unused"] = sr.edit(repo, lpath, unused, "            pass  # never", "unused", 4)
    (repo / "README.md").write_text("other\n")
    sr.git(repo, "commit", "-q", "-am", "off the stacks", stamp=5)
    shas["off"] = sr.git(repo, "rev-parse", "HEAD")
    return {"c": c, "repo": repo, "shas": shas, "tmp": tmp, "launcher": launcher, "top": top}


def test_the_commit_changing_the_launching_function_ranks_first_by_a_clear_margin(case) -> None:  # type: ignore[no-untyped-def]
    c, shas = case["c"], case["shas"]
    s = rank(c.launch_stacks, c.attribution, case["repo"], shas["base"], shas["off"], "--commits")
    assert s.commits == 5
    order = [r["subject"] for r in s.rows]
    assert order[0] == "culprit", order
    score = {r["subject"]: r["score"] for r in s.rows}
    assert score["culprit"] >= 1.5 * max(v for k, v in score.items() if k != "culprit"), score
    # the unused branch of that same function, the caller and the sibling rank below it
    assert order.index("unused") > 0 and order.index("caller") > 0 and order.index("sibling") > 0
    assert "off the stacks" not in order  # touched no file of the stacks
    first = s.rows[0]
    assert first["commit"] == shas["culprit"] and len(first["commit"]) == 40
    ev = {e["contributor"]: e for e in first["evidence"]}
    assert ev[case["top"]]["kind"] == "function"
    assert ev[case["top"]]["function"] == case["launcher"]["function"]
    assert case["top"] in first["contributors"] and first["share"] > 0
    kinds = {r["subject"]: {e["kind"] for e in r["evidence"]} for r in s.rows}
    assert "branch" in kinds["unused"] and "line" in kinds["caller"]
    assert kinds["sibling"] == {"file"}
    assert "+        _x = 1" in first["hunk"] and first["hunk"][0].startswith("@@ -")


def _td(*args: object) -> subprocess.CompletedProcess[str]:
    return cli_run(args, timeout=300)


def test_cli_json_table_and_refusals(case) -> None:  # type: ignore[no-untyped-def]
    tmp, repo, shas = case["tmp"], case["repo"], case["shas"]
    pair = (tmp / "base.arrow", tmp / "head.arrow")
    rng = f"{shas['base'][:10]}..{shas['off'][:10]}"
    p = _td("compare", *pair, "--repo", repo, "--commits", rng, "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["suspects"][0]["commit"] == shas["culprit"]
    assert d["suspects_range"] == {
        "base": shas["base"],
        "head": shas["off"],
        "from": "--commits",
        "commits": 5,
        "notes": ["no contributor with launch stacks moved significantly: all weighed"],
    }  # one cycle a side (whole runs): nothing is significant
    keys = {"commit", "subject", "author", "date", "score", "share", "files", "evidence"}
    assert keys <= set(d["suspects"][0])
    t = _td("compare", *pair, "--repo", repo, "--commits", rng, "--format", "table")
    assert t.returncode == 0, t.stderr
    assert "suspect commits: 5 first-parent commits" in t.stdout
    assert f"{shas['culprit'][:12]} score" in t.stdout
    # refusals: one line on stderr, exit 2, no traceback
    for args, words in [
        (("--repo", tmp), "not a git repository"),
        (("--repo", repo, "--commits", "nope..HEAD"), "nope is not a commit"),
        (("--repo", repo, "--commits", "HEAD"), "give a range A..B"),
        (("--repo", repo), "no capture manifest commit"),
        (("--commits", rng), "--commits needs --repo"),
    ]:
        r = _td("compare", *pair, *args, "--format", "json")
        assert r.returncode == 2, (args, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr and not r.stdout, args
