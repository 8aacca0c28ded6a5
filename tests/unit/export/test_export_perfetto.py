"""`compare --perfetto`: the Chrome JSON trace, checked against the Comparison it came from.

tests/integration/test_perfetto_trace.py loads the same output into Perfetto's trace processor.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import polars as pl
import pytest

from tracediff.base.errors import OutputError
from tracediff.engine.result import Comparison
from tracediff.export.perfetto import write_perfetto

ROOT = Path(__file__).resolve().parent.parents[2]


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    from tracediff.engine.compare import compare
    from tracediff.parse import load

    return compare(
        load(ROOT / "samples/g_good.arrow"), load(ROOT / "samples/g_bad.arrow"), n_boot=50
    )


@pytest.fixture(scope="module")
def trace(comparison: Comparison, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("pf") / "t.json.gz"
    info = write_perfetto(comparison, out)
    with gzip.open(out) as f:
        doc = orjson.loads(f.read())
    assert info["slices"] == comparison.events.height + comparison.cycles.height
    return doc


def test_ops_sit_at_cycle_times_period_plus_offset(trace: dict, comparison: Comparison) -> None:
    c = comparison
    period = int(c.cycles["span_ns"].max())
    assert trace["otherData"]["cycle_period_ns"] == period
    ops = pl.DataFrame(
        [
            {
                "pid": e["pid"],
                "ts_ns": round(e["ts"] * 1000),
                "dur_ns": round(e["dur"] * 1000),
                "cycle": e["args"]["cycle"],
                "contributor_id": e["args"]["contributor_id"],
            }
            for e in trace["traceEvents"]
            if e["ph"] == "X" and e["cat"] != "cycle"
        ]
    )
    want = c.events.select(
        pid=pl.when(pl.col("side") == "base").then(1).otherwise(2),
        ts_ns=pl.col("cycle") * period + pl.col("rel_start_ns"),
        dur_ns=pl.col("rel_end_ns") - pl.col("rel_start_ns"),
        cycle="cycle",
        contributor_id="contributor_id",
    )
    assert ops.sort(pl.all()).rows() == want.cast({"pid": pl.Int64}).sort(pl.all()).rows()


def test_tracks_and_processes(trace: dict, comparison: Comparison) -> None:
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs == {1: "base: g_good", 2: "head: g_bad"}
    threads = {(e["pid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert threads == {(p, n) for p in (1, 2) for n in ("GPU 0 · cycles", "GPU 0 · stream 7")}
    tids = [e["tid"] for e in meta if e["name"] == "thread_name"]
    assert len(tids) == len(set(tids))  # unique across both processes


def test_contributor_delta_in_args(trace: dict, comparison: Comparison) -> None:
    delta = dict(comparison.attribution.select("contributor_id", "delta_ms_per_cycle").iter_rows())
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "cycle"]
    assert {e["args"]["status"] for e in ops} >= {"matched", "added"}
    for e in ops:
        assert e["args"]["contributor_delta_ms_per_cycle"] == pytest.approx(
            delta[e["args"]["contributor_id"]]
        )


def test_plain_json_and_refusal(comparison: Comparison, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    write_perfetto(comparison, out)
    doc = orjson.loads(out.read_bytes())
    assert len(doc["traceEvents"]) > comparison.events.height
    with pytest.raises(OutputError, match="already exists"):
        write_perfetto(comparison, out)
    write_perfetto(comparison, out, force=True)
    with pytest.raises(OutputError, match="does not exist"):
        write_perfetto(comparison, tmp_path / "nope" / "t.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def _two_gpus(src: Path, dst: Path) -> None:
    """`src` with its device tables copied onto a second GPU (device 1, 1 µs later)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tracediff.runs import schema
    from tracediff.runs.runfile import Run, read_run, write_run

    run = read_run(src)
    tables = {}
    for name in schema.TABLES:
        t = run.table(name)
        if "device_id" in t.column_names and name != "devices" and t.num_rows:
            c = t.set_column(
                t.schema.get_field_index("device_id"),
                "device_id",
                pa.array([1] * t.num_rows, pa.int32()),
            )
            for col in ("start_ns", "end_ns"):
                c = c.set_column(c.schema.get_field_index(col), col, pc.add(c.column(col), 1000))
            t = pa.concat_tables([t, c])
        tables[name] = t
    write_run(Run(tables=tables, metadata=run.metadata), dst)


def test_two_gpus_get_their_own_tracks_and_partitions(tmp_path: Path) -> None:
    from tracediff.engine.compare import compare
    from tracediff.export.parquet import export_comparison
    from tracediff.runs.runfile import read_run

    for name in ("g_good", "g_bad"):
        _two_gpus(ROOT / f"samples/{name}.arrow", tmp_path / f"{name}.arrow")
    c = compare(read_run(tmp_path / "g_good.arrow"), read_run(tmp_path / "g_bad.arrow"), n_boot=20)
    write_perfetto(c, tmp_path / "t.json")
    doc = orjson.loads((tmp_path / "t.json").read_bytes())
    threads = {
        (e["pid"], e["args"]["name"]): e["tid"]
        for e in doc["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert set(threads) == {
        (p, f"GPU {d} · {t}") for p in (1, 2) for d in (0, 1) for t in ("cycles", "stream 7")
    }
    per_tid: dict[int, int] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] != "cycle":
            per_tid[e["tid"]] = per_tid.get(e["tid"], 0) + 1
    want = c.events.group_by("side", "device_id").len()
    for side, dev, n in want.iter_rows():
        assert per_tid[threads[(1 if side == "base" else 2, f"GPU {dev} · stream 7")]] == n

    export_comparison(c, tmp_path / "diff")
    for side, dev, n in want.iter_rows():
        part = tmp_path / f"diff/events/side={side}/device_id={dev}/part-0.parquet"
        assert pl.read_parquet(part).height == n
