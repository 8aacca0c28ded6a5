"""The native Kineto scanner alone: one call over a whole traceEvents array, one and two threads.

    bench/kineto_scan.py [--trace PATH.json[.gz]] [--repeat 9]

Input: the largest bundled real trace (the ResNet50 sample, 75.7 k events, 35.2 MB of JSON),
held in memory; the array's elements are scanned in one call (`closing`: up to its `]`), so
this is the C pass only -- no file read, no inflate, no tables (bench/kineto_ingest.py measures
the whole reader). Prints the best of --repeat calls per thread count, and, to show how a
two-thread split shares the work, each half of the array scanned alone on one thread.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import time
from pathlib import Path

from tracediff.parse.kineto import scan

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "tests/data/kineto/resnet50_num_workers_0.worker0.1623143566756.pt.trace.json.gz"


def best(
    data: bytes, start: int, stop: int, threads: int, closing: bool, repeat: int
) -> tuple[float, int]:
    t_best, events = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        got = scan._kineto_scan.scan(
            data, start, stop, scan._CATS, scan._SPEC, scan._CPU_OP, closing, threads, False
        )
        t_best = min(t_best, time.perf_counter() - t)
        if isinstance(got[0], str):
            raise SystemExit(f"refused: {got}")
        events = sum(p[0] for p in got[0])
    return t_best, events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    if not scan.ENABLED:
        raise SystemExit("the native scanner is not built (or TRACEDIFF_KINETO_SCAN=0)")
    raw = args.trace.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    end = data.rindex(b"]")
    cut = re.compile(rb"\}\s*,\s*\{").search(data, start + (end - start) // 2)
    assert cut is not None
    rows = [("whole array, 1 thread", start, len(data), 1, True),
            ("whole array, 2 threads", start, len(data), 2, True),
            ("first half, 1 thread", start, cut.start() + 1, 1, False),
            ("second half, 1 thread", cut.end() - 1, end, 1, False)]  # fmt: skip
    print(f"{args.trace.name}: {len(data) / 1e6:.1f} MB of JSON; load {os.getloadavg()[0]:.1f}")
    print(f"{'what':26s} {'MB':>6s} {'events':>8s} {'ms':>7s} {'GB/s':>6s} {'ns/event':>9s}")
    for label, a, b, threads, closing in rows:
        t, n = best(data, a, b, threads, closing, args.repeat)
        mb = (b - a) / 1e6
        print(
            f"{label:26s} {mb:6.1f} {n:8,d} {t * 1e3:7.1f} {mb / 1e3 / t:6.2f} {t / n * 1e9:9.0f}"
        )


if __name__ == "__main__":
    main()
