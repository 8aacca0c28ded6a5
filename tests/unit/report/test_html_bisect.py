"""`bisect --html`: the page of a bisection, from the bundled H200 pool's result
(tests/data/h200-bisect/bisect-auto.json), without a culprit comparison (the integration test
tests/integration/test_h200_bisect_pool.py draws one, in Chromium)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tracediff.report.html.bisect_page import render_bisect, step_share

DATA = Path(__file__).resolve().parent.parents[1] / "data" / "h200-bisect"


def test_steps_culprit_and_picture() -> None:
    r = json.loads((DATA / "bisect-auto.json").read_text())
    page = render_bisect(r)
    assert page.count("<tr><td class=num data-v=") == len(r["steps"]) == 4
    culprit = r["culprits"][0]
    assert f"<h3>culprit <code>{culprit['commit'][:12]}</code>" in page
    assert "culprit0-verdict" not in page  # no comparison was given
    data = json.loads(re.search(r'id="td-data">(.*?)</script>', page, re.S).group(1))
    (steps,) = data["figures"]
    ys = steps["data"][0]["y"]
    assert ys[0] == 100.0 and ys[1] > 99 and abs(ys[2]) < 1 and abs(ys[3]) < 1  # bad, c4, c2, c3
    assert [step_share(e) is None for e in r["steps"]] == [False] * 4
    assert "like bad" in page and "like good" in page
