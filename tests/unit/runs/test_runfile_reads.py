"""Run file reads the engine relies on: a subset of a table's columns, and dropping the mapped
pages from resident memory, give the same data as a full read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracediff.base.errors import InputError
from tracediff.runs.runfile import read_run

SAMPLE = Path(__file__).resolve().parent.parents[2] / "samples" / "g_bad.arrow"


def test_column_subset_equals_the_same_columns_of_a_full_read() -> None:
    run = read_run(SAMPLE)
    cols = ["end_ns", "name", "device_id", "grid_x"]  # any order, any subset
    part = run.read("kernels", cols)
    full = run.read("kernels")
    assert part.column_names == cols
    assert part.equals(full.select(cols))
    assert part.num_rows > 1000


def test_release_keeps_every_table_readable_and_equal() -> None:
    run = read_run(SAMPLE)
    before = {name: run.read(name) for name in run.tables.keys()}
    nvtx = run.table("nvtx_ranges")  # cached, possibly pointing into the mapping
    run.release()
    assert nvtx.equals(before["nvtx_ranges"])
    for name, table in before.items():
        assert run.read(name).equals(table), name


def test_column_subset_of_a_damaged_table_is_an_input_error(tmp_path: Path) -> None:
    """The schema is still checked whole when only some columns are read."""
    off, length = read_run(SAMPLE).tables._offsets["kernels"]  # type: ignore[attr-defined]
    raw = bytearray(SAMPLE.read_bytes())
    end = off + length
    raw[end - 64 : end] = b"\0" * 64  # the kernels table's IPC footer (its schema)
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="kernels"):
        read_run(bad).read("kernels", ["device_id", "name"])
