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
import importlib
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capture.runner import CaptureSpec


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
    n = p.add_argument_group("nsys")
    n.add_argument(
        "--trace",
        default="auto",
        help="nsys -t value (default auto: cuda,nvtx with a GPU, nvtx without)",
    )
    n.add_argument(
        "--capture-range",
        choices=["none", "cudaProfilerApi", "nvtx"],
        default=None,
        help="start collecting at cudaProfilerStart or at an NVTX range (--nvtx-capture)",
    )
    n.add_argument("--nvtx-capture", metavar="NAME", help="range[@domain] that opens the capture")
    n.add_argument("--delay", type=float, metavar="S", help="start collecting after S seconds")
    n.add_argument("--duration", type=float, metavar="S", help="collect for S seconds")
    n.add_argument(
        "--nsys-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra `nsys profile` argument (repeatable), e.g. --nsys-arg=--gpu-metrics-devices=0",
    )
    n.add_argument(
        "--nsys", metavar="PATH", help="nsys binary (default: $TRACEDIFF_NSYS, PATH, /opt)"
    )
    n.add_argument(
        "--no-stacks",
        action="store_true",
        help="do not record launch stacks (default: an nsys function trace of the workload's "
        "own Python packages, when they have at most 2000 functions)",
    )
    n.add_argument(
        "--stack-module",
        action="append",
        metavar="MODULE",
        help="function-trace this module and its submodules for launch stacks (repeatable; "
        "default: every package at the top of the PYTHONPATH folders)",
    )
    w = p.add_argument_group("workload")
    w.add_argument(
        "--pythonpath",
        action="append",
        metavar="SUBDIR",
        help="worktree folder to put first on PYTHONPATH (repeatable; default: the root)",
    )
    w.add_argument(
        "--nvtx-shim",
        choices=["sglang-eagle"],
        help="inject cycle/draft/verify NVTX ranges into SGLang's EAGLE workers",
    )
    from capture.presets import sglang_eagle3

    sglang_eagle3.add_arguments(p.add_argument_group("--preset sglang-eagle3"))
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the workload, run in the worktree root, e.g. -- python bench.py --steps 20",
    )


def capture_range_args(args: argparse.Namespace, preset_default: list[str]) -> list[str]:
    from tracediff.base.errors import UsageError

    out: list[str] = []
    if args.capture_range == "nvtx" and not args.nvtx_capture:
        raise UsageError(
            "--capture-range nvtx needs --nvtx-capture NAME", "e.g. --nvtx-capture cycle"
        )
    if args.nvtx_capture and args.capture_range not in (None, "nvtx"):
        raise UsageError("--nvtx-capture goes with --capture-range nvtx")
    if args.nvtx_capture:
        # stop, not nsys's default stop-shutdown, which kills the workload (exit 143) at range end
        out += [
            "--capture-range=nvtx",
            f"--nvtx-capture={args.nvtx_capture}",
            "--capture-range-end=stop",
        ]
    elif args.capture_range == "cudaProfilerApi":
        out += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    elif args.capture_range is None and args.delay is None and args.duration is None:
        out += preset_default
    if args.delay is not None:
        out.append(f"--delay={args.delay:g}")
    if args.duration is not None:
        out.append(f"--duration={args.duration:g}")
    return out


def apply_preset(spec: Any, args: argparse.Namespace) -> list[str]:
    """Fill spec's workload from --preset NAME and its options (capture and bisect alike);
    returns the preset's default nsys capture-range options ([] without a preset)."""
    if not args.preset:
        return []
    built = importlib.import_module("capture.presets.sglang_eagle3").build(args)
    spec.preset = args.preset
    spec.command = built["command"]
    spec.pythonpath = built["pythonpath"]
    spec.nvtx_shim = spec.nvtx_shim or built["nvtx_shim"]
    spec.python = built["python"]
    return list(built["capture_range"])


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


def workload_spec(
    args: argparse.Namespace, ref: str, no_workload: str | None, **fields: Any
) -> CaptureSpec:
    """The capture spec of the options `capture` and `bisect` share: the workload (`-- COMMAND`
    or --preset NAME), nsys's options, the launch stacks, --pythonpath and the capture range, at
    `ref`; `fields`: the caller's own CaptureSpec fields. `no_workload`: the hint of the usage
    error when neither a command nor a preset is given (None: none is needed)."""
    from capture.runner import CaptureSpec
    from tracediff.base.errors import UsageError

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.preset and command:
        raise UsageError("give either --preset or `-- COMMAND`, not both")
    if no_workload is not None and not args.preset and not command:
        raise UsageError("no workload given", no_workload)
    spec = CaptureSpec(
        repo=args.repo,
        ref=ref,
        outdir=args.output,
        command=command,
        trace=args.trace,
        nsys=args.nsys,
        extra_nsys_args=list(args.nsys_arg),
        nvtx_shim=args.nvtx_shim,
        stacks=not args.no_stacks,
        stack_modules=args.stack_module,
        **fields,
    )
    preset_range = apply_preset(spec, args)
    if args.pythonpath:
        spec.pythonpath = list(args.pythonpath)
    spec.capture_range = capture_range_args(args, preset_range)
    return spec


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
        progress=lambda msg: print(f"tracediff: {msg}", file=sys.stderr, flush=True),
    )
    m = result.manifest
    print(
        f"tracediff: {m['git']['commit'][:12]} ran in {m['duration_s']} s "
        f"(workload exit {m['workload_exit_code']}); wrote {result.outdir}/",
        file=sys.stderr,
    )
    for w in result.warnings:
        print(f"tracediff: warning: {w}", file=sys.stderr)
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


def _say(msg: str) -> None:
    print(f"tracediff: {msg}", file=sys.stderr, flush=True)


def _run_sets(spec: Any, args: argparse.Namespace, variants: list[str] | None) -> int:
    from capture.runsets import capture_runsets

    t0 = time.monotonic()
    r = capture_runsets(spec, list(args.commit), args.repeat, variants, sys.stderr, _say)
    sets = [p.folder for p in r.sets]
    for w in r.warnings:
        _say(f"warning: {w}")
    if r.exit_code:
        n = r.captured + r.reused
        _say(
            f"error: {r.problem}; {n} finished "
            f"run{'s' if n != 1 else ''} kept: run the same command again to resume"
        )
        return r.exit_code
    _say(
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
