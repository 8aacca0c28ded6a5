"""The native scanner's times equal the Python clock's, through a double and exactly.

Kineto writes ts in µs with three decimals; traces whose ts are Unix µs with a fraction need
the exact clock (a double is coarser than 1 ns there: clock.NeedExact), which Python computes
with Decimal (quantized to 0.001 µs, half to even). The scanner computes both from the JSON
text (_kineto_scan.c). These traces put ties, long fractions, negatives and both magnitudes
through a whole read with the scanner on and off.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracediff.parse.kineto import read_kineto, scan

pytestmark = pytest.mark.skipif(not scan.ENABLED, reason="the native scanner is not built")

_FRACTIONS = ["", ".5", ".001", ".0005", ".0015", ".0025", ".00251", ".12345", ".9995",
              ".99951", ".4444444", ".000000001", ".999"]  # fmt: skip


def _trace(path: Path, base: str) -> None:
    events = []
    for i, frac in enumerate(_FRACTIONS * 3):
        ts = (f"{base}{i:03d}" if base else str(i)) + frac
        dur = f"{i % 7}{_FRACTIONS[(i + 3) % len(_FRACTIONS)]}"
        events.append(
            f'{{"ph": "X", "cat": "kernel", "name": "k{i}", "pid": 0, "tid": 7, "ts": {ts}, '
            f'"dur": {dur}, "args": {{"device": 0, "stream": 7, "correlation": {i}}}}}'
        )
        events.append(
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, '
            f'"tid": 2, "ts": {ts}, "dur": 1.25, "args": {{"correlation": {i}}}}}'
        )
    path.write_text('{"traceEvents": [\n' + ",\n".join(events) + '\n], "schemaVersion": 1}')


@pytest.mark.parametrize(
    "base",
    ["1712195495519", "5712", "-5712", ""],
    ids=["unix-us (exact clock)", "uptime-us", "negative", "near zero"],
)
def test_times_equal_the_python_clocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base: str
) -> None:
    path = tmp_path / "t.json"
    _trace(path, base)
    monkeypatch.setattr(scan, "ENABLED", False)
    want = read_kineto(path)
    monkeypatch.setattr(scan, "ENABLED", True)
    scan.REFUSED.clear()
    got = read_kineto(path)
    for name, t in want.tables.items():
        assert t.equals(got.tables[name]), name
    assert want.warnings == got.warnings
    # the exact pass was scanned (the first pass, through doubles, is refused: NeedExact)
    assert set(scan.REFUSED) <= {"a time a double does not hold as Python reads it",
                                 "a time coarser than 1 ns"}  # fmt: skip
    starts = got.tables["kernels"].column("start_ns").to_pylist()
    if base == "1712195495519":  # exact: 0.0005 and 0.0025 round to even, 0.00251 up
        assert starts[3] == 1712195495519003000 + 0  # ".0005" → .000 (tie, 0 is even)
        assert starts[5] == 1712195495519005002  # ".0025" → .002 (tie, 2 is even)
        assert starts[6] == 1712195495519006003  # ".00251" → .003
        assert starts[4] == 1712195495519004002  # ".0015" → .002 (tie, 1 is odd)
    assert json.dumps(want.metadata, default=str) == json.dumps(got.metadata, default=str)
