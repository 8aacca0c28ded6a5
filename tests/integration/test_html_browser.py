"""`compare --html FILE` opened in a real headless Chromium (Debian's chromium and
chromium-driver, `make chromium`): the demo run sets, a two-GPU nsys pair, a host-only pair
and a `--repo` comparison of Kineto traces. Each page loads with no console message and no
request but its own file, shows the verdict and the significant contributors, draws its
pictures (one dot per run, a bar per contributor, a heat map for several GPUs), and its
screenshot is not blank; the table sorts, filters and searches.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser, missing
from tracediff.cli import main

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    why = missing()
    if why:
        pytest.fail(why)
    b = Browser()
    try:
        BLANK[:] = [blank_png(b, tmp_path_factory.mktemp("blank"))]
        yield b
    finally:
        b.close()


def render(tmp: Path, name: str, *argv: str) -> tuple[Path, dict[str, Any]]:
    """`compare ARGV --html tmp/NAME.html --format json`: the page and the JSON document."""
    page = tmp / f"{name}.html"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["compare", *argv, "--html", str(page), "--format", "json"])
    assert code == 0
    return page, json.loads(out.getvalue())


def blank_png(browser: Browser, tmp: Path) -> int:
    """The size of a screenshot of an empty page: what a blank rendering compresses to."""
    empty = tmp / "empty.html"
    empty.write_text("<!doctype html><title>empty</title><body data-ready=1></body>")
    browser.open(empty)
    return len(browser.screenshot())


def opened(browser: Browser, page: Path) -> dict[str, Any]:
    """Open `page` and check what every page must hold."""
    r = browser.open(page)
    assert r["ready"] == "1", r
    assert r["console"] == [], r["console"]  # no script error, no policy violation, no warning
    # nothing fetched but the page itself (data: URLs are plotly's own drawings: the heat map)
    inline = ("chrome:", "data:", "blob:")
    outside = [u for u in r["requests"] if u != r["url"] and not u.startswith(inline)]
    assert outside == [], outside
    return r


def text(browser: Browser, css: str) -> str:
    return str(browser.js("return document.querySelector(arguments[0]).textContent", css))


def count(browser: Browser, css: str) -> int:
    return int(browser.js("return document.querySelectorAll(arguments[0]).length", css))


BLANK: list[int] = []


def common(browser: Browser, doc: dict[str, Any]) -> None:
    """The verdict, the significant contributors, the table and the pictures every GPU or
    host comparison has."""
    assert f"{doc['delta_ms_per_cycle']['mean']:+.3f} ms/cycle" in text(browser, "#verdict")
    sig = {a["id"] for a in doc["attribution"] if a["significant"]}
    shown = browser.js(
        "return [...document.querySelectorAll('#attribution tr.sig td.id')].map(e => e.textContent)"
    )
    assert set(shown) == sig
    assert count(browser, "#attribution tbody tr") == len(doc["attribution"])
    runs = browser.js(
        "return [...document.querySelectorAll('#fig-runs .scatterlayer .trace')]"
        ".map(t => t.querySelectorAll('.point').length)"
    )
    assert runs == [doc["runs"]["base"], doc["runs"]["head"]]  # one dot per run
    assert count(browser, "#fig-cycles .barlayer .trace") == 2  # both sides' histograms
    bars = min(30, len(doc["attribution"]))
    assert count(browser, "#fig-attribution .barlayer .point") == bars
    shot = browser.screenshot()
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 10 * BLANK[0]  # not blank


def test_demo_run_sets_and_the_table(browser: Browser, tmp_path: Path) -> None:
    page, doc = render(tmp_path, "demo", "samples/runs/good", "samples/runs/bad")
    opened(browser, page)
    common(browser, doc)
    assert doc["runs"] == {"base": 4, "head": 4}
    drawn = browser.js(
        "const f = JSON.parse(document.getElementById('td-data').textContent).figures"
        ".find(f => f.key === 'timeline');"
        "return [f.data.reduce((n, t) => n + t.x.length, 0),"
        " document.querySelectorAll('#fig-timeline .barlayer .point').length]"
    )
    assert drawn[0] == drawn[1] > 0  # every op of the two cycles drawn
    # sort by change: ascending, then descending
    js_sort = (
        "const th = [...document.querySelectorAll('#attribution th')]"
        ".find(t => t.textContent === 'change ms'); th.click();"
        "return [...document.querySelectorAll('#attribution tbody tr')]"
        ".map(r => parseFloat(r.cells[6].dataset.v))"
    )
    up = browser.js(js_sort)
    assert up == sorted(up) and up != [a["delta_ms_per_cycle"] for a in doc["attribution"]]
    down = browser.js(js_sort)
    assert down == sorted(up, reverse=True)
    visible = (
        "return [...document.querySelectorAll('#attribution tbody tr')]"
        ".filter(r => r.style.display !== 'none').map(r => r.cells[0].textContent)"
    )
    browser.js(
        "const s = document.querySelector('select[data-filter=kind]'); s.value = 'kernel';"
        "s.dispatchEvent(new Event('change'))"
    )
    kernels = {a["id"] for a in doc["attribution"] if a["kind"] == "kernel"}
    assert set(browser.js(visible)) == kernels and kernels
    browser.js(
        "const s = document.querySelector('select[data-filter=kind]'); s.value = '';"
        "s.dispatchEvent(new Event('change')); const q = document.querySelector('.search');"
        "q.value = 'MEMCPY'; q.dispatchEvent(new Event('input'))"
    )
    memcpy = {a["id"] for a in doc["attribution"] if "memcpy" in a["name"].lower()}
    assert set(browser.js(visible)) == memcpy and memcpy
    assert text(browser, ".shown") == f"{len(memcpy)} of {len(doc['attribution'])} rows"


def test_two_gpus(browser: Browser, tmp_path: Path) -> None:
    nsys_ai = DATA / "nsys" / "nsys-ai"
    page, doc = render(
        tmp_path,
        "mfu",
        str(nsys_ai / "mfu_2gpu_before.sqlite"),
        str(nsys_ai / "mfu_2gpu_after.sqlite"),
    )
    opened(browser, page)
    common(browser, doc)
    crit = doc["critical_device"]
    assert crit is not None and len(doc["head"]["devices"]) == 2
    ticks = browser.js(
        "return [...document.querySelectorAll('#fig-heatmap .xtick text')].map(t => t.textContent)"
    )
    assert ticks == [f"GPU {d}" + (" (critical)" if d == crit else "") for d in (0, 1)]
    assert count(browser, "#fig-heatmap .hm image") == 1
    assert count(browser, "#fig-gpus .barlayer .point") == 2
    if doc["collectives"]:
        assert count(browser, "#fig-collectives .barlayer .point") > 0
    assert count(browser, "#fig-timeline .barlayer .point") > 0


def test_host_only(browser: Browser, tmp_path: Path) -> None:
    cap = DATA / "capture-hostonly"
    page, doc = render(
        tmp_path, "host", str(cap / "base" / "report.sqlite"), str(cap / "slow" / "report.sqlite")
    )
    opened(browser, page)
    common(browser, doc)
    assert count(browser, "#fig-timeline") == 0  # no GPU ops: no timeline
    title = text(browser, "#fig-phases .gtitle")
    assert title.startswith("Host wall time change by phase")
    assert "GPU change" not in browser.js("return document.body.innerText")


def test_repo_suspects_on_kineto(browser: Browser, tmp_path: Path, minispec_repo) -> None:
    repo, sha = minispec_repo
    kin = DATA / "h200-suspects" / "kineto"
    page, doc = render(
        tmp_path,
        "suspects",
        str(kin / "c1_base_eager.json.gz"),
        str(kin / "c5_unused_eager.json.gz"),
        "--repo",
        str(repo),
        "--commits",
        f"{sha['base']}..{sha['unused']}",
    )
    opened(browser, page)
    common(browser, doc)
    assert count(browser, "#suspects details.suspect") == len(doc["suspects"]) > 0
    first = text(browser, "#suspects details.suspect summary")
    assert first.startswith(sha["culprit"][:12])
    assert "launched from" in text(browser, "#attribution thead")
