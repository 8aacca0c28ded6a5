"""nsys SQLite reader on every real nsys export in tests/data, checked against SQL on the file.

The oracle is SQLite itself (stdlib sqlite3, independent of the reader's ADBC/polars path):
row counts, summed durations and per-name counts must match exactly.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tracediff.base.errors import InputError
from tracediff.parse import load
from tracediff.parse.intervals import nesting_depth
from tracediff.parse.nsys.reader import read_nsys_sqlite
from tracediff.parse.nsys.source import SqliteSource

DATA = Path(__file__).resolve().parent.parent.parent / "data"
H200 = [DATA / "h200" / f"{s}.sqlite" for s in ("g_good", "g_bad", "e_good", "e_bad")]
PUBLIC = sorted((DATA / "nsys").glob("*/*.sqlite"))
ALL = H200 + PUBLIC


def _sql(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    return {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}


def _count(path: Path, table: str, where: str = "") -> int:
    return (
        _sql(path, f"SELECT count(*) FROM {table} {where}")[0][0] if table in _tables(path) else 0
    )


def _df(run, table: str) -> pl.DataFrame:
    df = pl.from_arrow(run.table(table))
    assert isinstance(df, pl.DataFrame)
    return df


def test_public_data_present() -> None:
    names = {p.name for p in PUBLIC}
    assert {"mock.sqlite", "mfu_2gpu_before.sqlite", "report1.sqlite"} <= names, names
    assert {"saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "perlmutter-cloverleaf-cuda.sqlite"} <= names


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_row_counts_and_times_match_sql(path: Path) -> None:
    run = read_nsys_sqlite(path)
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    assert run.table("kernels").num_rows == _count(path, k)
    assert run.table("api_calls").num_rows == _count(path, "CUPTI_ACTIVITY_KIND_RUNTIME")
    assert run.table("memops").num_rows == _count(path, "CUPTI_ACTIVITY_KIND_MEMCPY") + _count(
        path, "CUPTI_ACTIVITY_KIND_MEMSET"
    )
    assert run.table("syncs").num_rows == _count(path, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    assert run.table("nvtx_ranges").num_rows == _count(
        path, "NVTX_EVENTS", "WHERE eventType IN (34, 59, 60)"
    )
    kernels = _df(run, "kernels")
    (total,) = _sql(path, f"SELECT coalesce(sum(end - start), 0) FROM {k}")[0]
    assert kernels["duration_ns"].sum() == total
    assert kernels["start_ns"].is_sorted()
    # every device that ran something is listed
    seen = {r[0] for r in _sql(path, f"SELECT DISTINCT deviceId FROM {k}")}
    assert seen <= set(_df(run, "devices")["device_id"].to_list())


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_kernel_and_api_names_match_stringids(path: Path) -> None:
    run = read_nsys_sqlite(path)
    want = dict(
        _sql(
            path,
            "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName GROUP BY 1",
        )
    )
    got = _df(run, "kernels").group_by(pl.col("name").cast(pl.String)).len()
    assert dict(got.iter_rows()) == want
    # API names lose their _vNNNN suffix and nothing else
    want_api = dict(
        _sql(
            path,
            "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "JOIN StringIds s ON s.id = r.nameId GROUP BY 1",
        )
    )
    stripped: dict[str, int] = {}
    for name, n in want_api.items():
        base = name.rsplit("_v", 1)[0] if name.rsplit("_v", 1)[-1].isdigit() else name
        stripped[base] = stripped.get(base, 0) + n
    got_api = _df(run, "api_calls").group_by(pl.col("name").cast(pl.String)).len()
    assert dict(got_api.iter_rows()) == stripped
    assert not any("not in StringIds" in w for w in run.warnings)


@pytest.mark.parametrize("stem", ["e_good", "g_good"])
def test_every_kernel_has_its_launch_call(stem: str) -> None:
    path = DATA / "h200" / f"{stem}.sqlite"
    k = _df(read_nsys_sqlite(path), "kernels")
    assert k["launch_api"].null_count() == 0
    assert (k["launch_start_ns"] <= k["start_ns"]).all()
    want = dict(
        _sql(
            path,
            "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "AND (r.globalTid & ~16777215) = k.globalPid JOIN StringIds s ON s.id = r.nameId "
            "GROUP BY 1",
        )
    )
    got = k.group_by(pl.col("launch_api").cast(pl.String)).len()
    assert dict(got.iter_rows()) == {n.rsplit("_v", 1)[0]: c for n, c in want.items()}
    if stem == "g_good":  # node-traced graph: kernels carry node ids and come from cudaGraphLaunch
        assert k["graph_node_id"].null_count() < k.height
        assert "cudaGraphLaunch" in set(k["launch_api"].cast(pl.String))


def test_old_schema_2_9_without_enum_tables() -> None:
    path = DATA / "nsys" / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    run = read_nsys_sqlite(path)
    assert run.metadata["nsys_version"] == "2022.2.1.31"
    assert run.metadata["nsys_schema_version"] == "2.9.1"
    m = _df(run, "memops").group_by("copy_kind", "src_kind", "dst_kind").agg(pl.col("bytes").sum())
    got = {
        tuple(r[:3]): r[3]
        for r in m.with_columns(pl.all().exclude("bytes").cast(pl.String)).iter_rows()
    }
    # copyKind 1/2 and memory kinds 0/2 in the file; nsys's enum numbering: 0 Pageable, 2 Device
    assert got == {
        ("HtoD", "Pageable", "Device"): 2621440000,
        ("DtoH", "Device", "Pageable"): 1310720000,
    }
    assert _df(run, "devices")["name"].to_list() == ["NVIDIA A100-SXM4-40GB"]


def test_four_gpus_listed_one_used_and_no_nvtx_table() -> None:
    path = DATA / "nsys" / "pipit" / "perlmutter-cloverleaf-cuda.sqlite"
    run = read_nsys_sqlite(path)
    dev = _df(run, "devices")
    assert dev["device_id"].to_list() == [0, 1, 2, 3]
    assert set(dev["name"]) == {"NVIDIA A100-SXM4-80GB"}
    assert dev["bus_location"].n_unique() == 4
    assert set(_df(run, "kernels")["device_id"]) == {0}
    assert any("no NVTX_EVENTS table" in w for w in run.warnings)
    assert run.table("nvtx_ranges").num_rows == 0


def test_2026_slice_without_gpu_table_or_domain_rows() -> None:
    path = DATA / "nsys" / "nsys-ai" / "mfu_2gpu_before.sqlite"
    run = read_nsys_sqlite(path)
    assert run.metadata["nsys_schema_version"] == "3.25.0"
    # upstream nsys-ai docs/user/reading-a-diff.md: total GPU time 535.20 ms
    assert round(_df(run, "kernels")["duration_ns"].sum() / 1e6, 2) == 535.20
    dev = _df(run, "devices")
    assert dev["device_id"].to_list() == [0, 1] and dev["name"].null_count() == 2
    assert any("no TARGET_INFO_GPU table" in w for w in run.warnings)
    coll = _df(run, "collectives").with_columns(pl.col("source", "name").cast(pl.String))
    (n_nccl_kernels,) = _sql(
        path,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.demangledName WHERE s.value LIKE 'nccl%'",
    )[0]
    assert coll.filter(pl.col("source") == "kernel").height == n_nccl_kernels == 66
    nvtx = coll.filter(pl.col("source") == "nvtx")
    (n_p2p,) = _sql(
        path,
        "SELECT count(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
        "WHERE n.domainId = 1 AND s.value IN ('ncclSend', 'ncclRecv')",
    )[0]
    assert nvtx.height == n_p2p == 264
    assert set(nvtx["op"]) == {"Send", "Recv"}
    assert nvtx["bytes"].null_count() == nvtx.height  # binaryData not exported: unknown, not 0
    assert any("named their domain NCCL" in w for w in run.warnings)
    assert any("not decoded" in w for w in run.warnings)


def test_capture_without_nvtx_table() -> None:
    path = DATA / "nsys" / "nsys-ai" / "mock.sqlite"
    run = read_nsys_sqlite(path)
    assert [w for w in run.warnings if "NVTX_EVENTS" in w]
    assert run.table("nvtx_ranges").num_rows == 0
    assert run.table("kernels").num_rows == 2


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    return dst


def test_missing_optional_tables_give_empty_tables_and_warnings(tmp_path: Path) -> None:
    path = _copy(DATA / "h200" / "e_good.sqlite", tmp_path)
    con = sqlite3.connect(path)
    for t in (
        "NVTX_EVENTS",
        "TARGET_INFO_GPU",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
    ):
        con.execute(f"DROP TABLE {t}")
    con.commit()
    con.close()
    run = read_nsys_sqlite(path)
    full = read_nsys_sqlite(DATA / "h200" / "e_good.sqlite")
    assert run.table("kernels").num_rows == full.table("kernels").num_rows
    assert _df(run, "kernels")["launch_api"].null_count() == run.table("kernels").num_rows
    assert run.table("nvtx_ranges").num_rows == 0 and run.table("api_calls").num_rows == 0
    text = " ".join(run.warnings)
    for t in ("NVTX_EVENTS", "TARGET_INFO_GPU", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        assert t in text
    assert (
        run.table("memops").num_rows
        == _count(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
        < full.table("memops").num_rows
    )


def test_adbc_type_inference_failure_falls_back(tmp_path: Path) -> None:
    """A TEXT column NULL for the first 64k rows, then text, breaks ADBC's first-batch inference."""
    adbc = pytest.importorskip("adbc_driver_sqlite.dbapi")
    path = _copy(DATA / "h200" / "g_good.sqlite", tmp_path)
    con = sqlite3.connect(path)
    while con.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0] < 70_000:
        con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE eventType = 59")
    con.execute("UPDATE NVTX_EVENTS SET textId = NULL, text = NULL WHERE rowid <= 66000")
    con.commit()
    (n_named,) = con.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text = 'verify'"
    ).fetchone()
    con.close()
    a = adbc.connect(str(path))  # precondition: the plain ADBC read does fail on this file
    cur = a.cursor()
    with pytest.raises(Exception, match="(?i)type"):
        cur.execute("SELECT CAST(text AS TEXT) FROM NVTX_EVENTS")
        cur.fetch_arrow_table()
    cur.close()
    a.close()
    nvtx = _df(read_nsys_sqlite(path), "nvtx_ranges")
    assert nvtx.filter(pl.col("name").cast(pl.String) == "verify").height == n_named > 0


@pytest.mark.parametrize("column", ["start", "gridX"])
def test_wrong_type_values_are_an_error_not_a_null(tmp_path: Path, column: str) -> None:
    """A kernel column read at once (start) fails the read; a launch dimension, read when first
    asked for (a compare never does), fails there."""
    path = _copy(DATA / "nsys" / "nsys-ai" / "mock.sqlite", tmp_path)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {column} = 'many' WHERE rowid = 1")
    con.commit()
    con.close()
    with pytest.raises(
        InputError, match="CUPTI_ACTIVITY_KIND_KERNEL holds values of the wrong type"
    ):
        read_nsys_sqlite(path).table("kernels")


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.3, 0.7, 0.999])
def test_truncated_sqlite_is_a_clear_error(tmp_path: Path, fraction: float) -> None:
    src = DATA / "h200" / "g_good.sqlite"
    data = src.read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[: max(16, int(len(data) * fraction))])
    with pytest.raises(InputError) as e:
        load(path)
    assert str(path) in e.value.message
    assert "\n" not in str(e.value)


def test_sqlite_that_is_not_nsys(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not an Nsight Systems export"):
        load(path)


def test_parallel_and_serial_reads_agree() -> None:
    path = DATA / "h200" / "e_bad.sqlite"
    # the SQLite (ADBC) path: the page decoder splits tables by leaf page, not rowid range
    a, b = SqliteSource(path, workers=1, pages=False), SqliteSource(path, workers=2, pages=False)
    a.CHUNK_ROWS = b.CHUNK_ROWS = 1000  # force several rowid ranges on a small file
    from tracediff.parse.nsys.schema import RUNTIME, RUNTIME_COLS
    from tracediff.parse.nsys.source import Read

    r = Read(RUNTIME, RUNTIME_COLS)
    assert len(b._ranges(r)) > 1
    assert [rng for _, _, rng in b._plan([r])] == b._ranges(r)  # the only table: split
    x, y = a.read([r])[0], b.read([r])[0]
    a.close()
    b.close()
    assert x.height == _count(path, RUNTIME) and x.equals(y)


def test_parallel_plan_splits_only_a_dominant_table() -> None:
    from tracediff.parse.nsys.schema import KERNEL, KERNEL_COLS, RUNTIME, RUNTIME_COLS, SYNC
    from tracediff.parse.nsys.source import Read

    path = DATA / "h200" / "e_bad.sqlite"  # 17,964 API calls x 7 columns, 4,410 kernels x 18
    a, b = SqliteSource(path, workers=1, pages=False), SqliteSource(path, workers=2, pages=False)
    a.CHUNK_ROWS = b.CHUNK_ROWS = 1000
    api, kern = Read(RUNTIME, RUNTIME_COLS), Read(KERNEL, KERNEL_COLS)
    sync = Read(SYNC, {"start": pl.Int64(), "end": pl.Int64()})
    plan = b._plan([sync, api])  # the API calls outweigh twice the syncs: split, and first
    assert plan[0][1] is api and [t[2] for t in plan if t[1] is api] == b._ranges(api)
    assert [t[2] for t in plan if t[1] is sync] == [None]
    plan = b._plan([kern, api, sync])  # API calls < 2x (kernels + syncs): whole tables
    assert [t[1] for t in plan] == [api, kern, sync] and {t[2] for t in plan} == {None}
    for reads in ([sync, api], [kern, api, sync]):
        for x, y in zip(a.read(reads), b.read(reads), strict=True):
            assert x.equals(y)
    a.close()
    b.close()


def test_nesting_depth_with_marks_and_shared_starts() -> None:
    df = pl.DataFrame(
        {
            "s": [0, 0, 0, 0, 0, 0],
            "start": [0, 0, 2, 2, 5, 5],
            "end": [10, 5, 2, 3, 5, None],
        }
    )
    # [0,10] > [0,5] > [2,3] > mark@2 (the longer interval opens first at a shared instant);
    # at 5, [0,5] closes before [5,..) opens, and mark@5 falls inside [5,..)
    got = nesting_depth(df, "start", "end", ["s"]).to_list()
    assert got == [0, 1, 3, 2, 2, 1]


def test_kernels_whose_launch_call_is_missing_keep_null_launch_fields(tmp_path: Path) -> None:
    path = _copy(DATA / "h200" / "e_good.sqlite", tmp_path)
    con = sqlite3.connect(path)
    con.execute(
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN "
        "(SELECT id FROM StringIds WHERE value LIKE 'cudaLaunchKernel_v%')"
    )
    con.commit()
    con.close()
    (orphans,) = _sql(
        path,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE NOT EXISTS (SELECT 1 FROM "
        "CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId)",
    )[0]
    k = _df(read_nsys_sqlite(path), "kernels")
    assert 0 < orphans < k.height
    assert k["launch_api"].null_count() == k["launch_start_ns"].null_count() == orphans
    assert "cudaLaunchKernel" not in set(k["launch_api"].cast(pl.String).drop_nulls())


def test_non_utf8_text_becomes_replacement_characters(tmp_path: Path) -> None:
    path = _copy(DATA / "h200" / "g_good.sqlite", tmp_path)
    con = sqlite3.connect(path)
    con.execute(
        "UPDATE NVTX_EVENTS SET text = CAST(X'647261667420e9' AS TEXT) WHERE text = 'draft'"
    )
    (n_draft,) = con.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE text = CAST(X'647261667420e9' AS TEXT)"
    ).fetchone()
    con.commit()
    con.close()
    nvtx = read_nsys_sqlite(path).table("nvtx_ranges")
    nvtx.validate(full=True)
    names = pl.Series(nvtx.column("name").cast(nvtx.schema.field("name").type.value_type))
    assert (names == "draft \ufffd").sum() == n_draft > 0


def test_kernels_without_names_are_counted_in_a_warning(tmp_path: Path) -> None:
    path = _copy(DATA / "nsys" / "nsys-ai" / "mock.sqlite", tmp_path)
    con = sqlite3.connect(path)
    # demangledName is NOT NULL in nsys's DDL: rebuild the table without constraints first
    con.execute("CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = NULL WHERE rowid = 1")
    con.commit()
    con.close()
    run = read_nsys_sqlite(path)
    assert any("1 kernels have no name" in w for w in run.warnings), run.warnings
    assert _df(run, "kernels")["name"].null_count() == 1


def _depth_reference(rows: list[tuple[object, int, int | None]]) -> list[int]:
    """Depth by definition, per row: boundaries sorted by (group, time, kind, -end, row), kind 0
    an end, 1 a start, 2 the end of a zero-length interval; depth = open intervals before."""
    big = 1 << 62
    ev = []
    for i, (g, s, e) in enumerate(rows):
        e2 = big if e is None else e
        ev.append((str(g), s, 1, -e2, i, 1))
        ev.append((str(g), e2, 2 if e2 == s else 0, 0, i, -1))
    ev.sort(key=lambda x: x[:5])
    out, opened, group = [0] * len(rows), 0, None
    for g, _, kind, _, i, d in ev:
        if g != group:
            group, opened = g, 0
        if kind == 1:
            out[i] = opened
        opened += d
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nesting_depth_equals_its_definition_with_groups_nulls_and_identical_intervals(
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    starts = rng.integers(0, 60, n)
    ends = [None if x < 0.05 else int(s + d) for s, d, x in
            zip(starts, rng.integers(0, 12, n), rng.random(n), strict=True)]  # fmt: skip
    groups_a = [None if x < 0.1 else int(v) for v, x in
                zip(rng.integers(0, 3, n), rng.random(n), strict=True)]  # fmt: skip
    groups_b = rng.integers(-2, 2, n)
    df = pl.DataFrame(
        {"a": groups_a, "b": groups_b, "start": starts, "end": ends},
        schema={"a": pl.Int64, "b": pl.Int64, "start": pl.Int64, "end": pl.Int64},
    )
    want = _depth_reference(
        [((a, b), int(s), e) for a, b, s, e in zip(groups_a, groups_b, starts, ends, strict=True)]
    )
    assert nesting_depth(df, "start", "end", ["a", "b"]).to_list() == want
    # one int group column (the arithmetic group code), and no groups at all
    want_b = _depth_reference(
        [(b, int(s), e) for b, s, e in zip(groups_b, starts, ends, strict=True)]
    )
    assert nesting_depth(df, "start", "end", ["b"]).to_list() == want_b
    want_1 = _depth_reference([(0, int(s), e) for s, e in zip(starts, ends, strict=True)])
    assert nesting_depth(df, "start", "end", []).to_list() == want_1
    assert max(want_1) > 3  # the data nests (identical intervals open in row order)


def test_threads_sharing_the_source_connection_each_get_their_own_answer(tmp_path: Path) -> None:
    """The reader's threads share one sqlite3 connection (the kernel table is read in the
    background while the rest is read). Without serialising it, an aggregate query answered
    with no row now and then when another thread's statement failed (IndexError in `_bounds`,
    a traceback where a corrupt file should give one line: 2-6 of 6,000 queries here)."""
    import threading

    from tracediff.parse.nsys.schema import KERNEL

    path = tmp_path / "corrupt.sqlite"
    shutil.copy(DATA / "h200" / "g_good.sqlite", path)
    con = sqlite3.connect(path)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (KERNEL,)).fetchone()
    (page,) = con.execute("PRAGMA page_size").fetchone()
    con.close()
    data = bytearray(path.read_bytes())
    data[(root - 1) * page : root * page] = bytes(range(256)) * (page // 256)  # not a b-tree page
    path.write_bytes(bytes(data))
    src = SqliteSource(path, workers=2)
    wrong: list[object] = []

    def ask(table: str) -> None:
        for _ in range(2000):
            try:
                rows = src._exec(f'SELECT min(rowid) FROM "{table}"')
            except InputError:  # the corrupt table: one clear error, as it should
                continue
            if len(rows) != 1:
                wrong.append(rows)

    threads = [
        threading.Thread(target=ask, args=(t,))
        for t in (KERNEL, "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    src.close()
    assert wrong == []


LATER = ["graph_node_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
         "registers_per_thread", "static_shared_memory_bytes", "dynamic_shared_memory_bytes"]  # fmt: skip
LATER_SQL = ("graphNodeId, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
             "staticSharedMemory, dynamicSharedMemory")  # fmt: skip


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.parent.name + "/" + p.stem)
def test_launch_dimensions_wait_until_read_and_are_the_files(path: Path) -> None:
    """A SQLite export's kernels leave their launch dimensions and graph node ids undecoded
    through the read, its checks and what a compare reads (runs/deferred.py's Partial); asked
    for, they are the file's, row for row (kernels in start order, ties in file order); so are
    the API calls' return values and kinds, read when the api_calls table is built."""
    run = load(path)
    lean = ["device_id", "stream_id", "start_ns", "end_ns", "name", "launch_start_ns"]
    assert run.read("kernels", lean).num_rows == run.read("kernels", ["start_ns"]).num_rows
    assert "kernels" in run.tables._later  # type: ignore[attr-defined]  # nothing built it
    got = run.table("kernels").select(LATER).to_pylist()
    want = _sql(path, f"SELECT {LATER_SQL} FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start, rowid")
    assert [tuple(r.values()) for r in got] == want
    assert "kernels" not in run.tables._later  # type: ignore[attr-defined]
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in _tables(path):
        return
    # the API calls' return values and kinds, likewise read when their table is built
    api = run.table("api_calls")
    want_api = _sql(
        path,
        "SELECT returnValue, CASE eventClass WHEN 1 THEN 'driver' ELSE 'runtime' END "
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start, rowid",
    )
    got_api = zip(
        api.column("return_value").to_pylist(), api.column("api_kind").to_pylist(), strict=True
    )
    assert list(got_api) == want_api


def test_an_export_changed_or_gone_before_its_launch_dimensions_are_read(tmp_path: Path) -> None:
    """The undecoded columns are read from the file again: one whose kernel table changed
    meanwhile, or that is gone, is a one-line error naming it, never another file's rows."""
    f = tmp_path / "run.sqlite"
    shutil.copy(DATA / "h200" / "g_good.sqlite", f)
    run = load(f)
    shutil.copy(DATA / "h200" / "e_bad.sqlite", f)  # 4410 kernels where there were 1764
    with pytest.raises(InputError, match="kernel table changed while tracediff read it"):
        run.table("kernels")
    shutil.copy(DATA / "h200" / "g_good.sqlite", f)
    gone = load(f)
    f.unlink()
    with pytest.raises(InputError, match=r"run\.sqlite: cannot read"):
        gone.table("kernels")


def test_an_export_read_under_another_name_is_read_whole(tmp_path: Path) -> None:
    """An export read for another file (nsys's export of a report, in a temporary folder gone
    once read) cannot be read again: its kernels and API calls are read whole at once."""
    from tracediff.parse.nsys.reader import read_nsys

    f = tmp_path / "export.sqlite"
    shutil.copy(DATA / "h200" / "g_good.sqlite", f)
    src = SqliteSource(f)
    try:
        run = read_nsys(src, tmp_path / "report.nsys-rep", "nsys-rep")
    finally:
        src.close()
    f.unlink()
    assert "kernels" not in run.tables._later  # type: ignore[attr-defined]
    want = _sql(DATA / "h200" / "g_good.sqlite", "SELECT gridX FROM CUPTI_ACTIVITY_KIND_KERNEL")
    assert sorted(run.table("kernels").column("grid_x").to_pylist()) == sorted(r[0] for r in want)
    assert (
        run.table("api_calls").num_rows
        == _sql(
            DATA / "h200" / "g_good.sqlite", "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        )[0][0]
    )
