"""A run file stores kernels and copies in device-major order (runs/runfile.py `DEVICE_MAJOR`):
the same rows, ordered by device then start then end, each column read back in one chunk, and
the same comparison as from the report the run was parsed from."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from tests.support.gen_nsys import SlowerKernel, write_report
from tracediff.cli import main
from tracediff.parse import load
from tracediff.runs.runfile import read_run, write_run

KEYS = ["device_id", "start_ns", "end_ns"]


def _sorted_rows(table: pa.Table) -> pa.Table:
    by = [(c, "ascending") for c in table.column_names if not pa.types.is_dictionary(table[c].type)]
    return table.sort_by(by).combine_chunks()


def _compare_json(base: Path, head: Path) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["compare", str(base), str(head), "--format", "json"])
    assert rc == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_kernels_device_major_same_rows_same_answer(tmp_path: Path) -> None:
    b, h = tmp_path / "b.sqlite", tmp_path / "h.sqlite"
    write_report(b, 4, 12, 30, seed=1)
    write_report(h, 4, 12, 30, [SlowerKernel("flash_fwd_kernel", 2_000)], seed=2)
    for src in (b, h):
        read = load(src).table("kernels")
        dev = read["device_id"].to_numpy()
        assert (np.diff(dev) < 0).any()  # the report's kernels come in start order, not by GPU
        write_run(load(src), src.with_suffix(".arrow"))
        kept = read_run(src.with_suffix(".arrow")).table("kernels")
        assert all(kept[c].num_chunks == 1 for c in kept.column_names)
        d, s, e = (kept[c].to_numpy() for c in KEYS)
        assert (np.diff(d) >= 0).all()
        same_device = np.diff(d) == 0
        assert ((np.diff(s) >= 0) | ~same_device).all()
        assert ((np.diff(e) >= 0) | ~same_device | (np.diff(s) > 0)).all()
        assert _sorted_rows(kept.drop_columns(["name", "short_name"])).equals(
            _sorted_rows(read.drop_columns(["name", "short_name"]))
        )
        # names travel with their rows: each (device, start) has the same kernel name
        names = {(r["device_id"], r["start_ns"], r["name"]) for r in kept.to_pylist()}
        assert names == {(r["device_id"], r["start_ns"], r["name"]) for r in read.to_pylist()}
    assert _compare_json(b.with_suffix(".arrow"), h.with_suffix(".arrow")) == _compare_json(b, h)
