"""`compare --html FILE`: the page's content without a browser (tests/integration/
test_html_browser.py opens it in Chromium): self-contained, its figures' data, the whole
attribution table with ids, names escaped, the output rules, and the gate writing it either way.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import polars as pl
import pytest

from tracediff.cli import main
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.report.html import render_compare

ROOT = Path(__file__).resolve().parent.parents[2]
G = (ROOT / "samples" / "g_good.arrow", ROOT / "samples" / "g_bad.arrow")
HOST = tuple(ROOT / "tests/data/capture-hostonly" / s / "report.sqlite" for s in ("base", "slow"))


def payload(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="td-data">(.*?)</script>', page, re.S)
    assert m, "no data script"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def g_result():
    return compare(load(G[0]), load(G[1]), n_boot=200)


def test_page_is_self_contained_and_small(g_result) -> None:
    page = render_compare(g_result)
    assert len(page.encode()) < 5_000_000
    outside = re.sub(
        r'<script type="application/octet-stream" id="td-plotly">[^<]*</script>', "", page
    )
    # nothing to load: no src/href at all, no URL of another origin; a policy forbids fetches
    assert not re.search(r"\b(src|href)\s*=", outside, re.I)
    assert not re.search(r"(https?:|wss?:)//", outside)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert len(re.findall(r"<script\b", page)) == 3  # data, packed plotly.js, page.js


def test_figures_hold_the_comparison(g_result) -> None:
    c = g_result
    figs = {f["key"]: f for f in payload(render_compare(c))["figures"]}
    assert {"runs", "cycles", "attribution", "timeline"} <= set(figs)
    runs = figs["runs"]["data"]
    assert [len(t["y"]) for t in runs] == [c.base.runs, c.head.runs] == [1, 1]
    assert runs[0]["y"] == [pytest.approx(c.base.mean_ms)]
    cyc = figs["cycles"]["data"]
    assert [len(t["x"]) for t in cyc] == [c.base.cycles, c.head.cycles]
    bars = figs["attribution"]["data"][0]
    ids = c.attribution["contributor_id"].to_list()[:30]
    assert bars["customdata"] == ids and [y.split()[0] for y in bars["y"]] == ids
    assert bars["x"][0] == pytest.approx(c.attribution["delta_ms_per_cycle"][0])
    drawn = sum(len(t["x"]) for t in figs["timeline"]["data"])
    ev = c.events
    per_side = ev.group_by("side", "cycle").len()
    assert drawn in {
        int(b + h) for b in per_side.filter(pl.col("side") == "base")["len"]
        for h in per_side.filter(pl.col("side") == "head")["len"]
    }  # fmt: skip


def test_table_lists_every_contributor_with_its_id(g_result) -> None:
    page = render_compare(g_result)
    ids = re.findall(r'<td class="id">(c\d+)</td>', page)
    assert ids == g_result.attribution["contributor_id"].to_list()
    sig = g_result.attribution.filter("significant")["contributor_id"].to_list()
    assert len(re.findall(r'<tr class="row sig"', page)) == len(sig) > 0


def test_names_from_the_trace_are_escaped(g_result) -> None:
    c = g_result
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    att = c.attribution.with_columns(
        pl.when(pl.col("contributor_id") == "c0")
        .then(pl.lit(evil))
        .otherwise(pl.col("name"))
        .alias("name")
    )
    bad = type(c)(**{**{k: getattr(c, k) for k in c.__dataclass_fields__}, "attribution": att})
    page = render_compare(bad)
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert" in page  # the table shows it as text
    figs = {f["key"]: f for f in payload(page)["figures"]}
    assert "&lt;script&gt;" in figs["attribution"]["data"][0]["y"][0]  # plotly shows it as text


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_output_rules(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    page.write_text("mine")
    code, _, err = run_cli("compare", *map(str, G), "--html", str(page), "--format", "json")
    assert code == 1 and "already exists" in err and "--force" in err
    assert page.read_text() == "mine"  # nothing the user has is overwritten
    code, _, err = run_cli("compare", *map(str, G), "--html", str(G[0]), "--format", "json")
    assert code == 1 and "overwrite the input" in err
    code, _, err = run_cli(
        "compare", *map(str, G), "--html", str(tmp_path / "no" / "r.html"), "--format", "json"
    )
    assert code == 1 and "does not exist" in err and not (tmp_path / "no").exists()
    code, _, _ = run_cli(
        "compare", *map(str, G), "--html", str(page), "--force", "--format", "json"
    )
    assert code == 0 and page.read_text().startswith("<!doctype html>")


def test_the_gate_writes_the_page_whether_it_trips_or_not(tmp_path: Path) -> None:
    tripped, passed = tmp_path / "fail.html", tmp_path / "pass.html"
    code, _, err = run_cli(
        "compare", *map(str, HOST), "--fail-above", "5", "--html", str(tripped), "--format", "json"
    )
    assert code == 3 and "gate: fail" in err
    assert '<p id="gate" class="gate fail"><b>gate: fail</b>' in tripped.read_text()
    code, _, err = run_cli(
        "compare", *map(str, G), "--fail-above", "5", "--html", str(passed), "--format", "json"
    )
    assert code == 0 and "gate: pass" in err
    assert '<p id="gate" class="gate pass">' in passed.read_text()
