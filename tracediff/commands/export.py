"""`tracediff export RUN... --parquet DIR [--force]`: every table of the runs as a Parquet dataset.

Inputs are run files or any report `tracediff parse` reads. stdout: rows written per table;
stderr: progress (on a terminal). docs/parquet-schema.md describes the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="run file (.arrow) or any report tracediff parses; several go into one dataset",
    )
    p.add_argument(
        "--parquet",
        type=Path,
        required=True,
        metavar="DIR",
        help="folder to write: DIR/<table>/run=<label>/[device_id=<N>/]part-0.parquet",
    )
    p.add_argument("--force", action="store_true", help="replace DIR if it is an earlier export")


def run(args: argparse.Namespace) -> int:
    from tracediff.export.parquet import export_runs
    from tracediff.outputs import refuse_inputs

    refuse_inputs(args.parquet, args.runs, "--parquet folder")  # replacing it would delete them

    def say(msg: str) -> None:
        if sys.stderr.isatty():
            print(f"tracediff: {msg}…", file=sys.stderr)

    info = export_runs(args.runs, args.parquet, force=args.force, progress=say)
    tables = info["tables"]
    width = max(len(t) for t in tables)
    lines = [f"{'table':<{width}}  {'rows':>12}"]
    lines += [f"{t:<{width}}  {n:>12,}" for t, n in tables.items()]
    sys.stdout.write("\n".join(lines) + "\n")
    print(f"tracediff: wrote {len(info['runs'])} run(s) to {args.parquet}", file=sys.stderr)
    return 0
