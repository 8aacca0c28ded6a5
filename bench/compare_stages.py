"""Where a compare's CPU goes: process CPU (user + system, every thread: polars and OpenBLAS run
pools of their own) spent inside each stage function of `tracediff compare`, in-process.

    bench/compare_stages.py [--repeat N] -- compare BASE HEAD --format json

Each repeat is a fresh child process running the tracediff CLI with the functions below wrapped
(inclusive times: a stage's row holds its callees' rows); the table gives each row's median over
the repeats and its range. `imports` is the CPU of loading tracediff.cli and the wrapped
modules before the call. Figures of one window compare; the machine's load moves them.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

STAGES = """
engine.compare:compare engine.inputs:load_sides engine.pipeline.reduce:reduce_file
engine.ops:gpu_ops_counted engine.pipeline.reduce:_cut engine.cycle.ranges:by_ranges
engine.cycle.ranges:tag engine.cycle.find:cut engine.pipeline.reduce:reduce_cut
engine.cycle.align:sequences engine.cycle.align:align_to engine.cycle.align:slot_changes
engine.statistics.attribute:per_device_cycles engine.pipeline.reduce:_reduce
engine.pipeline.join:join engine.statistics.verdict:verdict engine.pipeline.join:contributions
engine.tables:attribution engine.statistics.stats:per_cycle_stats
engine.statistics.attribute:bootstrap_delta engine.statistics.attribute:_resample_weights
engine.statistics.stats:across_gpus engine.statistics.verdict:host_phases
parse.load:load parse.load:_read_report parse.nsys.reader:read_nsys parse.sanity:check_run
parse.identity:identify parse.nsys.tables:kernels_table parse.nsys.tables:memops_table
parse.nsys.nvtx:nvtx_table parse.nccl:collectives_from
""".split()
"""The stage functions wrapped (module:function under tracediff/). The parse rows are called
only for a report (`load`: each side read, checked and identified; `_read_report`: the reader
alone; its rows inclusive of the kernel table's decode on another thread, process CPU)."""


def _row(target: str) -> str:
    mod_name, fn_name = target.split(":")
    return f"{mod_name.rsplit('.', 1)[-1]}.{fn_name}"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _fresh_mib() -> float:
    """MiB of transparent huge pages faulted in so far, machine-wide (/proc/vmstat): each is a
    fresh 2 MiB the kernel zeroed (~0.5 s a GiB on the development VM). A quiet machine's figure."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("thp_fault_alloc "):
                    return 2.0 * int(line.split()[1])
    except OSError:
        pass
    return 0.0


METRICS = {"cpu": _cpu, "fresh": _fresh_mib}


def child(argv: list[str], metric: str = "cpu", extra: tuple[str, ...] = ()) -> dict[str, float]:
    """Run `tracediff ARGV` here with the stages wrapped; {row: CPU seconds} (or, with `fresh`,
    MiB of huge pages faulted in)."""
    _cpu = METRICS[metric]  # noqa: N806  # the measure each row takes
    origin = 0.0 if metric == "cpu" else _cpu()  # CPU: the process's own, from its start
    start = _cpu()
    import tracediff.cli  # sets the allocator and OpenBLAS variables before numpy loads

    spent: dict[str, float] = {}

    def wrap(row: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            before = _cpu()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[row] = spent.get(row, 0.0) + _cpu() - before

        return timed

    for target in [*STAGES, *extra]:
        mod_name, fn_name = target.split(":")
        # sys.modules first: `tracediff.parse.load` is also the name of a function
        mod = sys.modules.get(f"tracediff.{mod_name}") or importlib.import_module(
            f"tracediff.{mod_name}"
        )
        owner_name, _, fn_name = fn_name.rpartition(".")  # Class.method: wrapped on its class
        owner = getattr(mod, owner_name) if owner_name else mod
        fn = getattr(owner, fn_name)
        timed = wrap(_row(target), fn)
        if owner_name:
            setattr(owner, fn_name, timed)
            continue
        for other in list(sys.modules.values()):  # `from x import f` names too
            if getattr(other, "__name__", "").startswith("tracediff"):
                for name, value in list(vars(other).items()):
                    if value is fn:
                        setattr(other, name, timed)
    loaded = _cpu()
    tracediff.cli.main(argv)
    return {"imports": loaded - start, **spent, "process": _cpu() - origin}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--metric",
        choices=sorted(METRICS),
        default="cpu",
        help="cpu: process CPU seconds; fresh: MiB of huge pages faulted in (quiet machine only)",
    )
    ap.add_argument(
        "--stage",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="one more function to wrap (module under tracediff/, e.g. parse.nsys.tables:launch_join)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("argv", nargs="+", help="the tracediff arguments, after --")
    args = ap.parse_args()
    if args.child:
        with open("/dev/null", "w") as null:
            stdout, sys.stdout = sys.stdout, null
            got = child(args.argv, args.metric, tuple(args.stage))
            sys.stdout = stdout
        print(json.dumps(got))
        return
    from compare import compiled  # bench/compare.py, beside this script

    import tracediff  # the package the children import (a PYTHONPATH one is compiled too)

    compiled([Path(tracediff.__file__).parent])
    runs, walls = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "--metric",
                args.metric,
                *(f"--stage={t}" for t in args.stage),
                "--",
                *args.argv,
            ],  # fmt: skip
            capture_output=True,
            text=True,
            check=True,
        )
        walls.append(time.perf_counter() - t0)
        runs.append(json.loads(out.stdout.splitlines()[-1]))
    print(f"{args.repeat} fresh processes, wall {statistics.median(walls):.2f} s (median)")
    unit = "CPU s" if args.metric == "cpu" else "fresh MiB"
    print(f"| stage (inclusive) | {unit}, median | range |\n|---|---:|---|")
    for row in ["imports", *(_row(t) for t in [*STAGES, *args.stage]), "process"]:
        vals = [r[row] for r in runs if row in r]
        if not vals:  # not called by this compare
            continue
        fmt = ".2f" if args.metric == "cpu" else ".0f"
        print(f"| {row} | {statistics.median(vals):{fmt}} | {min(vals):{fmt}}-{max(vals):{fmt}} |")


if __name__ == "__main__":
    main()
