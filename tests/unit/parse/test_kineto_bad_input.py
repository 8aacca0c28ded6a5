"""Kineto reader on broken inputs, each made in tmp_path from a real trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.support.cli import cli_run
from tracediff.base.errors import InputError
from tracediff.parse.kineto import read_kineto

REAL = Path(__file__).parent.parent.parent / "data" / "h200" / "k_good.json.gz"


def _text() -> bytes:
    return gzip.decompress(REAL.read_bytes())


def _expect(path: Path, *words: str) -> str:
    with pytest.raises(InputError) as err:
        read_kineto(path)
    msg = str(err.value)
    assert str(path) in msg and "\n" not in msg
    for w in words:
        assert w in msg
    return msg


def test_invalid_json(tmp_path: Path) -> None:
    p = tmp_path / "cut.json"
    p.write_bytes(_text()[:200_000])
    _expect(p, "not valid JSON")


def test_truncated_gzip(tmp_path: Path) -> None:
    p = tmp_path / "cut.json.gz"
    raw = REAL.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    _expect(p, "gzip")


def test_json_without_trace_events(tmp_path: Path) -> None:
    doc = json.loads(_text())
    del doc["traceEvents"]
    p = tmp_path / "meta_only.json"
    p.write_text(json.dumps(doc))
    _expect(p, "no traceEvents")
    q = tmp_path / "list.json"
    q.write_text(json.dumps(doc["deviceProperties"]))
    _expect(q, "not a Kineto trace")


def test_trace_without_gpu_events_warns(tmp_path: Path) -> None:
    doc = json.loads(_text())
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
    ]
    p = tmp_path / "cpu_only.json"
    p.write_text(json.dumps(doc))
    run = read_kineto(p)
    assert run.tables["kernels"].num_rows == 0 and run.tables["memops"].num_rows == 0
    assert run.tables["api_calls"].num_rows > 0
    assert any("no GPU kernels" in w for w in run.warnings)


def test_events_without_dur_warn_and_stay_null(tmp_path: Path) -> None:
    doc = json.loads(_text())
    dropped = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and dropped < 5:
            del e["dur"]
            dropped += 1
    p = tmp_path / "nodur.json"
    p.write_text(json.dumps(doc))
    run = read_kineto(p)
    k = run.tables["kernels"]
    assert k.column("duration_ns").null_count == 5 and k.column("end_ns").null_count == 5
    assert any("5 events have no dur" in w for w in run.warnings)


def test_non_utf8(tmp_path: Path) -> None:
    text = _text()
    i = text.index(b'"name": "aten::') + len(b'"name": "')
    p = tmp_path / "latin1.json"
    p.write_bytes(text[:i] + b"\xff" + text[i + 1 :])
    _expect(p, "UTF-8")


def test_wrong_value_type_is_one_line(tmp_path: Path) -> None:
    doc = json.loads(_text())
    doc["traceEvents"][3]["ts"] = "soon"
    p = tmp_path / "badts.json"
    p.write_text(json.dumps(doc))
    _expect(p, "traceEvents[3].ts")


def test_deeply_nested_json(tmp_path: Path) -> None:
    doc = json.loads(_text())
    p = tmp_path / "deep.json"
    depth = 200_000
    p.write_bytes(
        json.dumps({**doc, "traceEvents": []}).encode()[:-1]
        + b', "x": '
        + b"[" * depth
        + b"]" * depth
        + b"}"
    )
    _expect(p, "nested too deeply")


def test_impossible_times_are_refused(tmp_path: Path) -> None:
    for field in ("ts", "dur"):
        doc = json.loads(_text())
        next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")[field] = 1e300
        p = tmp_path / f"huge_{field}.json"
        p.write_text(json.dumps(doc))
        _expect(p, f"kernel event has {field} 1e+300")


def test_events_without_ts_are_skipped(tmp_path: Path) -> None:
    doc = json.loads(_text())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    del kernels[0]["ts"]
    p = tmp_path / "nots.json"
    p.write_text(json.dumps(doc))
    run = read_kineto(p)
    assert run.tables["kernels"].num_rows == len(kernels) - 1
    assert any("1 events have no ts and were skipped" in w for w in run.warnings)


def test_unlisted_category_and_phase_still_read(tmp_path: Path) -> None:
    doc = json.loads(_text())
    n = sum(e.get("cat") == "kernel" for e in doc["traceEvents"])
    extra = {"ph": "X", "cat": "my_plugin", "name": "x", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}
    doc["traceEvents"] += [extra, {**extra, "ph": "Z"}]
    p = tmp_path / "custom.json"
    p.write_text(json.dumps(doc))
    assert read_kineto(p).tables["kernels"].num_rows == n


def test_trace_larger_than_memory_fails_at_once(tmp_path: Path) -> None:
    """A trace whose JSON would not fit in memory is refused before it is parsed: a plain file by
    its size, a gzip as soon as its output passes the budget (a gzip bomb stops right there)."""
    import gzip as gz
    import time

    real = Path(__file__).parent.parent.parent / "data" / "h200" / "k_good.json.gz"
    plain = tmp_path / "k_good.json"
    plain.write_bytes(gz.decompress(real.read_bytes()))
    budget = 1_000_000  # bytes of JSON; the trace is several MB
    env = {"TRACEDIFF_MEMORY_BYTES": str(3 * budget)}
    for src in (real, plain):
        t = time.monotonic()
        r = cli_run(["info", str(src)], env=env, timeout=60)
        assert r.returncode == 1 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and str(src) in lines[0] and "1.0 MB of JSON" in lines[0], lines
        assert "Traceback" not in r.stderr and time.monotonic() - t < 30
    # with the machine's real memory the same files parse
    r = cli_run(["info", str(real)], timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("event", "column", "table"),
    [
        ({"pid": 2**64}, "process_id", "api_calls"),
        ({"tid": "99999999999999999999"}, "thread_id", "api_calls"),
        (
            {"cat": "kernel", "pid": 2**40, "args": {"stream": 7, "correlation": 1}},
            "device_id",
            "kernels",
        ),
        (
            {
                "cat": "kernel",
                "args": {"device": 0, "stream": 7, "correlation": 1, "grid": [2**40, 1, 1]},
            },
            "grid_x",
            "kernels",
        ),
    ],  # fmt: skip
    ids=["pid beyond int64", "tid string beyond int64", "device beyond int32", "grid beyond int32"],
)
def test_ids_that_do_not_fit_read_as_null(
    tmp_path: Path, event: dict[str, object], column: str, table: str
) -> None:
    """A corrupt id too large for its column is null (it used to raise OverflowError or a polars
    InvalidOperationError: a traceback); the rest of the event is read."""
    e: dict[str, object] = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                            "pid": 1, "tid": 2, "ts": 10, "dur": 1, "args": {"correlation": 1}}  # fmt: skip
    e.update(event)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [e]}))
    t = read_kineto(p).tables[table]
    assert t.num_rows == 1
    assert t.column(column).to_pylist() == [None]
    assert t.column("start_ns").to_pylist() == [10_000]
