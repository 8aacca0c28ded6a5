"""bisect's cycle-time comparison from kept run means gives the engine's numbers (issue 31:
bisect's own time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediff.bisect import quick as bq
from tracediff.engine.compare import compare
from tracediff.parse import load

DATA = Path(__file__).resolve().parents[2] / "data" / "capture-hostonly"


@pytest.fixture(scope="module")
def runs() -> tuple[object, object]:
    return load(DATA / "base" / "report.sqlite"), load(DATA / "slow" / "report.sqlite")


def test_the_cycle_time_from_kept_means_is_the_full_comparisons(runs: tuple) -> None:
    base, slow = runs
    means = bq.Means()
    # the means are kept from one comparison (1 run against 2: no across-run test) ...
    learn = compare([base], [slow, base])
    means.keep([slow, base], learn.head)
    assert set(means.of) == {slow.path, base.path}
    assert means.of[slow.path] > means.of[base.path]  # the slow workload is slower
    # ... and give another comparison's cycle-time fields exactly
    a, b = [base, slow, base], [slow, slow, base, slow]
    full = compare(a, b)
    got = bq.cycle_only(means.get(a), means.get(b))
    assert got.delta_ms_per_cycle == full.delta_ms_per_cycle
    assert got.delta_ci95 == full.delta_ci95
    assert got.p_value == full.p_value
    assert got.significant == full.significant


def test_host_only_means_from_each_run_alone_are_the_comparisons(runs: tuple) -> None:
    base, slow = runs
    # what a comparison with base first keeps for its head runs ...
    kept = bq.Means()
    c = compare([base], [slow, base, slow])
    kept.keep([slow, base, slow], c.head)
    # ... each run read alone gives bit for bit (runs given twice are read once)
    alone = bq.Means()
    assert alone.learn_host([slow, base, slow], base, None)
    assert alone.of == kept.of
    assert alone.get([base, slow]) == [kept.of[base.path], kept.of[slow.path]]
    # a step's comparison from them then equals the full comparison
    full = compare([base, slow], [slow, base, slow])
    got = bq.cycle_only(alone.get([base, slow]), alone.get([slow, base, slow]))
    assert (got.delta_ms_per_cycle, got.delta_ci95, got.p_value, got.significant) == (
        full.delta_ms_per_cycle,
        full.delta_ci95,
        full.p_value,
        full.significant,
    )


def test_a_run_with_gpu_operations_is_not_read_alone(runs: tuple) -> None:
    base, _ = runs
    gpu = load(DATA.parent / "kineto" / "base.json.gz")
    assert gpu.read("kernels", ["start_ns"]).num_rows > 0
    means = bq.Means()
    assert not means.learn_host([base, gpu], base, None)  # the engine's GPU path: compare
    assert not means.learn_host([base], gpu, None)
    assert means.of == {}
    assert means.host_only(base) and not means.host_only(gpu)


def test_a_run_whose_mean_is_not_kept_leaves_the_full_comparison(runs: tuple) -> None:
    base, slow = runs
    means = bq.Means()
    c = compare([base], [slow])  # one run a side: no run means
    means.keep([base], c.base)
    means.keep([slow], c.head)
    assert means.get([base, slow]) is None


def test_bisect_sets_one_blas_thread_where_numpy_bundles_openblas() -> None:
    # this venv's numpy bundles OpenBLAS (numpy.libs): found and set; elsewhere a no-op (False)
    import numpy

    bundled = any((Path(numpy.__file__).parent.parent / "numpy.libs").glob("*openblas*.so*"))
    assert bq.one_blas_thread() is bundled
