"""A user's first compare: `tracediff compare samples/runs/good samples/runs/bad --format table`.

    bench/first_compare.py [--repeat 5] [--vs PYTHONPATH_OF_A_BASELINE] [--where]

Issue 32's goal: <= 1.5 s wall on a quiet machine. Each round starts fresh child processes (the
command as a user types it, start-up and imports included):
- wall and CPU seconds (user + system, os.wait4 of the child) of the plain command;
- the imports' share: `python -X importtime`'s top-level modules summed, over that child's wall
  (the import time counts the imports the command makes late, inside a function, too);
- polars collects: every query polars runs (a LazyFrame's collect, each eager DataFrame method's
  own, collect_all), counted in a child that wraps polars' local engine (polars 2.x) before
  running the command.
`--vs DIR` runs the same rounds on a baseline tree (a copy of the `tracediff` package with its
compiled modules, put first on PYTHONPATH), interleaved A B A B, from a folder outside the
checkout so that the checkout is not imported. `--where` prints the 15 lines of tracediff that
collect most. Prints a markdown table of medians (and min-max) and the load average: this VM is
shared, so compare CPU seconds of interleaved rounds, not wall times of separate calls. A first
round, not counted, writes the bytecode caches (__pycache__, as an install has them) even where
PYTHONDONTWRITEBYTECODE is set: without them every run compiles tracediff's ~200 modules again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ARGS = ["compare", "samples/runs/good", "samples/runs/bad", "--format", "table"]

COUNT = """
import collections, os, runpy, sys, traceback
import polars as pl
from polars.lazyframe.engine import _LocalEngine
n = collections.Counter()
where = collections.Counter()
root = os.path.join(os.path.realpath(sys.argv[1]), "tracediff")
def site():
    for f in reversed(traceback.extract_stack()[:-2]):
        if os.path.realpath(f.filename).startswith(root):
            return f"{os.path.relpath(f.filename, root)}:{f.lineno} {f.name}"
    return "?"
collect, collect_all = _LocalEngine.collect, _LocalEngine.collect_all
def counted(self, *a, **k):
    n["collect"] += 1
    where[site()] += 1
    return collect(self, *a, **k)
def counted_all(self, *a, **k):
    n["collect_all"] += 1
    where[site()] += 1
    return collect_all(self, *a, **k)
_LocalEngine.collect, _LocalEngine.collect_all = counted, counted_all
sys.argv = ["tracediff", *sys.argv[2:]]
out = sys.stdout
sys.stdout = open(os.devnull, "w")
try:
    runpy.run_module("tracediff", run_name="__main__")
except SystemExit:
    pass
print("COLLECTS", n["collect"], n["collect_all"], file=out)
for k, v in where.most_common(15):
    print("WHERE", v, k, file=out)
"""


def run(cmd: list[str], tree: Path | None, cwd: Path) -> tuple[float, float, str, str]:
    """(wall s, CPU s, stdout, stderr) of one child, reaped by os.wait4 (its own rusage)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: tracediff's modules compiled once
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, errs = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed on {tree or ROOT}: {errs[-500:]}")
    return wall, ru.ru_utime + ru.ru_stime, text, errs


def one_round(tree: Path | None, cwd: Path) -> dict[str, object]:
    """One fresh-process round of the command on `tree` (None: the checkout)."""
    py = sys.executable
    wall, cpu, out, _ = run([py, "-m", "tracediff", *ARGS], tree, cwd)
    iwall, _, _, report = run([py, "-X", "importtime", "-m", "tracediff", *ARGS], tree, cwd)
    _, _, counted, _ = run([py, "-c", COUNT, str(tree or ROOT), *ARGS], tree, cwd)
    return {
        "wall": wall,
        "cpu": cpu,
        "out": out,
        "imports": _imports_s(report) / iwall,
        "collects": _collects(counted),
        "where": counted,
    }


def _imports_s(report: str) -> float:
    """Seconds of the top-level imports in `python -X importtime`'s report."""
    total = 0
    for line in report.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].startswith(" ") and not parts[2].startswith("  "):
            try:
                total += int(parts[1])
            except ValueError:
                continue
    return total / 1e6


def _collects(out: str) -> str:
    for line in out.splitlines():
        if line.startswith("COLLECTS"):
            _, one, alls = line.split()
            return f"{one} + {alls} collect_all"
    return "?"


def row(name: str, rounds: list[dict[str, object]]) -> str:
    def fig(key: str, fmt: str) -> str:
        vals = [float(r[key]) for r in rounds]  # type: ignore[arg-type]
        lo, mid, hi = min(vals), statistics.median(vals), max(vals)
        return f"{mid:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"

    return (
        f"| {name} | {fig('wall', '.2f')} | {fig('cpu', '.2f')} | "
        f"{fig('imports', '.0%')} | {rounds[-1]['collects']} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--vs", type=Path, help="a baseline tree to put first on PYTHONPATH")
    ap.add_argument("--where", action="store_true", help="the lines that collect most")
    a = ap.parse_args()
    # the children run from a folder outside the checkout (python puts its cwd first on the
    # path), where samples/ is a link to the checkout's
    cwd = Path(tempfile.mkdtemp(prefix="first-compare-"))
    (cwd / "samples").symlink_to(ROOT / "samples")
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    if a.vs is not None:
        trees.append((f"baseline {a.vs}", a.vs.resolve()))
    got: dict[str, list[dict[str, object]]] = {name: [] for name, _ in trees}
    for _name, tree in trees:  # a warm-up round, not counted: writes the bytecode caches
        one_round(tree, cwd)
    for _ in range(a.repeat):
        for name, tree in trees:
            got[name].append(one_round(tree, cwd))
    print(
        f"`tracediff {' '.join(ARGS)}`, {a.repeat} interleaved rounds, fresh processes; "
        "median (min-max)\n"
    )
    print("| tree | wall s | CPU s (user+sys) | imports' share of wall | polars collects |")
    print("|---|---|---|---|---|")
    for name, _ in trees:
        print(row(name, got[name]))
    outs = {str(r["out"]) for rs in got.values() for r in rs}
    print(
        f"\noutputs: {'identical' if len(outs) == 1 else f'{len(outs)} DIFFERENT'}; "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, "
        f"{os.cpu_count()} CPUs"
    )
    if a.where:
        for name, _ in trees:
            print(f"\n{name}: lines of tracediff that collect most")
            for line in str(got[name][-1]["where"]).splitlines():
                if line.startswith("WHERE"):
                    print("   ", line[6:])


if __name__ == "__main__":
    main()
