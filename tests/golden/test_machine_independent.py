"""The reports print the same bytes whatever the CPU summed in which order (report/numbers.py).

A fresh clone's goldens once failed on an AMD machine: `-0.38689026749999994` there,
`-0.38689026750000005` here, the low end of a bootstrap CI of the torch two-stream pair. The
float64 values a machine computes differ from another's by summation noise in their last bits;
here every float of real comparisons is nudged by a few units in the last place (the noise of a
reordered sum) and every format must print exactly what the un-nudged comparison prints. And the
golden cases run again with numpy's SIMD kernels limited to the baseline and polars on four
threads (the suite runs it on one: tests/conftest.py): the same bytes as the goldens.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.report import FORMATS, render
from tracediff.report.numbers import settle

ROOT = Path(__file__).resolve().parents[2]
PAIRS = {
    "torch_twostream": (
        "tests/data/h200/twostream/torch_good.sqlite",
        "tests/data/h200/twostream/torch_slow-a.sqlite",
    ),
    "e": ("tests/data/h200/e_good.sqlite", "tests/data/h200/e_bad.sqlite"),
    "k": ("tests/data/h200/k_good.json.gz", "tests/data/h200/k_bad.json.gz"),
}
ULPS = 4  # a reordered sum of a few hundred terms moves the last bits by about this much


class Nudge:
    """Moves each float by +-ULPS units in its last place, signs from a seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def array(self, x: np.ndarray) -> np.ndarray:
        out = x.astype(np.float64)
        direction = np.where(self.rng.random(out.shape) < 0.5, -np.inf, np.inf)
        for _ in range(ULPS):
            out = np.nextafter(out, direction)
        return out

    def value(self, v: Any) -> Any:
        if isinstance(v, float):
            return float(self.array(np.array([v]))[0])
        if isinstance(v, tuple):
            return tuple(self.value(x) for x in v)
        if isinstance(v, pl.DataFrame):
            floats = [c for c, t in v.schema.items() if t == pl.Float64]
            return v.with_columns(
                pl.Series(c, self.array(v[c].to_numpy()), pl.Float64).fill_nan(None) for c in floats
            )
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return dataclasses.replace(
                v, **{f.name: self.value(getattr(v, f.name)) for f in dataclasses.fields(v)}
            )
        return v


def nudged(c: Comparison, seed: int) -> Comparison:
    n = Nudge(seed)
    fields = ["base", "head", "delta_ms_per_cycle", "delta_ci95", "delta_pct", "noise_floor_ms"]
    fields += ["residual_ms_per_cycle", "attribution", "across_gpus", "host", "totals"]
    return dataclasses.replace(c, **{f: n.value(getattr(c, f)) for f in fields})


@pytest.fixture(scope="module", params=sorted(PAIRS))
def comparison(request: pytest.FixtureRequest) -> Comparison:
    base, head = PAIRS[request.param]
    return compare(ROOT / base, ROOT / head, n_boot=200)


@pytest.mark.parametrize("seed", [0, 1])
def test_last_bits_do_not_change_any_format(comparison: Comparison, seed: int) -> None:
    other = nudged(comparison, seed)
    moved = (
        comparison.attribution["ci95_low"].to_numpy() != other.attribution["ci95_low"].to_numpy()
    )
    assert moved.any(), "the nudge must move the values it is meant to move"
    for fmt in FORMATS:
        assert render(other, fmt) == render(comparison, fmt), fmt


def test_settle_absorbs_the_amd_difference() -> None:
    """The two values the AMD machine and this one printed for the same CI end."""
    assert settle(-0.38689026749999994) == settle(-0.38689026750000005) == -0.386890267
    assert settle(-2.22e-16) == 0.0 and str(settle(-1e-12)) == "0.0"  # no "-0.0"


def test_goldens_on_baseline_simd_and_four_threads() -> None:
    """Another numpy kernel set (SSE only: the AVX2/AVX-512 paths disabled) and polars on four
    threads where the suite has one (another reduction order): the goldens still match byte for
    byte."""
    env = {
        **os.environ,
        "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
        "POLARS_MAX_THREADS": "4",
    }
    env.pop("TRACEDIFF_UPDATE_GOLDEN", None)
    cases = [f"test_cli_output_matches_golden[compare_{t}.json]" for t in PAIRS]
    cases += ["test_cli_output_matches_golden[compare_g.csv]"]
    golden = "tests/golden/test_golden_outputs.py"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    proc = subprocess.run(
        [*argv, *(f"{golden}::{c}" for c in cases)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"{len(cases)} passed" in proc.stdout
