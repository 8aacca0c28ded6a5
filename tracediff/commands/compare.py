"""`tracediff compare BASE HEAD`: the TUI on a terminal, a report otherwise.

Exit codes: 0 ok; 1 error; 2 usage; 3 `--fail-above PCT` tripped (a significant regression above
PCT); 4 `--fail-above` cannot decide (the rule: tracediff/engine/statistics/gate.py, README "CI gate").
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAIL_EXIT = 3
UNDECIDED_EXIT = 4
"""`--fail-above`: the gate cannot decide (no CI, too few runs, nothing finite to judge)."""
MAX_COUNT = 1_000_000
"""The largest --top, --whatif or --bootstrap taken (far past any table's rows; a number past
64 bits overflowed in polars with a traceback)."""


def count(lo: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `lo` to MAX_COUNT (argparse's one-line error else)."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if not lo <= n <= MAX_COUNT:
            raise argparse.ArgumentTypeError(f"{text}: give a number from {lo} to {MAX_COUNT}")
        return n

    return parse


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


def add_layout(p: argparse.ArgumentParser) -> None:
    """`--layout auto|runs|ranks` of compare and info: how a folder of files is read
    (tracediff/parse/sides.py `Layout`, `resolve`)."""
    p.add_argument(
        "--layout",
        choices=["auto", "runs", "ranks"],
        default="auto",
        help="a folder of files is a run set (runs: repeats of one workload) or one run's per-rank "
        "files (ranks: e.g. nsys reports named by host); default: told apart by their data, the "
        "names a hint (README: What tracediff decided your inputs are)",
    )
    add_allow_missing(p)


def add_allow_missing(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-missing-ranks",
        action="store_true",
        help="read a job whose traces name a world size larger than the rank files present "
        "(default: refused, naming the missing ranks)",
    )


def add_scheduler(
    p: argparse.ArgumentParser, what: str = "reduce each run on a Dask distributed cluster"
) -> None:
    """`--scheduler` / `--memory-limit` (tracediff/base/daskclient.py; compare: engine/pipeline/cluster.py,
    parse: parse/pool.py)."""
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help=f"{what}: tcp://HOST:8786 (a running "
        "scheduler; the workers must see the same files) or local:N (N local worker "
        "processes); needs pip install 'tracediff[dask]'",
    )
    p.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="with --scheduler local:N: each worker's memory limit (e.g. 4GiB; default: the "
        "machine's memory / N)",
    )


def check_memory_limit(args: argparse.Namespace) -> None:
    from tracediff.base.errors import UsageError

    if args.memory_limit and not (args.scheduler or "").startswith("local:"):
        raise UsageError("--memory-limit sets local:N workers' limit: give --scheduler local:N")


def open_scheduler(args: argparse.Namespace) -> Any:
    """The daskclient.Connection `--scheduler` names (None without it); the caller closes it."""
    check_memory_limit(args)
    if not args.scheduler:
        return None
    from tracediff.base.daskclient import Connection

    return Connection(args.scheduler, args.memory_limit)


def run(args: argparse.Namespace) -> int:
    from tracediff.base.errors import UsageError

    if args.fail_above is not None and not (
        math.isfinite(args.fail_above) and args.fail_above >= 0
    ):
        raise UsageError(f"--fail-above {args.fail_above}: give a percentage >= 0")
    tty = sys.stdout.isatty() and sys.stdin.isatty()
    use_tui = tty and args.format is None and not args.no_tui

    def say(msg: str) -> None:
        if sys.stderr.isatty():
            print(f"tracediff: {msg}…", file=sys.stderr)

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
        return _compare(args, say, executor, use_tui)
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


def _compare(
    args: argparse.Namespace, say: Callable[[str], None], executor: Any, use_tui: bool
) -> int:
    from tracediff.base.errors import UsageError
    from tracediff.base.outputs import Transaction
    from tracediff.engine.compare import compare
    from tracediff.engine.inputs import load_sides

    # --whatif replays and --repo ranks a run's own ops: those read the runs here
    ranks_on = executor if not (args.whatif or args.repo is not None) else None
    sides = load_sides(
        args.base,
        args.head,
        args.layout,
        say,
        args.device_map,
        ranks_on,
        allow_missing_ranks=args.allow_missing_ranks,
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
        progress=say,
        labels=sides.labels,
        executor=executor,
    )
    result = sides.onto(result)
    suspects = None
    if args.repo is not None:
        from tracediff.suspects import suspects_for

        say(f"ranking the commits of {args.repo}")
        suspects = suspects_for(result, bases, heads, args.repo, args.commits)
    whatif = None
    if args.whatif:
        from tracediff.replay import recover_top

        say(f"replaying the top {args.whatif} contributors")
        whatif = recover_top(result, args.whatif)
    with Transaction() as txn:  # a failure below removes the outputs written above
        code = _outputs_and_report(args, result, whatif, use_tui, say, txn, suspects)
    return code


def _outputs_and_report(
    args: argparse.Namespace,
    result: Any,
    whatif: Any,
    use_tui: bool,
    say: Callable[[str], None],
    txn: Any,
    suspects: Any = None,
) -> int:
    from tracediff.report import render
    from tracediff.report.text import safe

    if args.export:
        from tracediff.export.parquet import export_comparison

        say(f"writing {args.export}")
        export_comparison(result, args.export, force=args.force, txn=txn)
    if args.perfetto:
        from tracediff.export.perfetto import write_perfetto

        say(f"writing {args.perfetto}")
        write_perfetto(result, args.perfetto, force=args.force, txn=txn)
    decision = None
    if args.fail_above is not None:
        from tracediff.engine.statistics.gate import gate

        decision = gate(result, args.fail_above)
    if args.html:
        from tracediff.report.html import render_compare
        from tracediff.report.html.write import write_html

        say(f"writing {args.html}")
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
                print(f"tracediff: warning: {safe(w)}", file=sys.stderr)
        sys.stdout.write(render(result, fmt, args.top, whatif=whatif, suspects=suspects))
    if decision is not None:
        print(f"tracediff: gate: {decision.decision}: {safe(decision.reason)}", file=sys.stderr)
        return {"fail": FAIL_EXIT, "undecided": UNDECIDED_EXIT}.get(decision.decision, 0)
    return 0
