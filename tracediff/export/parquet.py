"""Parquet export: run tables, or a comparison's diff tables, as a hive-partitioned dataset.

Stage: output. Input: run inputs (anything `parse.load` reads) or a `Comparison`; output: a folder
that polars, DuckDB, pyarrow and Spark read with hive partitioning (docs/parquet-schema.md):

    DIR/_tracediff.json                                     what the folder holds (kind, row counts)
    DIR/runs/part-0.parquet                                 one row per run: label, source, metadata
    DIR/kernels/run=<label>/device_id=<N>/part-0.parquet    kernels, memops, collectives
    DIR/api_calls/run=<label>/part-0.parquet                every other run table

or, for `compare --export`:

    DIR/summary/part-0.parquet                              one row: both sides' cycle statistics
    DIR/events/side=<base|head>/device_id=<N>/part-0.parquet    events and cycles
    DIR/attribution/part-0.parquet                          attribution, across_gpus, host, collectives, totals

Partition columns live in the path only (the hive convention); a null device is the partition
`__HIVE_DEFAULT_PARTITION__`, which polars and DuckDB read back as null (pyarrow needs the
partitioning schema where no row has a device: docs/parquet-schema.md). A table with no
rows is still written, as one zero-row file, so its schema is always there to read.

Memory: tables are written one at a time. A run file is memory-mapped and loads each table on
first access; after a table is written it is dropped from the run's cache, so at most one table's
columns (plus one device's slice of it) are in memory at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracediff import __version__
from tracediff.base import outputs
from tracediff.base.errors import OutputError, UsageError
from tracediff.engine.result import Comparison, SideSummary
from tracediff.runs import schema
from tracediff.runs.runfile import Run

EXPORT_VERSION = 1
"""Version of this folder layout and of the diff-table schemas (schema.DIFF_TABLES); in
`_tracediff.json`."""
MARKER = "_tracediff.json"
"""Names starting with `_` are skipped by Parquet dataset readers, so the marker never gets read
as data; `--force` replaces only folders holding it (or empty ones)."""
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
PARTITIONED = ("kernels", "memops", "collectives")
"""Run tables partitioned by device as well as by run: the big per-GPU ones."""
COMPRESSION = "zstd"
FRAME_CHUNK = 1 << 18
"""Rows of a diff table converted to Arrow and written at a time."""

Progress = Callable[[str], None]

RUNS = pa.schema(
    [
        ("run", pa.string()),  # the label used in the `run=` partitions
        ("input_path", pa.string()),  # the path given to export
        ("source", pa.string()),  # the report the run was parsed from
        ("source_format", pa.string()),
        (
            "metadata",
            pa.string(),
        ),  # the run's whole metadata (capture manifest, tool versions), JSON
        ("warnings", pa.string()),  # JSON list of the parser's warnings
    ]
)

_str, _i32, _i64, _f64, _bool = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()


def _floats(*names: str) -> list[tuple[str, pa.DataType]]:
    return [(n, _f64) for n in names]


DIFF_PARTITIONS = {"events": ("side", "device_id"), "cycles": ("side", "device_id")}

_SIDE_TYPES = {
    "str": _str,
    "int": _i64,
    "float": _f64,
    "float | None": _f64,
    "list[int]": pa.list_(_i32),
    "tuple[float, ...]": pa.list_(_f64),
    "tuple[str, ...]": pa.list_(_str),
}
SUMMARY = pa.schema(
    [
        (f"{side}_{f.name}", _SIDE_TYPES[str(f.type)])
        for side in ("base", "head")
        for f in dataclasses.fields(SideSummary)
    ]
    + _floats("delta_ms_per_cycle", "delta_ci95_low", "delta_ci95_high", "delta_pct")
    + [("significant", _bool)]
    + _floats("noise_floor_ms", "residual_ms_per_cycle")
    + [("noise_unit", _str), ("p_value", _f64)]
    + [
        ("critical_device", _i32),
        ("env_diffs", _str),
        ("warnings", _str),
        ("tracediff_version", _str),
    ]
)
"""One row per comparison. `env_diffs`: JSON list of {key, base, head}; `warnings`: JSON list."""


# --- output folder -------------------------------------------------------------------------------


def _replaceable(out: Path) -> bool:
    return (
        out.is_dir()
        and not out.is_symlink()
        and ((out / MARKER).is_file() or not any(out.iterdir()))
    )


def check_output_dir(out: Path, *, force: bool) -> Path:
    """Raise OutputError unless `out` can be written (absent, or an earlier export and `force`)."""
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{out}: folder {parent} does not exist", "create it first")
    if out.exists() or out.is_symlink():
        if not force:
            raise OutputError(f"{out}: already exists", "pass --force to replace it")
        if not _replaceable(out):
            raise OutputError(
                f"{out}: exists and is not a tracediff export folder",
                "--force replaces only folders tracediff wrote; "
                "remove it yourself or pick another path",
            )
    return parent


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def output_dir(out: Path, *, force: bool, txn: outputs.Transaction | None = None) -> Iterator[Path]:
    """Yield an empty temp folder beside `out`; on success it becomes `out` in one rename
    (tracediff.base.outputs: without `force` only if `out` still does not exist)."""
    out = Path(out)
    parent = check_output_dir(out, force=force)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent))
        tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes 0700; an export is a plain folder
    except OSError as e:
        raise OutputError(
            f"{out}: cannot create a folder in {parent}: {e.strerror or e}", "check permissions"
        ) from None
    try:
        yield tmp
        outputs.publish(tmp, out, force=force, txn=txn)
    except OSError as e:  # writing a table into the temp folder failed (full disk, EFBIG)
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(
            f"{out}: cannot write: {e.strerror or e}", "check free space and permissions"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_marker(root: Path, kind: str, tables: dict[str, int], **extra: Any) -> dict[str, Any]:
    info = {
        "kind": kind,
        "export_version": EXPORT_VERSION,
        "run_format_version": schema.FORMAT_VERSION,
        "tracediff_version": __version__,
        "tables": tables,
        **extra,
    }
    (root / MARKER).write_bytes(orjson.dumps(info, option=orjson.OPT_INDENT_2))
    return info


# --- writing tables ------------------------------------------------------------------------------


def _write_file(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression=COMPRESSION)


def _part_value(v: Any) -> str:
    return NULL_PARTITION if v is None else str(v)


def _split(table: pa.Table, keys: Sequence[str]) -> Iterator[tuple[dict[str, Any], pa.Table]]:
    """(key values, rows without the key columns) for each distinct key tuple of `table`.

    Partitions are filtered out one at a time, so the extra memory is one partition; a table
    with one key tuple (a single-GPU run) is passed on without a copy. An empty table yields
    itself once, under null keys.
    """
    keys = list(keys)
    data = table.drop_columns(keys)
    if table.num_rows == 0:
        yield dict.fromkeys(keys), data
        return
    combos = table.select(keys).group_by(keys, use_threads=False).aggregate([]).to_pylist()
    combos.sort(key=lambda c: tuple((c[k] is None, c[k]) for k in keys))
    if len(combos) == 1:
        yield combos[0], data
        return
    for combo in combos:
        mask = None
        for k in keys:
            col = table.column(k)
            if combo[k] is None:
                m = pc.is_null(col)
            else:
                m = pc.fill_null(pc.equal(col, combo[k]), False)
            mask = m if mask is None else pc.and_(mask, m)
        yield combo, data.filter(mask)


def _part_path(base: Path, keys: Sequence[str], combo: dict[str, Any]) -> Path:
    return base.joinpath(*(f"{k}={_part_value(combo[k])}" for k in keys), "part-0.parquet")


def write_partitioned(table: pa.Table, base: Path, keys: Sequence[str]) -> int:
    """Write `table` under `base/k1=v1/k2=v2/part-0.parquet`, one file per distinct key tuple.

    Returns the number of files written.
    """
    n = 0
    for combo, part in _split(table, keys):
        _write_file(part, _part_path(base, keys, combo))
        n += 1
        del part
    return n


def write_frame(
    frame: pl.DataFrame, base: Path, target: pa.Schema, keys: Sequence[str] = ()
) -> int:
    """Stream a polars frame to Parquet in row chunks, conformed to `target`, split by `keys`.

    One open writer per partition, so only one chunk's Arrow copy exists at a time (the diff
    tables of a big comparison are millions of rows). Returns the rows written.
    """
    writers: dict[tuple[Any, ...], pq.ParquetWriter] = {}
    try:
        for chunk in frame.iter_slices(FRAME_CHUNK) if frame.height else [frame]:
            for combo, part in _split(_conform(chunk, target), keys):
                key = tuple(combo[k] for k in keys)
                w = writers.get(key)
                if w is None:
                    path = _part_path(base, keys, combo)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    w = writers[key] = pq.ParquetWriter(path, part.schema, compression=COMPRESSION)
                w.write_table(part if part.schema == w.schema else part.cast(w.schema))
    finally:
        for w in writers.values():
            w.close()
    return frame.height


def _safe_label(label: str) -> str:
    # A hive partition value must be one path segment that readers need not URL-decode.
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._") or "run"


def unique_label(label: str, taken: Sequence[str]) -> str:
    """`label` made safe for a path segment, with -2, -3... added if already taken."""
    base = _safe_label(label)
    cand, n = base, 1
    while cand in taken:
        n += 1
        cand = f"{base}-{n}"
    return cand


def write_run_tables(
    run: Run, root: Path, label: str, progress: Progress | None = None
) -> dict[str, int]:
    """Write every table of `run` under `root/<table>/run=<label>/...`; returns rows per table."""
    rows: dict[str, int] = {}
    for name in schema.TABLES:
        if progress:
            progress(f"writing {label}: {name}")
        # read without caching, so the next table does not stack on top of this one
        table = schema.conform(name, run.read(name))
        base = root / name / f"run={label}"
        if name in PARTITIONED:
            write_partitioned(table, base, ["device_id"])
        else:
            _write_file(table, base / "part-0.parquet")
        rows[name] = table.num_rows
        del table
    return rows


def _run_row(run: Run, label: str, input_path: str) -> dict[str, Any]:
    opts = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    md = run.metadata
    return {
        "run": label,
        "input_path": input_path,
        "source": None if md.get("source") is None else str(md["source"]),
        "source_format": None if md.get("source_format") is None else str(md["source_format"]),
        "metadata": orjson.dumps(md, option=opts, default=str).decode(),
        "warnings": orjson.dumps(run.warnings, default=str).decode(),
    }


def export_runs(
    inputs: Sequence[Path],
    out: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
    labels: Sequence[str | None] | None = None,
    sets: Sequence[tuple[Path, Sequence[int], bool]] = (),
    allow_missing_ranks: bool = False,
) -> dict[str, Any]:
    """Export every table of each input (run file or report) to the Parquet dataset `out`.

    Inputs are loaded one at a time. `labels` (one per input, None: the run's own label) name
    the `run=` partitions, e.g. a run set's runs by set and run. `sets`: the run sets given, as
    (folder, the indices of their runs among `inputs`, whether indexed), checked to hold one
    workload's runs (parse/grouping.py) before the folder is published. Returns what
    `_tracediff.json` records.
    """
    from tracediff.parse import grouping, load
    from tracediff.parse import identity as idn

    if not inputs:
        raise UsageError("give at least one run file or report to export")
    given_labels = list(labels) if labels is not None else None
    if given_labels is not None and len(given_labels) != len(inputs):
        raise UsageError("give one label per input to export")
    with output_dir(out, force=force) as tmp:
        taken: list[str] = []  # the labels given so far (the parameter `labels` may hold None)
        rows: list[dict[str, Any]] = []
        totals = dict.fromkeys(schema.TABLES, 0)
        per_run: dict[str, dict[str, int]] = {}
        idents: list[dict[str, Any]] = []
        for i, path in enumerate(inputs):
            if progress:
                progress(f"reading {path}")
            run = load(Path(path), allow_missing_ranks=allow_missing_ranks)
            idents.append(idn.of(run))
            given = given_labels[i] if given_labels is not None else None
            label = unique_label(given or run.label, taken)
            taken.append(label)
            per_run[label] = write_run_tables(run, tmp, label, progress)
            for k, v in per_run[label].items():
                totals[k] += v
            rows.append(_run_row(run, label, str(path)))
            del run
        for folder, members, indexed in sets:
            grouping.check_run_set(
                [idents[k] for k in members],
                [grouping.run_name(folder, Path(inputs[k])) for k in members], folder,
                indexed=indexed,
            )  # fmt: skip
        _write_file(pa.Table.from_pylist(rows, schema=RUNS), tmp / "runs" / "part-0.parquet")
        info = _write_marker(tmp, "runs", {"runs": len(rows), **totals}, runs=per_run)
    return info


# --- comparison ----------------------------------------------------------------------------------


def _conform(frame: pl.DataFrame, target: pa.Schema) -> pa.Table:
    """`frame` with the declared columns and types first (missing ones null), then any extra."""
    data = frame.to_arrow() if frame.width else pa.table({})
    n = frame.height if frame.width else 0
    cols, fields = [], []
    for f in target:
        if f.name in data.column_names:
            col = data.column(f.name)
            cols.append(col if col.type == f.type else col.cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
        fields.append(f)
    for name in data.column_names:
        if name not in target.names:  # a column the engine added since: keep it, never lose data
            col = data.column(name)
            if pa.types.is_string_view(col.type) or pa.types.is_large_string(col.type):
                col = col.cast(pa.string())
            cols.append(col)
            fields.append(pa.field(name, col.type))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def summary_table(result: Comparison) -> pa.Table:
    row: dict[str, Any] = {}
    for side in ("base", "head"):
        s = getattr(result, side)
        for f in dataclasses.fields(SideSummary):
            row[f"{side}_{f.name}"] = getattr(s, f.name)
    row.update(
        delta_ms_per_cycle=result.delta_ms_per_cycle,
        delta_ci95_low=result.delta_ci95[0],
        delta_ci95_high=result.delta_ci95[1],
        delta_pct=result.delta_pct,
        significant=result.significant,
        noise_floor_ms=result.noise_floor_ms,
        residual_ms_per_cycle=result.residual_ms_per_cycle,
        noise_unit=result.noise_unit,
        p_value=result.p_value,
        critical_device=result.critical_device,
        env_diffs=orjson.dumps(
            [dataclasses.asdict(d) for d in result.env_diffs], default=str
        ).decode(),
        warnings=orjson.dumps(result.warnings, default=str).decode(),
        tracediff_version=__version__,
    )
    return pa.Table.from_pylist([row], schema=SUMMARY)


def write_comparison_tables(result: Comparison, root: Path) -> dict[str, int]:
    """Write the summary and every diff table of `result` under `root`; returns rows per table."""
    rows: dict[str, int] = {}
    summary = summary_table(result)
    _write_file(summary, root / "summary" / "part-0.parquet")
    rows["summary"] = summary.num_rows
    for name, target in schema.DIFF_TABLES.items():
        keys = DIFF_PARTITIONS.get(name, ())
        rows[name] = write_frame(getattr(result, name), root / name, target, keys)
    return rows


def export_comparison(
    result: Comparison,
    out: Path,
    *,
    force: bool = False,
    txn: outputs.Transaction | None = None,
) -> dict[str, Any]:
    """Write `result`'s diff tables as the Parquet dataset `out` (`compare --export`)."""
    with output_dir(out, force=force, txn=txn) as tmp:
        rows = write_comparison_tables(result, tmp)
        info = _write_marker(
            tmp, "comparison", rows, base=result.base.label, head=result.head.label
        )
    return info
