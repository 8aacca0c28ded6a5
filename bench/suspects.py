"""How long commit suspects take for a 50-commit range (issue 19 goal: <= 2 s).

    bench/suspects.py [--commits 50] [--rounds 5]

The stacks are real: the TraceLens SGLang decode vs prefill-decode comparison (tests/data/kineto).
The repository is built once in a temp folder (tests/support/suspects_repo.py): a Python file where each
of those stacks' SGLang frames points, padded with module-level statements so each file is as
long as its highest frame line (model_runner.py: ~3,300 lines), then N commits. Each commit edits
`per` of the stacked files in `lines` places (function bodies and padding alike) and one file
off the stacks, so every commit makes the ranking parse both sides of the files it touched. The
time is `tracediff.suspects.rank.rank` in-process (its git log, ls-tree and cat-file calls and
the ast parses included; the comparison itself is not), min and median of the rounds, as wall
seconds and as CPU seconds of this process and its git children (wall follows the shared
machine's load; CPU much less).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import suspects_repo as sr  # noqa: E402
from tracediff.engine.compare import compare  # noqa: E402
from tracediff.parse import load  # noqa: E402
from tracediff.suspects.rank import rank  # noqa: E402

PREFIX = "/sgl-workspace/sglang/python/"


def make(root: Path, ls, n: int, per: int, lines: int) -> tuple[Path, str, str]:  # type: ignore[no-untyped-def]
    files = sr.frame_files(ls, PREFIX)
    repo = root / f"repo-{per}-{lines}"
    base = sr.build(repo, files, pad=True)
    rng = random.Random(per * 1000 + lines)
    paths = sorted(files)
    for i in range(n):
        for p in rng.sample(paths, per):
            f = repo / p
            text = f.read_text().split("\n")
            for _ in range(lines):
                j = rng.randrange(len(text) - 1)
                if text[j].startswith("_p"):
                    text[j] = f"{text[j].split(' = ')[0]} = {i}"
                elif text[j].strip() == "_x = 0":
                    text[j] = text[j].replace("_x = 0", "_x = 0  # edited")
            f.write_text("\n".join(text))
        (repo / "README.md").write_text(f"edit {i}\n")
        sr.git(repo, "commit", "-q", "-am", f"commit {i}", stamp=i + 1)
    return repo, base, sr.git(repo, "rev-parse", "HEAD")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    data = ROOT / "tests" / "data" / "kineto"
    c = compare(
        load(data / "sglang_Qwen3-8B_decode.json.gz"),
        load(data / "sglang_Qwen3-8B_prefilldecode.json.gz"),
        n_boot=10,
    )
    print(
        f"launch_stacks: {c.launch_stacks.height} frame rows, {c.attribution.height} contributors"
    )
    print(
        "| commits | stacked files a commit | lines edited a file | suspects | wall min s "
        "| wall median s | CPU min s | CPU median s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        for per, lines in ((1, 3), (3, 20), (8, 200)):
            repo, base, head = make(Path(tmp), c.launch_stacks, a.commits, per, lines)
            times, cpus, n = [], [], 0
            for _ in range(a.rounds):
                t0, c0 = time.perf_counter(), os.times()
                s = rank(c.launch_stacks, c.attribution, repo, base, head, "--commits")
                c1 = os.times()
                times.append(time.perf_counter() - t0)
                cpus.append(sum(c1[:4]) - sum(c0[:4]))  # this process and its git children
                n = len(s.rows)
            print(
                f"| {a.commits} | {per} | {lines} | {n} | {min(times):.3f} | "
                f"{statistics.median(times):.3f} | {min(cpus):.3f} | {statistics.median(cpus):.3f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
