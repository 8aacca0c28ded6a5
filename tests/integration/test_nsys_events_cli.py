"""CUDA event records and stream waits read through the real nsys CLI (parquetdir export of a
.nsys-rep) equal those read from the same report's SQLite export."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracediff.parse import load

pytestmark = [pytest.mark.nsys]

TWO = Path(__file__).resolve().parent.parent / "data" / "h200" / "twostream"


def _events(path: Path) -> pl.DataFrame:
    df = pl.from_arrow(load(path).table("cuda_events"))
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col(pl.Categorical).cast(pl.String))


def test_parquetdir_route_reads_the_same_events(nsys: str) -> None:
    rep, sql = _events(TWO / "cupy_good.nsys-rep"), _events(TWO / "cupy_good.sqlite")
    assert rep.height == 100 and rep.filter(pl.col("action") == "wait").height == 40
    assert rep.equals(sql)
