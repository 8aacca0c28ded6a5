"""`tracediff whatif BASE HEAD --take SELECTOR...`: replay HEAD with chosen durations from BASE.

SELECTOR: `all`; a kind (kernel, memcpy, memset, collective, gap); a contributor id from
`tracediff compare` (c3); `name:REGEX`; or a plain pattern (a regex searched in contributor names).
The output and its JSON schema: tracediff/report/whatif.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracediff.commands.common import add_allow_missing, count, progress


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "base", type=Path, help="the good run: run file (.arrow) or any report tracediff parses"
    )
    p.add_argument("head", type=Path, help="the run to replay")
    p.add_argument(
        "--take",
        nargs="+",
        action="extend",
        required=True,
        metavar="SELECTOR",
        help="contributors whose durations come from BASE: all, a kind (kernel, memcpy, memset, "
        "collective, gap), an id from `compare` (c3), name:REGEX, or a pattern",
    )
    p.add_argument(
        "--cycle",
        help="NVTX range that delimits a cycle (as for compare); default: found automatically",
    )
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--top", type=count(1), default=10, help="critical-path rows shown (default 10)")
    add_allow_missing(p)


def run(args: argparse.Namespace) -> int:
    from tracediff.base.errors import UsageError
    from tracediff.engine.compare import compare
    from tracediff.parse import load
    from tracediff.parse.sanity import check_pair
    from tracediff.parse.sides import resolve
    from tracediff.replay import predict
    from tracediff.report.whatif import render

    for given in (args.base, args.head):
        side = resolve(given)
        if side.is_run_set:
            raise UsageError(
                f"{given}: is a run set ({len(side.runs)} runs); what-if replays one run's "
                f"timeline: give one of its runs, e.g. {side.runs[0]}"
            )
    progress(f"reading {args.base}")
    allow = args.allow_missing_ranks
    base = load(resolve(args.base).runs[0], allow_missing_ranks=allow)
    progress(f"reading {args.head}")
    head = load(resolve(args.head).runs[0], allow_missing_ranks=allow)
    check_pair(base, head)
    from tracediff.parse.ranks.gpus import align_sides

    (base,), (head,), _ = align_sides([base], [head])  # GPUs matched as compare matches them
    result = compare(base, head, cycle=args.cycle, n_boot=200, progress=progress)
    progress("replaying")
    sys.stdout.write(render(predict(result, args.take, top=args.top), args.format))
    return 0
