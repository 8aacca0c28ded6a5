"""A user's first compare, and the fixed cost every small compare pays (issue 32).

    bench/first_compare.py [--repeat 5] [--vs PYTHONPATH_OF_A_BASELINE] [--where]
                           [--pairs demo,sqlite,kineto]

Inputs (`--pairs`, default all three):
- demo: `tracediff compare samples/runs/good samples/runs/bad --format table`, the README's first
  command (two run sets of 4 H200 runs: 8 run files). Issue 32's goal: <= 1.5 s wall, quiet machine.
- sqlite: `compare tests/data/h200/g_good.sqlite g_bad.sqlite --format json` (one small nsys
  report a side, parsed in the command: ~3 k kernels each).
- kineto: `compare tests/data/h200/k_good.json.gz k_bad.json.gz --format json` (the same
  workload's Kineto traces): with `sqlite`, the cost of one small compare, which the test suite
  pays hundreds of times.

Each round starts fresh child processes (the command as a user types it, start-up and imports
included):
- wall and CPU seconds (user + system, os.wait4 of the child) and peak RSS of the plain command;
- the imports' share: `python -X importtime`'s top-level modules summed, over that child's wall
  (the import time counts the imports the command makes late, inside a function, too);
- polars collects: every query polars runs (a LazyFrame's collect, each eager DataFrame method's
  own, collect_all), counted in a child that wraps polars' local engine (polars 2.x) before
  running the command.
`--vs DIR` runs the same rounds on a baseline tree (a copy of the `tracediff` package with its
compiled modules, or a checkout of another commit, put first on PYTHONPATH), interleaved A B A B,
from a folder outside the checkout so that the checkout is not imported; the table then has the
median of the per-round ratios A/B. `--where` prints the 15 lines of tracediff that collect most.
Prints a markdown table of medians (and min-max) and the load average: this VM is shared, so
compare CPU seconds of interleaved rounds, not wall times of separate calls. A first round, not
counted, writes the bytecode caches (__pycache__, as an install has them) even where
PYTHONDONTWRITEBYTECODE is set: without them every run compiles tracediff's ~200 modules again.
The outputs of every round of a pair must be identical (checked, printed under the table).
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

PAIRS = {
    "demo": ["compare", "samples/runs/good", "samples/runs/bad", "--format", "table"],
    "sqlite": [
        "compare", "tests/data/h200/g_good.sqlite", "tests/data/h200/g_bad.sqlite",
        "--format", "json",
    ],
    "kineto": [
        "compare", "tests/data/h200/k_good.json.gz", "tests/data/h200/k_bad.json.gz",
        "--format", "json",
    ],
}  # fmt: skip

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


def run(cmd: list[str], tree: Path | None, cwd: Path) -> dict[str, object]:
    """wall s, CPU s, peak MiB, stdout and stderr of one child, reaped by os.wait4 (its own
    rusage)."""
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
    return {
        "wall": wall,
        "cpu": ru.ru_utime + ru.ru_stime,
        "peak": ru.ru_maxrss / 1024,  # KiB on Linux
        "out": text,
        "err": errs,
    }


def one_round(args: list[str], tree: Path | None, cwd: Path) -> dict[str, object]:
    """One fresh-process round of `tracediff ARGS` on `tree` (None: the checkout)."""
    py = sys.executable
    got = run([py, "-m", "tracediff", *args], tree, cwd)
    timed = run([py, "-X", "importtime", "-m", "tracediff", *args], tree, cwd)
    counted = str(run([py, "-c", COUNT, str(tree or ROOT), *args], tree, cwd)["out"])
    got["imports"] = _imports_s(str(timed["err"])) / float(timed["wall"])  # type: ignore[arg-type]
    got["collects"] = _collects(counted)
    got["where"] = counted
    return got


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


def _fig(vals: list[float], fmt: str) -> str:
    lo, mid, hi = min(vals), statistics.median(vals), max(vals)
    return f"{mid:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def row(pair: str, name: str, rounds: list[dict[str, object]]) -> str:
    def fig(key: str, fmt: str) -> str:
        return _fig([float(r[key]) for r in rounds], fmt)  # type: ignore[arg-type]

    return (
        f"| {pair} | {name} | {fig('wall', '.2f')} | {fig('cpu', '.2f')} | {fig('peak', '.0f')} "
        f"| {fig('imports', '.0%')} | {rounds[-1]['collects']} |"
    )


def ratios(pair: str, a: list[dict[str, object]], b: list[dict[str, object]]) -> str:
    """The median (min-max) of the per-round ratios A/B (each round ran A then B)."""

    def fig(key: str) -> str:
        return _fig([float(x[key]) / float(y[key]) for x, y in zip(a, b, strict=True)], ".3f")  # type: ignore[arg-type]

    return f"| {pair} | A/B | {fig('wall')} | {fig('cpu')} | {fig('peak')} | | |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--vs", type=Path, help="a baseline tree to put first on PYTHONPATH")
    ap.add_argument("--where", action="store_true", help="the lines that collect most")
    ap.add_argument("--pairs", default=",".join(PAIRS), help=f"of {', '.join(PAIRS)}")
    a = ap.parse_args()
    pairs = [p for p in a.pairs.split(",") if p]
    if unknown := sorted(set(pairs) - set(PAIRS)):
        ap.error(f"--pairs: unknown {', '.join(unknown)}")
    # the children run from a folder outside the checkout (python puts its cwd first on the
    # path), where samples/ and tests/data are links to the checkout's
    cwd = Path(tempfile.mkdtemp(prefix="first-compare-"))
    (cwd / "samples").symlink_to(ROOT / "samples")
    (cwd / "tests").mkdir()
    (cwd / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    if a.vs is not None:
        trees.append((f"baseline {a.vs}", a.vs.resolve()))
    got: dict[tuple[str, str], list[dict[str, object]]] = {
        (p, name): [] for p in pairs for name, _ in trees
    }
    for pair in pairs:
        for _name, tree in trees:  # a warm-up round, not counted: writes the bytecode caches
            one_round(PAIRS[pair], tree, cwd)
    for _ in range(a.repeat):
        for pair in pairs:
            for name, tree in trees:
                got[pair, name].append(one_round(PAIRS[pair], tree, cwd))
    print(f"{a.repeat} interleaved rounds, fresh processes; median (min-max)\n")
    for pair in pairs:
        print(f"- {pair}: `tracediff {' '.join(PAIRS[pair])}`")
    print(
        "\n| input | tree | wall s | CPU s (user+sys) | peak MiB | imports' share of wall "
        "| polars collects |"
    )
    print("|---|---|---|---|---|---|---|")
    for pair in pairs:
        for name, _ in trees:
            print(row(pair, name, got[pair, name]))
        if len(trees) == 2:
            print(ratios(pair, got[pair, trees[0][0]], got[pair, trees[1][0]]))
    print()
    for pair in pairs:
        outs = {str(r["out"]) for name, _ in trees for r in got[pair, name]}
        print(f"{pair} outputs: {'identical' if len(outs) == 1 else f'{len(outs)} DIFFERENT'}")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    if a.where:
        for pair in pairs:
            for name, _ in trees:
                print(f"\n{pair}, {name}: lines of tracediff that collect most")
                for line in str(got[pair, name][-1]["where"]).splitlines():
                    if line.startswith("WHERE"):
                        print("   ", line[6:])


if __name__ == "__main__":
    main()
