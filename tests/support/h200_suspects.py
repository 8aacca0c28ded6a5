"""The H200 suspects captures (tests/data/h200-suspects: the minispec repo at five commits,
PyTorch-profiler traces and `tracediff capture` nsys run sets; README there; issue 19's device
case): `compare --repo`'s JSON of two of them, and the ranking each capture must give.

Base and the unused-branch commit are the ends; between them the caller (model.block), the
sibling (layers.norm) and the culprit, which alone changed layers.mlp, the function launching the
slower kernels (fp32 casts and a GEMV: about +1.04 ms/cycle of GPU work).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.support.cli import cli_run

DATA = Path(__file__).resolve().parents[1] / "data" / "h200-suspects"


def compare_json(runs: list[Path], repo: Path, *extra: str, nsys: str | None = None) -> Any:
    """`tracediff compare RUNS --repo REPO EXTRA --format json`'s document; `nsys`: the binary
    that reads the runs' .nsys-rep (put first on PATH)."""
    env = dict(os.environ)
    if nsys is not None:
        env["PATH"] = f"{Path(nsys).parent}:{env.get('PATH', '')}"
    p = cli_run(
        ["compare", *map(str, runs), "--repo", str(repo), *extra, "--format", "json"],
        timeout=600, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def culprit_first(doc: Any, sha: dict[str, str], margin: float, range_from: str) -> list[str]:
    """Asserts what every capture's suspects must show: the range base..unused (4 commits) taken
    from `range_from`, the culprit first, its score at least `margin` times the next one's, its
    best evidence in mlp alone, layers.mlp among the functions on its stacks, and its
    contributors' change the slower kernels' (> 0.5 ms/cycle). Returns the commits in rank
    order."""
    r = doc["suspects_range"]
    assert (r["base"], r["head"], r["from"], r["commits"]) == (
        sha["base"], sha["unused"], range_from, 4,
    )  # fmt: skip
    ranked = doc["suspects"]
    order = [s["commit"] for s in ranked]
    assert order and order[0] == sha["culprit"], [s["subject"] for s in ranked]
    top = ranked[0]
    assert len(ranked) == 1 or top["score"] >= margin * ranked[1]["score"], ranked
    assert {e["function"] for e in top["evidence"]} == {"mlp"}
    assert "minispec/layers.py:mlp" in top["functions"]
    assert top["delta_ms_per_cycle"] > 0.5
    return order
