"""tracediff against nsys-ai on one pair, interleaved: this VM's speed moves up to 3x within
minutes (two tracediff medians 6 minutes apart here: 3.6 and 2.5 s), so a ratio is only worth
something between runs of one window.

    bench/vs_nsysai.py [--work /tmp/speed33] [--pair h200x500] [--rounds 3] [--td-runs 3]

Each round: tracediff `compare BASE HEAD --format json` TD_RUNS times, one cold `nsys-ai diff`
(its Parquet cache removed first: what a user's first diff costs), tracediff TD_RUNS times
again. A round's ratio is nsys-ai's wall (CPU) over the median of the tracediff runs around it;
the table gives each round and the median over rounds, with tracediff's peak against nsys-ai's.
The pair comes from bench/compare.py (`build`); nsys-ai as there (its docstring installs it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import TRACEDIFF, Measure, build, compiled, run_child  # noqa: E402


def _cold(nsys_ai: str, b: Path, h: Path, timeout: float) -> tuple[Measure, list[str]]:
    """One cold `nsys-ai diff`, and the reasons of the tries before it that failed: nsys-ai 0.3.0
    fails now and then building its two caches ("Table with name StringIds does not exist",
    exit 1 after ~11 s; a segfault in session 19), so a failed try is made again (3 at most),
    each from no cache, and said."""
    failed: list[str] = []
    err = b.parent / "nsys-ai.stderr"
    for _ in range(3):
        for p in (b, h):
            for c in p.parent.glob(p.stem + ".nsys-cache*"):
                shutil.rmtree(c) if c.is_dir() else c.unlink()
        for c in b.parent.glob(".parquet_build_*"):  # a crashed build's leftovers
            shutil.rmtree(c, ignore_errors=True)
        cmd = [nsys_ai, "diff", str(b), str(h), "--no-ai", "--format", "json"]
        m = run_child(["sh", "-c", f'exec "$0" "$@" 2>"{err}"', *cmd], timeout)
        if m.rc == 0:
            return m, failed
        lines = err.read_text(errors="replace").strip().splitlines()
        failed.append(f"exit {m.rc} after {m.wall_s:.0f} s: {lines[-1] if lines else ''}")
    return m, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/speed33"))
    ap.add_argument("--pair", default="h200x500")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--td-runs", type=int, default=3)
    ap.add_argument("--nsys-ai", default=shutil.which("nsys-ai") or "/tmp/nsysai-venv/bin/nsys-ai")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    if not Path(args.nsys_ai).exists():
        raise SystemExit(f"{args.nsys_ai}: not found (bench/compare.py's docstring installs it)")
    args.work.mkdir(parents=True, exist_ok=True)
    b, h, kernels = build(args.work, args.pair)
    compiled([Path(__file__).resolve().parent.parent / "tracediff"])
    td = [*TRACEDIFF, "compare", str(b), str(h), "--format", "json"]
    print(
        f"{args.pair}: {kernels:,} kernels a side; load {os.getloadavg()[0]:.1f}", file=sys.stderr
    )
    rows = []
    for r in range(args.rounds):
        t0 = time.strftime("%H:%M", time.gmtime())
        around = [run_child(td, args.timeout) for _ in range(args.td_runs)]
        ns, failed = _cold(args.nsys_ai, b, h, args.timeout)
        for why in failed:
            print(f"round {r + 1}: nsys-ai failed, tried again: {why}", file=sys.stderr)
        around += [run_child(td, args.timeout) for _ in range(args.td_runs)]
        if ns.rc != 0 or any(m.rc != 0 for m in around):
            print(f"round {r + 1}: exit nsys-ai {ns.rc}, tracediff "
                  f"{[m.rc for m in around]}", file=sys.stderr)  # fmt: skip
            continue
        wall = statistics.median(m.wall_s for m in around)
        cpu = statistics.median(m.cpu_s for m in around)
        rss = statistics.median(m.rss_mib for m in around)
        rows.append((r + 1, t0, ns, wall, cpu, rss, os.getloadavg()[0]))
        print(f"  round {r + 1}: nsys-ai {ns.wall_s:.1f} s, tracediff {wall:.2f} s: "
              f"{ns.wall_s / wall:.1f}x", file=sys.stderr)  # fmt: skip
    print("| round | UTC | nsys-ai wall s | CPU s | peak MiB | tracediff wall s | CPU s | peak MiB "
          "| wall x | CPU x | memory x | load after |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, t0, ns, wall, cpu, rss, load in rows:
        print(f"| {n} | {t0} | {ns.wall_s:.1f} | {ns.cpu_s:.1f} | {ns.rss_mib:.0f} | {wall:.2f} | "
              f"{cpu:.2f} | {rss:.0f} | {ns.wall_s / wall:.1f} | {ns.cpu_s / cpu:.1f} | "
              f"{rss / ns.rss_mib:.2f} | {load:.1f} |")  # fmt: skip
    if rows:
        med = [statistics.median(x) for x in zip(*[
            (ns.wall_s / w, ns.cpu_s / c, rs / ns.rss_mib) for _, _, ns, w, c, rs, _ in rows
        ], strict=True)]  # fmt: skip
        print(f"\nmedian over rounds: {med[0]:.1f}x wall, {med[1]:.1f}x CPU, {med[2]:.2f}x memory")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
