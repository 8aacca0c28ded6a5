"""tests/support/gen_kineto_ranks.py (the per-rank Kineto job of bench/dask_ranks.py) writes what the
row-by-row tests/support/gen_kineto_nodes.py writes from the same simulated job, and its hosts' clock
errors are the ones the join estimates."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.support.gen_kineto_nodes import write_kineto_nodes
from tests.support.gen_kineto_ranks import write_job
from tests.support.gen_nsys import SlowerCollective, Straggler, write_report
from tracediff.parse import load

ERRORS = [0, 2_700_000, -4_100_000]
CHANGES = [Straggler(3, 20_000), SlowerCollective(5_000)]
COLS = {
    "kernels": ["device_id", "stream_id", "correlation_id", "name", "start_ns", "duration_ns"],
    "api_calls": ["correlation_id", "name", "start_ns", "duration_ns"],
}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("ranks")
    hosts = [f"node-{n:03d}" for n in range(3)]
    src = write_report(d / "one.sqlite", 6, 10, 24, CHANGES, seed=5)
    write_kineto_nodes(src.path, d / "rows", 2, ERRORS, hosts)
    t = write_job(d / "cols", 3, 2, 10, 24, CHANGES, seed=5, clock_error_ns=ERRORS, jobs=2)
    assert (t.ranks, t.kernels_per_rank, t.allreduces_per_cycle) == (6, 240, 3)
    assert [p.name.split("_")[0] for p in t.paths] == [h for h in hosts for _ in range(2)]
    return d / "rows", d / "cols"


def _table(run_path: Path, name: str) -> pl.DataFrame:
    df = pl.from_arrow(load(run_path).table(name))
    assert isinstance(df, pl.DataFrame)
    return df.select(COLS[name]).with_columns(pl.col("name").cast(pl.String))


def test_each_rank_holds_the_row_writers_events(job: tuple[Path, Path]) -> None:
    rows, cols = job
    a = sorted(rows.iterdir())
    b = sorted(cols.iterdir())
    assert [p.name.removesuffix(".gz") for p in b] == [p.name for p in a]
    for x, y in zip(a, b, strict=True):
        for t in COLS:
            want, got = _table(x, t), _table(y, t)
            assert want.height == 240 and got.equals(want), (y.name, t)
        assert load(y).metadata["rank"] == load(x).metadata["rank"]


def test_the_join_finds_each_hosts_clock_error(job: tuple[Path, Path]) -> None:
    run = load(job[1], layout="ranks")
    md = run.metadata["clock_offsets"]
    assert [h["host"] for h in md["hosts"]] == ["node-000", "node-001", "node-002"]
    for h, err in zip(md["hosts"], ERRORS, strict=True):
        assert abs(h["offset_ns"] + err) < 1_000  # moved back by its error, within 1 us
    assert pl.from_arrow(run.table("kernels")).height == 6 * 240  # type: ignore[union-attr]
