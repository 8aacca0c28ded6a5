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


def test_small_table_decoded_once_and_let_go_on_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small table's column reads decode it once (runfile.SMALL_TABLE_BYTES); `release` lets
    go of kept kernels and memops, and a read after it gives the same data."""
    from tracediff.runs import runfile

    run = read_run(SAMPLE)
    lazy = run.tables
    assert lazy._offsets["kernels"][1] <= runfile.SMALL_TABLE_BYTES  # type: ignore[attr-defined]
    decoded: list[str] = []
    real = runfile._LazyTables._load

    def counted(self: object, name: str, *a: object, **k: object) -> object:
        decoded.append(name)
        return real(self, name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(runfile._LazyTables, "_load", counted)
    first = run.read("kernels", ["device_id", "start_ns"])
    again = run.read("kernels", ["name"])
    assert decoded == ["kernels"]
    assert first.equals(run.read("kernels").select(["device_id", "start_ns"]))
    run.release()
    assert not dict.__contains__(lazy, "kernels")
    assert run.read("kernels", ["name"]).equals(again)
    assert decoded == ["kernels", "kernels"]


def test_big_table_column_reads_stay_uncached(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above SMALL_TABLE_BYTES a column read decodes only its columns and keeps nothing."""
    from tracediff.runs import runfile

    monkeypatch.setattr(runfile, "SMALL_TABLE_BYTES", 0)
    run = read_run(SAMPLE)
    part = run.read("kernels", ["end_ns", "name"])
    assert not dict.__contains__(run.tables, "kernels")
    assert part.equals(run.read("kernels").select(["end_ns", "name"]))
