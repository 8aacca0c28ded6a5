"""What launch-stack resolution (issue 19) adds to a Kineto parse: before/after, interleaved.

    bench/kineto_stacks.py [--before REV] [--trace PATH.json.gz ...] [--rounds 7]

"before" is the package at git revision REV (default: the first commit whose
tracediff/parse/kineto/stacks.py is absent, i.e. the parent of the commit that added it),
extracted into a temp folder with this checkout's built C modules copied in; "after" is this
checkout. Each round parses every trace once with each, in a fresh child process (a tiny trace
read first, so polars' thread pools are not counted), alternating which goes first: this VM's
speed drifts within minutes, so only interleaved runs compare. Prints the median and the fastest
wall time of read_kineto per side and the added share. Goal: at most +25 % on the SGLang
prefill-decode trace.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "kineto"
DEFAULT = [DATA / "sglang_Qwen3-8B_prefilldecode.json.gz", DATA / "sglang_Qwen3-8B_decode.json.gz"]
CHILD = """
import sys, time
from tracediff.parse.kineto import read_kineto
read_kineto(sys.argv[2])
t = time.perf_counter()
read_kineto(sys.argv[1])
print(time.perf_counter() - t)
"""


def _before_rev() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H", "--",
         "tracediff/parse/kineto/stacks.py"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not out:
        raise SystemExit("stacks.py is not committed here: give --before REV")
    return out[-1] + "^"


def _extract(rev: str, into: Path) -> None:
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "tracediff"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    for so in (ROOT / "tracediff" / "parse").glob("*.so"):
        shutil.copy(so, into / "tracediff" / "parse" / so.name)


def _time(tree: Path, trace: Path) -> float:
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
    small = DATA / "base.json.gz"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(trace), str(small)],
        capture_output=True, text=True, check=True, env=env, cwd=tree,
    )  # fmt: skip
    return float(out.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", help="git revision to compare with")
    ap.add_argument("--trace", type=Path, action="append")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    rev = a.before or _before_rev()
    traces = [t.resolve() for t in a.trace or DEFAULT]  # the children run in the trees
    with tempfile.TemporaryDirectory(prefix="td-stacks-bench-") as tmp:
        before = Path(tmp)
        _extract(rev, before)
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(a.rounds):
            for trace in traces:
                sides = [("before", before), ("after", ROOT)]
                for side, tree in sides if r % 2 == 0 else sides[::-1]:
                    times.setdefault((trace.name, side), []).append(_time(tree, trace))
    print(f"before = {rev}, after = this checkout; {a.rounds} interleaved rounds, wall s")
    print(f"{'trace':44} {'before med':>10} {'after med':>10} {'before min':>10} "
          f"{'after min':>10} {'added (med)':>11}")  # fmt: skip
    for trace in traces:
        b, f = times[trace.name, "before"], times[trace.name, "after"]
        mb, mf = statistics.median(b), statistics.median(f)
        print(
            f"{trace.name:44} {mb:10.3f} {mf:10.3f} {min(b):10.3f} {min(f):10.3f} "
            f"{(mf / mb - 1) * 100:+10.1f}%"
        )


if __name__ == "__main__":
    main()
