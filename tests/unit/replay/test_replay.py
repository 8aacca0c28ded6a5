"""What-if replay on real H200 traces and on synthetic exports with injected changes.

The replay must reproduce HEAD from HEAD's own durations, predict BASE when everything is taken
from BASE, and recover an injected change when (and only when) the op that carries it is taken.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.support.gen_nsys import SlowerKernel, Straggler, write_report
from tracediff.base.errors import UsageError
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load
from tracediff.replay import predict
from tracediff.replay.graph import build

H200 = Path(__file__).resolve().parent.parent.parent / "data" / "h200"
_cache: dict[tuple[str, str], Comparison] = {}


def _cmp(base: str, head: str) -> Comparison:
    key = (base, head)
    if key not in _cache:
        _cache[key] = compare(
            load(H200 / f"{base}.sqlite"), load(H200 / f"{head}.sqlite"), n_boot=50
        )
    return _cache[key]


@pytest.mark.parametrize(
    ("base", "head"), [("g_good", "g_bad"), ("e_good", "e_bad"), ("g_bad", "g_good")]
)
def test_own_durations_reproduce_measured_cycles(base: str, head: str) -> None:
    c = _cmp(base, head)
    w = predict(c, "c0")
    measured = (
        c.cycles.filter((pl.col("side") == "head") & pl.col("critical"))
        .sort("cycle")["span_ns"]
        .to_numpy()
        / 1e6
    )
    assert w.cycles.height == c.head.cycles == len(measured)
    assert np.allclose(w.cycles["replayed_ms"].to_numpy(), measured, rtol=0.02)
    assert w.replayed_head_ms_per_cycle == pytest.approx(c.head.mean_ms, rel=0.02)
    g = build(c)
    assert (
        g.stats["host_bound_ops"] > 0
    )  # the draft phase is host-launch-bound: the model must see it


@pytest.mark.parametrize(
    ("base", "head"),
    [("g_good", "g_bad"), ("g_bad", "g_good"), ("e_good", "e_bad"), ("e_bad", "e_good")],
)
def test_everything_from_base_predicts_base(base: str, head: str) -> None:
    c = _cmp(base, head)
    assert abs(c.head.mean_ms - c.base.mean_ms) > 0.2 * c.base.mean_ms  # the pair really differs
    w = predict(c, "all")
    assert w.predicted_ms_per_cycle == pytest.approx(c.base.mean_ms, rel=0.05)
    assert w.recovered_share == pytest.approx(1.0, abs=0.1)
    assert set(w.selected["contributor_id"]) == set(
        c.attribution.filter(pl.col("kind") != "overlap")["contributor_id"]
    )


@pytest.mark.parametrize(("base", "head"), [("g_good", "g_bad"), ("e_good", "e_bad")])
def test_top_contributor_recovers_about_its_attributed_change(base: str, head: str) -> None:
    c = _cmp(base, head)
    top = c.attribution.row(0, named=True)
    w = predict(c, top["contributor_id"])
    assert w.recovered_ms_per_cycle == pytest.approx(top["delta_ms_per_cycle"], rel=0.1)
    # one stream: span = durations + idle, so taking a gap contributor moves the cycle by its change
    assert w.recovered_ms_per_cycle == pytest.approx(top["delta_ms_per_cycle"], rel=0.01)
    # the kernels barely changed between these runs: taking them moves almost nothing
    k = predict(c, "kernel")
    assert abs(k.recovered_ms_per_cycle) < 0.05 * abs(c.delta_ms_per_cycle)


@pytest.mark.parametrize(("base", "head"), [("e_good", "e_bad"), ("g_good", "g_bad")])
def test_critical_path_covers_the_cycle(base: str, head: str) -> None:
    c = _cmp(base, head)
    w = predict(c, "c1", top=10_000)
    cp = w.critical_path
    assert cp["share"].sum() == pytest.approx(1.0, abs=0.01)
    assert cp["ms_per_cycle"].sum() == pytest.approx(w.predicted_ms_per_cycle, rel=0.01)
    host = cp.filter(pl.col("name").str.contains("waiting for the host"))["share"].sum()
    if base.startswith("e"):  # eager: every launch is host-bound, the GPU mostly waits for the host
        assert host > 0.5
    else:  # the CUDA-graph verify phase runs back to back on the GPU: its kernels are the path
        assert cp.filter((pl.col("kind") == "kernel") & (pl.col("phase") == "verify")).height > 10


def test_selectors() -> None:
    c = _cmp("g_good", "g_bad")
    by_name = predict(c, "name:^nvjet_").selected
    assert by_name.height > 0 and by_name["name"].str.starts_with("nvjet_").all()
    assert set(predict(c, "gap").selected["kind"]) == {"gap"}
    assert predict(c, ["c0", "c1"]).selected["contributor_id"].sort().to_list() == ["c0", "c1"]
    for bad in ("name:(", "c9999", "no_such_kernel_anywhere", "overlap"):
        with pytest.raises(UsageError):
            predict(c, bad)


# ---- synthetic exports: the answer is known


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gen")


def test_slower_kernel_is_recovered_only_by_taking_it(gen: Path) -> None:
    extra = 5_000
    tb = write_report(gen / "slow_b.sqlite", 1, 20, 40, seed=11)
    th = write_report(
        gen / "slow_h.sqlite", 1, 20, 40, [SlowerKernel("flash_fwd_kernel", extra)], seed=12
    )
    c = compare(load(tb.path), load(th.path), n_boot=50)
    injected = extra * th.count_per_cycle["flash_fwd_kernel"] / 1e6
    w = predict(c, "name:flash_fwd_kernel")
    assert w.recovered_ms_per_cycle == pytest.approx(injected, rel=0.15)
    assert w.predicted_ms_per_cycle == pytest.approx(c.base.mean_ms, rel=0.01)
    other = predict(c, "name:layer_norm")
    assert abs(other.recovered_ms_per_cycle) < 0.1 * injected
    assert w.critical_path.filter(pl.col("name").str.contains("flash_fwd_kernel")).height == 1


def test_multi_gpu_straggler(gen: Path) -> None:
    late = 40_000
    tb = write_report(gen / "strag_b.sqlite", 2, 20, 40, seed=11)
    th = write_report(gen / "strag_h.sqlite", 2, 20, 40, [Straggler(1, late)], seed=12)
    c = compare(load(tb.path), load(th.path), n_boot=50)
    assert c.head.mean_ms > c.base.mean_ms + 0.5 * late * 1e-6 * th.allreduces_per_cycle
    own = predict(c, "all")
    assert own.replayed_head_ms_per_cycle == pytest.approx(c.head.mean_ms, rel=0.02)
    assert own.predicted_ms_per_cycle == pytest.approx(c.base.mean_ms, rel=0.05)
    assert own.sweeps > 1  # ranks are coupled through the all-reduces
    # the straggler's late launches (host-bound idle on GPU 1) explain the change...
    gap1 = c.attribution.filter(
        (pl.col("kind") == "gap")
        & (pl.col("device_id") == 1)
        & pl.col("name").str.contains("host-bound")
    )
    w = predict(c, gap1["contributor_id"].to_list())
    assert w.predicted_ms_per_cycle == pytest.approx(c.base.mean_ms, rel=0.03)
    # ...while the waiting rank's all-reduce on GPU 0 only waits: taking it recovers little
    coll0 = c.attribution.filter((pl.col("kind") == "collective") & (pl.col("device_id") == 0))
    wc = predict(c, coll0["contributor_id"].to_list())
    assert abs(wc.recovered_ms_per_cycle) < 0.1 * abs(c.delta_ms_per_cycle)


def test_removing_an_op_from_a_host_bound_phase_saves_nothing() -> None:
    """e_bad's verify phase has an extra DtoD copy; the phase is launch-bound (the GPU waits for
    each launch), so taking the copy away (it is absent in base) cannot make the cycle shorter."""
    c = _cmp("e_good", "e_bad")
    row = c.attribution.filter((pl.col("kind") == "memcpy") & (pl.col("status") == "added")).row(
        0, named=True
    )
    assert row["delta_ms_per_cycle"] > 0.01
    w = predict(c, row["contributor_id"])
    assert abs(w.recovered_ms_per_cycle) < 0.1 * row["delta_ms_per_cycle"]


def test_host_waiting_on_the_gpu_moves_with_it() -> None:
    """specloop slow-verify (real capture): verify runs its MLP twice, and the host waits for
    verify (cudaDeviceSynchronize) before launching draft_extend. Taking the slowed verify kernels
    from base must bring the host's later launches forward too: the cycle shortens by about
    those kernels' change. With the host pinned in place the answer would be zero."""
    samples = Path(__file__).resolve().parent.parent.parent.parent / "samples"
    c = compare(
        load(samples / "specloop_good.arrow"),
        load(samples / "specloop_slow_verify.arrow"),
        n_boot=50,
    )
    g = build(c)
    assert g.syncs.n == c.head.cycles  # one sync inside each cycle, with launches after it
    slowed = c.attribution.filter(
        (pl.col("kind") == "kernel") & (pl.col("phase") == "verify")
    ).head(2)
    assert (slowed["delta_ms_per_cycle"] > 0.4).all()
    w = predict(c, slowed["contributor_id"].to_list())
    assert w.replayed_head_ms_per_cycle == pytest.approx(c.head.mean_ms, rel=1e-6)
    assert w.recovered_ms_per_cycle == pytest.approx(slowed["delta_ms_per_cycle"].sum(), rel=0.1)
    assert predict(c, "all").predicted_ms_per_cycle == pytest.approx(c.base.mean_ms, rel=0.02)
