"""`tracediff compare BASE HEAD`: the TUI on a terminal, a report otherwise.

Exit codes: 0 ok; 1 error; 2 usage; 3 `--fail-above PCT` tripped (a significant regression above
PCT); 4 `--fail-above` cannot decide (the rule: tracediff/engine/statistics/gate.py, README "CI gate").
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from tracediff.commands.common import (
    add_layout,
    add_scheduler,
    check_memory_limit,
    count,
    progress,
    say,
)

FAIL_EXIT = 3
UNDECIDED_EXIT = 4
"""`--fail-above`: the gate cannot decide (no CI, too few runs, nothing finite to judge)."""


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "base", type=Path, help="the good run: run file (.arrow) or any report tracediff parses"
    )
    p.add_argument("head", type=Path, help="the run to explain")
    p.add_argument(
        "--cycle",
        help="NVTX range (or Kineto annotation) that delimits a cycle: NAME or DOMAIN:NAME; "
        "'whole' compares whole runs; default: found automatically",
    )
    p.add_argument(
        "--format",
        choices=["table", "markdown", "json", "csv"],
        help="print a report (default: the TUI on a terminal, a table otherwise)",
    )
    p.add_argument(
        "--top", type=count(1), default=15, help="contributors shown in table/markdown (default 15)"
    )
    p.add_argument(
        "--fail-above",
        type=float,
        metavar="PCT",
        help=f"CI gate: exit {FAIL_EXIT} when GPU work (or, with run sets, the cycle time) grew "
        f"significantly by more than PCT percent of base's cycle time; exit {UNDECIDED_EXIT} "
        "when it cannot decide (README: CI gate)",
    )
    p.add_argument(
        "--bootstrap",
        type=count(10),
        default=1000,
        help="bootstrap resamples for the CIs (default 1000)",
    )
    p.add_argument("--no-tui", action="store_true", help="print the report even on a terminal")
    p.add_argument(
        "--whatif",
        type=count(1),
        nargs="?",
        const=5,
        default=None,
        metavar="N",
        help="replay HEAD with each of the top N contributors (default 5) taken from "
        "BASE and report the time each would recover (see `tracediff whatif`)",
    )
    p.add_argument(
        "--export",
        type=Path,
        metavar="DIR",
        help="also write the diff tables as a Parquet dataset (docs/parquet-schema.md)",
    )
    p.add_argument(
        "--perfetto",
        type=Path,
        metavar="OUT.json[.gz]",
        help="also write base and head, cycle-aligned, as a Perfetto/Chrome JSON trace",
    )
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the report as one self-contained HTML page (pictures, the whole "
        "table; opens from disk, fetches nothing); with --fail-above, written either way",
    )
    p.add_argument(
        "--repo",
        type=Path,
        metavar="DIR",
        help="the workload's git checkout: rank the commits between base and head by how much "
        "of the change runs through the code each touched (needs launch stacks)",
    )
    p.add_argument(
        "--commits",
        metavar="A..B",
        help="with --repo: base's and head's commits (default: from the capture manifests)",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite --export/--perfetto/--html outputs"
    )
    add_scheduler(p)
    add_layout(p)
    p.add_argument(
        "--device-map",
        metavar="BASE=HEAD[,...]",
        help="pair base GPU BASE with head GPU HEAD (device ids as `info` lists them); default: "
        "by rank, else by id, else by order with a warning (README: One run from many files)",
    )


def run(args: argparse.Namespace) -> int:
    from tracediff.base.errors import UsageError

    if args.fail_above is not None and not (
        math.isfinite(args.fail_above) and args.fail_above >= 0
    ):
        raise UsageError(f"--fail-above {args.fail_above}: give a percentage >= 0")
    tty = sys.stdout.isatty() and sys.stdin.isatty()
    use_tui = tty and args.format is None and not args.no_tui

    from tracediff.base.outputs import overlaps, refuse_inputs

    if (
        args.export
        and args.perfetto
        and (overlaps(args.export, args.perfetto) or overlaps(args.perfetto, args.export))
    ):
        raise UsageError(
            f"--export {args.export} and --perfetto {args.perfetto} overlap: give them "
            "separate paths (the trace outside the export folder)"
        )
    if args.export:  # refuse an existing output or an input as output now, not after the work
        from tracediff.export.parquet import check_output_dir

        refuse_inputs(args.export, [args.base, args.head], "--export folder")
        check_output_dir(args.export, force=args.force)
    if args.perfetto:
        from tracediff.export.perfetto import check_output_file

        if str(args.perfetto) == "-":  # stdout carries the report: two documents on one stream
            raise UsageError(
                "--perfetto -: the trace is not written to stdout, which carries the report",
                "give a file name such as diff.json.gz",
            )
        refuse_inputs(args.perfetto, [args.base, args.head], "--perfetto trace")
        check_output_file(args.perfetto, force=args.force)
    if args.html:
        check_html_arg(args)
    if args.commits is not None and args.repo is None:
        raise UsageError("--commits needs --repo DIR (the git checkout the commits are in)")
    if args.repo is not None:
        from tracediff.suspects import gitlog

        gitlog.toplevel(args.repo)  # refuse a non-repo before the work
    executor = None
    check_memory_limit(args)
    if args.scheduler:  # before the work: a missing Dask or an unreachable scheduler
        from tracediff.engine.pipeline.cluster import open_executor

        executor = open_executor(args.scheduler, args.memory_limit)
    try:
        return _compare(args, executor, use_tui)
    finally:
        if executor is not None:
            executor.close()


def check_html_arg(args: argparse.Namespace) -> None:
    """Refuse an --html path that is an input, overlaps another output, or exists (no
    --force), before the work."""
    from tracediff.base.errors import UsageError
    from tracediff.base.outputs import overlaps, refuse_inputs
    from tracediff.report.html.write import check_html_output

    refuse_inputs(args.html, [args.base, args.head], "--html page")
    for flag in ("export", "perfetto"):
        other = getattr(args, flag, None)
        if other and (overlaps(args.html, other) or overlaps(other, args.html)):
            raise UsageError(
                f"--html {args.html} and --{flag} {other} overlap: give separate paths"
            )
    check_html_output(args.html, force=args.force)


def _compare(args: argparse.Namespace, executor: Any, use_tui: bool) -> int:
    from functools import partial

    from tracediff.base.errors import UsageError
    from tracediff.base.outputs import Transaction
    from tracediff.engine.compare import compare, reduce_first
    from tracediff.engine.inputs import load_sides

    # --whatif replays and --repo ranks a run's own ops: those read the runs here
    ranks_on = executor if not (args.whatif or args.repo is not None) else None
    # a report alone reads no op: the ops are kept only for what reads them
    keep_ops = (
        use_tui
        or bool(args.html or args.export or args.perfetto or args.whatif)
        or args.repo is not None
    )
    sides = load_sides(
        args.base,
        args.head,
        args.layout,
        progress,
        args.device_map,
        ranks_on,
        allow_missing_ranks=args.allow_missing_ranks,
        # base reduced before head is read, its events let go (on a cluster: on its workers)
        reduce_base=(
            None
            if keep_ops or executor
            else partial(reduce_first, cycle=args.cycle, n_boot=args.bootstrap)
        ),
    )
    bases, heads = sides.bases, sides.heads
    if args.whatif and (len(bases) > 1 or len(heads) > 1):
        raise UsageError(
            "--whatif replays one run's timeline: give one run per side (a run set's run file, "
            "e.g. RUNSET/run-01/run.arrow), or leave --whatif out"
        )
    result = compare(
        bases,
        heads,
        cycle=args.cycle,
        n_boot=args.bootstrap,
        progress=progress,
        labels=sides.labels,
        executor=executor,
        keep_ops=keep_ops,
        first=sides.first,
    )
    result = sides.onto(result)
    suspects = None
    if args.repo is not None:
        from tracediff.suspects import suspects_for

        progress(f"ranking the commits of {args.repo}")
        suspects = suspects_for(result, bases, heads, args.repo, args.commits)
    whatif = None
    if args.whatif:
        from tracediff.replay import recover_top

        progress(f"replaying the top {args.whatif} contributors")
        whatif = recover_top(result, args.whatif)
    with Transaction() as txn:  # a failure below removes the outputs written above
        code = _outputs_and_report(args, result, whatif, use_tui, txn, suspects)
    return code


def _outputs_and_report(
    args: argparse.Namespace,
    result: Any,
    whatif: Any,
    use_tui: bool,
    txn: Any,
    suspects: Any = None,
) -> int:
    from tracediff.report import render

    if args.export:
        from tracediff.export.parquet import export_comparison

        progress(f"writing {args.export}")
        export_comparison(result, args.export, force=args.force, txn=txn)
    if args.perfetto:
        from tracediff.export.perfetto import write_perfetto

        progress(f"writing {args.perfetto}")
        write_perfetto(result, args.perfetto, force=args.force, txn=txn)
    decision = None
    if args.fail_above is not None:
        from tracediff.engine.statistics.gate import gate

        decision = gate(result, args.fail_above)
    if args.html:
        from tracediff.report.html import render_compare
        from tracediff.report.html.write import write_html

        progress(f"writing {args.html}")
        page = render_compare(result, whatif=whatif, suspects=suspects, gate=decision)
        write_html(page, args.html, force=args.force, txn=txn)
    if use_tui:
        try:
            from tracediff.tui.app import run_app
        except ModuleNotFoundError:
            use_tui = False
        else:
            run_app(result, suspects=suspects)
    if not use_tui:
        fmt = args.format or "table"
        if fmt != "table":  # table prints them itself; machine formats keep stdout pure data
            for w in result.warnings:
                say(f"warning: {w}")
        sys.stdout.write(render(result, fmt, args.top, whatif=whatif, suspects=suspects))
    if decision is not None:
        say(f"gate: {decision.decision}: {decision.reason}")
        return {"fail": FAIL_EXIT, "undecided": UNDECIDED_EXIT}.get(decision.decision, 0)
    return 0
