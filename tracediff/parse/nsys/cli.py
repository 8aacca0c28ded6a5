"""Nsight Systems reports that need the nsys CLI (.nsys-rep, .qdstrm) and Parquet exports.

Stage: parse. Input: a `.nsys-rep`, a raw `.qdstrm`, or an `nsys export --type parquetdir`
folder; output: a `Run`, through the same table logic as SQLite exports (reader.read_nsys).

A report is exported by the real `nsys export` into a temporary folder that is always removed.
The export is Parquet (`parquetdir`, nsys 2023.4 and later) of only the tables the reader uses
(`--tables`). Since the SQLite page decoder, tracediff reads either at about the same speed
(1 M kernels: 0.45 s Parquet, 0.43 s SQLite, bench/ingest.py; it was 2.5x in Parquet's favour);
which one nsys writes faster for a large report is not measured (only small reports are at
hand: ~0.1 s either way). If that export fails, SQLite is tried before giving up. A `.qdstrm` is
first turned into a report by QdstrmImporter. Timeouts: $TRACEDIFF_NSYS_TIMEOUT seconds
(default 1800) per tool run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from tracediff.base import nsys_tool, settings
from tracediff.base.errors import InputError
from tracediff.parse.nsys import reader
from tracediff.parse.nsys.source import Read, typed
from tracediff.runs.runfile import Run

_BAD_REPORT_HINT = (
    "the file may be truncated or not an Nsight Systems report; copy or capture it again"
)


class ParquetSource:
    """An `nsys export --type parquetdir` folder: one `<TABLE>.parquet` per table."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.src = str(folder)
        self.files = {p.name[: -len(".parquet")]: p for p in self.folder.glob("*.parquet")}
        self.tables = set(self.files)
        self._cols: dict[str, list[str]] = {}

    def columns(self, table: str) -> list[str]:
        if table not in self._cols:
            path = self.files[table]
            try:
                self._cols[table] = pq.read_schema(path).names
            except (OSError, ValueError) as e:
                raise InputError(
                    f"{path}: not a readable Parquet file ({e})", "export the report again"
                ) from None
        return self._cols[table]

    def _scan(self, read: Read) -> tuple[pl.LazyFrame, list[str]]:
        """Only the wanted columns (absent ones come back as nulls), rows filtered in the scan."""
        path = self.files[read.table]
        have = [c for c in read.cols if c in self.columns(read.table)]
        lf = pl.scan_parquet(path).select(have)
        if read.where_in and read.where_in[0] in have:
            lf = lf.filter(pl.col(read.where_in[0]).is_in(list(read.where_in[1])))
        return lf, have

    def _bad(self, read: Read, e: Exception) -> InputError:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        return InputError(
            f"{self.files[read.table]}: not a readable Parquet file ({msg})",
            "export the report again",
        )

    def read(self, reads: Sequence[Read]) -> list[pl.DataFrame]:
        """Every table in one `collect_all`: polars decodes the files' columns and row groups on
        its own thread pool (1 M kernels: ~0.1 CPU-s less than a Python pool of per-table
        collects). Each frame is then made one chunk (row groups come back as chunks)."""
        present = [r for r in reads if r.table in self.tables]
        scans = [self._scan(r) for r in present]
        try:
            dfs = pl.collect_all([lf for lf, _ in scans])
        except (OSError, pl.exceptions.PolarsError):
            dfs = []
            for r, (lf, _) in zip(present, scans, strict=True):  # find the file to blame
                try:
                    dfs.append(lf.collect())
                except (OSError, pl.exceptions.PolarsError) as e:
                    raise self._bad(r, e) from None
        got = {
            id(r): typed(df, r, have, str(self.files[r.table])).rechunk()
            for r, df, (_, have) in zip(present, dfs, scans, strict=True)
        }
        return [got[id(r)] if id(r) in got else pl.DataFrame(schema=r.cols) for r in reads]

    def close(self) -> None:
        pass


def read_parquetdir(
    folder: Path, source_format: str = "nsys-parquetdir", source: Path | None = None
) -> Run:
    """Read an `nsys export --type parquetdir` folder into a Run."""
    return reader.read_nsys(ParquetSource(folder), Path(source or folder), source_format)


def _export(nsys: Path, rep: Path, tmp: Path, src: Path) -> tuple[Path, str]:
    """Export `rep` to Parquet (or SQLite if that fails); return the output and its format."""
    out = ""
    for kind, target in (("parquetdir", tmp / "export"), ("sqlite", tmp / "export.sqlite")):
        # anchored patterns: only the tables the reader uses
        tables = ",".join(f"^{t}$" for t in reader.TABLES_READ)
        cmd = [str(nsys), "export", "--type", kind, "--force-overwrite=true", "--quiet=true",
               "--tables", tables, "-o", str(target), str(rep)]  # fmt: skip
        r = nsys_tool.run(
            cmd, timeout=settings.nsys_timeout(), what=f"nsys export --type {kind}", src=src
        )
        if r.returncode == 0 and target.exists():
            return target, kind
        out = r.output
    raise InputError(
        f"{src}: nsys cannot read this report ({nsys_tool.last_error_line(out)})", _BAD_REPORT_HINT
    )


def _with_suffix(path: Path, kind: str, tmp: Path) -> Path:
    """The report under a name the nsys tools accept: itself, or (a report detected by its
    magic but named otherwise, say `.sqlite`) a link to it in `tmp` named `report.<suffix>`."""
    suffix = {"nsys-rep": (".nsys-rep", ".qdrep"), "qdstrm": (".qdstrm",)}[kind]
    if path.name.lower().endswith(suffix):
        return path
    link = tmp / f"report{suffix[0]}"
    if not link.exists():
        link.symlink_to(path.resolve())
    return link


def read_report(path: Path, kind: str) -> Run:
    """Read a `.nsys-rep` / `.qdstrm` (through the nsys CLI) or a parquetdir folder."""
    path = Path(path)
    if kind == "parquetdir":
        return read_parquetdir(path)
    if kind not in ("nsys-rep", "qdstrm"):
        raise ValueError(kind)
    nsys = nsys_tool.find_nsys()
    with tempfile.TemporaryDirectory(prefix="tracediff-nsys-") as tmp_name:
        tmp = Path(tmp_name)
        rep = _with_suffix(path, kind, tmp)
        if kind == "qdstrm":
            importer = nsys_tool.find_qdstrm_importer()
            nsys_tool.check_can_open(path, importer)
            named, rep = rep, tmp / "import.nsys-rep"  # the .qdstrm under a name it accepts
            why = nsys_tool.import_qdstrm(importer, named, rep, src=path)
            if why is not None:
                raise InputError(
                    f"{path}: QdstrmImporter cannot import it ({why})", _BAD_REPORT_HINT
                )
        nsys_tool.check_can_open(rep, nsys)
        exported, fmt = _export(nsys, rep, tmp, path)
        if fmt == "parquetdir":
            run = read_parquetdir(exported, kind, source=path)
        else:
            src = reader.SqliteSource(exported)
            try:
                run = reader.read_nsys(src, path, kind)
            finally:
                src.close()
    version = nsys_tool.tool_version(nsys)
    made = nsys_tool.report_version(path)
    run.metadata["nsys_export_tool_version"] = nsys_tool.fmt_version(version) if version else None
    run.metadata["nsys_report_version"] = nsys_tool.fmt_version(made) if made else None
    run.metadata["nsys_export_format"] = fmt
    return run
