"""`tracediff capture --commit REF -o OUTDIR (--preset NAME ... | -- COMMAND ...)`.

Profiles a workload at a git commit under nsys and leaves OUTDIR/run.arrow (plus report.nsys-rep,
manifest.json, capture.log), then prints on stderr the `tracediff compare` command to run next.
stdout stays empty: the workload's own output goes to stderr and OUTDIR/capture.log.

Exit codes: 0 captured; 1 the workload failed (report kept), a tool failed, or bad input;
2 usage; 130 interrupted (the partial capture is kept, marked partial=true).
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--commit", required=True, metavar="REF", help="git commit, branch or tag to profile"
    )
    p.add_argument(
        "--repo", type=Path, default=Path("."), help="git checkout of the code (default: .)"
    )
    p.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUTDIR", help="folder to create"
    )
    p.add_argument("--force", action="store_true", help="replace OUTDIR if it exists")
    p.add_argument("--label", help="label stored in the run (default: the ref)")
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
    from tracediff.errors import UsageError

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


def _suggest_base(outdir: Path, explicit: Path | None) -> Path | None:
    """The baseline to name in the compare hint: --base, else the newest sibling capture."""
    if explicit is not None:
        return explicit
    parent = outdir.resolve().parent
    found = [
        d / "run.arrow"
        for d in parent.iterdir()
        if d.is_dir()
        and d.resolve() != outdir.resolve()
        and (d / "run.arrow").is_file()
        and (d / "manifest.json").is_file()
    ]
    return max(found, key=lambda f: f.stat().st_mtime) if found else None


def run(args: argparse.Namespace) -> int:
    from capture.runner import CaptureSpec, capture
    from tracediff.errors import UsageError

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if args.preset and command:
        raise UsageError("give either --preset or `-- COMMAND`, not both")
    spec = CaptureSpec(
        repo=args.repo,
        ref=args.commit,
        outdir=args.output,
        command=command,
        label=args.label,
        force=args.force,
        trace=args.trace,
        nsys=args.nsys,
        extra_nsys_args=list(args.nsys_arg),
        nvtx_shim=args.nvtx_shim,
    )
    preset_range: list[str] = []
    if args.preset:
        built = importlib.import_module("capture.presets.sglang_eagle3").build(args)
        spec.preset = args.preset
        spec.command = built["command"]
        spec.pythonpath = built["pythonpath"]
        spec.nvtx_shim = spec.nvtx_shim or built["nvtx_shim"]
        spec.python = built["python"]
        preset_range = built["capture_range"]
    elif not command:
        raise UsageError(
            "no workload given", "add --preset NAME, or `-- COMMAND ARGS...` at the end"
        )
    if args.pythonpath:
        spec.pythonpath = list(args.pythonpath)
    spec.capture_range = capture_range_args(args, preset_range)

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
    if result.run_file is not None:
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
