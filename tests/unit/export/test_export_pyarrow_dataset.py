"""The export reads with plain pyarrow.dataset as docs/parquet-schema.md says (issue #17).

pyarrow infers a hive partition's type from the non-null values in the paths: a table whose
rows all lack a device (the bundled run's `collectives`: host-side NCCL ranges only) has only
the null partition, and `partitioning="hive"` refuses it. The doc gives the partitioning to
pass; this test runs the doc's own snippet on every table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from tracediff.export.parquet import export_runs
from tracediff.runs import schema
from tracediff.runs.runfile import read_run

ROOT = Path(__file__).resolve().parent.parents[2]
RUN = ROOT / "samples" / "g_good.arrow"
DOC = ROOT / "docs" / "parquet-schema.md"


def _doc_snippet() -> str:
    """The `ds.dataset(...)` call the doc's 'Null device' paragraph gives."""
    m = re.search(r"`(ds\.dataset\(\"DIR/collectives\".*?\))`", DOC.read_text(), re.S)
    assert m, "docs/parquet-schema.md no longer gives the pyarrow partitioning"
    return m.group(1)


def test_every_partitioned_table_reads_with_the_documented_pyarrow_call(tmp_path: Path) -> None:
    out = tmp_path / "export"
    export_runs([RUN], out)
    run = read_run(RUN)
    snippet = _doc_snippet()
    partitioned = [t for t in schema.TABLES if (out / t / "run=g_good").is_dir() and any(
        p.name.startswith("device_id=") for p in (out / t / "run=g_good").iterdir()
    )]  # fmt: skip
    assert "collectives" in partitioned and "kernels" in partitioned
    for table in partitioned:
        got = eval(snippet.replace("DIR/collectives", str(out / table)), {"ds": ds, "pa": pa})
        t = got.to_table()
        want = run.table(table)
        assert t.num_rows == want.num_rows, table
        assert t.column("device_id").null_count == want.column("device_id").null_count, table
    # the all-null table is the case plain hive inference cannot read (the doc said it could)
    assert (
        run.table("collectives").column("device_id").null_count == run.table("collectives").num_rows
    )
    with pytest.raises(pa.ArrowInvalid, match="No non-null segments"):
        ds.dataset(out / "collectives", format="parquet", partitioning="hive").to_table()
