"""Nsight Systems report (SQLite export, Parquet folder, `.nsys-rep`, `.qdstrm`) → run-file tables.

Stage: parse. Input: an nsys export, schema 2.9 (nsys 2022.2) through 3.28 (2026.x). Output: a
`Run` with the tables of `tracediff.runs.schema`.

This package is the only place that knows nsys table and column names. reader.py runs the steps
(`read_nsys`, over any `Source`; `read_nsys_sqlite` for a `.sqlite` file); its parts:

    schema.py   nsys table and column names, types, enum values (the vocabulary)
    source.py   Read / Source / SqliteSource: raw tables as polars frames (C page decoder, ADBC)
    pages.py    SQLite b-tree pages -> Arrow columns (tracediff/parse/nsys/_sqlite_pages.c)
    columns.py  StringIds dictionary, enum labels, pid/tid split, schema-exact assembly
    tables.py   kernels, memops, api_calls, syncs, devices; the launch join
    nvtx.py     nvtx_ranges (domains, depth, payloads)
    events.py   cuda_events (CUDA event record / wait / sync, for the replay's edges)
    cli.py      `.nsys-rep` / `.qdstrm` through the nsys CLI; ParquetSource for Parquet folders

bench/ingest.py and bench/sqlite_fetch.py measure speed and memory.
"""

from typing import TYPE_CHECKING, Any

from .reader import read_nsys, read_nsys_sqlite

if TYPE_CHECKING:
    from .cli import read_report

__all__ = ["read_nsys", "read_nsys_sqlite", "read_report"]


def __getattr__(name: str) -> Any:
    """`read_report` on first use: cli.py pulls pyarrow.parquet (and pyarrow.compute with it)
    and the nsys tool finder, which reading a `.sqlite` export never needs (~0.1 CPU-s)."""
    if name == "read_report":
        from .cli import read_report

        return read_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
