"""Device ids are labels, not small integers: a trace whose GPUs are numbered like process ids
(Kineto writes the pid) compares exactly like the same trace numbered 0, 1, ..."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from tests.support.gen_nsys import Straggler, write_report
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.runs.runfile import Run

BIG = 3_000_000  # well past the 2**16 the engine's packed sort keys hold


def _renumbered(run: Run) -> Run:
    tables = dict(run.tables.items())
    for name in ("kernels", "memops"):
        t = tables[name]
        i = t.schema.get_field_index("device_id")
        dev = pa.compute.add(t.column(i), pa.scalar(BIG, t.schema.field(i).type))
        tables[name] = t.set_column(i, t.schema.field(i), dev)
    return Run(tables=tables, metadata=dict(run.metadata), warnings=list(run.warnings))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run]:
    tmp = tmp_path_factory.mktemp("devids")
    b = write_report(tmp / "b.sqlite", 3, 12, 24, seed=21)
    h = write_report(tmp / "h.sqlite", 3, 12, 24, [Straggler(1, 15_000)], seed=22)
    return load(b.path), load(h.path)


def test_large_device_ids_give_the_same_attribution(pair: tuple[Run, Run]) -> None:
    small = compare(*pair, n_boot=200)
    big = compare(*(_renumbered(r) for r in pair), n_boot=200)
    assert big.delta_ms_per_cycle == pytest.approx(small.delta_ms_per_cycle, abs=1e-12)
    shifted = small.attribution.with_columns(pl.col("device_id") + BIG)
    assert_frame_equal(big.attribution, shifted)
    assert_frame_equal(big.cycles, small.cycles.with_columns(pl.col("device_id") + BIG))
    assert big.critical_device == small.critical_device + BIG
    assert_frame_equal(
        big.across_gpus.drop("top_device_id"), small.across_gpus.drop("top_device_id")
    )
