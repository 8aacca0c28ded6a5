"""Fuzz the Kineto JSON scanner (tracediff/parse/kineto/_kineto_scan.c) under ASan and UBSan.

    make fuzz-kineto           # builds the sanitizer copy, runs 120 s
    python tools/fuzz_kineto_scan.py SO_PATH SECONDS [SEED]

Each iteration takes a run of whole elements of a real bundled trace's traceEvents array (a few
bytes to ~3 MB, so pieces of >= 1 MB are split over two threads), damages it (bytes replaced,
JSON-significant bytes inserted, runs deleted or repeated -- half of them at an event key the
scanner reads -- or the end cut off), and scans it as the reader would: with or without the
array's `]` after it, one or two threads, the double or the exact clock, the Python calls' names
dictionary-encoded (they must be msgspec's names). The piece is copied into
a buffer of exactly its size (PYTHONMALLOC=malloc gives it ASan's red zones), so a read past its
end is caught. The scanner must refuse or answer; when it answers, the reader's msgspec decode
must take the same elements, and so must msgspec's plain decode (property (b) of
tests/unit/parse/test_kineto_scan.py). Any invalid read or undefined behaviour stops the run with the
sanitizer's report; a laxer accept stops it with the piece written to a file. Not a test: CI's
sanitizer-free build is what the tests check.
"""

from __future__ import annotations

import ctypes
import gzip
import importlib.util
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
TRACES = [
    ROOT / "tests/data/h200/k_good.json.gz",
    ROOT / "tests/data/kineto/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # Unix-us ts
    ROOT / "tests/data/kineto/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    ROOT / "tests/data/kineto/nccl_data.json.gz",  # record_param_comms, collectives
    ROOT / "tests/data/kineto/sampled_rank-0.json.gz",  # minified
    ROOT / "tests/data/kineto/step_based_trace_2543932.json.gz",  # gpu_user_annotation
    ROOT / "tests/data/kineto/resnet50_num_workers_0.worker0.pt.trace.json.gz",  # 2021 schema
    ROOT / "tests/data/kineto/sglang_Qwen3-8B_prefilldecode.json.gz",  # Python calls: 'd' names
]
INSERTS = [
    b'"', b"\\", b"\\u", b"\\ud800", b"\\udc00", b"\\ud800\\u", b"{", b"}", b"[", b"]", b",",
    b":", b" ", b"\n", b"-", b".", b"e", b"E-", b"0", b"9", b"1e400", b"1e0001", b"1e309",
    b"-9223372036854775808", b"9223372036854775807", b"18446744073709551616", b"null", b"tru",
    b"\x00", b"\x1f", b"\x7f", b"\x80", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff",
    b'"X"', b'"ts":', b'"cat":"kernel",', b'"args":{}', b"[" * 40, b"{" * 33, b"9" * 25,
    b'"stream 7"', b'"ProfilerStep#3"', b'"record_param_comms"', b".5", b"8796093022208.5",
]  # fmt: skip
KEYS = [b'"ph"', b'"cat"', b'"name"', b'"pid"', b'"tid"', b'"ts"', b'"dur"', b'"args"', b'"grid"',
        b'"stream"', b'"device"', b'"correlation"', b'"bytes"', b'"Collective name"']  # fmt: skip
# values put in place of a key's value: the JSON stays valid, the scanner's choices are met
VALUES = [
    b"0", b"-0", b"1.5", b"-1.0625", b"2.5005", b"1e3", b"1E+3", b"9.1e15", b"-9.1e15", b"9.3e15",
    b"8796093022208.5", b"1712195495519689.047", b"9007199254740993", b"-9223372036854775808",
    b"999999999999999999", b"1000000000000000000", b"1e309", b"1e400", b"1e-400", b"null",
    b"true", b'"7"', b'"stream 7"', b'" 7 "', b'"\\u0037"', b'"\\ud83d\\ude00"', b'"caf\xc3\xa9"',
    b'"\\u0000"', b"[]", b"[1, 2, 3]", b"[1.5]", b"[null]", b"[-9223372036854775808]", b"{}",
    b'{"device": 1, "device": 2}', b"[" * 33 + b"]" * 33, b'"X"', b'"B"', b'"kernel"',
    b'"cpu_op"', b'"gpu_memcpy"', b'"cuda_runtime"', b'"ProfilerStep#1"', b'"record_param_comms"',
]  # fmt: skip
TAILS = [b"]}", b'], "traceName": "x"}', b"]", b"\n  ]\n}\n", b"]   "]


def arrays() -> list[tuple[bytes, list[int]]]:
    """Each trace's JSON and the offsets in it where an element starts (`{` after a cut)."""
    from tracediff.parse.kineto import events

    out = []
    for path in TRACES:
        data = gzip.decompress(path.read_bytes())
        m = events._KEY.search(data)
        assert m is not None, path
        starts = [m.end()] + [c.end() - 1 for c in events._CUT.finditer(data, m.end())]
        out.append((data, starts))
    return out


def value_end(piece: bytearray, i: int) -> int:
    """Where the JSON value at i ends (roughly: strings and nesting are followed)."""
    depth, in_str = 0, False
    while i < len(piece):
        c = piece[i]
        if in_str:
            if c == 0x5C:  # backslash
                i += 1
            elif c == 0x22:
                in_str = False
                if depth == 0:
                    return i + 1
        elif c == 0x22:
            in_str = True
        elif c in b"[{":
            depth += 1
        elif c in b"]}":
            if depth == 0:
                return i
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == 0x2C and depth == 0:
            return i
        i += 1
    return i


def swap_value(rng: random.Random, piece: bytearray) -> None:
    """One key's value replaced by another valid JSON value."""
    key = rng.choice(KEYS)
    at = piece.find(key + b":", rng.randrange(len(piece) + 1))
    if at < 0:
        at = piece.find(key + b":")
    if at < 0:
        return
    i = at + len(key) + 1
    while i < len(piece) and piece[i] in b" \t\r\n":
        i += 1
    piece[i : value_end(piece, i)] = rng.choice(VALUES)


def damage(rng: random.Random, piece: bytearray) -> None:
    if rng.random() < 0.5:  # valid JSON still
        for _ in range(rng.choice([1, 1, 2, 4])):
            swap_value(rng, piece)
        return
    for _ in range(rng.choice([1, 1, 2, 3, 8])):
        if rng.random() < 0.5:  # at a key the scanner reads, or its value
            key = rng.choice(KEYS)
            at = piece.find(key, rng.randrange(len(piece) + 1))
            i = at + rng.randrange(len(key) + 6) if at >= 0 else rng.randrange(len(piece) + 1)
        else:
            i = rng.randrange(len(piece) + 1)
        i = min(i, len(piece))
        op = rng.random()
        if op < 0.3 and i < len(piece):
            piece[i] = rng.randrange(256)
        elif op < 0.65:
            piece[i:i] = rng.choice(INSERTS)
        elif op < 0.8:
            del piece[i : i + rng.randint(1, 16)]
        elif op < 0.95:
            j = min(len(piece), i + rng.randint(1, 40))
            piece[j:j] = piece[i:j]  # a key or value twice
        else:
            del piece[i:]


def exact_buffer(data: bytes) -> Any:
    """A buffer of exactly len(data) bytes of its own (a bytes object has a trailing NUL)."""
    return (ctypes.c_char * len(data)).from_buffer_copy(data) if data else bytearray()


def check(native: Any, data: bytes, closing: bool, threads: int, exact: bool) -> str:
    """Scans data as the reader would; the answer's class, or AssertionError for a finding."""
    from tracediff.parse.kineto import events, scan

    buf = exact_buffer(data)
    spec = (scan._CATS, scan._SPEC, scan._CPU_OP)
    got = native.scan(buf, 0, len(data), *spec, closing, threads, exact, scan._CODED)
    if isinstance(got[0], str):
        if not 0 <= got[1] <= len(data):
            raise AssertionError(f"refusal offset {got[1]} outside the piece")
        return got[0]
    parts, close = got
    n = sum(p[0] for p in parts)
    if closing:
        if not (0 <= close < len(data) and data[close] == ord("]")):
            raise AssertionError(f"closing scan's `]` at {close} is not one")
        elements = data[:close]
    else:
        elements = data
    doc = b"[" + elements + b"]"
    decoded = events._KINDS[exact, False].events.decode(doc)  # the reader's decoder: must take it
    if len(decoded) != n:
        raise AssertionError(f"{n} events scanned, msgspec decodes {len(decoded)}")
    # the dictionary-encoded names of the Python calls: their names as msgspec reads them
    names = [
        v
        for _, per_role, _ in parts
        for code, cols in per_role.items()
        if code == scan._CODED
        for v in scan._array(cols[0]).to_pylist()
    ]
    want = [e.name for e in decoded if e.cat == "python_function" and e.ph == "X"]
    if names != want:
        raise AssertionError("dictionary-encoded names differ from msgspec's")
    msgspec.json.decode(doc)  # and msgspec's plain decode
    return "accepted"


def main() -> None:
    so, seconds = sys.argv[1], float(sys.argv[2])
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    spec = importlib.util.spec_from_file_location("_kineto_scan", so)
    assert spec and spec.loader
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    sources = arrays()
    seen: Counter[str] = Counter()
    start, n, reads = time.time(), 0, 0
    while time.time() - start < seconds:
        data, starts = rng.choice(sources)
        k = rng.randrange(len(starts) - 1)
        size = int(10 ** rng.uniform(1.5, 6.5))  # ~30 B .. ~3 MB of elements
        m = k + 1  # (the array's last element is left out: where it ends is not known here)
        while m < len(starts) - 1 and starts[m] - starts[k] < size:
            m += 1
        piece = bytearray(data[starts[k] : starts[m] - 1])  # up to just past an element's `}`
        piece = piece[: piece.rfind(b"}") + 1]
        if rng.random() < 0.9:
            damage(rng, piece)
        for closing in (False, True):
            whole = bytes(piece) + (rng.choice(TAILS) if closing else b"")
            threads = rng.choice([1, 2])
            exact = rng.random() < 0.3
            try:
                seen[check(native, whole, closing, threads, exact)] += 1
            except Exception:
                keep = Path(tempfile.mkdtemp(prefix="fuzz-kineto-")) / "piece.json"
                keep.write_bytes(whole)
                print(f"finding: closing={closing} threads={threads} exact={exact}; piece: {keep}")
                raise
            reads += 1
        n += 1
    accepted = seen["accepted"]
    print(
        f"{n} pieces, {reads} scans, {accepted} accepted and decoded by msgspec, the rest refused"
    )
    print("; ".join(f"{r}: {v}" for r, v in seen.most_common(12)))
    print("no finding")


if __name__ == "__main__":
    main()
