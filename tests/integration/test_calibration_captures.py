"""Run-set statistics on real captures of a workload with per-process noise (issue 22).

The real nsys (NVTX only) and the real `tracediff capture --commit base --commit plus1.2ms
--repeat N` on a git repository built here (bench/capture_calib.py: verify carries a per-process
offset U(0, 1.5 ms), seeded so the pool is reproducible up to this machine's timing; `plus1.2ms`
adds 1.2 ms to verify, about 2.8x the between-run spread). Repetitions are seeded draws of runs
from that pool, each decided by the real `tracediff compare` on the drawn run files.

The default test is small (8 runs a commit at SCALE, a few draws); `pytest -m slow` captures the
bench's pool (CALIB_RUNS runs a commit, default 30, into CALIB_POOL if given: it resumes) and
checks the bounds over CALIB_DRAWS seeded draws (default 2000) per cell.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench import capture_calib as cc
from tests.support.cli import cli_run

pytestmark = [pytest.mark.nsys, pytest.mark.git]

ROOT = Path(__file__).resolve().parent.parent.parent
SCALE, CYCLES = 30.0, 10
"""Every duration x30 (offset U(0, 45 ms), +36 ms), 10 cycles a run: this shared 2-core VM's
scheduling delays (CPU quota throttling under load: measured up to +6 ms per 3.4 ms cycle at load
9 on the unscaled workload) come per wake-up, not per ms asleep, so the scaled workload keeps the
per-process offset the dominant between-run noise, as the issue's ratio (+1.2 ms = 2.8x) needs.
x10 was not enough at load 16: 5 vs 5 draws of +12 ms measured +5.9 to +15.9 ms and none was
significant, rightly, beside base runs that the load spread as much."""


def td(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return cli_run(args, timeout=600, cwd=ROOT)


@pytest.fixture(scope="module")
def pool(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("calib")
    cc.capture_pool(p, 8, nsys, ["base", "plus1.2ms"], seed="ci-22", scale=SCALE, cycles=CYCLES)
    return p


def test_info_shows_each_runs_mean_cycle_time_as_compare_takes_it(pool: Path) -> None:
    """`tracediff info` on an NVTX-only run set: every run cut at its host ranges, with its mean
    cycle time equal to the per-run mean the run-set verdict tests (compare's run_means_ms)."""
    base, _ = cc.run_means(pool, "plus1.2ms")
    r = td("info", pool / "runs" / "base", "--format", "json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["cycle_rule"] == "nvtx:cycle"
    assert [x["cycles"] for x in info["runs"]] == [CYCLES] * 8
    assert [x["cycle_error"] for x in info["runs"]] == [None] * 8
    assert np.allclose([x["mean_cycle_ms"] for x in info["runs"]], base, rtol=1e-9)
    # the per-process offset is there to see: the runs' means spread by more than the jitter
    assert max(base) - min(base) > 0.3 * SCALE, base
    table = td("info", pool / "runs" / "base")
    assert table.returncode == 0, table.stderr
    for row in info["runs"]:
        line = next(ln for ln in table.stdout.splitlines() if row["path"] in ln)
        assert line.split()[1:4] == [str(row["cycles"]), f"{row['mean_cycle_ms']:.3f}", "ms"]


def test_one_commit_is_not_significant_and_the_slower_commit_is(pool: Path, tmp_path: Path) -> None:
    """Seeded draws from 8 + 8 real captures (x30), each decided by the real compare: 4 vs 4 of
    one commit (a draw is a split of the 8 base runs, and of the 35 splits only the most extreme
    one reaches p = 2/70 < 5 %: at most 2 of 12 draws may be flagged, where statistics over
    cycles flag most), 5 vs 5 of base vs +36 ms (found in ~99 % of draws of the bench's pool: at
    least four of five), and 3 vs 3, which cannot reach 5 % at all and must say so."""
    base, plus = (np.asarray(x) for x in cc.run_means(pool, "plus1.2ms"))
    assert len(base) == len(plus) == 8
    same = [cc.cli_decision(pool, "base", d, tmp_path) for d in cc.draws(8, None, 4, 12, seed=1)]
    assert sum(sig for sig, _ in same) <= 2, same
    slower = [cc.cli_decision(pool, "plus1.2ms", d, tmp_path) for d in cc.draws(8, 8, 5, 5, seed=1)]
    assert sum(sig for sig, _ in slower) >= 4, slower
    assert all(18 < delta < 60 for _, delta in slower), slower  # +36 ms, give or take noise
    # the bench's fast path (runstats on the per-run means) decides as compare does
    for d, (sig, _) in zip(cc.draws(8, 8, 5, 5, seed=1), slower, strict=True):
        assert cc.decide(base[d.base], plus[d.head]) == sig
    b, h = cc.link_draw(pool, "plus1.2ms", cc.draws(8, 8, 3, 1, seed=1)[0], tmp_path)
    r = td("compare", b, h, "--format", "json")
    j = json.loads(r.stdout)
    assert j["runs"] == {"base": 3, "head": 3} and not j["delta_ms_per_cycle"]["significant"]
    assert "3 vs 3 runs cannot reach 5 % significance" in r.stderr


def _binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""

    def log_pmf(i: int) -> float:
        lc = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
        return lc + i * math.log(p) + (n - i) * math.log1p(-p)

    return sum(math.exp(log_pmf(i)) for i in range(k, n + 1))


@pytest.mark.slow
def test_calibration_bounds_on_the_bench_pool(nsys: str, tmp_path: Path) -> None:
    """Issue 22's bounds over seeded draws from a pool of real captures (bench/capture_calib.py):
    same-vs-same flagged in at most 5 % (the count is tested against 5 %: a rate whose exact level
    is 4.8 % would exceed 5 % in a quarter of 2000-draw estimates), a shift of 2x the between-run
    SD (real base runs, the shift added) found in >= 90 % with 8 vs 8, the +1.2 ms commit in
    >= 95 % with 5 vs 5."""
    pool = Path(os.environ.get("CALIB_POOL") or tmp_path)
    runs = int(os.environ.get("CALIB_RUNS", "30"))
    n = int(os.environ.get("CALIB_DRAWS", "2000"))
    cc.capture_pool(pool, runs, nsys, list(cc.COMMITS), seed="22")
    means: dict[str, np.ndarray] = {}
    for name in ("plus1.2ms", "shift2x"):
        b, h = cc.run_means(pool, name)
        means["base"], means[name] = np.asarray(b), np.asarray(h)
    base = means["base"]
    sd = float(np.std(base, ddof=1))
    for k in (4, 5, 8):
        fp = round(cc.rate(base, base, cc.draws(len(base), None, k, n, seed=22)) * n)
        assert _binom_sf(fp, n, 0.05) > 0.01, f"{k} vs {k}: {fp} of {n} same-vs-same flagged"
    shifted = cc.rate(base, base, cc.draws(len(base), None, 8, n, seed=22), add_ms=2.0 * sd)
    assert shifted >= 0.90, shifted
    plus = means["plus1.2ms"]
    found = cc.rate(base, plus, cc.draws(len(base), len(plus), 5, n, seed=22))
    assert found >= 0.95, found
    with open(os.environ.get("CALIB_REPORT", os.devnull), "a") as f:
        f.write(json.dumps({"runs": runs, "draws": n, "sd_ms": sd, "plus_5v5": found}) + "\n")
