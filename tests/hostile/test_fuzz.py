"""Property-based fuzzing (issue #8) of the nsys reader, the Kineto reader and the diff engine.

- nsys: small random exports built with the real DDL of the H200 export's tables (so every
  column, type and NOT NULL is nsys's own); the reader must read each one exactly.
- Kineto: random event lists, including junk events; the reader must keep every kernel and its
  times exactly, and never raise anything but TracediffError.
- engine: random kernel sequences as runs (NVTX cycle ranges, kernels launched inside them):
  a run against itself aligns as the identity with zero delta, and for random pairs the
  attribution sums to the measured delta.

Examples are few and derandomized (same examples every run) so the file stays within ~30 s.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.support import make_corpus
from tracediff.base.errors import TracediffError
from tracediff.engine.compare import compare
from tracediff.parse.kineto import read_kineto
from tracediff.parse.nsys.reader import read_nsys_sqlite
from tracediff.runs import schema
from tracediff.runs.runfile import Run, read_run, stored, write_run

# No shrink phase: shrinking an engine failure ran 5+ minutes; the failing example is printed as
# found, and derandomize makes it the same on every run.
FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TID = 1 << 24
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)  # any Unicode but surrogates


# ---------------------------------------------------------------- nsys SQLite


def _real_ddl() -> dict[str, str]:
    con = sqlite3.connect(f"file:{make_corpus.NSYS}?mode=ro", uri=True)
    try:
        wanted = (
            "StringIds",
            make_corpus.KERNEL,
            make_corpus.RUNTIME,
            make_corpus.NVTX,
            "META_DATA_EXPORT",
        )
        return {
            n: sql
            for n, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            if n in wanted
        }
    finally:
        con.close()


DDL = _real_ddl()

_kernel = st.fixed_dictionaries(
    {
        "start": st.integers(0, 1 << 40),
        "dur": st.integers(-1000, 1 << 20),
        "dev": st.integers(0, 3),
        "stream": st.integers(0, 1 << 33),
        "corr": st.none() | st.integers(0, 12),
        "name": st.integers(0, 7),
        "pid": st.integers(1, 3),
    }
)
_api = st.fixed_dictionaries(
    {
        "start": st.integers(0, 1 << 40),
        "dur": st.integers(0, 1 << 16),
        "corr": st.none() | st.integers(0, 12),
        "name": st.integers(0, 7),
        "pid": st.integers(1, 3),
        "tid": st.integers(1, 5),
    }
)
_nvtx = st.fixed_dictionaries(
    {
        "start": st.integers(0, 1 << 40),
        "dur": st.none() | st.integers(-10, 1 << 20),
        "type": st.sampled_from([34, 59, 60, 75]),
        "text": st.none() | TEXT,
        "pid": st.integers(1, 3),
        "tid": st.integers(1, 5),
    }
)


def _write_nsys(
    path: Path, strings: list[str], kernels: list[dict], apis: list[dict], nvtx: list[dict]
) -> None:
    con = sqlite3.connect(path)
    for sql in DDL.values():
        con.execute(sql)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(strings)))
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.11.1')")
    con.executemany(
        f'INSERT INTO "{make_corpus.KERNEL}" (start, "end", deviceId, contextId, streamId, '
        "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, "
        "gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, "
        "localMemoryPerThread, localMemoryTotal, gridId) "
        "VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 1)",
        [
            (
                k["start"],
                k["start"] + k["dur"],
                k["dev"],
                k["stream"],
                k["corr"],
                k["pid"] * TID,
                k["name"],
                k["name"],
            )
            for k in kernels
        ],
    )
    con.executemany(
        f'INSERT INTO "{make_corpus.RUNTIME}" (start, "end", eventClass, globalTid, correlationId, '
        "nameId, returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)",
        [
            (a["start"], a["start"] + a["dur"], a["pid"] * TID + a["tid"], a["corr"], a["name"])
            for a in apis
        ],
    )
    con.executemany(
        f'INSERT INTO "{make_corpus.NVTX}" (start, "end", eventType, text, globalTid) '
        "VALUES (?, ?, ?, ?, ?)",
        [
            (
                n["start"],
                None if n["dur"] is None else n["start"] + n["dur"],
                n["type"],
                n["text"],
                n["pid"] * TID + n["tid"],
            )
            for n in nvtx
        ],
    )
    con.commit()
    con.close()


def _key(row: tuple) -> tuple:
    return tuple((v is None, v if v is not None else 0) for v in row)


@FUZZ
@given(
    strings=st.lists(TEXT, max_size=6),
    kernels=st.lists(_kernel, max_size=25),
    apis=st.lists(_api, max_size=25),
    nvtx=st.lists(_nvtx, max_size=12),
)
def test_nsys_reader_reads_random_exports_exactly(
    strings: list[str], kernels: list[dict], apis: list[dict], nvtx: list[dict]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "r.sqlite"
        _write_nsys(path, strings, kernels, apis, nvtx)
        run = read_nsys_sqlite(path)
        k = run.table("kernels")
        assert k.num_rows == len(kernels)

        def name(i: int) -> str | None:
            return strings[i] if i < len(strings) else None

        want = sorted(
            (
                (x["start"], x["start"] + x["dur"], x["dur"], x["dev"], x["pid"], name(x["name"]))
                for x in kernels
            ),
            key=_key,
        )
        got = sorted(
            zip(
                *(
                    k.column(c).cast(pa.string()).to_pylist()
                    if c == "name"
                    else k.column(c).to_pylist()
                    for c in (
                        "start_ns",
                        "end_ns",
                        "duration_ns",
                        "device_id",
                        "process_id",
                        "name",
                    )
                ),
                strict=True,
            ),
            key=_key,
        )
        assert got == want
        # a kernel gets its launch call when its process made an API call with its correlation id
        calls = {(a["pid"], a["corr"]) for a in apis if a["corr"]}
        launched = sum(1 for x in kernels if x["corr"] and (x["pid"], x["corr"]) in calls)
        assert k.num_rows - k.column("launch_start_ns").null_count == launched
        dangling = sum(1 for x in kernels if x["name"] >= len(strings))
        assert any("not in StringIds" in w for w in run.warnings) == (
            dangling > 0 or _api_dangling(apis, strings)
        )
        assert run.table("nvtx_ranges").num_rows == sum(1 for n in nvtx if n["type"] != 75)
        assert run.table("api_calls").num_rows == len(apis)
        # everything read is valid Arrow and survives the run file
        write_run(run, Path(d) / "r.arrow")
        back = read_run(Path(d) / "r.arrow")
        for t in schema.TABLES:
            run.table(t).validate(full=True)
            assert back.table(t).equals(stored(t, run.table(t)))


def _api_dangling(apis: list[dict], strings: list[str]) -> bool:
    return any(a["name"] >= len(strings) for a in apis)


# ---------------------------------------------------------------- Kineto

_ns = st.integers(0, 1 << 40)
_kineto_kernel = st.fixed_dictionaries(
    {
        "start": _ns,
        "dur": st.none() | st.integers(0, 1 << 30),
        "name": TEXT,
        "dev": st.integers(0, 3),
        "stream": st.integers(0, 50),
        "corr": st.integers(0, 30),
    }
)
_junk = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["B", "E", "i", "M", "s", "f", "X", "C"]),
        "cat": st.none()
        | st.sampled_from(["ac2g", "Trace", "cpu_op", "python_function", "overhead"])
        | TEXT,
        "name": st.none() | TEXT | st.integers(),
        "ts": st.none() | st.integers(0, 1 << 40),
        "args": st.dictionaries(TEXT, st.none() | st.integers() | TEXT, max_size=3),
    }
)


def _us(ns: int) -> float:
    return ns / 1000  # the shortest repr of this double has the ns digits exactly


@FUZZ
@given(
    kernels=st.lists(_kineto_kernel, max_size=30),
    junk=st.lists(_junk, max_size=15),
    ncalls=st.integers(0, 30),
)
def test_kineto_reader_keeps_every_kernel_exactly(
    kernels: list[dict], junk: list[dict], ncalls: int
) -> None:
    events: list[dict[str, Any]] = []
    for k in kernels:
        e: dict[str, Any] = {
            "ph": "X",
            "cat": "kernel",
            "name": k["name"],
            "pid": k["dev"],
            "tid": k["stream"],
            "ts": _us(k["start"]),
            "args": {"device": k["dev"], "stream": k["stream"], "correlation": k["corr"]},
        }
        if k["dur"] is not None:
            e["dur"] = _us(k["dur"])
        events.append(e)
    events += [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 7,
            "tid": 8,
            "ts": float(i),
            "dur": 1.5,
            "args": {"correlation": i},
        }
        for i in range(ncalls)
    ]
    events += [{k: v for k, v in j.items() if v is not None} for j in junk]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        path.write_text(
            json.dumps({"traceEvents": events, "deviceProperties": []})
        )  # ints beyond 64 bits too
        try:
            run = read_kineto(path)
        except TracediffError:
            # only junk that is not a trace event may be refused (e.g. a `cat` that is a number)
            assert junk, "a trace of well-formed kernels was refused"
            return
    k = run.table("kernels")
    assert k.num_rows == len(kernels)
    want = Counter((x["start"], x["dur"], x["dev"], x["name"]) for x in kernels)
    got = Counter(
        zip(
            k.column("start_ns").to_pylist(),
            k.column("duration_ns").to_pylist(),
            k.column("device_id").to_pylist(),
            k.column("name").cast(pa.string()).to_pylist(),
            strict=True,
        )
    )
    assert got == want
    assert any("have no dur" in w for w in run.warnings) == any(x["dur"] is None for x in kernels)
    launched = sum(1 for x in kernels if 0 <= x["corr"] < ncalls)
    assert k.num_rows - k.column("launch_start_ns").null_count == launched


# ---------------------------------------------------------------- engine

NAMES = [
    "gemm",
    "attn",
    "norm",
    "rope",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    "silu",
    "embed",
    "topk",
]
_op = st.tuples(
    st.integers(0, len(NAMES) - 1),
    st.integers(0, 50_000),
    st.integers(0, 20_000),
    st.integers(0, 1),
    st.integers(0, 1),
    st.integers(0, 8_000),
)  # name, dur, gap, device, stream, lead


def make_run(cycles: list[list[tuple[int, int, int, int, int, int]]], label: str) -> Run:
    """A run of len(cycles) `cycle` NVTX ranges on one host thread, each launching its ops."""
    pid, tid = 100, 101
    k: dict[str, list[Any]] = {
        c: []
        for c in (
            "device_id",
            "process_id",
            "stream_id",
            "start_ns",
            "end_ns",
            "duration_ns",
            "name",
            "correlation_id",
            "launch_thread_id",
            "launch_api",
            "launch_start_ns",
            "launch_end_ns",
        )
    }
    r: dict[str, list[Any]] = {
        c: []
        for c in (
            "process_id",
            "thread_id",
            "start_ns",
            "end_ns",
            "duration_ns",
            "name",
            "depth",
            "range_kind",
        )
    }
    t, corr = 1_000_000, 0
    for ops in cycles:
        host0 = t
        cursor = {0: t + 10_000, 1: t + 10_000}  # per device
        host, last = t + 1, t
        for name, dur, gap, dev, stream, lead in ops:
            corr += 1
            start = cursor[dev] + gap
            if stream == 0:
                cursor[dev] = start + dur  # stream 1 overlaps what follows on stream 0
            host, last = max(host + 1, start - lead), max(last, start + dur)
            (
                k["device_id"].append(dev),
                k["process_id"].append(pid),
                k["stream_id"].append(7 + stream),
            )
            (
                k["start_ns"].append(start),
                k["end_ns"].append(start + dur),
                k["duration_ns"].append(dur),
            )
            (
                k["name"].append(NAMES[name]),
                k["correlation_id"].append(corr),
                k["launch_thread_id"].append(tid),
            )
            k["launch_api"].append("cudaLaunchKernel"), k["launch_start_ns"].append(host)
            k["launch_end_ns"].append(host + 1)
        end = max(host + 2, last)
        for c, v in (
            ("process_id", pid),
            ("thread_id", tid),
            ("start_ns", host0),
            ("end_ns", end),
            ("duration_ns", end - host0),
            ("name", "cycle"),
            ("depth", 0),
            ("range_kind", "push_pop"),
        ):
            r[c].append(v)
        t = end + 50_000
    tables = {
        "kernels": schema.conform("kernels", pa.table(k)),
        "nvtx_ranges": schema.conform("nvtx_ranges", pa.table(r)),
    }
    return Run(tables=tables, metadata={"source": f"{label}.fuzz", "label": label})


_cycles = st.lists(st.lists(_op, min_size=1, max_size=8), min_size=1, max_size=5)


@FUZZ
@given(
    seq=st.lists(
        st.tuples(st.integers(0, len(NAMES) - 1), st.integers(0, 1)), min_size=1, max_size=8
    ),
    timing=st.lists(
        st.lists(
            st.tuples(st.integers(0, 50_000), st.integers(0, 20_000), st.integers(0, 8_000)),
            min_size=8,
            max_size=8,
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_run_against_itself_is_the_identity(
    seq: list[tuple[int, int]], timing: list[list[tuple]]
) -> None:
    """The same op sequence every cycle (one stream per device, so GPU order is launch order):
    all ops matched to slots 0..n-1 under their own names, zero delta, nothing significant."""
    cycles = [
        [(n, dur, gap, dev, 0, lead) for (n, dev), (dur, gap, lead) in zip(seq, tm, strict=False)]
        for tm in timing
    ]
    run = make_run(cycles, "a")
    c = compare(run, run, cycle="cycle", n_boot=20)
    _assert_zero(c)
    ev = c.events
    assert (ev["status"] == "matched").all()
    per_device = Counter(dev for _, dev in seq)
    slots = ev.group_by("side", "cycle", "device_id").agg(pl.col("slot").sort(), pl.len())
    assert slots.height == 2 * len(timing) * len(per_device)
    for row in slots.iter_rows(named=True):
        assert row["slot"] == list(range(per_device[row["device_id"]]))
    # each op that took time on a cycle's critical GPU (the one charged) has its contributor
    crit = c.cycles.filter(pl.col("critical")).select("side", "cycle", "device_id")
    charged = ev.join(crit, on=["side", "cycle", "device_id"], how="semi").filter(
        pl.col("duration_ns") > 0
    )
    assert not charged["contributor_id"].is_null().any()


def _assert_zero(c: Any) -> None:
    assert c.delta_ms_per_cycle == 0 and c.residual_ms_per_cycle == 0 and not c.significant
    assert (c.attribution["delta_ms_per_cycle"] == 0).all()
    assert not c.attribution["significant"].any()
    base = c.events.filter(pl.col("side") == "base").drop("side")
    head = c.events.filter(pl.col("side") == "head").drop("side")
    assert base.sort(pl.all()).equals(head.sort(pl.all()))


@FUZZ
@given(cycles=_cycles)
def test_any_run_against_itself_has_zero_delta(cycles: list[list[tuple]]) -> None:
    """Cycles that differ (ops added, reordered across streams): both sides still align alike."""
    run = make_run(cycles, "a")
    _assert_zero(compare(run, run, cycle="cycle", n_boot=20))


@FUZZ
@given(base=_cycles, head=_cycles)
def test_attribution_sums_to_the_delta(base: list[list[tuple]], head: list[list[tuple]]) -> None:
    b, h = make_run(base, "base"), make_run(head, "head")
    c = compare(b, h, cycle="cycle", n_boot=20)
    assert abs(c.residual_ms_per_cycle) < 1e-6
    assert abs(c.attribution["delta_ms_per_cycle"].sum() - c.delta_ms_per_cycle) < 1e-6
    # each side's mean span is the sum of its own contributions
    assert abs(c.attribution["base_ms_per_cycle"].sum() - c.base.mean_ms) < 1e-6
    assert abs(c.attribution["head_ms_per_cycle"].sum() - c.head.mean_ms) < 1e-6
    assert c.base.cycles == len(base) and c.head.cycles == len(head)
