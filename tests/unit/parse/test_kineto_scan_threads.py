"""The native Kineto scanner's two-thread split gives what one thread gives.

A piece of >= 1 MB is split near its middle where an element's `}`, a `,` and the next `{`
meet, and the two parts are scanned at once (_kineto_scan.c). A split that falls inside a
string leaves the first part's last string open, so that part refuses and the piece is scanned
whole. These tests put that pattern inside strings at and around the middle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tracediff.parse.kineto import _kineto_scan, events, read_kineto, scan
from tracediff.parse.kineto.fields import ROLE_NAMES

pytestmark = pytest.mark.skipif(not scan.ENABLED, reason="the native scanner is not built")

_TRAP = '}, {"ph": "X", "cat": "kernel", "name": "fake", "pid": 0, "tid": 7, "ts": 1, "dur": 1}'


def _events(n: int, trap_every: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        name = f"kernel_{i % 50}" + (_TRAP if i % trap_every == 0 else "")
        out.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": 1000 + i,
                "dur": 0.5,
                "args": {"device": 0, "stream": 7, "correlation": i, "grid": [i % 9, 1, 1]},
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 1000 + i,
                "dur": 2,
                "args": {"Call stack": _TRAP * 3, "Input Dims": [[4, 4], [4, 4]]},
            }
        )
    return out


def _piece(evs: list[dict[str, Any]]) -> bytes:
    return b",\n".join(json.dumps(e).encode() for e in evs)


def _scan(data: bytes, threads: int) -> Any:
    return _kineto_scan.scan(
        data, 0, len(data), scan._CATS, scan._SPEC, scan._CPU_OP, False, threads, False
    )


@pytest.mark.parametrize("trap_every", [1, 7, 10_000])
def test_two_threads_give_one_threads_columns(trap_every: int) -> None:
    data = _piece(_events(6000, trap_every))
    assert len(data) >= 1 << 20  # large enough to split
    one, two = _scan(data, 1), _scan(data, 2)
    assert not isinstance(one[0], str), one
    assert not isinstance(two[0], str), two
    assert len(one[0]) == 1

    def joined(parts: list[Any], code: int, col: int) -> list[Any]:
        cols = [p[1][code][col] for p in parts if code in p[1]]
        return [scan._array(c).to_pylist() for c in cols]

    kernel = ROLE_NAMES.index("kernel") + 1
    for col in range(len(scan._COLUMNS["kernel"])):
        a = [v for part in joined(one[0], kernel, col) for v in part]
        b = [v for part in joined(two[0], kernel, col) for v in part]
        assert a == b, scan._COLUMNS["kernel"][col]
    assert sum(p[0] for p in one[0]) == sum(p[0] for p in two[0]) == 12000


def test_a_split_inside_a_string_is_scanned_whole() -> None:
    """Every candidate split from the middle on lies inside a string: the result is one part
    (the first part refused, the piece was scanned whole), with no made-up "fake" kernel."""
    evs = _events(6000, 10_000)
    data = (
        _piece(evs[:6000])
        + b",\n"
        + json.dumps(
            {"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "args": {"s": _TRAP * 40_000}}
        ).encode()
    )
    got = _scan(data, 2)
    assert not isinstance(got[0], str), got
    kernel = ROLE_NAMES.index("kernel") + 1
    names = [v for p in got[0] if kernel in p[1] for v in scan._array(p[1][kernel][0]).to_pylist()]
    assert "fake" not in names and len(names) == 3000


@pytest.mark.parametrize("threads", [1, 2])
def test_whole_read_is_the_same_with_one_or_two_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events(12_000, 5), "deviceProperties": []}))
    monkeypatch.setattr(scan, "ENABLED", False)
    want = read_kineto(path)
    monkeypatch.setattr(scan, "ENABLED", True)
    monkeypatch.setattr(scan, "THREADS", threads)
    monkeypatch.setattr(events, "CHUNK_BYTES", 1 << 21)  # several pieces, each split
    got = read_kineto(path)
    for name, t in want.tables.items():
        assert t.equals(got.tables[name]), name
    assert want.metadata == got.metadata
    assert want.tables["kernels"].num_rows == 12_000
