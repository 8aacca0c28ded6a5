"""Hostile-input corpus (issue #8), generated deterministically from the real inputs.

Every file is derived from a real capture: the H200 nsys export and Kineto trace under
tests/data/h200/ and the bundled run files under samples/. Nothing is hand-written except the few
cases that are about the shape of a file rather than its content (empty file, random bytes, JSON
without traceEvents). Same inputs and library versions give byte-identical output.

The corpus is built at test time into a session temp folder (about 1 s on 2 cores, ~40 MB, most
of it SQLite copies), so nothing generated is committed. To look at it by hand:

    .venv/bin/python -m tests.support.make_corpus /tmp/hostile
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import sqlite3
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "tests" / "data" / "h200"
SAMPLES = ROOT / "samples"
NSYS = H200 / "g_good.sqlite"  # the smaller of the real H200 exports (909 kB, 1764 kernels)
KINETO = H200 / "k_good.json.gz"  # real PyTorch profiler trace (2940 kernels)
RUN = SAMPLES / "g_good.arrow"  # bundled run file (parsed from g_good.sqlite)
RUN_BAD = SAMPLES / "g_bad.arrow"

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"

# Tables an nsys export may lack (older nsys, -t without cuda, sliced or partial exports).
OPTIONAL_TABLES = (
    KERNEL,
    RUNTIME,
    NVTX,
    "StringIds",
    "TARGET_INFO_GPU",
    "META_DATA_EXPORT",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "TARGET_INFO_SESSION_START_TIME",
    "ENUM_CUDA_MEMCPY_OPER",
)

HUGE_TEXT_BYTES = 16 << 20


def _rand(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


# ---------------------------------------------------------------- generic files


def _generic(out: Path) -> None:
    (out / "empty.sqlite").write_bytes(b"")
    (out / "empty.json").write_bytes(b"")
    (out / "random.bin").write_bytes(_rand(1, 4096))
    (out / "random.json.gz").write_bytes(_rand(2, 4096))
    (out / "random.json").write_bytes(_rand(3, 4096))
    (out / "random_with_sqlite_magic.sqlite").write_bytes(b"SQLite format 3\x00" + _rand(4, 8192))
    (out / "random_with_run_magic.arrow").write_bytes(b"TRACEDIFF-RUN\x00\x00\x00" + _rand(5, 4096))
    (out / "a_directory").mkdir()
    (out / "a_file.txt").write_text("not a folder\n")


# ---------------------------------------------------------------- nsys SQLite


def _sqlite_copy(out: Path, name: str, sql: str | Callable[[sqlite3.Connection], None]) -> Path:
    """Copy the real export and change it with `sql`; VACUUM so the file is tidy and stable."""
    dst = out / name
    shutil.copyfile(NSYS, dst)  # copyfile: the source is read-only, the copy must not be
    con = sqlite3.connect(dst)
    try:
        if callable(sql):
            sql(con)
        else:
            con.executescript(sql)
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    return dst


def _recreate_nullable(con: sqlite3.Connection, table: str) -> None:
    """Re-create `table` without its NOT NULL constraints (as a Parquet export may hold nulls)."""
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    decl = ", ".join(f'"{c}"' for c in cols)
    con.execute(f'ALTER TABLE "{table}" RENAME TO "_old"')
    con.execute(f'CREATE TABLE "{table}" ({decl})')
    con.execute(f'INSERT INTO "{table}" SELECT {decl} FROM "_old" ORDER BY rowid')
    con.execute('DROP TABLE "_old"')


def _nsys(out: Path) -> None:
    data = NSYS.read_bytes()
    page = int.from_bytes(data[16:18], "big")
    for name, cut in [
        ("header", 50),
        ("page1", page),
        ("half", len(data) // 2),
        ("last_page", len(data) - page),
    ]:
        (out / f"nsys_truncated_{name}.sqlite").write_bytes(data[:cut])

    con = sqlite3.connect(out / "sqlite_not_nsys.sqlite")
    con.execute("CREATE TABLE measurements (t INTEGER, value REAL)")
    con.executemany("INSERT INTO measurements VALUES (?, ?)", [(i, i / 3) for i in range(100)])
    con.commit()
    con.close()

    for table in OPTIONAL_TABLES:
        _sqlite_copy(out, f"nsys_no_{table}.sqlite", f'DROP TABLE "{table}"')

    # corrupt the kernel table's root page (the file keeps its size and header)
    dst = _sqlite_copy(out, "nsys_corrupt_kernel_page.sqlite", "")
    con = sqlite3.connect(dst)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (KERNEL,)).fetchone()
    con.close()
    buf = bytearray(dst.read_bytes())
    buf[(root - 1) * page : root * page] = _rand(6, page)
    dst.write_bytes(bytes(buf))

    # 1 kernel in 10 ends before it starts (clock glitch / corrupt record)
    _sqlite_copy(
        out,
        "nsys_kernel_end_before_start.sqlite",
        f'UPDATE "{KERNEL}" SET "end" = start - 1000 WHERE rowid % 10 = 0',
    )
    # kernel names: ids that StringIds does not hold, and nulls
    _sqlite_copy(
        out,
        "nsys_kernel_dangling_name.sqlite",
        f'UPDATE "{KERNEL}" SET demangledName = 99999999, shortName = 99999998 WHERE rowid % 7 = 0',
    )

    def null_names(con: sqlite3.Connection) -> None:
        _recreate_nullable(con, KERNEL)
        con.execute(
            f'UPDATE "{KERNEL}" SET demangledName = NULL, shortName = NULL WHERE rowid % 7 = 0'
        )

    _sqlite_copy(out, "nsys_kernel_null_name.sqlite", null_names)

    # the last `cycle` range never closed (capture stopped inside it): end is NULL
    _sqlite_copy(
        out,
        "nsys_nvtx_unclosed.sqlite",
        f'UPDATE "{NVTX}" SET "end" = NULL WHERE text = \'cycle\' AND start = '
        f"(SELECT max(start) FROM \"{NVTX}\" WHERE text = 'cycle')",
    )

    # NVTX pops without pushes: nsys pairs push/pop itself and drops a stray pop, so the trace of
    # one in an export is a push_pop range on a thread with no matching open. We model the two
    # shapes an exporter can leave: a range ending before it starts, and an end on a range with
    # no start on that thread (a pop row on a thread that never pushed: endGlobalTid only).
    def stray_pops(con: sqlite3.Connection) -> None:
        con.execute(
            f'INSERT INTO "{NVTX}" (start, "end", eventType, text, globalTid, endGlobalTid) '
            f'SELECT "end", start, 59, \'stray_pop\', globalTid, globalTid FROM "{NVTX}" '
            "WHERE text = 'draft' LIMIT 3"
        )
        con.execute(
            f'INSERT INTO "{NVTX}" (start, "end", eventType, text, globalTid, endGlobalTid) '
            f'SELECT "end", "end", 59, \'pop_only\', globalTid + 7, globalTid + 7 FROM "{NVTX}" '
            "WHERE text = 'verify' LIMIT 3"
        )

    _sqlite_copy(out, "nsys_nvtx_stray_pops.sqlite", stray_pops)

    # a 16 MB NVTX mark text (someone logged a tensor)
    def huge(con: sqlite3.Connection) -> None:
        tid, t = con.execute(
            f"SELECT globalTid, start FROM \"{NVTX}\" WHERE text = 'cycle' LIMIT 1"
        ).fetchone()
        con.execute(
            f'INSERT INTO "{NVTX}" (start, "end", eventType, text, globalTid) '
            "VALUES (?, NULL, 34, ?, ?)",
            (t + 1, "x" * HUGE_TEXT_BYTES, tid),
        )

    _sqlite_copy(out, "nsys_nvtx_huge_text.sqlite", huge)

    # names that are not UTF-8 (TEXT columns hold any bytes): the `draft` ranges and one kernel name
    def latin1(con: sqlite3.Connection) -> None:
        con.execute(
            f"UPDATE \"{NVTX}\" SET text = CAST(X'647261667420e9' AS TEXT) WHERE text = 'draft'"
        )
        (sid,) = con.execute(f'SELECT demangledName FROM "{KERNEL}" LIMIT 1').fetchone()
        con.execute(
            "UPDATE StringIds SET value = CAST(X'6b65726e656c5fff' AS TEXT) WHERE id = ?", (sid,)
        )

    _sqlite_copy(out, "nsys_non_utf8.sqlite", latin1)

    # every CUDA API call recorded twice (same correlation id): a kernel must still appear once
    _sqlite_copy(
        out,
        "nsys_duplicate_correlation.sqlite",
        f'INSERT INTO "{RUNTIME}" SELECT start + 1, "end" + 1, eventClass, globalTid, '
        f'correlationId, nameId, returnValue, callchainId FROM "{RUNTIME}"',
    )

    # `cycle` ranges renamed `step`: the two runs name their cycles differently
    _sqlite_copy(
        out,
        "nsys_cycle_renamed.sqlite",
        f"UPDATE \"{NVTX}\" SET text = 'step' WHERE text = 'cycle'",
    )

    _nsys_containers(out)

    # issue 17, damage that reads as data: every kernel twice, all 0 ns, all / some negative,
    # one kernel 11 days long, one copy 3 days long
    day = 86400 * 10**9
    for name, sql in [
        ("kernels_duplicated", f'INSERT INTO "{KERNEL}" SELECT * FROM "{KERNEL}"'),
        ("kernels_zero", f'UPDATE "{KERNEL}" SET "end" = start'),
        ("kernels_all_negative", f'UPDATE "{KERNEL}" SET "end" = start - 5000'),
        ("kernel_11_days", f'UPDATE "{KERNEL}" SET "end" = start + {11 * day} WHERE rowid = 100'),
        (
            "memcpy_3_days",
            f'UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET "end" = start + {3 * day} WHERE rowid = 7',
        ),
    ]:
        _sqlite_copy(out, f"nsys_{name}.sqlite", sql)

    # a value of the wrong type in an INTEGER column (SQLite does not enforce column types)
    _sqlite_copy(
        out, "nsys_wrong_type.sqlite", f"UPDATE \"{KERNEL}\" SET start = 'soon' WHERE rowid = 5"
    )


def _nsys_containers(out: Path) -> None:
    """Issue 17: exports whose container is not what it seems. A WAL-mode export whose last
    commit (every second kernel deleted) is still in its `-wal` file, the same with a damaged
    log, an SQLite holding only StringIds, and a .nsys-rep renamed .sqlite. (A WAL's salts are
    random: these two files differ from build to build, their content does not.)"""
    src = out / ".wal_source.sqlite"
    shutil.copyfile(NSYS, src)
    con = sqlite3.connect(src)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA wal_autocheckpoint=0")
        con.execute(f'DELETE FROM "{KERNEL}" WHERE rowid % 2 = 0')
        con.commit()
        for name in ("nsys_wal", "nsys_wal_damaged"):  # copied while the log is unapplied
            shutil.copyfile(src, out / f"{name}.sqlite")
        shutil.copyfile(src.with_name(src.name + "-wal"), out / "nsys_wal.sqlite-wal")
        size = src.with_name(src.name + "-wal").stat().st_size
        (out / "nsys_wal_damaged.sqlite-wal").write_bytes(_rand(8, size))
    finally:
        con.close()
    for p in out.glob(".wal_source.sqlite*"):
        p.unlink()

    # a writer stopped inside a transaction: its hot journal beside an export whose pages hold
    # half the change (a tiny page cache makes SQLite write them before the commit)
    src = out / ".journal_source.sqlite"
    shutil.copyfile(NSYS, src)
    con = sqlite3.connect(src, isolation_level=None)
    try:
        con.execute("PRAGMA cache_size=1")
        con.execute("BEGIN")
        con.execute(f'DELETE FROM "{KERNEL}" WHERE rowid % 2 = 0')
        con.execute(f'UPDATE "{RUNTIME}" SET start = start + 1')
        shutil.copyfile(src, out / "nsys_hot_journal.sqlite")
        shutil.copyfile(
            src.with_name(src.name + "-journal"), out / "nsys_hot_journal.sqlite-journal"
        )
        con.execute("ROLLBACK")
    finally:
        con.close()
    for p in out.glob(".journal_source.sqlite*"):
        p.unlink()

    def strings_only(con: sqlite3.Connection) -> None:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            if t != "StringIds":
                con.execute(f'DROP TABLE "{t}"')

    _sqlite_copy(out, "nsys_strings_only.sqlite", strings_only)
    shutil.copyfile(H200 / "g_good.nsys-rep", out / "nsys_rep_renamed.sqlite")


# ---------------------------------------------------------------- Kineto


def _kineto(out: Path) -> None:
    gz = KINETO.read_bytes()
    raw = gzip.decompress(gz)
    for name, cut in [("10", 10), ("half", len(gz) // 2), ("trailer", len(gz) - 4)]:
        (out / f"kineto_truncated_gz_{name}.json.gz").write_bytes(gz[:cut])
    bad_crc = bytearray(gz)
    bad_crc[-8] ^= 0xFF
    (out / "kineto_bad_crc.json.gz").write_bytes(bytes(bad_crc))
    for name, cut in [("1", 1), ("half", len(raw) // 2), ("last_byte", len(raw) - 1)]:
        (out / f"kineto_truncated_json_{name}.json").write_bytes(raw[:cut])

    doc = json.loads(raw)
    events = doc["traceEvents"]

    def write(name: str, d: object) -> None:
        (out / name).write_bytes(orjson.dumps(d))

    write("kineto_no_traceEvents.json", {k: v for k, v in doc.items() if k != "traceEvents"})
    write("kineto_top_level_array.json", events)
    write("kineto_empty_events.json", {**doc, "traceEvents": []})
    write(
        "kineto_cpu_only.json",
        {
            **doc,
            "traceEvents": [
                e
                for e in events
                if e.get("cat") != "kernel" and not str(e.get("cat", "")).startswith("gpu_")
            ],
        },
    )

    # the first 10 kernels lose their `dur`
    nodur, n = [], 0
    for e in events:
        if e.get("cat") == "kernel" and n < 10:
            e = {k: v for k, v in e.items() if k != "dur"}
            n += 1
        nodur.append(e)
    write("kineto_kernels_without_dur.json", {**doc, "traceEvents": nodur})

    # every runtime call twice with the same correlation id (two tracers attached)
    dup = events + [{**e, "ts": e["ts"] + 0.5} for e in events if e.get("cat") == "cuda_runtime"]
    write("kineto_duplicate_correlation.json", {**doc, "traceEvents": dup})

    # issue 17: every kernel event twice; every kernel 0 us; one kernel 2 days long
    write(
        "kineto_kernels_duplicated.json",
        {**doc, "traceEvents": events + [e for e in events if e.get("cat") == "kernel"]},
    )
    zero = [{**e, "dur": 0} if e.get("cat") == "kernel" else e for e in events]
    write("kineto_kernels_zero.json", {**doc, "traceEvents": zero})
    long = [dict(e) for e in events]
    next(e for e in long if e.get("cat") == "kernel")["dur"] = 2 * 86400 * 10**6
    write("kineto_kernel_2_days.json", {**doc, "traceEvents": long})

    # a CUPTI range-profiler trace: a metric range per kernel, no kernel or copy activity
    ranged = [
        {**e, "cat": "cuda_profiler_range"} if e.get("cat") == "kernel" else e
        for e in events
        if e.get("cat") not in ("gpu_memcpy", "gpu_memset")
    ]
    write("kineto_range_profiler.json", {**doc, "traceEvents": ranged})

    # a kernel's ts as a string, and absurd magnitudes
    strts = [dict(e) for e in events]
    next(e for e in strts if e.get("cat") == "kernel")["ts"] = "5087246739840.247"
    write("kineto_ts_string.json", {**doc, "traceEvents": strts})
    huge = [dict(e) for e in events]
    next(e for e in huge if e.get("cat") == "kernel")["ts"] = 1e300
    write("kineto_ts_1e300.json", {**doc, "traceEvents": huge})

    # a kernel name with a byte that is not UTF-8 (JSON must be UTF-8)
    k0 = next(e for e in events if e.get("cat") == "kernel")["name"].encode()
    (out / "kineto_non_utf8.json").write_bytes(raw.replace(k0, k0[:-1] + b"\xff", 1))
    (out / "kineto_bom.json").write_bytes(b"\xef\xbb\xbf" + raw)
    # deeply nested JSON (stack exhaustion in a recursive decoder)
    (out / "kineto_deep_nesting.json").write_bytes(
        b'{"traceEvents": [], "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    )

    # gzip bomb: 8 GiB of spaces inside valid JSON: 128 gzip members of 64 MiB (8 MB on disk)
    member = gzip.compress(b" " * (64 << 20), compresslevel=9, mtime=0)
    with open(out / "kineto_gzip_bomb.json.gz", "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": [', mtime=0))
        for _ in range(128):
            f.write(member)
        f.write(gzip.compress(b"]}", mtime=0))


# ---------------------------------------------------------------- run files


def _footer(data: bytes) -> tuple[int, dict[str, object]]:
    (flen,) = struct.unpack("<Q", data[-16:-8])
    start = len(data) - 16 - flen
    return start, json.loads(data[start : start + flen])


def with_footer(data: bytes, footer: dict[str, object] | bytes) -> bytes:
    """The same run file with another footer, written the way runfile.py writes one."""
    start, _ = _footer(data)
    blob = footer if isinstance(footer, bytes) else orjson.dumps(footer)
    return data[:start] + blob + struct.pack("<Q", len(blob)) + b"TDRUNEND"


def _runfiles(out: Path) -> None:
    data = RUN.read_bytes()
    for name, cut in [
        ("8", 8),
        ("magic", 16),
        ("100", 100),
        ("half", len(data) // 2),
        ("end_marker", len(data) - 1),
        ("length", len(data) - 12),
    ]:
        (out / f"run_truncated_{name}.arrow").write_bytes(data[:cut])
    _, footer = _footer(data)
    (out / "run_future_version.arrow").write_bytes(
        with_footer(data, {**footer, "format_version": 99})
    )
    (out / "run_footer_garbage.arrow").write_bytes(
        with_footer(data, b"\x00{not json" + _rand(7, 64))
    )
    tables = dict(footer["tables"])  # type: ignore[arg-type]
    tables["kernels"] = [16, len(data) * 2]
    (out / "run_table_outside.arrow").write_bytes(with_footer(data, {**footer, "tables": tables}))
    (out / "run_metadata_not_object.arrow").write_bytes(
        with_footer(data, {**footer, "metadata": 5})
    )
    (out / "run_warnings_not_list.arrow").write_bytes(with_footer(data, {**footer, "warnings": 5}))
    # bytes of the kernels table overwritten: its Arrow IPC footer, and the middle of its lz4 body
    off, length = footer["tables"]["kernels"]  # type: ignore[index]
    for name, at in [("ipc_footer", off + length - 10), ("body", off + length // 2)]:
        buf = bytearray(data)
        buf[at : at + 10] = b"\xa5" * 10
        (out / f"run_kernels_corrupt_{name}.arrow").write_bytes(bytes(buf))


def strip_checksums(data: bytes) -> bytes:
    """The same run file as an older tracediff wrote it: no `checksums` in the footer."""
    _, footer = _footer(data)
    footer.pop("checksums", None)
    return with_footer(data, footer)


def _flip(data: bytes, bit: int) -> bytes:
    buf = bytearray(data)
    buf[bit // 8] ^= 1 << (bit % 8)
    return bytes(buf)


def silent_kernel_flip(data: bytes, tmp: Path) -> int:
    """A bit inside the kernels table's lz4 body whose flip an unchecked reader does not notice
    (the table reads, with other values): searched from the middle of the table, the first found."""
    from tracediff.base.errors import TracediffError
    from tracediff.runs.runfile import read_run

    _, footer = _footer(data)
    off, length = footer["tables"]["kernels"]  # type: ignore[index]
    legacy = strip_checksums(data)
    ref = read_run(RUN).table("kernels")
    probe = tmp / ".probe.arrow"
    try:
        for bit in range((off + length // 2) * 8, (off + length) * 8, 8 * 97 + 3):
            probe.write_bytes(_flip(legacy, bit))  # tables lie before the footer: same bits
            try:
                if not read_run(probe).table("kernels").equals(ref):
                    return bit
            except TracediffError:
                continue
    finally:
        probe.unlink(missing_ok=True)
    raise AssertionError("no silently damaging bit found in the kernels table")


def _checked_runfiles(out: Path) -> None:
    """Run files written by this tracediff (with checksums) and damaged: one flipped bit in the
    kernels body (an unchecked read changes kernel times silently), one in the footer's JSON
    (an unchecked read changes the metadata silently), and footers without tables, with a
    format_version of the wrong type."""
    from tracediff.runs.runfile import read_run, write_run

    checked = out / "run_checked.arrow"
    write_run(read_run(RUN), checked)
    data = checked.read_bytes()
    bit = silent_kernel_flip(data, out)
    (out / "run_checked_kernels_bitflip.arrow").write_bytes(_flip(data, bit))
    start, _ = _footer(data)
    at = data.index(b"g_good.sqlite", start)  # 'g' -> 'f': still valid JSON
    (out / "run_checked_footer_bitflip.arrow").write_bytes(_flip(data, at * 8))
    (out / "run_legacy.arrow").write_bytes(strip_checksums(data))
    at = data.index(b'"checksums"', start) + 2  # "checksums" -> "cxecksums": not an older file
    (out / "run_checked_checksums_key_bitflip.arrow").write_bytes(_flip(data, at * 8 + 4))
    _, footer = _footer(RUN.read_bytes())
    legacy = RUN.read_bytes()
    no_kernels = {k: v for k, v in footer["tables"].items() if k != "kernels"}  # type: ignore[union-attr]
    for name, f in [
        ("run_no_kernels_table", {**footer, "tables": no_kernels}),
        ("run_tables_empty", {**footer, "tables": {}}),
        ("run_unknown_table", {**footer, "tables": {**footer["tables"], "kernelz": [16, 8]}}),  # type: ignore[dict-item]
        ("run_version_string", {**footer, "format_version": "1"}),
        ("run_version_float", {**footer, "format_version": 1.0}),
        ("run_version_true", {**footer, "format_version": True}),
        ("run_version_zero", {**footer, "format_version": 0}),
    ]:
        (out / f"{name}.arrow").write_bytes(with_footer(legacy, f))
    # a checked file whose footer lost a table: its footer CRC no longer matches
    _, cf = _footer(data)
    cf["tables"] = {k: v for k, v in cf["tables"].items() if k != "kernels"}  # type: ignore[union-attr]
    (out / "run_checked_no_kernels_table.arrow").write_bytes(with_footer(data, cf))


def derived_runs(out: Path) -> None:
    """Run files for compare: one GPU vs two, and a run whose cycle ranges are named differently;
    tracediff's own Perfetto output of the bundled pair (gzip and plain), which is not a profile."""
    from tracediff.engine.compare import compare
    from tracediff.export.perfetto import write_perfetto
    from tracediff.runs.runfile import Run, read_run, write_run

    pair = compare(read_run(RUN), read_run(RUN_BAD), n_boot=10)
    for name in ("tracediff_perfetto.json.gz", "tracediff_perfetto.json"):
        write_perfetto(pair, out / name)

    bad = read_run(RUN_BAD)
    tables = {n: bad.table(n) for n in bad.tables.keys()}
    k = tables["kernels"]
    twin = k.set_column(
        k.schema.get_field_index("device_id"), "device_id", pa.array([1] * k.num_rows, pa.int32())
    )
    tables["kernels"] = pa.concat_tables([k, twin])
    write_run(
        Run(tables=tables, metadata=dict(bad.metadata), warnings=list(bad.warnings)),
        out / "run_two_gpus.arrow",
    )


def build(out: Path) -> Path:
    """Write the whole corpus into `out` (created; must not exist or be empty)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _generic(out)
    _nsys(out)
    _kineto(out)
    _runfiles(out)
    _checked_runfiles(out)
    derived_runs(out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.support.make_corpus OUTDIR")
    print(build(Path(sys.argv[1])))
