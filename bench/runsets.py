"""Run-set compare benchmark: 5 vs 5 runs of the x100 H200 replicas beside one x500 pair.

    bench/runsets.py [--work DIR] [--repeat 3] [--runs 5]

Inputs (built once into --work, not timed): tests/data/h200/g_good.sqlite and g_bad.sqlite
replicated 100 times (bench/replicate.py: ~176 k kernels each) and parsed to run files; each
side's run set is `--runs` copies of its run file in a folder. The contrast: the same reports
replicated 500 times (~0.88 M kernels a side), one run a side, about the kernels of the whole
5-run set. Each `tracediff compare ... --format json` runs in its own child process (peak RSS =
its ru_maxrss); the two are interleaved, `--repeat` times, because this VM's speed moves by up to
3x within minutes. Prints a markdown table and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from compare import TRACEDIFF, run_child  # noqa: E402

H200 = ROOT / "tests" / "data" / "h200"


def build(work: Path, times: int, runs: int) -> tuple[Path, Path]:
    """(base, head) of `runs` runs each (a folder), or one run file each when runs == 1."""
    out = []
    for side in ("g_good", "g_bad"):
        arrow = work / f"{side}x{times}.arrow"
        if not arrow.exists():
            sql = work / f"{side}x{times}.sqlite"
            subprocess.run(
                [sys.executable, str(ROOT / "bench" / "replicate.py"), "--src",
                 str(H200 / f"{side}.sqlite"), "--times", str(times), "-o", str(sql)],
                check=True, capture_output=True,
            )  # fmt: skip
            subprocess.run([*TRACEDIFF, "parse", str(sql), "-o", str(arrow)], check=True)
            sql.unlink()
        if runs == 1:
            out.append(arrow)
            continue
        folder = work / f"{side}x{times}_runs{runs}"
        if not folder.exists():
            folder.mkdir()
            for i in range(runs):
                shutil.copy(arrow, folder / f"run-{i + 1:02d}.arrow")
        out.append(folder)
    return out[0], out[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/tracediff-bench-runsets"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sets = build(args.work, 100, args.runs)
    pair = build(args.work, 500, 1)
    rows = []
    for r in range(args.repeat):
        for name, (b, h) in (
            (f"{args.runs} vs {args.runs} runs x100", sets),
            ("1 vs 1 x500", pair),
        ):
            m = run_child([*TRACEDIFF, "compare", str(b), str(h), "--format", "json"], 900)
            rows.append((r, name, m))
            print(f"  {name} #{r}: {m.wall_s:.2f} s wall, {m.cpu_s:.2f} CPU-s, "
                  f"{m.rss_mib:.0f} MiB, rc {m.rc}", file=sys.stderr)  # fmt: skip
    print("| repeat | compare | wall s | CPU s | peak RSS MiB | rc |")
    print("|---|---|---|---|---|---|")
    for r, name, m in rows:
        print(f"| {r} | {name} | {m.wall_s:.2f} | {m.cpu_s:.2f} | {m.rss_mib:.0f} | {m.rc} |")
    print(f"\n{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
