"""`compare` recovers changes injected into synthetic nsys exports (tests/support/gen_nsys.py), with size.

Each pair is two runs of the same program (different noise seeds); the head has one change of
known size. The expected answers are computed here from what the generator says it wrote.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.support.gen_nsys import (
    AddedCopy,
    HostGap,
    SlowerKernel,
    Straggler,
    Truth,
    pool_name,
    write_report,
)
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load
from tracediff.report import render

CYCLES, OPS = 30, 40


def _pair(tmp: Path, n_gpus: int, changes: list, name: str) -> tuple[Comparison, Truth, Truth]:
    tb = write_report(tmp / f"{name}_base.sqlite", n_gpus, CYCLES, OPS, seed=11)
    th = write_report(tmp / f"{name}_head.sqlite", n_gpus, CYCLES, OPS, changes, seed=12)
    return compare(load(tb.path), load(th.path)), tb, th


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gen")


def _rows(c: Comparison, name: str) -> pl.DataFrame:
    return c.attribution.filter(pl.col("name") == name)


def _critical_span_mean_ms(t: Truth) -> float:
    """Mean over cycles of the GPU span of the rank that finishes last, from the generator."""
    assert t.cycle_span_ns is not None
    return float(t.cycle_span_ns.max(axis=0).mean() / 1e6) if t.n_gpus == 1 else float("nan")


def _realised_ms(t: Truth, short: str) -> float:
    """Mean per cycle of the total duration of kernel `short` on GPU 0, as generated."""
    assert t.durations_ns is not None
    slots = [i for i, n in enumerate(t.op_names) if n == pool_name(short)]
    return float(t.durations_ns[0][:, slots].sum(axis=1).mean() / 1e6)


def _assert_additive(c: Comparison) -> None:
    assert abs(c.residual_ms_per_cycle) < 1e-9
    assert c.attribution["delta_ms_per_cycle"].sum() == pytest.approx(
        c.delta_ms_per_cycle, abs=1e-9
    )


def test_slower_kernel_single_gpu(tmp: Path) -> None:
    extra = 3_000
    c, tb, th = _pair(tmp, 1, [SlowerKernel("flash_fwd_kernel", extra)], "slow1")
    injected = extra * th.count_per_cycle["flash_fwd_kernel"] / 1e6
    assert c.base.cycles == c.head.cycles == CYCLES
    # the cycle spans are the generator's, to the nanosecond
    assert c.base.mean_ms == pytest.approx(_critical_span_mean_ms(tb), abs=1e-6)
    assert c.head.mean_ms == pytest.approx(_critical_span_mean_ms(th), abs=1e-6)
    row = _rows(c, pool_name("flash_fwd_kernel")).row(0, named=True)
    assert row["delta_ms_per_cycle"] == pytest.approx(injected, rel=0.08)
    # exactly the realised change: mean per cycle of the generator's flash durations, head - base
    assert row["delta_ms_per_cycle"] == pytest.approx(
        _realised_ms(th, "flash_fwd_kernel") - _realised_ms(tb, "flash_fwd_kernel"), abs=1e-9
    )
    assert row["significant"] and row["status"] == "matched"
    assert row["head_count_per_cycle"] == th.count_per_cycle["flash_fwd_kernel"]
    assert c.attribution["contributor_id"][0] == row["contributor_id"]  # the top contributor
    # nothing else moved: every other significant row is tiny next to the injected change
    others = c.attribution.filter(pl.col("significant") & (pl.col("name") != row["name"]))
    assert others["delta_ms_per_cycle"].abs().sum() < 0.1 * injected
    assert c.significant and c.delta_ci95[0] <= injected <= c.delta_ci95[1]
    _assert_additive(c)


def test_slower_kernel_ci_coverage(tmp: Path) -> None:
    """The 95 % CI of the slowed kernel holds the injected change for most seed pairs.

    The bootstrap CI is an interval estimate: over 20 independent pairs a calibrated 95 % CI misses
    about once; more than 4 misses means the interval is too narrow (or the delta biased)."""
    extra, hits, deltas = 3_000, 0, []
    for s in range(20):
        tb = write_report(tmp / "cov_b.sqlite", 1, 20, 21, seed=1000 + s)
        th = write_report(
            tmp / "cov_h.sqlite",
            1,
            20,
            21,
            [SlowerKernel("flash_fwd_kernel", extra)],
            seed=2000 + s,
        )
        c = compare(load(tb.path), load(th.path), n_boot=500)
        injected = extra * th.count_per_cycle["flash_fwd_kernel"] / 1e6
        row = _rows(c, pool_name("flash_fwd_kernel")).row(0, named=True)
        hits += row["ci95_low"] <= injected <= row["ci95_high"]
        deltas.append(row["delta_ms_per_cycle"])
    assert hits >= 16
    assert np.mean(deltas) == pytest.approx(injected, rel=0.02)  # unbiased


def test_slower_kernel_two_gpus(tmp: Path) -> None:
    """On 2 GPUs each cycle is charged to the GPU that finished last: sum the kernel over GPUs."""
    extra = 4_000
    c, _, th = _pair(
        tmp, 2, [SlowerKernel("nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT", extra)], "slow2"
    )
    injected = extra * th.count_per_cycle["nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT"] / 1e6
    rows = _rows(c, "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT")
    assert rows["delta_ms_per_cycle"].sum() == pytest.approx(injected, rel=0.1)
    assert c.delta_ci95[0] <= injected <= c.delta_ci95[1]
    # the per-GPU kernel totals (not charged to a critical GPU) move by exactly the injection
    tot = c.totals.filter(pl.col("name") == "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT").row(
        0, named=True
    )
    assert tot["delta_ms"] / (CYCLES * 2) == pytest.approx(injected, rel=0.05)
    # summed over GPUs it is one row of the right size, whichever GPU finished last
    across = c.across_gpus.filter(pl.col("name") == "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT")
    assert across.height == 1 and across["devices"][0] == 2
    row = across.row(0, named=True)
    assert row["significant"] and row["ci95_low"] <= injected <= row["ci95_high"]
    assert row["delta_ms_per_cycle"] == pytest.approx(rows["delta_ms_per_cycle"].sum(), abs=1e-12)
    _assert_additive(c)


def test_added_copy(tmp: Path) -> None:
    copy = AddedCopy(after_op=5, duration_ns=8_000, nbytes=1 << 20)
    c, _, th = _pair(tmp, 1, [copy], "copy")
    mem = c.attribution.filter(pl.col("kind") == "memcpy")
    assert mem.height == 1
    row = mem.row(0, named=True)
    assert row["name"] == "Memcpy DtoD" and row["status"] == "added"
    assert row["base_count_per_cycle"] == 0 and row["head_count_per_cycle"] == 1
    assert row["significant"] and row["ci95_low"] <= copy.duration_ns / 1e6 <= row["ci95_high"]
    # the template has no copy: every head copy is an unmatched (added) event
    ev = c.events.filter((pl.col("side") == "head") & (pl.col("kind") == "memcpy"))
    assert ev.height == CYCLES and ev["slot"].is_null().all() and (ev["status"] == "added").all()
    kernels = c.attribution.filter(pl.col("kind") == "kernel")
    assert not kernels["significant"].any()
    _assert_additive(c)


def test_straggler_rank_makes_the_others_wait(tmp: Path) -> None:
    late, straggler = 20_000, 2
    c, tb, th = _pair(tmp, 4, [Straggler(straggler, late)], "strag")
    injected = late * th.allreduces_per_cycle / 1e6
    coll = c.collectives
    # GPU ids stay integers; message size is unknown in these exports (null, never 0)
    assert coll.schema["device_id"] == pl.Int32 and coll["bytes"].null_count() == coll.height
    others = coll.filter(pl.col("device_id") != straggler)
    grow = others["head_wait_ms_per_cycle"] - others["base_wait_ms_per_cycle"]
    # each non-straggler waits ~late per all-reduce (less the base rank-to-rank skew it replaces)
    assert grow.min() > 0.8 * injected and grow.max() < 1.02 * injected
    s = coll.filter(pl.col("device_id") == straggler).row(0, named=True)
    assert s["head_wait_ms_per_cycle"] < 0.1 * injected  # it arrives last: never waits
    # transfer time is unchanged on every GPU
    tr = coll["head_transfer_ms_per_cycle"] - coll["base_transfer_ms_per_cycle"]
    assert tr.abs().max() < 0.05 * injected
    assert c.delta_ci95[0] <= c.delta_ms_per_cycle and c.significant
    assert c.delta_ms_per_cycle == pytest.approx(injected, rel=0.15)
    # the change is explained as waiting (non-straggler critical) or the straggler's host gap
    wait = c.attribution.filter(pl.col("name").str.ends_with("[wait for last rank]"))
    host = c.attribution.filter(pl.col("name").str.starts_with("idle: host-bound"))
    explained = wait["delta_ms_per_cycle"].sum() + host["delta_ms_per_cycle"].sum()
    assert explained == pytest.approx(c.delta_ms_per_cycle, rel=0.15)
    assert c.critical_device == straggler or wait.filter(pl.col("significant")).height > 0
    assert c.base.devices == c.head.devices == [0, 1, 2, 3]
    _assert_additive(c)


def test_straggler_summed_over_gpus_cancels_the_critical_gpu_shuffle(tmp: Path) -> None:
    """The straggler finishes last in most head cycles, so unchanged kernels move from the other
    GPUs' rows to its row: per GPU they show offsetting changes; summed over GPUs they cancel,
    and what is left is the waiting and the straggler's late launches."""
    c, _, _ = _pair(tmp, 4, [Straggler(2, 20_000)], "strag")
    a = c.across_gpus
    assert a["delta_ms_per_cycle"].sum() == pytest.approx(c.delta_ms_per_cycle, abs=1e-9)
    kernels = a.filter(pl.col("kind") == "kernel")
    assert kernels.height > 0 and not kernels["significant"].any()
    per_gpu = (
        c.attribution.filter(pl.col("kind") == "kernel")
        .group_by("name")
        .agg(pl.col("delta_ms_per_cycle").abs().max().alias("most"))
        .join(kernels.select("name", "delta_ms_per_cycle"), on="name")
    )
    shuffled = per_gpu.filter(pl.col("most") > 0.005)  # > 5 µs/cycle on some GPU's row...
    assert shuffled.height > 0
    # ...but under a fifth of that once summed over GPUs
    assert (shuffled["delta_ms_per_cycle"].abs() < 0.2 * shuffled["most"]).all()
    sig = a.filter(pl.col("significant"))
    explained = sig.filter(
        pl.col("name").str.ends_with("[wait for last rank]")
        | pl.col("name").str.starts_with("idle: host-bound")
    )["delta_ms_per_cycle"].sum()
    assert explained == pytest.approx(c.delta_ms_per_cycle, rel=0.15)
    table = render(c, "table")
    assert "summed over GPUs" in table and "[wait for last rank]" in table
    md = render(c, "markdown")
    assert "Summed over GPUs" in md and md.index("Summed over GPUs") < md.index("Per GPU:")


def test_single_gpu_has_no_summed_view(tmp: Path) -> None:
    c, _, _ = _pair(tmp, 1, [], "noise")
    assert c.across_gpus.height == 0 and "summed over GPUs" not in render(c, "table")


def test_host_gap(tmp: Path) -> None:
    g = 50_000
    c, _, _ = _pair(tmp, 1, [HostGap(before_op=20, gap_ns=g)], "gap")
    gaps = c.attribution.filter(pl.col("kind") == "gap")
    host = gaps.filter(pl.col("name").str.starts_with("idle: host-bound")).row(0, named=True)
    # the whole idle stretch before the late launch is host-bound: g plus the usual ~1.5 µs gap
    assert g / 1e6 <= host["delta_ms_per_cycle"] <= (g + 2_500) / 1e6
    assert host["significant"] and host["base_ms_per_cycle"] == 0
    assert gaps["delta_ms_per_cycle"].sum() == pytest.approx(g / 1e6, rel=0.03)
    assert c.delta_ci95[0] <= g / 1e6 <= c.delta_ci95[1]
    assert not c.attribution.filter(pl.col("kind") == "kernel")["significant"].any()
    _assert_additive(c)


@pytest.mark.parametrize("n_gpus", [1, 4])
def test_self_compare_is_zero(tmp: Path, n_gpus: int) -> None:
    t = write_report(tmp / f"self{n_gpus}.sqlite", n_gpus, CYCLES, OPS, seed=5)
    run = load(t.path)
    c = compare(run, run)
    assert c.delta_ms_per_cycle == 0 and not c.significant
    assert not c.attribution["significant"].any()
    assert np.allclose(c.attribution["delta_ms_per_cycle"].to_numpy(), 0.0, atol=1e-12)
    assert c.totals["delta_ms"].abs().max() == 0


def test_two_seeds_no_change_is_not_significant(tmp: Path) -> None:
    """Two runs of the same program (noise only): no significant change, nothing above noise."""
    c, _, _ = _pair(tmp, 1, [], "noise")
    assert not c.significant
    sig = c.attribution.filter(pl.col("significant"))
    assert sig["delta_ms_per_cycle"].abs().sum() < 0.002  # < 2 µs per cycle in all
