"""Fuzz the SQLite page decoder (tracediff/parse/nsys/_sqlite_pages.c) under ASan and UBSan.

    make fuzz-pages            # builds the sanitizer copy, runs 120 s
    python tools/fuzz_sqlite_pages.py SO_PATH SECONDS [SEED]

Each iteration damages random bytes of a real bundled report (half of them in one table's
root page, so the decoder meets the damage rather than refusing at once), then asks for random
fields of that table as every kind of column. The decoder must refuse or answer; any invalid
read or undefined behaviour stops the run with the sanitizer's report. Not a test: CI's
sanitizer-free build is what the tests check.
"""

from __future__ import annotations

import importlib.util
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORTS = [
    ROOT / "tests/data/h200/g_good.sqlite",
    ROOT / "tests/data/nsys/pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
]


def main() -> None:
    so, seconds = sys.argv[1], float(sys.argv[2])
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    spec = importlib.util.spec_from_file_location("_sqlite_pages", so)
    assert spec and spec.loader
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    from tracediff.parse.nsys import pages as sqlite_pages

    sqlite_pages._native = native
    roots = {}
    for src in REPORTS:
        con = sqlite3.connect(src)
        roots[src] = [r for (r,) in con.execute("SELECT rootpage FROM sqlite_master")]
        con.close()
    out = Path(tempfile.mkdtemp(prefix="fuzz-pages-")) / "damaged.sqlite"
    start, n, answered = time.time(), 0, 0
    while time.time() - start < seconds:
        src = rng.choice(REPORTS)
        data = bytearray(src.read_bytes())
        page = int.from_bytes(data[16:18], "big") or 65536
        root = rng.choice([r for r in roots[src] if r])
        for _ in range(rng.randint(1, 40)):
            pg = root if rng.random() < 0.5 else rng.randrange(1, len(data) // page)
            data[(pg - 1) * page + rng.randrange(page)] = rng.randrange(256)
        out.write_bytes(bytes(data))
        reader = sqlite_pages.PageReader(out)
        for _ in range(4):
            fields = rng.sample(range(12), rng.randint(1, 6))
            kinds = [rng.choice("iwfs") for _ in fields]
            got = reader.read(root, fields, kinds, rng.choice([-1, 0]), rng.choice([1, 2]))
            answered += got is not None
        reader.close()
        n += 1
    out.unlink()
    out.parent.rmdir()
    print(f"{n} damaged files, {4 * n} reads, {answered} answered, the rest refused; no finding")


if __name__ == "__main__":
    main()
