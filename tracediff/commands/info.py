"""`tracediff info RUN|REPORT [--format json]`: what a run holds.

The summary: tracediff/runinfo.py; the output and its JSON schema: tracediff/report/info.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path, help="run file or any report tracediff can parse")
    p.add_argument("--format", choices=["table", "json"], default="table")


def run(args: argparse.Namespace) -> int:
    from tracediff.parse import load
    from tracediff.report.info import render
    from tracediff.report.text import safe
    from tracediff.runinfo import summarize

    info = summarize(load(args.path))
    if args.format == "table":  # JSON holds them; the table's reader sees them on stderr
        for w in info["warnings"]:
            print(f"tracediff: warning: {safe(w)}", file=sys.stderr)
        if info["run_file_checksums"] is False:
            print(
                f"tracediff: warning: {safe(str(args.path))}: an older run file without checksums: damage "
                "to it cannot be detected (parse the report again to add them)",
                file=sys.stderr,
            )
    sys.stdout.write(render(info, args.format))
    return 0
