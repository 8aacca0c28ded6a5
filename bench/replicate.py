"""Build a large nsys export by replicating a real report's timeline N times.

    bench/replicate.py [--src tests/data/h200/g_good.sqlite] [--times N | --kernels K] -o OUT.sqlite
    bench/replicate.py --src G_GOOD_PQTDIR [--times N | --kernels K] -o OUT_DIR   (parquetdir)

A folder as --src (an `nsys export --type parquetdir` of a real report) gives a parquetdir
output with nsys's own column types; a .sqlite gives an SQLite export.

Copy k (0..N-1) of every event table is shifted by k x (report span + 1 ms), and its
correlationIds (and NVTX rangeIds) are offset by k x (max id + 1), so every launch still joins
to exactly one API call of its own copy. Every other table (StringIds, TARGET_INFO_*, ENUM_*,
META_DATA_*) is copied once. The whole copy runs inside SQLite (ATTACH + INSERT ... SELECT), so
building a 1 M-kernel file takes seconds. The output is a benchmark input, never a test fixture.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SRC = ROOT / "tests" / "data" / "h200" / "g_good.sqlite"

# event tables: (time columns to shift, id columns to offset)
EVENT_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": (["start", "end"], ["correlationId"]),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (["start", "end"], ["correlationId"]),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (["start", "end"], ["correlationId"]),
    "CUPTI_ACTIVITY_KIND_MEMSET": (["start", "end"], ["correlationId"]),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (["start", "end"], ["correlationId"]),
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": ([], ["correlationId"]),
    "CUDA_GRAPH_NODE_EVENTS": (["start", "end"], []),
    "NVTX_EVENTS": (["start", "end"], ["rangeId"]),
}
# NVTX DomainCreate rows are per process, not per cycle: copy them once.
NVTX_ONCE = "eventType IN (33, 39, 75, 76)"


def kernel_count(src: Path) -> int:
    if src.is_dir():
        import pyarrow.parquet as pq

        return int(pq.read_metadata(src / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").num_rows)
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    (n,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    return int(n)


def replicate(src: Path, out: Path, times: int) -> dict[str, int]:
    if out.exists():
        out.unlink()
    tmp = out.with_name(f".{out.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("ATTACH DATABASE ? AS src", (f"file:{src}?mode=ro",))
    tables = [
        (n, sql)
        for n, sql in con.execute("SELECT name, sql FROM src.sqlite_master WHERE type='table'")
    ]
    for _name, sql in tables:
        con.execute(sql)
    span_lo, span_hi, max_corr = 1 << 62, 0, 0
    for name in EVENT_TABLES:
        if name not in dict(tables):
            continue
        cols = {r[1] for r in con.execute(f"PRAGMA src.table_info({name})")}
        if "start" in cols:
            lo, hi = con.execute(
                f"SELECT min(start), max(coalesce(end, start)) FROM src.{name}"
            ).fetchone()
            if lo is not None:
                span_lo, span_hi = min(span_lo, lo), max(span_hi, hi)
        if "correlationId" in cols:
            (mc,) = con.execute(f"SELECT max(correlationId) FROM src.{name}").fetchone()
            max_corr = max(max_corr, mc or 0)
        if "rangeId" in cols:
            (mr,) = con.execute(f"SELECT max(rangeId) FROM src.{name}").fetchone()
            max_corr = max(max_corr, mr or 0)
    period = span_hi - span_lo + 1_000_000
    id_step = max_corr + 1
    con.execute("BEGIN")
    for name, _sql in tables:
        cols = [r[1] for r in con.execute(f"PRAGMA src.table_info({name})")]
        col_list = ", ".join(f'"{c}"' for c in cols)
        if name not in EVENT_TABLES:
            con.execute(f"INSERT INTO main.{name} SELECT {col_list} FROM src.{name}")
            continue
        shift, ids = EVENT_TABLES[name]
        where = ""
        if name == "NVTX_EVENTS":
            con.execute(
                f"INSERT INTO main.{name} SELECT {col_list} FROM src.{name} WHERE {NVTX_ONCE}"
            )
            where = f"WHERE NOT ({NVTX_ONCE})"
        exprs = []
        for c in cols:
            if c in shift:
                exprs.append(f'"{c}" + :k * {period}')
            elif c in ids:
                exprs.append(f'"{c}" + :k * {id_step}')
            else:
                exprs.append(f'"{c}"')
        sel = f"SELECT {', '.join(exprs)} FROM src.{name} {where}"
        for k in range(times):
            con.execute(f"INSERT INTO main.{name} ({col_list}) {sel}", {"k": k})
    con.execute("COMMIT")
    counts = {
        n: con.execute(f"SELECT count(*) FROM main.{n}").fetchone()[0]
        for n in EVENT_TABLES
        if n in dict(tables)
    }
    con.execute("DETACH DATABASE src")
    con.close()
    os.replace(tmp, out)
    return counts


def replicate_parquetdir(src: Path, out: Path, times: int) -> dict[str, int]:
    """The same replication on an `nsys export --type parquetdir` folder, in polars."""
    import polars as pl

    frames = {p.name[: -len(".parquet")]: pl.read_parquet(p) for p in sorted(src.glob("*.parquet"))}
    lo, hi, max_id = 1 << 62, 0, 0
    for name in EVENT_TABLES:
        df = frames.get(name)
        if df is None or df.is_empty():
            continue
        if "start" in df.columns:
            lo = min(lo, int(df["start"].min()))  # type: ignore[arg-type]
            hi = max(hi, int(df.select(pl.coalesce("end", "start").max()).item()))
        for c in ("correlationId", "rangeId"):
            if c in df.columns and df[c].max() is not None:
                max_id = max(max_id, int(df[c].max()))  # type: ignore[arg-type]
    period, id_step = hi - lo + 1_000_000, max_id + 1
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.mkdir(parents=True)
    counts = {}
    for name, df in frames.items():
        if name in EVENT_TABLES:
            shift, ids = EVENT_TABLES[name]
            once = (
                df.filter(pl.col("eventType").is_in([33, 39, 75, 76]))
                if name == "NVTX_EVENTS"
                else df.clear()
            )
            body = (
                df.filter(~pl.col("eventType").is_in([33, 39, 75, 76]))
                if name == "NVTX_EVENTS"
                else df
            )
            copies = [
                body.with_columns(
                    *[
                        (pl.col(c) + pl.lit(k * period).cast(df.schema[c]))
                        for c in shift
                        if c in df.columns
                    ],
                    *[
                        (pl.col(c) + pl.lit(k * id_step).cast(df.schema[c]))
                        for c in ids
                        if c in df.columns
                    ],
                )
                for k in range(times)
            ]
            df = pl.concat([once, *copies])
            counts[name] = df.height
        df.write_parquet(tmp / f"{name}.parquet", statistics=False)
    tmp.rename(out)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--times", type=int, help="number of copies of the timeline")
    g.add_argument("--kernels", type=int, default=1_000_000, help="at least this many kernels")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    if args.output.exists() and not args.force:
        print(f"replicate: {args.output}: already exists (pass --force)", file=sys.stderr)
        return 1
    times = args.times
    if times is None:
        times = -(-args.kernels // kernel_count(args.src))
    t0 = time.perf_counter()
    if args.src.is_dir():
        if args.output.exists():
            shutil.rmtree(args.output)
        counts = replicate_parquetdir(args.src, args.output, times)
    else:
        counts = replicate(args.src, args.output, times)
    dt = time.perf_counter() - t0
    print(f"{'table':<40} {'rows':>12}")
    for name, n in counts.items():
        print(f"{name:<40} {n:>12,}")
    files = list(args.output.glob("*")) if args.output.is_dir() else [args.output]
    size = sum(f.stat().st_size for f in files)
    print(f"x{times} of {args.src.name} -> {args.output} ({size / 2**20:.0f} MiB) in {dt:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
