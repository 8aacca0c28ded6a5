"""A run split into per-process files (tools/split_run.py) and joined again (parse/ranks/combine.py)
compares as the one file does: generated 4-GPU nsys reports with a straggler rank (the critical
GPU, the per-GPU rows, the collective wait/transfer split) and the real H200 captures (issue 20).
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from tests.support.gen_nsys import Straggler, write_report
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load

ROOT = Path(__file__).resolve().parent.parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import split_run  # noqa: E402

H200 = ROOT / "tests" / "data" / "h200"
KEY = ["kind", "name", "phase", "device_id"]


def _split(src: Path, out: Path) -> Path:
    assert split_run.main([str(src), "-o", str(out)]) == 0
    return out


def _same(a: Comparison, b: Comparison) -> None:
    assert a.delta_ms_per_cycle == pytest.approx(b.delta_ms_per_cycle, abs=1e-12)
    assert (a.base.cycles, a.head.cycles) == (b.base.cycles, b.head.cycles)
    assert a.critical_device == b.critical_device
    cols = [*KEY, "base_ms_per_cycle", "head_ms_per_cycle", "delta_ms_per_cycle", "status"]
    x, y = a.attribution.select(cols).sort(KEY), b.attribution.select(cols).sort(KEY)
    assert x.height == y.height > 0
    assert x.select(KEY, "status").equals(y.select(KEY, "status"))
    for c in ("base_ms_per_cycle", "head_ms_per_cycle", "delta_ms_per_cycle"):
        assert (x[c] - y[c]).abs().max() < 1e-9  # type: ignore[operator]


def test_straggler_across_four_files_is_found_as_in_one(tmp_path: Path) -> None:
    tb = write_report(tmp_path / "b.sqlite", 4, 30, 40, seed=11)
    th = write_report(tmp_path / "h.sqlite", 4, 30, 40, [Straggler(2, 20_000)], seed=12)
    one = compare(load(tb.path), load(th.path))
    db, dh = _split(tb.path, tmp_path / "b"), _split(th.path, tmp_path / "h")
    assert sorted(p.name for p in db.iterdir()) == [f"rank-{i}.arrow" for i in range(4)]
    jb, jh = load(db), load(dh)  # folders of rank files: one run each
    assert [g["rank"] for g in jh.metadata["gpus"]] == [0, 1, 2, 3]
    assert {g["rank_from"] for g in jh.metadata["gpus"]} == {"file name"}
    many = compare(jb, jh)
    _same(one, many)
    # the straggler: every other GPU waits longer in its all-reduces, GPU 2 does not
    for c in (one, many):
        coll = c.collectives
        grow = coll["head_wait_ms_per_cycle"] - coll["base_wait_ms_per_cycle"]
        waits = dict(zip(coll["device_id"], grow, strict=True))
        assert waits[2] < 0.1 * min(v for d, v in waits.items() if d != 2)
    assert one.collectives.sort("device_id").equals(many.collectives.sort("device_id"))


@pytest.mark.parametrize("pair", [("g_good", "g_bad"), ("e_good", "e_bad")])
def test_h200_captures_split_per_process_compare_the_same(
    tmp_path: Path, pair: tuple[str, str]
) -> None:
    b, h = (H200 / f"{n}.sqlite" for n in pair)
    one = compare(load(b), load(h))
    db, dh = _split(b, tmp_path / "b"), _split(h, tmp_path / "h")
    many = compare(load(db, layout="ranks"), load(dh, layout="ranks"))
    _same(one, many)
    assert pl.Series(many.attribution["device_id"]).drop_nulls().unique().to_list() == [0]
