"""What the commands share: argument groups and their checks, and the one way a command speaks
on stderr.

Stage: CLI. Each command module (parse, info, compare, whatif, export, capture, bisect) imports
this and no other command (an import-linter contract, "the commands are independent").
Imported when the parser is built, so it imports only the standard library and tracediff.base
at module level: `tracediff capture` runs where polars and pyarrow are not installed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracediff.base.inert import safe

if TYPE_CHECKING:
    from capture.runner import CaptureSpec


def say(msg: str) -> None:
    """A diagnostic line on stderr, `tracediff: MSG`, made inert (a file name may hold ESC or
    a newline): what a command tells the user, always (a log keeps it)."""
    print(f"tracediff: {safe(msg)}", file=sys.stderr, flush=True)


def progress(msg: str) -> None:
    """Progress of long work, `tracediff: MSG…` on stderr, only when stderr is a terminal (a
    log or a pipe gets none; stdout is data)."""
    if sys.stderr.isatty():
        print(f"tracediff: {safe(msg)}…", file=sys.stderr)


# --- numbers --------------------------------------------------------------------------------------

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


# --- inputs and the Dask cluster ------------------------------------------------------------------


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


# --- the workload: the options capture and bisect share -------------------------------------------


def add_workload_args(p: argparse.ArgumentParser, note: str = "") -> None:
    """nsys's options, launch stacks, the workload's PYTHONPATH and NVTX shim, the preset's
    options and `-- COMMAND`: capture's and bisect's (`note`: added to each group's title)."""
    n = p.add_argument_group(f"nsys{note}")
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
    w = p.add_argument_group(f"workload{note}")
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

    sglang_eagle3.add_arguments(p.add_argument_group(f"--preset sglang-eagle3{note}"))
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
