"""`tracediff parse REPORT|FOLDER|FILE... -o RUN.arrow [--scheduler ADDRESS]`: any supported
input → one run file.

Several files (or a folder of one run's per-rank files) are one run: read in parallel (a local
pool, or with --scheduler one file per Dask worker: parse/pool.py `OnDask`) and joined here
(tracediff/parse/ranks/combine.py), per-file progress on stderr."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracediff.commands.common import add_allow_missing, add_scheduler, open_scheduler, say


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "report",
        type=Path,
        nargs="+",
        help=".nsys-rep, .sqlite, .qdstrm, parquetdir folder, Kineto .json[.gz]; several files "
        "(or a folder of per-rank files) are the files of one run",
    )
    p.add_argument(
        "--layout",
        choices=["auto", "ranks"],
        default="auto",
        help="a folder's files are one run's ranks when their names say so (auto), or always "
        "(ranks: e.g. nsys reports named by host)",
    )
    add_allow_missing(p)
    p.add_argument("--jobs", type=int, help="files read at once (default: the cores)")
    add_scheduler(p, "read each file on a Dask distributed cluster")
    p.add_argument("-o", "--output", type=Path, required=True, help="run file to write (RUN.arrow)")
    p.add_argument("--force", action="store_true", help="overwrite the output if it exists")
    p.add_argument("--label", help="label stored in the run (default: file stem)")


def run(args: argparse.Namespace) -> int:
    from tracediff.base.errors import OutputError, UsageError
    from tracediff.base.outputs import refuse_inputs
    from tracediff.parse import load
    from tracediff.parse.load import load_files
    from tracediff.parse.ranks.gpus import used_devices
    from tracediff.runs.runfile import write_run

    out: Path = args.output
    refuse_inputs(out, list(args.report), "run file")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: give a number of processes >= 1")
    if out.exists() and not args.force:
        raise OutputError(f"{out}: already exists", "pass --force to overwrite it")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():  # checked before a long parse, not after
        raise OutputError(f"{out}: folder {parent} does not exist", "create it first")

    if args.scheduler and args.jobs is not None:
        raise UsageError("--jobs sizes the local pool: give --scheduler or --jobs, not both")
    conn = open_scheduler(args)  # before the work: a missing Dask or an unreachable scheduler
    try:
        executor = None
        if conn is not None:
            from tracediff.parse.pool import OnDask

            executor = OnDask(conn)
        if len(args.report) > 1:
            run_ = load_files(
                args.report,
                say=say,
                workers=args.jobs,
                executor=executor,
                allow_missing_ranks=args.allow_missing_ranks,
            )
        else:
            run_ = load(
                args.report[0],
                layout=args.layout,
                say=say,
                workers=args.jobs,
                executor=executor,
                allow_missing_ranks=args.allow_missing_ranks,
            )
    finally:
        if conn is not None:
            conn.close()
    if args.label:
        run_.metadata["label"] = args.label
    used_devices(run_)  # kept with the record counts: a compare's GPU matching reads it back
    for w in run_.warnings:
        say(f"warning: {w}")
    write_run(run_, out, force=args.force)
    if run_.checksums is False:  # said after the write, so a failed one stays one line
        say(
            f"warning: {args.report[0]}: an older run file without checksums: "
            f"damage to it cannot be detected, and {out}'s checksums cover what was read"
        )
    k = run_.table("kernels").num_rows
    print(
        f"wrote {out} ({k} kernels, {run_.table('nvtx_ranges').num_rows} NVTX ranges)",
        file=sys.stderr,
    )
    return 0
