"""`tracediff export --parquet` and `compare --export`: read back with polars and DuckDB.

Inputs are the bundled sample runs (real nsys captures on an H200), plus a two-GPU run built from
g_good by giving a copy of its device tables device_id 1, to exercise the device partitions.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tracediff.base.errors import OutputError
from tracediff.cli import main
from tracediff.export import parquet as px
from tracediff.runs import schema
from tracediff.runs.runfile import Run, read_run, write_run

ROOT = Path(__file__).resolve().parent.parents[2]
GOOD, BAD = ROOT / "samples/g_good.arrow", ROOT / "samples/g_bad.arrow"


def sql(q: str) -> pl.DataFrame:
    return duckdb.sql(q).pl()


def per_device(run: Run, table: str) -> dict[int | None, tuple[int, int]]:
    """{device_id: (rows, sum of duration_ns)} straight from the run file."""
    t = pl.from_arrow(run.table(table))
    assert isinstance(t, pl.DataFrame)
    g = t.group_by("device_id").agg(pl.len(), pl.col("duration_ns").sum())
    return {r[0]: (r[1], r[2]) for r in g.iter_rows()}


@pytest.fixture(scope="module")
def two_gpu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """g_good with its device tables duplicated onto a second GPU (device 1, shifted 1 s)."""
    run = read_run(GOOD)
    tables = {}
    for name in schema.TABLES:
        t = run.table(name)
        if "device_id" in t.column_names and name != "devices" and t.num_rows:
            copy = t.set_column(
                t.schema.get_field_index("device_id"),
                "device_id",
                pa.array([1] * t.num_rows, pa.int32()),
            )
            copy = copy.set_column(
                copy.schema.get_field_index("start_ns"),
                "start_ns",
                pc.add(copy.column("start_ns"), 1_000_000_000),
            )
            t = pa.concat_tables([t, copy])
        tables[name] = t
    path = tmp_path_factory.mktemp("runs") / "two_gpu.arrow"
    write_run(Run(tables=tables, metadata={**run.metadata, "label": "two gpu"}), path)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, two_gpu: Path) -> Path:
    out = tmp_path_factory.mktemp("export") / "ds"
    assert (
        main(["export", str(GOOD), str(BAD), str(two_gpu), str(GOOD), "--parquet", str(out)]) == 0
    )
    return out


def test_kernels_per_device_match_run_files(exported: Path, two_gpu: Path) -> None:
    got = sql(f"""select run, device_id, count(*) as n, sum(duration_ns) as dur
                  from read_parquet('{exported}/kernels/**/*.parquet', hive_partitioning=true)
                  group by all order by all""")
    want = []
    for label, path in (("g_bad", BAD), ("g_good", GOOD), ("g_good-2", GOOD), ("two_gpu", two_gpu)):
        for dev, (n, dur) in sorted(per_device(read_run(path), "kernels").items()):
            want.append((label, dev, n, dur))
    assert got.rows() == sorted(want)
    assert {r[1] for r in want if r[0] == "two_gpu"} == {0, 1}
    assert (exported / "kernels/run=two_gpu/device_id=1/part-0.parquet").is_file()


def test_every_table_round_trips_with_polars(exported: Path) -> None:
    good = read_run(GOOD)
    for name, sch in schema.TABLES.items():
        df = pl.read_parquet(exported / name, hive_partitioning=True).filter(
            pl.col("run") == "g_good"
        )
        assert df.height == good.table(name).num_rows, name
        assert set(df.columns) == set(sch.names) | {"run"}, name
        if name == "nvtx_ranges":
            want = pl.from_arrow(good.table(name))
            assert isinstance(want, pl.DataFrame)
            key = ["start_ns", "thread_id", "depth"]
            assert (
                df.sort(key)["name"].cast(pl.String).to_list()
                == want.sort(key)["name"].cast(pl.String).to_list()
            )


def test_file_schema_is_the_run_schema(exported: Path) -> None:
    f = pq.read_schema(exported / "kernels/run=g_good/device_id=0/part-0.parquet")
    want = schema.KERNELS.remove(schema.KERNELS.get_field_index("device_id"))
    assert f.remove_metadata().equals(want)  # dictionary-encoded names survive the round trip


def test_null_device_partition_reads_back_as_null(exported: Path) -> None:
    good = read_run(GOOD)
    want = per_device(good, "collectives")
    got = sql(f"""select device_id, count(*)
                  from read_parquet('{exported}/collectives/**/*.parquet', hive_partitioning=true)
                  where run = 'g_good' group by all""")
    assert {r[0]: r[1] for r in got.rows()} == {k: v[0] for k, v in want.items()}
    assert None in want  # host-side NCCL ranges have no device


def test_runs_table(exported: Path) -> None:
    runs = pl.read_parquet(exported / "runs")
    assert runs["run"].to_list() == ["g_good", "g_bad", "two_gpu", "g_good-2"]
    assert runs["input_path"].to_list()[0] == str(GOOD)
    md = orjson.loads(runs["metadata"][1])
    assert md["source"] == read_run(BAD).metadata["source"]
    assert runs["source"][1] == md["source"]
    info = orjson.loads((exported / px.MARKER).read_bytes())
    assert info["kind"] == "runs" and info["tables"]["kernels"] == 4 * 1764 + 1764


def test_refuses_to_overwrite(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.name for p in exported.iterdir())
    assert main(["export", str(GOOD), "--parquet", str(exported)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(exported) in err and "--force" in err
    assert sorted(p.name for p in exported.iterdir()) == before
    # --force replaces an earlier export, never a folder tracediff did not write
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert main(["export", str(GOOD), "--parquet", str(other), "--force"]) == 1
    assert (other / "notes.txt").read_text() == "keep me"
    again = tmp_path / "again"
    assert main(["export", str(GOOD), "--parquet", str(again)]) == 0
    assert main(["export", str(BAD), "--parquet", str(again), "--force"]) == 0
    assert pl.read_parquet(again / "runs")["run"].to_list() == ["g_bad"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"TRACEDIFF-RUN\x00\x00\x00 truncated")
    out = tmp_path / "out"
    assert main(["export", str(GOOD), str(junk), "--parquet", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(junk) in err and "Traceback" not in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def failing(table: pa.Table, path: Path, **kw: object) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        pq.write_table(table, path, **kw)

    monkeypatch.setattr(px.pq, "write_table", failing)
    with pytest.raises(OutputError, match="No space left"):
        px.export_runs([GOOD], tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_one_table_in_memory_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = read_run(GOOD)
    cached: list[int] = []
    real = pq.write_table

    def spy(table: pa.Table, path: Path, **kw: object) -> None:
        cached.append(len(dict.keys(run.tables)))  # tables the lazy run holds decoded right now
        real(table, path, **kw)

    monkeypatch.setattr(px.pq, "write_table", spy)
    rows = px.write_run_tables(run, tmp_path, "g_good")
    # the writer reads each table uncached (Run.read): the run itself holds none decoded, and the
    # only table in memory is the one being written
    assert len(cached) >= len(schema.TABLES) and max(cached) == 0
    assert len(dict.keys(run.tables)) == 0
    assert rows == {n: run.table(n).num_rows for n in schema.TABLES}


def test_unique_labels() -> None:
    assert px.unique_label("a b/c", []) == "a_b_c"
    assert px.unique_label("g_good", ["g_good", "g_good-2"]) == "g_good-3"
    assert px.unique_label("../..", []) == "run"


# --- compare --export ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def diff(tmp_path_factory: pytest.TempPathFactory):
    from tracediff.engine.compare import compare
    from tracediff.parse import load

    out = tmp_path_factory.mktemp("diff") / "d"
    assert (
        main(
            [
                "compare",
                str(GOOD),
                str(BAD),
                "--format",
                "json",
                "--bootstrap",
                "50",
                "--export",
                str(out),
            ]
        )
        == 0
    )
    return out, compare(load(GOOD), load(BAD), n_boot=50)


def test_compare_export_events_and_cycles(diff) -> None:
    out, c = diff
    got = sql(f"""select side, device_id, kind, status, count(*) as n, sum(duration_ns) as dur
                  from read_parquet('{out}/events/**/*.parquet', hive_partitioning=true)
                  group by all order by all""")
    want = (
        c.events.group_by("side", "device_id", "kind", "status")
        .agg(n=pl.len(), dur=pl.col("duration_ns").sum())
        .sort(pl.all())
    )
    assert got.rows() == want.rows()
    assert ("head", 0, "memcpy", "added") in {r[:4] for r in got.rows()}
    cycles = pl.read_parquet(out / "cycles", hive_partitioning=True)
    assert cycles.height == c.cycles.height
    assert (
        cycles.filter(pl.col("side") == "head")["span_ns"].sort().to_list()
        == c.cycles.filter(pl.col("side") == "head")["span_ns"].sort().to_list()
    )


def test_compare_export_attribution_and_summary(diff) -> None:
    out, c = diff
    attr = pl.read_parquet(out / "attribution")
    assert attr.columns == list(schema.DIFF_TABLES["attribution"].names)
    assert (
        attr.select("contributor_id", "delta_ms_per_cycle").rows()
        == c.attribution.select("contributor_id", "delta_ms_per_cycle").rows()
    )
    s = sql(f"select * from read_parquet('{out}/summary/*.parquet')").row(0, named=True)
    assert (s["base_label"], s["head_label"]) == ("g_good", "g_bad")
    assert s["base_cycles"] == c.base.cycles and s["head_devices"] == [0]
    assert s["delta_ms_per_cycle"] == pytest.approx(c.delta_ms_per_cycle)
    totals = pl.read_parquet(out / "totals")
    assert totals["head_count"].sum() == c.totals["head_count"].sum() > 0
    for name in ("host", "collectives"):  # written with their columns even when empty
        assert (
            pl.read_parquet(out / name).columns[: len(schema.DIFF_TABLES[name])]
            == schema.DIFF_TABLES[name].names
        )


def test_engine_frames_match_declared_diff_schemas(diff) -> None:
    """A column the engine adds or renames must be declared (and so documented) here."""
    _, c = diff
    for name, sch in schema.DIFF_TABLES.items():
        frame = getattr(c, name)
        if frame.width:
            assert sorted(frame.columns) == sorted(sch.names), name


def test_diff_tables_stream_in_chunks(
    diff, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written 500 rows at a time, the dataset holds the same rows as written whole."""
    out, c = diff
    monkeypatch.setattr(px, "FRAME_CHUNK", 500)
    small = tmp_path / "small"
    px.export_comparison(c, small)
    cols = ["side", "device_id", "cycle", "slot", "rel_start_ns", "contributor_id", "status"]
    whole = pl.read_parquet(out / "events", hive_partitioning=True).select(cols).sort(pl.all())
    chunked = pl.read_parquet(small / "events", hive_partitioning=True).select(cols).sort(pl.all())
    assert chunked.height == c.events.height > 4 * 500
    assert chunked.equals(whole)
    meta = pq.ParquetFile(small / "events/side=head/device_id=0/part-0.parquet").metadata
    assert meta.num_row_groups > 1  # appended chunk by chunk, not rebuilt whole
