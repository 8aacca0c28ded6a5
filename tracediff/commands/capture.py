"""`tracediff capture --commit REF -o OUTDIR (--preset NAME ... | -- COMMAND ...)`.

Profiles a workload at a git commit under nsys and leaves OUTDIR/run.arrow (plus report.nsys-rep,
manifest.json, capture.log), then prints on stderr the `tracediff compare` command to run next.
stdout stays empty: the workload's own output goes to stderr and OUTDIR/capture.log.

With `--repeat N`, several `--commit`, or `--variants A,B` it writes run sets instead
(capture/runsets.py: layout, interleaved order, resume; tracediff/runs/runset.py: the index format):

    tracediff capture --commit A --commit B --repeat 5 -o runs -- python bench.py
    tracediff capture --commit HEAD --repeat 4 --variants good,bad -o runs -- \
        python bench.py --variant {variant}

Exit codes: 0 captured; 1 the workload failed (report kept), a tool failed, or bad input;
2 usage; 130 interrupted (the partial capture is kept, marked partial=true; a run-set call is
resumed by running it again).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from tracediff.commands.common import add_workload_args, say, workload_spec


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--commit",
        required=True,
        action="append",
        metavar="REF",
        help="git commit, branch or tag to profile (repeatable: one run set per commit)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="capture N runs per commit (and variant), interleaved, into run sets; "
        "the same command again resumes",
    )
    p.add_argument(
        "--variants",
        metavar="A,B,...",
        help="one run set per name, with {variant} in the command replaced by it",
    )
    p.add_argument(
        "--repo", type=Path, default=Path("."), help="git checkout of the code (default: .)"
    )
    p.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUTDIR", help="folder to create"
    )
    p.add_argument(
        "--force", action="store_true", help="replace OUTDIR if it exists (run sets: start over)"
    )
    p.add_argument("--label", help="label stored in the run (default: the ref)")
    p.add_argument(
        "--include-uncommitted",
        action="store_true",
        help="apply the checkout's uncommitted edits (git diff HEAD) to the worktree; HEAD only",
    )
    p.add_argument("--preset", choices=["sglang-eagle3"], help="a ready-made workload (see below)")
    p.add_argument(
        "--base",
        type=Path,
        metavar="RUN",
        help="baseline run file for the printed compare command (default: a sibling capture)",
    )
    add_workload_args(p)


def _suggest_base(outdir: Path, explicit: Path | None) -> Path | None:
    """The baseline to name in the compare hint: --base, else the newest good sibling capture
    (a failed or interrupted capture is never a baseline)."""
    from capture.runsets import good_capture

    if explicit is not None:
        return explicit
    parent = outdir.resolve().parent
    found = [
        d / "run.arrow"
        for d in parent.iterdir()
        if d.is_dir() and d.resolve() != outdir.resolve() and good_capture(d)
    ]
    return max(found, key=lambda f: f.stat().st_mtime) if found else None


def run(args: argparse.Namespace) -> int:
    from capture.runner import capture
    from tracediff.base.errors import UsageError

    variants = None if args.variants is None else args.variants.split(",")
    runsets = args.repeat != 1 or len(args.commit) > 1 or variants is not None
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: needs at least 1 run")
    if runsets and args.label and len(args.commit) * len(variants or [None]) > 1:
        raise UsageError("--label names one run set; this call writes several")
    spec = workload_spec(
        args,
        args.commit[0],
        "add --preset NAME, or `-- COMMAND ARGS...` at the end",
        label=args.label,
        force=args.force,
        include_uncommitted=args.include_uncommitted,
    )
    if runsets:
        return _run_sets(spec, args, variants)

    result = capture(
        spec,
        echo=sys.stderr,
        progress=say,
    )
    m = result.manifest
    print(
        f"tracediff: {m['git']['commit'][:12]} ran in {m['duration_s']} s "
        f"(workload exit {m['workload_exit_code']}); wrote {result.outdir}/",
        file=sys.stderr,
    )
    for w in result.warnings:
        say(f"warning: {w}")
    if result.run_file is not None and result.exit_code == 0:
        base = _suggest_base(result.outdir, args.base)
        head = shlex.quote(str(result.run_file))
        if base is not None:
            print(f"next: tracediff compare {shlex.quote(str(base))} {head}", file=sys.stderr)
        else:
            print(
                "next: capture the baseline (tracediff capture --commit BASE_REF -o BASE_DIR ...), "
                f"then: tracediff compare BASE_DIR/run.arrow {head}",
                file=sys.stderr,
            )
    if result.problem:  # last, so it is the line a user (or a CI log) sees
        print(
            f"tracediff: {'warning' if result.exit_code == 0 else 'error'}: {result.problem}",
            file=sys.stderr,
        )
    return result.exit_code


def _run_sets(spec: Any, args: argparse.Namespace, variants: list[str] | None) -> int:
    from capture.runsets import capture_runsets

    t0 = time.monotonic()
    r = capture_runsets(spec, list(args.commit), args.repeat, variants, sys.stderr, say)
    sets = [p.folder for p in r.sets]
    for w in r.warnings:
        say(f"warning: {w}")
    if r.exit_code:
        n = r.captured + r.reused
        say(
            f"error: {r.problem}; {n} finished "
            f"run{'s' if n != 1 else ''} kept: run the same command again to resume"
        )
        return r.exit_code
    say(
        f"wrote {len(sets)} run set{'s' if len(sets) != 1 else ''} of {args.repeat} runs in "
        f"{r.outdir}/ ({r.captured} captured, {r.reused} reused) in {time.monotonic() - t0:.0f} s"
    )
    q = [shlex.quote(str(f)) for f in sets]
    if len(q) > 1:
        for head in q[1:]:
            print(f"next: tracediff compare {q[0]} {head}", file=sys.stderr)
    else:
        base = shlex.quote(str(args.base)) if args.base else "BASE_DIR"
        if not args.base:
            print(
                "next: capture the baseline the same way (tracediff capture --commit BASE_REF "
                f"--repeat {args.repeat} -o BASE_DIR ...), then:",
                file=sys.stderr,
            )
        print(f"next: tracediff compare {base} {q[0]}", file=sys.stderr)
    return 0
