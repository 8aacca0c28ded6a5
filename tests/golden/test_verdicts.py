"""What the verdict says in two situations a reader must not misread.

- One cycle a side (`--cycle whole`): no confidence interval exists, so nothing may be called
  significant (polars orders NaN above every number: a naive `ci_low > 0` says yes).
- A host-side regression (ResNet50, DataLoader num_workers 0 vs 4): the GPU span of a step barely
  moves while the step's wall time drops from 154.7 to 128.2 ms (the figures the PyTorch profiler
  tutorial publishes for this pair); the verdict must say the change is on the host side.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.report import render
from tracediff.report.compare_json import to_dict
from tracediff.report.verdict import verdict_lines

DATA = Path(__file__).parent.parent / "data"


def test_one_cycle_a_side_is_never_significant() -> None:
    nsys_ai = DATA / "nsys" / "nsys-ai"
    c = compare(
        load(nsys_ai / "mfu_2gpu_before.sqlite"),
        load(nsys_ai / "mfu_2gpu_after.sqlite"),
        cycle="whole",
    )
    assert c.base.cycles == c.head.cycles == 1
    assert math.isnan(c.delta_ci95[0]) and not c.significant
    assert not c.attribution["significant"].any()
    assert any("fewer than 2 cycles" in w for w in c.warnings)
    d = to_dict(c)
    assert d["delta_ms_per_cycle"]["ci95"] == [None, None]
    assert "nan" not in render(c, "table").lower()


def test_host_side_regression_is_called_host_side() -> None:
    k = DATA / "kineto"
    try:
        base = load(k / "resnet50_num_workers_0.worker0.pt.trace.json.gz")
        head = load(k / "resnet50_num_workers_4.worker0.pt.trace.json.gz")
    except FileNotFoundError as e:  # pragma: no cover - the files are bundled
        pytest.fail(str(e))
    c = compare(base, head)
    assert c.base.cycle_method == "nvtx:ProfilerStep"
    assert c.base.wall_mean_ms == pytest.approx(154.7, abs=0.05)
    assert c.head.wall_mean_ms == pytest.approx(128.2, abs=0.05)
    assert abs(c.delta_ms_per_cycle) < 0.1 * (c.base.wall_mean_ms - c.head.wall_mean_ms)
    text = "\n".join(verdict_lines(c))
    assert "host side" in text and "154.745 -> 128.247" in text
