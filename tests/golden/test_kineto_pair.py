"""The H200 Kineto pair (no cycle markers): cycles cut from the kernel sequence, same answer as nsys.

k_good/k_bad are the specloop workload under the PyTorch profiler, CUDA-graph verify, 20 measured
cycles; the bad variant's out-of-place all-reduce shows up as an extra copy kernel per cycle.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracediff.engine.compare import compare
from tracediff.engine.ops import gpu_ops
from tracediff.parse import load

H200 = Path(__file__).parent.parent / "data" / "h200"


@pytest.fixture(scope="module")
def cmp():  # type: ignore[no-untyped-def]
    return compare(load(H200 / "k_good.json.gz"), load(H200 / "k_bad.json.gz"))


def test_cycles_are_whole_periods(cmp) -> None:  # type: ignore[no-untyped-def]
    assert cmp.base.cycle_method.startswith("kernel-period:")
    ops = gpu_ops(load(H200 / "k_good.json.gz"))
    per_cycle = cmp.events.filter(pl.col("side") == "base").group_by("cycle").len()["len"]
    # every base cycle holds the same number of ops, and that number tiles the whole trace
    assert per_cycle.n_unique() == 1
    assert ops.height % int(per_cycle[0]) == 0
    assert ops.height // int(per_cycle[0]) - 1 <= cmp.base.cycles <= ops.height // int(per_cycle[0])


def test_extra_copy_kernel_is_the_added_contributor(cmp) -> None:  # type: ignore[no-untyped-def]
    k = cmp.attribution.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    added = k.filter(pl.col("status") == "added")
    assert added.height >= 1 and added["significant"][0] and added["delta_ms_per_cycle"][0] > 0
    assert "memcpy" in added["name"][0]
    matched = k.filter(pl.col("status") == "matched")
    assert matched.height > 10 and not matched["significant"].any()
    assert abs(cmp.residual_ms_per_cycle) < 1e-9
