"""Ties settled by the data, not by a hash table's order: the same answer every run.

Each case builds an input with an exact tie that a `group_by` / `unique` order used to settle,
differently from call to call: two cycle ranges with equal scores, range names of equal counts
in an error hint, the cycles of a host-only comparison, two cross-stream sources ending at the
same nanosecond. And two devices finishing a cycle together: the critical one is now the lower
GPU, as the what-if replay's spans pick it (it was whatever the sort left first).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tracediff.base.errors import AnalysisError
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.replay.events import trace_edges
from tracediff.runs import schema
from tracediff.runs.runfile import Run

ROOT = Path(__file__).resolve().parent.parent.parent.parent
RUNS = 8


def _one(values: list) -> object:
    assert len(set(values)) == 1, f"{len(set(values))} different answers in {len(values)} runs"
    return values[0]


def _with_copied_cycle_ranges(run: Run, gpu: bool = True) -> Run:
    """The run with its `cycle` ranges renamed `loop`, and a copy of them named `loop2`: two
    candidates of equal score (same count, depth, coverage; neither a preferred name)."""
    r = pl.from_arrow(run.table("nvtx_ranges"))
    assert isinstance(r, pl.DataFrame)
    cyc = pl.col("name").cast(pl.String) == "cycle"
    loop = r.filter(cyc).with_columns(pl.lit("loop").cast(r.schema["name"]).alias("name"))
    dup = loop.with_columns(pl.lit("loop2").cast(r.schema["name"]).alias("name"))
    # host-only: no `verify` either (a preferred name would win)
    ranges = pl.concat([r.filter(~cyc), dup, loop]) if gpu else pl.concat([dup, loop])
    tables = {name: run.table(name) for name in schema.TABLES}
    tables["nvtx_ranges"] = schema.conform("nvtx_ranges", ranges.to_arrow())
    if not gpu:
        tables["kernels"], tables["memops"] = schema.empty("kernels"), schema.empty("memops")
    return Run(tables=tables, metadata=dict(run.metadata))


@pytest.fixture(scope="module")
def spec() -> Run:
    return load(ROOT / "samples" / "specloop_good.arrow")


def test_cycle_range_of_equal_score_is_the_same_every_run(spec: Run) -> None:
    run = _with_copied_cycle_ranges(spec)
    methods = [compare(run, run, n_boot=10).base.cycle_method for _ in range(RUNS)]
    assert _one(methods) == "nvtx:loop"  # in (domain, name) order, the first


def test_host_only_range_and_cycles_are_the_same_every_run(spec: Run) -> None:
    run = _with_copied_cycle_ranges(spec, gpu=False)
    cs = [compare(run, run, n_boot=10) for _ in range(RUNS)]
    assert _one([c.base.cycle_method for c in cs]) == "nvtx:loop"
    _one([str(c.cycles.rows()) for c in cs])
    cyc = cs[0].cycles
    assert cyc.height == 40 and cyc.select("side", "cycle").equals(
        cyc.select("side", "cycle").sort("side", "cycle")
    )


@pytest.mark.parametrize("gpu", [True, False])
def test_missing_range_hint_is_the_same_every_run(spec: Run, gpu: bool) -> None:
    """Ranges of equal counts (20 each) are listed by name."""
    run = _with_copied_cycle_ranges(spec, gpu=gpu)
    hints = []
    for _ in range(RUNS):
        with pytest.raises(AnalysisError) as e:
            compare(run, run, cycle="nosuchrange", n_boot=10)
        hints.append(e.value.hint)
    want = "draft, draft_extend, loop, loop2, verify" if gpu else "loop, loop2"
    assert _one(hints).startswith(f"ranges present: {want}; pass --cycle NAME")


def _edges_case() -> tuple[pl.DataFrame, pl.DataFrame]:
    """One process, cycle 0. Ops 0 and 1 (streams 1 and 2) end at the same ns; op 2 (stream 3)
    is enqueued after a wait whose record names no stream: its source is one of the two."""
    h = pl.DataFrame(
        {
            "_i": [0, 1, 2],
            "_cyc": [0, 0, 0],
            "_o": [0, 0, 0],
            "process_id": [1, 1, 1],
            "stream_id": [1, 2, 3],
            "start_ns": [1_000, 1_000, 2_100],
            "end_ns": [2_000, 2_000, 2_500],
            "launch_start_ns": [100, 110, 300],
        }
    )
    ev = pl.DataFrame(
        {
            "action": ["record", "wait"],
            "process_id": [1, 1],
            "thread_id": [10, 10],
            "stream_id": [None, 3],
            "event_id": [None, 5],
            "event_sync_id": [None, None],
            "api_start_ns": [200, 250],
        },
        schema_overrides={"stream_id": pl.Int64, "event_id": pl.Int64, "event_sync_id": pl.Int64},
    )
    return h, ev


def test_stream_wait_source_of_a_tie_is_the_same_every_run() -> None:
    h, ev = _edges_case()
    edges = [trace_edges(h, ev)[0] for _ in range(RUNS * 2)]
    assert _one([str(e.rows()) for e in edges]) == str([(2, 1, 100)])  # the later op


def test_sources_of_one_target_are_in_one_order_every_run() -> None:
    """Op 2 waits on both streams (two records that name them): two edges, in source order."""
    h, ev = _edges_case()
    ev = pl.DataFrame(
        {
            "action": ["record", "record", "wait", "wait"],
            "process_id": [1, 1, 1, 1],
            "thread_id": [10, 10, 10, 10],
            "stream_id": [1, 2, 3, 3],
            "event_id": [5, 6, 5, 6],
            "event_sync_id": [None, None, None, None],
            "api_start_ns": [200, 205, 250, 260],
        },
        schema_overrides={"event_sync_id": pl.Int64},
    )
    edges = [trace_edges(h, ev)[0] for _ in range(RUNS * 2)]
    assert _one([str(e.rows()) for e in edges]) == str([(2, 0, 100), (2, 1, 100)])


def test_devices_finishing_together_charge_the_lower_gpu() -> None:
    """e_good plus a copy of itself as a second process on GPU 1: every cycle ends on both GPUs
    at the same ns with the same span. The cycle is charged to GPU 0, as replay.simulate._spans
    does (it was GPU 1 in 1 of 12 cycles: the order a multi-key sort left the tie in)."""
    run = load(ROOT / "tests" / "data" / "h200" / "e_good.sqlite")
    tables = {}
    for name, t in run.tables.items():
        c = t
        for col in ("process_id", "thread_id", "launch_thread_id"):
            if col in c.column_names:
                i = c.schema.get_field_index(col)
                c = c.set_column(i, c.field(i), pc.add(c.column(i), pa.scalar(1, pa.int64())))
        if "device_id" in c.column_names:
            i = c.schema.get_field_index("device_id")
            c = c.set_column(i, c.field(i), pc.add(c.column(i), pa.scalar(1, pa.int32())))
        tables[name] = pa.concat_tables([t, c]).combine_chunks()
    two = Run(tables=tables, metadata=dict(run.metadata))
    c = compare(two, two, n_boot=10)
    crit = c.cycles.filter(pl.col("critical"))
    assert crit.height == 24 and (crit["device_id"] == 0).all()
    assert c.critical_device == 0


def test_head_is_cut_at_base_ranges_domain(spec: Run) -> None:
    """Base's cut, found automatically, is `cycle` in the default domain; head also has ranges
    named `cycle` in another domain, shifted by half a cycle. Head is cut at the default
    domain's only (it was cut at the name, in every domain: twice the cycles, each a half)."""
    r = pl.from_arrow(spec.table("nvtx_ranges"))
    assert isinstance(r, pl.DataFrame)
    cyc = r.filter((pl.col("name").cast(pl.String) == "cycle") & pl.col("domain").is_null())
    half = int((cyc["end_ns"] - cyc["start_ns"]).to_numpy().mean() // 2)
    other = cyc.with_columns(
        pl.lit("other").cast(r.schema["domain"]).alias("domain"),
        pl.col("start_ns") + half,
        pl.col("end_ns") + half,
    )
    tables = {name: spec.table(name) for name in schema.TABLES}
    tables["nvtx_ranges"] = schema.conform("nvtx_ranges", pl.concat([r, other]).to_arrow())
    head = Run(tables=tables, metadata=dict(spec.metadata))
    c = compare(spec, head, n_boot=10)
    assert c.base.cycle_method == c.head.cycle_method == "nvtx:cycle"
    assert c.base.cycles == c.head.cycles == 20
    assert abs(c.delta_ms_per_cycle) < 1e-9  # the same GPU work, cut the same way


def _renamed(run: Run, name: str, domain: str | None) -> Run:
    r = pl.from_arrow(run.table("nvtx_ranges"))
    assert isinstance(r, pl.DataFrame)
    cyc = (pl.col("name").cast(pl.String) == "cycle") & pl.col("domain").is_null()
    r = r.with_columns(
        pl.when(cyc).then(pl.lit(name)).otherwise(pl.col("name").cast(pl.String)).alias("name"),
        pl.when(cyc)
        .then(pl.lit(domain))
        .otherwise(pl.col("domain").cast(pl.String))
        .alias("domain"),
    )
    tables = {n: run.table(n) for n in schema.TABLES}
    tables["nvtx_ranges"] = schema.conform("nvtx_ranges", r.to_arrow())
    return Run(tables=tables, metadata=dict(run.metadata))


def test_head_range_moved_to_another_domain_is_still_found(spec: Run) -> None:
    """Between the two commits the `cycle` range moved into a domain: head is cut at it there,
    and a warning says so."""
    head = _renamed(spec, "cycle", "myapp")
    c = compare(spec, head, n_boot=10)
    assert c.head.cycles == 20
    assert any("other side's domain" in w and "myapp" in w for w in c.warnings), c.warnings


def test_cycle_name_with_colons_is_a_name_first(spec: Run) -> None:
    """`--cycle sglang::step` names a range called that (not range `step` of domain `sglang:`)."""
    run = _renamed(spec, "sglang::step", None)
    c = compare(run, run, cycle="sglang::step", n_boot=10)
    assert c.base.cycles == 20


def test_info_device_listed_twice_takes_its_known_values(tmp_path: Path) -> None:
    """A device listed by two processes, once without its properties: `info` shows the known
    name and SM count (it kept either row, by run)."""
    from tracediff.engine.runinfo import summarize
    from tracediff.runs.runfile import write_run

    run = load(ROOT / "samples" / "specloop_good.arrow")
    d = pl.from_arrow(run.table("devices"))
    assert isinstance(d, pl.DataFrame) and d.height == 1
    blank = d.with_columns(
        pl.lit(None, d.schema["name"]).alias("name"),
        pl.lit(None, pl.Int32).alias("sm_count"),
        pl.lit(None, pl.Int64).alias("memory_bytes"),
        (pl.col("process_id") + 1).alias("process_id"),
    )
    tables = {n: run.table(n) for n in schema.TABLES}
    tables["devices"] = schema.conform("devices", pl.concat([blank, d]).to_arrow())
    path = tmp_path / "twice.arrow"
    write_run(Run(tables=tables, metadata=dict(run.metadata)), path)
    got = [summarize(load(path))["devices"] for _ in range(RUNS)]
    assert _one([str(g) for g in got])
    (dev,) = got[0]
    assert dev["name"] == d["name"][0] and dev["sm_count"] == d["sm_count"][0]
