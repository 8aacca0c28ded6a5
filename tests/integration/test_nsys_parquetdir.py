"""The parquetdir reader (nsys.cli.ParquetSource): damaged files, column subsets, row groups."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from tracediff.base.errors import InputError
from tracediff.parse import load
from tracediff.parse.nsys.cli import ParquetSource
from tracediff.parse.nsys.schema import KERNEL, KERNEL_COLS, NVTX, NVTX_COLS
from tracediff.parse.nsys.source import Read
from tracediff.runs import schema

pytestmark = [pytest.mark.nsys]

H200 = Path(__file__).resolve().parent.parent / "data" / "h200"


@pytest.fixture(scope="module")
def g_bad_pq(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pq") / "g_bad_pqtdir"
    subprocess.run(
        [nsys, "export", "--type", "parquetdir", "--quiet=true", "-o", str(out),
         str(H200 / "g_bad.nsys-rep")],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def test_damaged_column_data_names_the_file(g_bad_pq: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(g_bad_pq, bad)
    f = bad / f"{KERNEL}.parquet"
    data = bytearray(f.read_bytes())
    data[4:68] = b"\xff" * 64  # the first page header; the footer (schema) stays readable
    f.write_bytes(bytes(data))
    with pytest.raises(InputError, match=f"{KERNEL}.parquet: not a readable Parquet file"):
        load(bad)


def test_reads_take_their_columns_types_and_filter(g_bad_pq: Path) -> None:
    src = ParquetSource(g_bad_pq)
    cols = dict(KERNEL_COLS) | {"noSuchColumn": pl.Int64()}
    kern, nvtx, absent = src.read(
        [Read(KERNEL, cols), Read(NVTX, NVTX_COLS, ("eventType", (59,))), Read("NOPE", cols)]
    )
    assert kern.columns == list(cols) and absent.columns == list(cols) and absent.height == 0
    assert dict(kern.schema) == cols and kern["noSuchColumn"].null_count() == kern.height
    assert kern.height == pq.read_metadata(g_bad_pq / f"{KERNEL}.parquet").num_rows
    raw = pl.read_parquet(g_bad_pq / f"{NVTX}.parquet")
    assert nvtx.height == raw.filter(pl.col("eventType") == 59).height > 0
    assert kern.n_chunks("all") == [1] * len(cols)


def test_many_row_groups_read_as_one(g_bad_pq: Path, tmp_path: Path) -> None:
    """A table written in several row groups (chunks) gives the same run as one row group."""
    split = tmp_path / "split"
    shutil.copytree(g_bad_pq, split)
    for name in (KERNEL, "CUPTI_ACTIVITY_KIND_RUNTIME"):
        t = pq.read_table(g_bad_pq / f"{name}.parquet")
        pq.write_table(t, split / f"{name}.parquet", row_group_size=max(1, t.num_rows // 7))
    assert pq.read_metadata(split / f"{KERNEL}.parquet").num_row_groups > 1
    a, b = load(g_bad_pq), load(split)
    for t in schema.TABLES:
        assert a.table(t).equals(b.table(t)), t
