"""Compare benchmark: wall time and peak RSS of parse and compare, beside `nsys-ai diff`.

    bench/compare.py [--work DIR] [--pairs h200x50,h200x500,gen8] [--nsys-ai PATH] [--timeout S]
                     [--before DIR --rounds N]

Pairs (built once into --work, not timed):
- h200xN: tests/data/h200/g_good.sqlite vs g_bad.sqlite, each replicated N times by
  bench/replicate.py (12 N cycles, 1.8 k N kernels per side).
- gen8: tests/support/gen_nsys.py, 8 GPUs x 6250 cycles x 100 ops = 5 M kernels per side; the head has a
  slower flash kernel (+2 µs) and a straggler rank (+5 µs per all-reduce).

Steps, each in its own child process (peak RSS = ru_maxrss of that child, from os.wait4):
- `tracediff parse X.sqlite -o X.arrow` for each side;
- `tracediff compare base.arrow head.arrow --format json` (the goal: <= 20 s, <= 3 GB for gen8);
- `tracediff compare base.sqlite head.sqlite --format json`: end to end from the exports;
- `nsys-ai diff base.sqlite head.sqlite --no-ai --format json` cold (its Parquet cache removed
  first) and warm (cache built by the cold run). nsys-ai lives in its own venv (not a tracediff
  dependency): python3 -m venv /tmp/nsysai-venv && /tmp/nsysai-venv/bin/pip install nsys-ai==0.3.0
  duckdb==1.4.4 duckdb-ext-sqlite==1.4.4.20260205, then copy duckdb_ext/extensions/v1.4.4/... to
  ~/.duckdb/extensions/v1.4.4/linux_amd64/ (without the sqlite extension nsys-ai tries to download
  it, waits ~12 s per profile on an offline machine, and falls back to plain SQLite).

`--before DIR` (a copy of the tracediff package with its compiled modules, e.g. `git archive
REV tracediff | tar -x -C DIR` and its .so files copied in): the two compare steps run for
this checkout and that one in turn, `--rounds` times (after first in odd rounds), each reported
as its medians, with the ratio of the median CPU seconds (after/before) and whether the JSON
is the same. Run it with PYTHONDONTWRITEBYTECODE unset, or every child compiles ~200 modules.

Prints one table (markdown) and the machine's CPU count and load average (other work on the
machine inflates wall times; RSS is unaffected).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TRACEDIFF = [sys.executable, "-m", "tracediff"]
"""Run from a folder with no `tracediff` in it (run_child's cwd): `-m` puts the working folder
first on sys.path, before PYTHONPATH, which would shadow a `--before` package; the venv's
`tracediff` script is not used, as it imports what this checkout's CLI names (`run`), which an
older package may not have."""


@dataclass
class Measure:
    wall_s: float
    cpu_s: float  # user + system CPU time of the child
    rss_mib: float
    rc: int
    out: str


def run_child(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> Measure:
    """Like measure(), but the child is reaped by wait4 itself, so ru_maxrss is exactly its own."""
    t0 = time.perf_counter()
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-out-{os.getpid()}.txt"
    with open(out_path, "wb") as f, open(os.devnull, "wb") as null:
        p = subprocess.Popen(
            cmd,
            stdout=f,
            stderr=null,
            env={**os.environ, **(env or {})},
            cwd=out_path.parent,  # see TRACEDIFF
        )

        def kill() -> None:
            try:
                p.kill()
            except OSError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    out = out_path.read_text(errors="replace")
    out_path.unlink()
    rc = 124 if wall >= timeout else p.returncode
    return Measure(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, rc, out)


def build(work: Path, pair: str) -> tuple[Path, Path, int]:
    """Make the exports of `pair` in `work` (reused if present). Returns (base, head, kernels)."""
    import sqlite3

    b, h = work / f"{pair}_base.sqlite", work / f"{pair}_head.sqlite"
    if not (b.exists() and h.exists()):
        print(f"building {pair}...", file=sys.stderr)
        if pair.startswith("h200x"):
            n = pair[len("h200x") :]
            for src, dst in (("g_good", b), ("g_bad", h)):
                subprocess.run(
                    [
                        sys.executable,
                        str(ROOT / "bench" / "replicate.py"),
                        "--src",
                        str(ROOT / "tests" / "data" / "h200" / f"{src}.sqlite"),
                        "--times",
                        n,
                        "-o",
                        str(dst),
                        "--force",
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
        elif pair == "gen8":
            from tests.support.gen_nsys import SlowerKernel, Straggler, write_report

            write_report(b, 8, 6250, 100, seed=1)
            write_report(
                h,
                8,
                6250,
                100,
                [SlowerKernel("flash_fwd_kernel", 2_000), Straggler(3, 5_000)],
                seed=2,
            )
        else:
            raise SystemExit(f"unknown pair {pair!r}")
    con = sqlite3.connect(f"file:{b}?mode=ro", uri=True)
    (k,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    return b, h, int(k)


def interleaved(
    args: list[str], before: Path | None, rounds: int, timeout: float
) -> dict[str, Measure]:
    """`tracediff ARGS` of this checkout ("after") and, with `before` (a copy of the tracediff
    package with its compiled modules, put first on PYTHONPATH), of that one, in turn for
    `rounds` rounds (after first in odd rounds): each one's median wall, CPU and peak, and its
    last output."""
    runs: dict[str, list[Measure]] = {"after": []} | ({"before": []} if before else {})
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for who in order:
            env = {"PYTHONPATH": str(before)} if who == "before" else None
            runs[who].append(run_child([*TRACEDIFF, *args], timeout, env))
    return {
        who: Measure(
            statistics.median(m.wall_s for m in ms),
            statistics.median(m.cpu_s for m in ms),
            statistics.median(m.rss_mib for m in ms),
            max((m.rc for m in ms), key=abs),
            ms[-1].out,
        )
        for who, ms in runs.items()
    }


def bench_pair(
    work: Path,
    pair: str,
    nsys_ai: str | None,
    timeout: float,
    before: Path | None = None,
    rounds: int = 1,
) -> list[dict]:
    b, h, kernels = build(work, pair)
    rows = []

    def row(tool: str, step: str, m: Measure, note: str = "") -> None:
        status = "" if m.rc == 0 else (" (timeout)" if m.rc == 124 else f" (exit {m.rc})")
        rows.append(
            {
                "pair": pair,
                "kernels/side": kernels,
                "tool": tool,
                "step": step,
                "wall_s": m.wall_s,
                "cpu_s": m.cpu_s,
                "rss_mib": m.rss_mib,
                "note": (note + status).strip(),
            }
        )
        print(
            f"  {pair:10} {tool:9} {step:36} {m.wall_s:7.1f} s {m.cpu_s:7.1f} cpu-s "
            f"{m.rss_mib:7.0f} MiB {status}",
            file=sys.stderr,
        )

    arrows = []
    for side, src in (("base", b), ("head", h)):
        out = src.with_suffix(".arrow")
        m = run_child([*TRACEDIFF, "parse", str(src), "-o", str(out), "--force"], timeout)
        row("tracediff", f"parse {side} (.sqlite -> .arrow)", m)
        arrows.append(out)
    for step, pair_in in (
        ("compare (.arrow pair)", arrows),
        ("compare (.sqlite pair, end to end)", [b, h]),
    ):
        cmd = ["compare", str(pair_in[0]), str(pair_in[1]), "--format", "json"]
        got = interleaved(cmd, before, rounds, timeout)
        m = got["after"]
        note = ""
        if m.rc == 0:
            d = json.loads(m.out)
            note = f"{d['base']['cycles']} cycles; delta {d['delta_ms_per_cycle']['mean']:+.4f} ms/cycle"
        if before is not None:
            same = got["after"].out == got["before"].out
            note += f"; {rounds} rounds, medians; JSON {'the same' if same else 'DIFFERS'}"
        row("tracediff", step, m, note)
        if before is not None:
            ratio = got["after"].cpu_s / got["before"].cpu_s
            row("tracediff (before)", step, got["before"], f"after/before CPU {ratio:.3f}")
    if nsys_ai:
        for p in (b, h):
            for c in p.parent.glob(p.stem + ".nsys-cache*"):
                shutil.rmtree(c) if c.is_dir() else c.unlink()
        cmd = [nsys_ai, "diff", str(b), str(h), "--no-ai", "--format", "json"]
        m = run_child(cmd, timeout)
        row("nsys-ai", "diff cold (builds its cache)", m)
        if m.rc == 0:
            m = run_child(cmd, timeout)
            row("nsys-ai", "diff warm (cache built)", m)
    return rows


def compiled(dirs: list[Path]) -> None:
    """Every module's bytecode written before anything is timed, as an installed package has
    it: with PYTHONDONTWRITEBYTECODE set (this VM's environment) a module edited since its
    .pyc was written is compiled from source at every start (~0.07 CPU-s of a x500 compare)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", *map(str, dirs)], env=env,
                   stdout=subprocess.DEVNULL, check=False)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/tracediff-bench"))
    ap.add_argument("--pairs", default="h200x50,h200x500,gen8")
    ap.add_argument("--nsys-ai", default=shutil.which("nsys-ai") or "/tmp/nsysai-venv/bin/nsys-ai")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument(
        "--before",
        type=Path,
        help="a baseline: a copy of the tracediff package (with its compiled modules) whose "
        "compare steps run in turn with this checkout's, first on PYTHONPATH",
    )
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the compare steps")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    nsys_ai = args.nsys_ai if args.nsys_ai and Path(args.nsys_ai).exists() else None
    if nsys_ai is None:
        print(
            "nsys-ai not found: its rows are skipped (see the docstring to install it)",
            file=sys.stderr,
        )
    compiled([ROOT / "tracediff"] + ([args.before] if args.before else []))
    load0 = os.getloadavg()
    rows = []
    for pair in args.pairs.split(","):
        rows += bench_pair(
            args.work, pair.strip(), nsys_ai, args.timeout, args.before, max(1, args.rounds)
        )
    load1 = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} CPUs; load average (1 min) {load0[0]:.1f} before, "
        f"{load1[0]:.1f} after\n"
    )
    print("| pair | kernels/side | tool | step | wall s | CPU s | peak RSS MiB | note |")
    print("|---|---:|---|---|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['pair']} | {r['kernels/side']:,} | {r['tool']} | {r['step']} | "
            f"{r['wall_s']:.1f} | "
            f"{r['cpu_s']:.1f} | "
            f"{r['rss_mib']:.0f} | {r['note']} |"
        )
    print()
    for pair in dict.fromkeys(r["pair"] for r in rows):
        e2e = [r for r in rows if r["pair"] == pair and r["step"].startswith("compare (.sqlite")]
        arrow = [r for r in rows if r["pair"] == pair and r["step"].startswith("compare (.arrow")]
        cold = [
            r
            for r in rows
            if r["pair"] == pair and r["step"].startswith("diff cold") and not r["note"]
        ]
        warm = [
            r
            for r in rows
            if r["pair"] == pair and r["step"].startswith("diff warm") and not r["note"]
        ]
        parts = []
        if cold and e2e:
            parts.append(
                f"nsys-ai cold / tracediff end-to-end = {cold[0]['wall_s'] / e2e[0]['wall_s']:.1f}x"
            )
        if warm and arrow:
            parts.append(
                "nsys-ai warm / tracediff .arrow compare = "
                f"{warm[0]['wall_s'] / arrow[0]['wall_s']:.1f}x"
            )
        if parts:
            print(f"{pair}: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
