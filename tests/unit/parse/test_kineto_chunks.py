"""The Kineto reader's chunked decode gives exactly what one whole-document decode gives.

The reader cuts traceEvents into pieces where `}`, `,` and `{` meet; these tests make the pieces
tiny so every real trace is cut thousands of times, and feed layouts where a cut can fall inside a
string or a nested value, where keys follow the array, or where the array is minified. Every test
runs twice: pieces scanned by the native scanner (scan.py) where it takes them, and all pieces
decoded by msgspec.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.parse.kineto import events, read_kineto, scan
from tracediff.runs.runfile import Run

DATA = Path(__file__).parent.parent.parent / "data"
REAL = [
    DATA / "kineto" / "step_based_trace_2543932.json.gz",  # gpu_user_annotation, flows
    DATA / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # ROCm
    DATA / "kineto" / "sampled_rank-0.json.gz",  # minified, one line
    DATA / "kineto" / "gpu_only_trace.json.gz",
    DATA / "h200" / "k_good.json.gz",
]


@pytest.fixture(autouse=True, params=["scan", "msgspec"])
def piece_decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "scan" and not scan.ENABLED:
        pytest.skip("the native scanner is not built")
    monkeypatch.setattr(scan, "ENABLED", request.param == "scan")
    return str(request.param)


def _whole(monkeypatch: pytest.MonkeyPatch, path: Path) -> Run:
    with monkeypatch.context() as m:

        def no_chunks(*a: Any, **k: Any) -> Any:
            raise events.NotChunked
            yield  # pragma: no cover

        m.setattr(events, "chunks", no_chunks)
        return read_kineto(path)


def _chunked(monkeypatch: pytest.MonkeyPatch, path: Path, size: int) -> Run:
    with monkeypatch.context() as m:
        m.setattr(events, "CHUNK_BYTES", size)
        seen: list[int] = []
        real = events._piece

        def counting(*a: Any, **k: Any) -> Any:
            out = real(*a, **k)
            seen.append(isinstance(out, scan.Scanned))  # a failed try raises
            return out

        m.setattr(events, "_piece", counting)
        run = read_kineto(path)
        run.metadata["pieces"] = len(seen)
        run.metadata["scanned"] = sum(seen)
        return run


def _same(a: Run, b: Run) -> None:
    assert a.warnings == b.warnings
    skip = ("pieces", "scanned", "source")
    assert {k: v for k, v in a.metadata.items() if k not in skip} == {
        k: v for k, v in b.metadata.items() if k not in skip
    }
    for name in a.tables:
        assert a.tables[name].schema == b.tables[name].schema, name
        assert_frame_equal(pl.from_arrow(a.tables[name]), pl.from_arrow(b.tables[name]))


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_traces_cut_into_small_pieces(
    path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, piece_decoder: str
) -> None:
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(path.read_bytes()))
    want = _whole(monkeypatch, path)
    # 2000-byte pieces, or ~400 pieces where that would be more (the 4.6 MB H200 trace took
    # 8.9 s at 2300 pieces a read under msgspec; the cuts that can fall in a string or a nested
    # value are _cases' below, made for it)
    size = max(2000, plain.stat().st_size // 400)
    for src in (path, plain):
        got = _chunked(monkeypatch, src, size)
        assert got.metadata["pieces"] > 10 or path.stat().st_size < 8000
        # the scanner takes every piece of these traces (msgspec: none)
        want_scanned = got.metadata["pieces"] if piece_decoder == "scan" else 0
        assert got.metadata["scanned"] == want_scanned
        _same(want, got)


def _kernel(i: int, **extra: Any) -> dict[str, Any]:
    e = {
        "ph": "X",
        "cat": "kernel",
        "name": f"k{i}",
        "pid": 0,
        "tid": 7,
        "ts": 1000.0 + i,
        "dur": 0.5,
        "args": {"device": 0, "stream": 7, "correlation": i},
    }
    e.update(extra)
    return e


def _api(i: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 2,
        "ts": 999.0 + i,
        "dur": 0.25,
        "args": {"correlation": i},
    }


def _cases() -> dict[str, bytes]:
    evs: list[dict[str, Any]] = []
    for i in range(60):
        evs += [_api(i), _kernel(i)]
    tricky = [dict(e) for e in evs]
    # cuts that fall inside a string and inside nested objects of args
    tricky[5]["name"] = 'a "}, {" b' + "}, {" * 50
    tricky[9]["args"] = {**tricky[9]["args"], "nested": [{"a": 1}, {"b": 2}] * 40}
    tricky[20]["args"] = {**tricky[20]["args"], "more": "x},{" * 100}
    after = {"traceEvents": evs, "deviceProperties": [{"id": 0, "name": "G"}] * 30}
    doc = {"schemaVersion": 1, "traceEvents": evs}
    kineto_layout = (
        b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
        + b",\n".join(
            b"  {\n    "
            + json.dumps(e)[1:-1].encode().replace(b', "args"', b',\n    "args"')
            + b"\n  }"
            for e in evs
        )
        + b'\n  ],\n  "traceName": "x"\n}\n'
    )
    return {
        "minified": json.dumps(doc, separators=(",", ":")).encode(),
        "indented": json.dumps(doc, indent=4).encode(),
        "one_per_line": b'{"traceEvents": [\n'
        + b",\n".join(json.dumps(e).encode() for e in evs)
        + b"\n]}",
        "kineto_layout": kineto_layout,
        "tricky_values": json.dumps({"traceEvents": tricky}).encode(),
        "keys_after_array": json.dumps(after).encode(),
        "key_twice": json.dumps(doc)[:-1].encode()
        + b', "traceEvents": ['
        + json.dumps(_kernel(999)).encode()
        + b"]}",
        "unlisted_category": json.dumps(
            {"traceEvents": evs + [{"ph": "X", "cat": "new_cat", "name": "n", "ts": 1}]}
        ).encode(),
        "args_beyond_double": json.dumps({"traceEvents": evs})
        .replace('"correlation": 7}', '"correlation": 7, "device": 1e400}')
        .encode(),
        "empty_array": b'{"traceEvents": [], "deviceProperties": [{"id": 0}, {"id": 1}]}',
        "nested_key_first": json.dumps(
            {"meta": [{"traceEvents": []}, {"x": 1}], "traceEvents": evs}
        ).encode(),
        "ts_unix_exact": json.dumps({"traceEvents": evs})
        .replace('"ts": 10', '"ts": 17121954955196')
        .encode(),
    }


@pytest.mark.parametrize("case", sorted(_cases()))
@pytest.mark.parametrize("size", [1, 150, 700])
def test_layouts_cut_anywhere(
    case: str, size: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _cases()[case]
    for name, blob in (("t.json", data), ("t.json.gz", gzip.compress(data))):
        path = tmp_path / name
        path.write_bytes(blob)
        got = _chunked(monkeypatch, path, size)
        _same(_whole(monkeypatch, path), got)
        # all but these go through the chunked decode (the rest: no array content to cut, or
        # the first "traceEvents" key found is not the top-level one)
        assert (got.metadata["pieces"] > 0) == (case not in ("empty_array", "nested_key_first"))


def test_gzip_members_and_padding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _cases()["kineto_layout"]
    path = tmp_path / "t.json.gz"
    half = len(data) // 2
    path.write_bytes(gzip.compress(data[:half]) + b"\x00" * 10 + gzip.compress(data[half:]))
    _same(_whole(monkeypatch, path), _chunked(monkeypatch, path, 300))
