"""`tracediff bisect --good REF --bad REF -o OUTDIR [--repeat N] (-- COMMAND ... | --preset NAME
| --pool DIR)`.

Finds the first-parent commit(s) between GOOD and BAD that made the workload slower: captures
run sets (N runs a commit, through `tracediff capture --repeat`'s code), compares them across runs,
binary-searches, and reports each culprit with its share of the change and what it moved in the
timeline (tracediff/bisect/bisection.py: the algorithm and the decision rule). Where the ends' runs carry
launch stacks, the search probes the top commit suspect (and its parent) first, within the
binary search's bound (tracediff/bisect/order.py; --no-suspects turns that off). OUTDIR keeps
one run set per commit (OUTDIR/<sha12>) and bisect.json; the same command again resumes. One bisect at a time on
an OUTDIR (OUTDIR/.bisect.lock); an existing folder that is not a bisection's is refused.

    tracediff bisect --good v1.2 --bad main -o bisect-runs -- python bench.py --steps 20

Pool (tracediff/bisect/pool.py): `--pool DIR` takes each commit's runs from DIR, the OUTDIR of
`tracediff capture --repeat N --commit A --commit B ... -o DIR` run elsewhere (e.g. a GPU host
that can only write .qdstrm files: they are imported here), instead of capturing.

Exit codes: 0 culprit(s) found; 1 error (an end does not run, bad input, a tool failed);
2 usage; 5 nothing to bisect, or not decided (GOOD and BAD not told apart across runs; the
message says which, and what would decide);
130 interrupted (the same command again resumes).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from tracediff.commands.common import add_workload_args, say, workload_spec

POOL_HELP = """\
pool: --pool DIR takes each commit's runs from DIR instead of capturing them. DIR is what
  tracediff capture --repeat N --commit A --commit B ... -o DIR
writes (DIR/runsets.json, and per commit DIR/<name>/runset.json + run-01/ ...: one run set per
commit, matched by the full hash in its runset.json; a folder of such outputs also works). A run
with only its report (report.qdstrm + manifest.json, from a GPU host without QdstrmImporter) is
imported here, as tracediff parse does. Pool runs are copied into OUTDIR/<sha12>/pool-NN/; the
step log's from_pool counts them. With no workload command, a commit whose pool runs cannot decide
is "undecided: pool exhausted" and the search goes around it (as a skipped commit); with the
pool's command given too, the missing runs are captured here.
Reports captured by hand: DIR/<commit>/ per commit, named by its hash (a unique prefix of >= 7
digits) or a ref in --repo, holding plain reports of repeated runs (.nsys-rep, .sqlite, .qdstrm,
Kineto; each file one run) or capture folders; copied into OUTDIR/<sha12>/hand-NN/. Their
capture order is unknown: not paired in rounds; no workload command can be mixed in.

not decided: at --max-runs the ends may be "not decided" (compare's one-look test calls the change
significant; bisect asks 1 % over all its looks): stderr prints the same command with the
--max-runs that would decide it; a larger --repeat or --max-runs on the same -o reuses every
capture.
"""


def add_parser(p: argparse.ArgumentParser) -> None:
    p.epilog = POOL_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--good", required=True, metavar="REF", help="a commit that is fast")
    p.add_argument("--bad", required=True, metavar="REF", help="a later commit that is slow")
    p.add_argument(
        "--repo", type=Path, default=Path("."), help="git checkout of the code (default: .)"
    )
    p.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUTDIR", help="run sets and state"
    )
    p.add_argument("--repeat", type=int, default=4, metavar="N", help="runs per commit (default 4)")
    p.add_argument(
        "--max-runs",
        type=int,
        metavar="M",
        help="runs at most per undecided commit (default 2N)",
    )
    p.add_argument(
        "--contributor", metavar="REGEX", help="follow the contributors whose name matches"
    )
    p.add_argument("--cycle", metavar="NAME", help="NVTX range that is one cycle (as compare)")
    p.add_argument(
        "--pool",
        type=Path,
        metavar="DIR",
        help="take runs from DIR (capture --repeat's OUTDIR) instead of capturing (see below)",
    )
    p.add_argument(
        "--no-suspects",
        action="store_true",
        help="plain binary search: do not probe the top commit suspect first (tracediff/bisect/order.py)",
    )
    p.add_argument("--preset", choices=["sglang-eagle3"], help="a ready-made workload (as capture)")
    p.add_argument(
        "--format", choices=["table", "markdown", "json"], default="table", help="stdout format"
    )
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the result as one self-contained HTML page: the steps, the culprits "
        "and each culprit's comparison with its parent (as compare --html draws it)",
    )
    p.add_argument("--force", action="store_true", help="overwrite the --html page")
    add_workload_args(p, " (as tracediff capture)")


def with_max_runs(argv: list[str], runs: int) -> list[str]:
    """The command line `tracediff ARGV` with --max-runs set to `runs` (before `--` COMMAND)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:cut], argv[cut:]
    out: list[str] = []
    skip = False
    for i, a in enumerate(head):
        if skip:
            skip = False
            continue
        if a == "--max-runs" and i + 1 < len(head):
            skip = True
            continue
        if a.startswith("--max-runs="):
            continue
        out.append(a)
    return ["tracediff", *out, "--max-runs", str(runs), *tail]


def _say(msg: str) -> None:
    say(f"bisect: {msg}")


def run(args: argparse.Namespace) -> int:
    from tracediff.bisect.bisection import BisectInterrupted, BisectSpec, NothingToBisect
    from tracediff.bisect.search import run_bisect

    no_workload = "add `-- COMMAND ARGS...` at the end, --preset NAME, or --pool DIR"
    spec = workload_spec(args, args.good, no_workload if args.pool is None else None)
    if args.html:
        from tracediff.base.outputs import refuse_inputs
        from tracediff.report.html.write import check_html_output

        refuse_inputs(args.html, [args.output, args.repo], "--html page")
        check_html_output(args.html, force=args.force)
    bspec = BisectSpec(
        capture=spec,
        good=args.good,
        bad=args.bad,
        repeat=args.repeat,
        max_runs=args.max_runs,
        contributor=args.contributor,
        cycle=args.cycle,
        pool=args.pool,
        suspects=not args.no_suspects,
    )
    try:
        result = run_bisect(bspec, _say)
    except NothingToBisect as e:
        if e.plan_max_runs:
            _say(f"to decide it: {shlex.join(with_max_runs(sys.argv[1:], e.plan_max_runs))}")
        if e.plan_longer is not None:
            k = e.plan_longer
            _say(
                f"or, at less capture time (about {k.seconds:.0f} s a side against "
                f"{k.seconds_now:.0f} s): runs {k.times}x as long (about {k.cycles} cycles a run; "
                f"the runs' spread is mostly cycle to cycle) and --repeat {k.runs}, on a new -o "
                "(an estimate from the ends' runs)"
            )
        raise
    except KeyboardInterrupt:  # between captures (during one, capture_runsets reports it)
        raise BisectInterrupted(
            "interrupted",
            f"every finished capture is kept in {args.output}: run the same "
            "command again to resume",
        ) from None
    from tracediff.report import bisect as report

    render = {
        "json": report.render_json,
        "markdown": report.render_markdown,
        "table": report.render_table,
    }
    out = render[args.format](result)
    if args.html:
        write_page(args, result)
    sys.stdout.write(out)
    cap = result["captures"]
    if result["uncertain_steps"]:
        _say(
            f"warning: {len(result['uncertain_steps'])} step(s) undecided at --max-runs were "
            "decided by closeness only: the culprit is a best guess (raise --max-runs)"
        )
    for c in result["culprits"]:
        _say(f"culprit {c['commit'][:12]}: {report.share_text(c)}")
    if result.get("first_bad_confirmed", True) is False:
        _say(
            "warning: no culprit's change was seen again on fresh interleaved runs of it and its "
            "parent: first_bad is a best guess (capture more runs: --repeat)"
        )
    failed = [e for e in result["steps"] if e.get("confirm_problem")]
    if failed:
        _say(
            f"warning: {len(failed)} confirmation(s) on fresh runs failed part-way (see "
            "confirm_problem in the steps): decided on the runs already captured, so a further "
            "culprit beside one may be missed"
        )
    _say(
        f"{cap['used']} captures used ({cap['captured_now']} now, {cap['reused']} reused); "
        f"bound {cap['bound']} + {cap['extra_runs']} extra + {cap['failed_runs']} failed"
        + (f" + {cap['confirm_runs']} confirm" if cap.get("confirm_runs") else "")
        + (f" + {cap['fresh_runs']} fresh end" if cap.get("fresh_runs") else "")
        + (f"; {cap['from_pool']} from the pool" if cap.get("from_pool") else "")
        + f"; wall time {result['wall_s']:.0f} s"
    )
    return 0


def write_page(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """`--html`: the page, with each culprit compared with its parent on their run sets in
    OUTDIR (a culprit whose run sets cannot be compared is drawn without its comparison, and
    the reason is said on stderr)."""
    from tracediff.base.errors import TracediffError
    from tracediff.engine.compare import compare
    from tracediff.engine.inputs import load_sides
    from tracediff.report.html.bisect_page import render_bisect
    from tracediff.report.html.write import write_html

    comparisons = {}
    for c in result["culprits"]:
        parent, culprit = (Path(result["outdir"]) / s[:12] for s in (c["parent"], c["commit"]))
        try:
            sides = load_sides(parent, culprit, "auto", lambda _m: None)
            comp = compare(sides.bases, sides.heads, cycle=args.cycle, labels=sides.labels)
        except TracediffError as e:
            _say(f"--html: {c['commit'][:12]} drawn without its comparison: {e}")
            continue
        comparisons[c["commit"]] = sides.onto(comp)
    _say(f"writing {args.html}")
    write_html(render_bisect(result, comparisons), args.html, force=args.force)
