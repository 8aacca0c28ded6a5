"""The SQLite page decoder (tracediff/parse/nsys/_sqlite_pages.c via sqlite_pages.py) against SQLite.

Oracle: SQLite itself (stdlib sqlite3) on the same file. Inputs: every SQLite report bundled in
tests/data (real nsys exports from 2.9 to 3.x schemas), hypothesis-made tables covering every
integer width, reals, NULLs, rowid aliases and columns added after rows were written, and
damaged files (the decoder must refuse or return the right number of rows, never crash).
"""

from __future__ import annotations

import shutil
import sqlite3
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracediff.parse.nsys import pages as sqlite_pages
from tracediff.parse.nsys.pages import PageReader
from tracediff.parse.nsys.reader import read_nsys
from tracediff.parse.nsys.schema import KERNEL, RUNTIME
from tracediff.parse.nsys.source import SqliteSource

DATA = Path(__file__).resolve().parent.parent.parent / "data"
REPORTS = sorted(DATA.rglob("*.sqlite"))
_NUMERIC = {"INTEGER": "i", "INT": "i", "REAL": "f"}


def test_native_module_is_built() -> None:
    # `pip install` compiles it; without it every read silently takes the 5x slower path
    assert sqlite_pages.AVAILABLE


def _tables(con: sqlite3.Connection) -> list[tuple[str, int, list[tuple[int, str, str]], int]]:
    """(name, root page, numeric columns as (field, name, kind), rowid-alias field)."""
    out = []
    for name, root in con.execute("SELECT name, rootpage FROM sqlite_master WHERE type='table'"):
        info = con.execute(f'PRAGMA table_info("{name}")').fetchall()
        cols = [(r[0], r[1], _NUMERIC[r[2].upper()]) for r in info if r[2].upper() in _NUMERIC]
        pk = [r for r in info if r[5]]
        ipk = pk[0][0] if len(pk) == 1 and pk[0][2].upper() == "INTEGER" else -1
        if cols:
            out.append((name, root, cols, ipk))
    return out


def _expected(con: sqlite3.Connection, table: str, cols: list[tuple[int, str, str]]) -> list:
    q = ", ".join(f'"{c[1]}"' for c in cols)
    rows = con.execute(f'SELECT {q} FROM "{table}"').fetchall()
    if not rows:
        return [[] for _ in cols]
    return [
        [None if v is None else float(v) if kind == "f" else v for v in col]
        for col, (_, _, kind) in zip(zip(*rows, strict=True), cols, strict=True)
    ]


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.relative_to(DATA)))
def test_every_numeric_column_of_every_report_equals_sqlite(path: Path) -> None:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    reader = PageReader(path)
    decoded = set()
    try:
        for name, root, cols, ipk in _tables(con):
            got = reader.read(root, [c[0] for c in cols], [c[2] for c in cols], ipk, workers=2)
            if got is None:  # refused: some record is not the plain case (checked below)
                continue
            decoded.add(name)
            assert [a.to_pylist() for a in got] == _expected(con, name, cols), name
    finally:
        reader.close()
        con.close()
    # the tables the speed is for are decoded, not refused
    assert {KERNEL, RUNTIME} & set(n for n, *_ in _tables(sqlite3.connect(path))) <= decoded


def test_whole_parse_is_identical_with_and_without_the_page_decoder() -> None:
    for path in (
        DATA / "h200" / "g_good.sqlite",
        DATA / "nsys" / "nsys-ai" / "mfu_2gpu_after.sqlite",
        DATA / "nsys" / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    ):
        runs = []
        for pages in (True, False):
            src = SqliteSource(path, workers=2, pages=pages)
            try:
                runs.append(read_nsys(src, path, "nsys-sqlite"))
            finally:
                src.close()
        with_pages, without = runs
        assert with_pages.tables.keys() == without.tables.keys()
        for name, table in without.tables.items():
            assert with_pages.tables[name].equals(table), (path.name, name)


_INT_EDGES = [
    0,
    1,
    -1,
    127,
    -128,
    128,
    32767,
    -32768,
    2**23 - 1,
    -(2**23),
    2**31 - 1,
    -(2**31),
    2**47 - 1,
    -(2**47),
    2**63 - 1,
    -(2**63),
]
_ints = st.one_of(st.sampled_from(_INT_EDGES), st.integers(-(2**63), 2**63 - 1), st.none())
_reals = st.one_of(st.floats(allow_nan=False), st.integers(-(2**53), 2**53), st.none())


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(st.tuples(_ints, _reals, _ints, st.text(max_size=30) | st.none()), max_size=600),
    added=st.lists(_ints, max_size=50),
    workers=st.sampled_from([1, 2, 4]),
)
def test_generated_tables_equal_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list, added: list, workers: int
) -> None:
    monkeypatch.setattr(sqlite_pages, "_SPLIT_ROWS", 64)  # several parts from a few hundred rows
    path = tmp_path / "t.sqlite"
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size=512")  # many leaf pages and interior levels from few rows
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, r REAL, b INTEGER, s TEXT)")
    con.executemany("INSERT INTO t (a, r, b, s) VALUES (?, ?, ?, ?)", rows)
    con.execute("ALTER TABLE t ADD COLUMN late INTEGER")  # older records lack this field
    con.executemany("INSERT INTO t (a, late) VALUES (1, ?)", [(v,) for v in added])
    con.commit()
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='t'").fetchone()
    cols = [(0, "id", "i"), (1, "a", "i"), (2, "r", "f"), (3, "b", "i"), (4, "s", "s"),
            (5, "late", "i")]  # fmt: skip
    reader = PageReader(path)
    try:
        got = reader.read(root, [c[0] for c in cols], [c[2] for c in cols], 0, workers)
        assert got is not None
        assert [a.to_pylist() for a in got] == _expected(con, "t", cols)
        # text asked for as a number, or numbers as text, are refused, not misread
        refused = reader.read(root, [4], ["i"], 0, workers) is None
        assert refused == any(r[3] is not None for r in rows)
        refused = reader.read(root, [1], ["s"], 0, workers) is None
        assert refused == (any(r[0] is not None for r in rows) or bool(added))
        # int32 output: exact where every value fits, refused where one does not
        got32 = reader.read(root, [3], ["w"], 0, workers)
        fits = all(r[2] is None or -(2**31) <= r[2] < 2**31 for r in rows)
        assert (got32 is not None) == fits
        if got32 is not None:
            assert got32[0].type == pa.int32()
            assert got32[0].to_pylist() == _expected(con, "t", [(3, "b", "i")])[0]
    finally:
        reader.close()
        con.close()


def _small_table(path: Path, n: int = 3000) -> int:
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size=1024")
    con.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, -i * 7) for i in range(n)])
    con.commit()
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='t'").fetchone()
    con.close()
    return int(root)


def test_refuses_what_it_does_not_decode(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE big (a INTEGER, blob BLOB)")  # a record spilling to overflow pages
    con.execute("INSERT INTO big VALUES (1, zeroblob(10000))")
    con.execute("CREATE TABLE mixed (a INTEGER)")  # SQLite keeps text in an INTEGER column
    con.executemany("INSERT INTO mixed VALUES (?)", [(1,), ("x",)])
    con.execute("CREATE TABLE realint (a INTEGER)")
    con.execute("INSERT INTO realint VALUES (1.5)")
    con.execute("CREATE TABLE wr (a INTEGER PRIMARY KEY, b INTEGER) WITHOUT ROWID")
    con.execute("INSERT INTO wr VALUES (1, 2)")
    # a generated column has no record field: the fields after it shift
    con.execute("CREATE TABLE gen (a INTEGER, g INTEGER AS (a * 10) VIRTUAL, b INTEGER)")
    con.execute("INSERT INTO gen (a, b) VALUES (1, 2)")
    con.execute("CREATE TABLE dflt (a INTEGER)")
    con.execute("INSERT INTO dflt VALUES (1)")
    con.execute("ALTER TABLE dflt ADD COLUMN b INTEGER DEFAULT 7")  # not stored in old rows
    con.commit()
    roots = dict(con.execute("SELECT name, rootpage FROM sqlite_master WHERE type='table'"))
    con.close()
    reader = PageReader(path)
    try:
        assert reader.read(roots["big"], [0], ["i"]) is None
        assert reader.read(roots["mixed"], [0], ["i"]) is None
        assert reader.read(roots["realint"], [0], ["i"]) is None
        assert reader.read(roots["realint"], [0], ["f"])[0].to_pylist() == [1.5]
        assert reader.read(roots["wr"], [1], ["i"]) is None  # index b-tree pages
        assert reader.read(10**6, [0], ["i"]) is None  # no such page
    finally:
        reader.close()
    # and SqliteSource reads those tables through SQLite instead
    src = SqliteSource(path, workers=2)
    import polars as pl

    from tracediff.parse.nsys.source import Read

    try:
        (df,) = src.read([Read("realint", {"a": pl.Float64()})])
        assert df["a"].to_list() == [1.5]
        (df,) = src.read([Read("gen", {"a": pl.Int64(), "b": pl.Int64()})])
        assert df.rows() == [(1, 2)]
        (df,) = src.read([Read("dflt", {"a": pl.Int64(), "b": pl.Int64()})])
        assert df.rows() == [(1, 7)]
        # these went through SQLite: small tables through the stdlib, ADBC not even imported
        assert not src._adbc_cons and src._adbc_module is None
        (df,) = src.read([Read("big", {"a": pl.Int64()})])
        assert df.rows() == [(1,)]
    finally:
        src.close()
    one = SqliteSource(path, workers=1)  # one worker plans no rowid ranges: a WITHOUT ROWID
    try:  # table is read (through ADBC), not taken for a corrupt file
        (df,) = one.read([Read("wr", {"a": pl.Int64(), "b": pl.Int64()})])
        assert df.rows() == [(1, 2)]
    finally:
        one.close()
    # several workers weigh every table by its rowid range to plan the reads: a WITHOUT ROWID
    # table has none, and is read whole, alone or beside others (was: "SQLite file is corrupt")
    two = SqliteSource(path, workers=2)
    try:
        (df,) = two.read([Read("wr", {"a": pl.Int64(), "b": pl.Int64()})])
        assert df.rows() == [(1, 2)]
        wr, big = two.read([Read("wr", {"a": pl.Int64()}), Read("big", {"a": pl.Int64()})])
        assert wr.rows() == [(1,)] and big.rows() == [(1,)]
    finally:
        two.close()


def test_a_cycle_in_the_tree_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    root = _small_table(path)
    data = bytearray(path.read_bytes())
    page = 1024
    hdr = (root - 1) * page
    assert data[hdr] == 0x05  # an interior page: 3000 rows do not fit in one 1 KB page
    data[hdr + 8 : hdr + 12] = struct.pack(">I", root)  # right-most child: itself
    bad = tmp_path / "cycle.sqlite"
    bad.write_bytes(bytes(data))
    reader = PageReader(bad)
    try:
        assert reader.read(root, [0, 1], ["i", "i"]) is None
    finally:
        reader.close()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), min_size=1, max_size=8)
)
def test_damaged_pages_never_crash(tmp_path: Path, flips: list[tuple[int, int]]) -> None:
    good = tmp_path / "good.sqlite"
    if not good.exists():
        _small_table(good)
    con = sqlite3.connect(good)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='t'").fetchone()
    con.close()
    data = bytearray(good.read_bytes())
    for at, value in flips:  # bytes past the 100-byte file header: pages, pointers, records
        data[100 + at % (len(data) - 100)] = value
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(bytes(data))
    reader = PageReader(bad)
    try:
        for kinds in (["i", "i"], ["s", "f"]):
            got = reader.read(root, [0, 1], kinds, -1, 2)
            assert got is None or len(got[0]) == len(got[1])
    finally:
        reader.close()


def test_source_reads_the_big_tables_from_pages(tmp_path: Path) -> None:
    """The fast path is taken for the kernel and API tables of a real report: same frames as
    SQLite, and none of ADBC's connections opened for them."""
    path = tmp_path / "r.sqlite"
    shutil.copy(DATA / "h200" / "g_good.sqlite", path)
    from tracediff.parse.nsys.schema import (
        KERNEL_COLS,
        MEMCPY,
        MEMCPY_COLS,
        MEMSET,
        MEMSET_COLS,
        RUNTIME_COLS,
        SYNC,
        SYNC_COLS,
    )
    from tracediff.parse.nsys.source import Read

    reads = [
        Read(KERNEL, KERNEL_COLS),
        Read(RUNTIME, RUNTIME_COLS),
        Read(MEMCPY, MEMCPY_COLS),
        Read(MEMSET, MEMSET_COLS),
        Read(SYNC, SYNC_COLS),
    ]
    fast, slow = SqliteSource(path, workers=2), SqliteSource(path, workers=2, pages=False)
    try:
        a, b = fast.read(reads), slow.read(reads)
        assert fast._adbc_cons == [] and slow._adbc_cons != []
        for x, y in zip(a, b, strict=True):
            assert x.height > 0 and x.equals(y) and x.schema == y.schema
    finally:
        fast.close()
        slow.close()


def test_text_with_invalid_utf8_reads_as_through_sqlite(tmp_path: Path) -> None:
    """SQLite TEXT may hold any bytes: both paths give U+FFFD for the bad ones, and a
    `where_in` read filters the same rows."""
    import polars as pl

    from tracediff.parse.nsys.source import Read

    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE n (a INTEGER, s TEXT)")
    con.executemany("INSERT INTO n VALUES (?, ?)", [(i, f"range {i} \u00e9") for i in range(300)])
    con.execute("INSERT INTO n VALUES (300, CAST(x'6f6bff' AS TEXT))")
    con.commit()
    con.close()
    read = Read("n", {"a": pl.Int64(), "s": pl.String()}, ("a", (3, 300)))
    frames = []
    for pages in (True, False):
        src = SqliteSource(path, workers=2, pages=pages)
        try:
            frames.append(src.read([read])[0])
            assert (src._adbc_cons == []) == pages
        finally:
            src.close()
    assert frames[0].equals(frames[1])
    assert frames[0].rows() == [(3, "range 3 \u00e9"), (300, "ok\ufffd")]


def _varint9(v: int) -> bytes:
    """SQLite's 9-byte varint: 7 bits in each of 8 bytes, then 8 in the last."""
    return bytes(0x80 | ((v >> (8 + 7 * (7 - i))) & 0x7F) for i in range(8)) + bytes([v & 0xFF])


def test_field_sizes_that_wrap_around_are_refused(tmp_path: Path) -> None:
    """A crafted record whose unwanted fields' sizes add up past 2**64 to just below the body
    must be refused, not read from before the record (a sum that wrapped used to pass)."""
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size=4096")
    con.execute("CREATE TABLE t (b1 BLOB, b2 BLOB, b3 BLOB, d INTEGER)")
    con.execute("INSERT INTO t VALUES (x'', x'', x'', 5)")
    con.commit()
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name='t'").fetchone()
    con.close()
    data = bytearray(path.read_bytes())
    base = (root - 1) * 4096
    assert data[base] == 0x0D and struct.unpack(">H", data[base + 3 : base + 5]) == (1,)
    # blob sizes 2**63-8, 2**63-8, 12: 2**64-4 in all, so the int64 field "starts" 4 bytes
    # before the 8-byte body
    st = 12 + 2 * (2**63 - 8)
    header = bytes([21]) + _varint9(st) + _varint9(st) + bytes([12 + 2 * 12, 6])
    payload = header + struct.pack(">q", 42)
    cell = bytes([len(payload), 1]) + payload
    at = 200  # unallocated space of the page, after the one-entry cell pointer array
    data[base + at : base + at + len(cell)] = cell
    data[base + 8 : base + 10] = struct.pack(">H", at)
    bad = tmp_path / "wrap.sqlite"
    bad.write_bytes(bytes(data))
    reader = PageReader(bad)
    try:
        assert reader.read(root, [3], ["i"]) is None
    finally:
        reader.close()
