"""Calibration of run-set statistics on real captures: is "significant" right on a noisy workload?

A git repository built here holds a CPU workload that emits NVTX ranges (`cycle` > `draft`,
`verify`, 20 cycles) whose verify phase carries a per-process offset drawn once per process from
U(0, 1.5 ms) (issue 22's workload: the spread a new process, other autotune picks or allocator
state give), plus N(0, 0.3 ms) per-cycle jitter, on top of the real timing noise of this shared
machine. Commits: `base`, `shift2x` (+0.87 ms on verify: 2x the model's between-run SD of
0.433 ms) and `plus1.2ms` (+1.2 ms: 2.8x that SD).

A pool of runs per commit is captured once, with the real nsys (NVTX only) and the real
`tracediff capture --commit base --commit shift2x --commit plus1.2ms --repeat N` (interleaved,
resumable: run it again with the same --pool to add runs). Each run's mean cycle time comes from
one real `tracediff compare POOL/base POOL/<commit> --format json` (`run_means_ms`: the per-run
means the run-set verdict tests; every run is cut by base's first run's rule, as in any compare).

Repetitions are seeded draws of runs from that pool, not fresh captures (a capture costs seconds
here): a same-vs-same repetition draws 2k distinct base runs and splits them k / k; a shifted one
draws k base runs and k runs of the shifted commit; "base + 2.0x SD" draws like same-vs-same and
adds 2x the pool's measured between-run SD to every head run (real noise, a known shift: the
real `shift2x` commit lands where the pool's noise puts it). Each draw is decided by the run-set
verdict's own test (tracediff/engine/statistics/runstats.across_runs and the minimum effect of
engine/statistics/stats.py, as engine/statistics/verdict.py decides), and `--check K` runs the real `tracediff compare`
on the first K draws of each real cell and stops if its decision differs. Also printed: same
commit, k consecutive runs (capture order) vs the next k, which a drift during the call would
flag. `--scale S` multiplies every duration (tests/integration/test_calibration_captures.py uses
10: this shared VM's scheduling delays come per wake-up, not per ms asleep).

    .venv/bin/python bench/capture_calib.py --pool /tmp/calib-pool [--runs 30] [--draws 3000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tracediff.engine.statistics.runstats import across_runs
from tracediff.engine.statistics.stats import MIN_EFFECT_MS

OFFSET_MS, JITTER_MS, CYCLES = 1.5, 0.3, 20
# 0.433 ms: the offset's SD (the jitter adds 0.3 / sqrt(20) ms in quadrature: 0.444 ms)
SD_MODEL_MS = OFFSET_MS / 12**0.5
COMMITS = {"base": 0.0, "shift2x": 0.87, "plus1.2ms": 1.2}  # ms added to verify

WORK = """\
import os, random, time
import nvtx

EXTRA_MS = {extra}  # what this commit adds to verify
SCALE = {scale}  # every duration (and the offset) times this
# one offset per process, U(0, {offset} ms): seeded by SEED and the invocation count when the
# caller asks for a reproducible pool, else from the OS (a fresh draw per process either way)
n = 0
if os.environ.get("COUNTER"):
    with open(os.environ["COUNTER"], "a") as f:
        f.write(os.environ["TRACEDIFF_CAPTURE_COMMIT"] + "\\n")
    with open(os.environ["COUNTER"]) as f:
        n = len(f.read().splitlines())
seed = os.environ.get("SEED")
rng = random.Random(f"{{seed}}-{{n}}") if seed else random.Random()
offset_ms = rng.uniform(0, {offset}) * SCALE
for _ in range({cycles}):
    nvtx.push_range("cycle")
    nvtx.push_range("draft"); time.sleep(0.001 * SCALE); nvtx.pop_range()
    jitter_ms = rng.gauss(0, {jitter}) * SCALE
    nvtx.push_range("verify")
    time.sleep(max(0.0, (1.6 + EXTRA_MS) * SCALE + offset_ms + jitter_ms) / 1000)
    nvtx.pop_range()
    nvtx.pop_range()
"""

ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "calib",
        "GIT_AUTHOR_EMAIL": "calib@example.invalid",
        "GIT_COMMITTER_NAME": "calib",
        "GIT_COMMITTER_EMAIL": "calib@example.invalid",
        "GIT_AUTHOR_DATE": "2026-12-01T12:00:00Z",
        "GIT_COMMITTER_DATE": "2026-12-01T12:00:00Z",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def build_repo(
    repo: Path, scale: float = 1.0, cycles: int = CYCLES, commits: dict[str, float] = COMMITS
) -> None:
    """One commit per entry, tagged with its name (fixed dates: the same shas every time);
    `scale` multiplies every duration, the offset and the shifts."""
    repo.mkdir(parents=True, exist_ok=True)
    if (repo / ".git").is_dir():
        return
    git(repo, "init", "-q", "-b", "main")
    for name, extra in commits.items():
        (repo / "work.py").write_text(
            WORK.format(extra=extra, offset=OFFSET_MS, jitter=JITTER_MS, cycles=cycles, scale=scale)
        )
        git(repo, "add", "work.py")
        git(repo, "commit", "-qm", name)
        git(repo, "tag", name)


def tracediff(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tracediff ARGS`, a process of its own (forked with its imports done: the
    suite's tests/support/cli.py; the draws run compare dozens of times)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.support.cli import cli_run

    return cli_run(args, env=env, timeout=3600)


def capture_pool(
    pool: Path,
    runs: int,
    nsys: str,
    commits: list[str],
    seed: str | None = None,
    scale: float = 1.0,
    cycles: int = CYCLES,
) -> None:
    """`tracediff capture --commit ... --repeat runs` into pool/runs (resumes what is there)."""
    repo = pool / "repo"
    build_repo(repo, scale, cycles)
    argv = ["capture", "--repo", str(repo), "-o", str(pool / "runs"), "--nsys", nsys]
    for c in commits:
        argv += ["--commit", c]
    # the environment's own name for its python (sys.executable is python or python3 as the
    # caller was started: another workload command, which the run set would refuse to resume)
    python = str(Path(sys.prefix) / "bin" / "python")
    argv += ["--repeat", str(runs), "--", python, "work.py"]
    env = {"COUNTER": str(pool / "counter.txt")} | ({"SEED": seed} if seed else {})
    r = tracediff(*argv, env=env)
    if r.returncode != 0:
        raise SystemExit(f"capture failed ({r.returncode}): {r.stderr.strip()[-2000:]}")


def run_means(pool: Path, commit: str) -> tuple[list[float], list[float]]:
    """(base, commit) per-run mean cycle times in ms from one real compare of the whole pools."""
    r = tracediff(
        "compare", str(pool / "runs" / "base"), str(pool / "runs" / commit), "--format", "json"
    )
    if r.returncode != 0:
        raise SystemExit(f"compare failed ({r.returncode}): {r.stderr.strip()}")
    j = json.loads(r.stdout)
    return _side_means(j, "base"), _side_means(j, "head")


def _side_means(report: dict[str, Any], side: str) -> list[float]:
    return [float(x) for x in report[side]["run_means_ms"]]


def decide(base: np.ndarray, head: np.ndarray) -> bool:
    """engine/statistics/verdict.py's across-run decision on per-run means (ms)."""
    t = across_runs(base[None, :], head[None, :])
    d = float(t.delta_ms[0])
    return bool((t.ci95_low[0] > 0 or t.ci95_high[0] < 0) and abs(d) >= MIN_EFFECT_MS)


@dataclass
class Draw:
    base: list[int]  # indices into the base pool
    head: list[int]  # indices into the base pool (same) or the head pool (shifted)


def draws(n_base: int, n_head: int | None, k: int, count: int, seed: int) -> list[Draw]:
    """`count` seeded draws of k vs k runs: from the base pool alone (n_head None: 2k distinct
    runs split k / k) or k base runs and k head runs."""
    out = []
    for i in range(count):
        rng = np.random.default_rng([seed, k, i])
        if n_head is None:
            pick = rng.choice(n_base, size=2 * k, replace=False)
            out.append(Draw(sorted(pick[:k].tolist()), sorted(pick[k:].tolist())))
        else:
            b = rng.choice(n_base, size=k, replace=False)
            h = rng.choice(n_head, size=k, replace=False)
            out.append(Draw(sorted(b.tolist()), sorted(h.tolist())))
    return out


def rate(base: np.ndarray, head: np.ndarray, ds: list[Draw], add_ms: float = 0.0) -> float:
    """How often the draws `ds` (indices into base / head) are called significant; `add_ms` is
    added to every head run (the semi-synthetic cell: real base runs, a known shift)."""
    return float(np.mean([decide(base[d.base], head[d.head] + add_ms) for d in ds]))


def link_draw(pool: Path, head_set: str, d: Draw, work: Path) -> tuple[Path, Path]:
    """Two run-set folders under `work` (b/, h/) holding links to the drawn runs' run files."""
    sides = []
    for name, set_name, idx in (("b", "base", d.base), ("h", head_set, d.head)):
        folder = work / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        runs = sorted((pool / "runs" / set_name).glob("run-*/run.arrow"))
        for j in idx:
            os.symlink(runs[j], folder / f"{runs[j].parent.name}.arrow")
        sides.append(folder)
    return sides[0], sides[1]


def cli_decision(pool: Path, head_set: str, d: Draw, work: Path) -> tuple[bool, float]:
    """The real `tracediff compare` on the drawn runs: (significant, change in ms per cycle)."""
    b, h = link_draw(pool, head_set, d, work)
    r = tracediff("compare", str(b), str(h), "--format", "json")
    if r.returncode != 0:
        raise SystemExit(f"compare failed ({r.returncode}): {r.stderr.strip()}")
    v = json.loads(r.stdout)["delta_ms_per_cycle"]
    return bool(v["significant"]), float(v["mean"])


@dataclass
class Cell:
    title: str
    head_set: str | None  # the pool the head runs come from; None: base's (disjoint from base's)
    add_ms: float = 0.0


def measure(
    pool: Path, means: dict[str, np.ndarray], n_draws: int, seed: int, check: int, ks: list[int]
) -> tuple[list[Cell], dict[int, list[str]], int]:
    """The table's cells: per run count k, the rate of each cell (or "-" where the pool is too
    small); the first `check` draws of every cell re-decided by the real compare (raises on a
    disagreement). Returns (cells, rows, draws checked)."""
    base = means["base"]
    sd = float(np.std(base, ddof=1))
    cells = [
        Cell("same vs same flagged", None),
        Cell("base + 2.0x SD found", None, 2.0 * sd),
        Cell("shift2x found", "shift2x"),
        Cell("plus1.2ms found", "plus1.2ms"),
    ]
    rows: dict[int, list[str]] = {}
    checked = 0
    with tempfile.TemporaryDirectory(prefix="calib-") as tmp:
        for k in ks:
            rows[k] = []
            for cell in cells:
                head = base if cell.head_set is None else means[cell.head_set]
                n_head = None if cell.head_set is None else len(head)
                if (2 * k if n_head is None else k) > len(base) or k > len(head):
                    rows[k].append("-")
                    continue
                ds = draws(len(base), n_head, k, n_draws, seed)
                rows[k].append(f"{rate(base, head, ds, cell.add_ms):.1%}")
                if cell.add_ms:
                    continue  # a shift added to real runs: no capture holds it
                for d in ds[:check]:
                    sig, _ = cli_decision(pool, cell.head_set or "base", d, Path(tmp))
                    if sig != decide(base[d.base], head[d.head]):
                        raise SystemExit(f"compare disagrees with the bench: {cell.title} {d}")
                    checked += 1
    return cells, rows, checked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pool", type=Path, required=True, help="where the pool is (or goes)")
    ap.add_argument("--runs", type=int, default=30, help="runs per commit in the pool")
    ap.add_argument("--draws", type=int, default=3000, help="seeded draws per cell")
    ap.add_argument("--seed", type=int, default=22, help="seeds the draws")
    ap.add_argument("--pool-seed", default="22", help="seeds the per-process offsets ('': OS)")
    ap.add_argument("--check", type=int, default=3, help="draws per cell re-decided by the CLI")
    ap.add_argument("--nsys", default=shutil.which("nsys") or "/opt/nsys-2024.2.3/bin/nsys")
    ap.add_argument("--scale", type=float, default=1.0, help="every duration times this")
    ap.add_argument("--no-capture", action="store_true", help="use the pool as it is")
    args = ap.parse_args()
    t0 = time.monotonic()
    if not args.no_capture:
        seed = args.pool_seed or None
        capture_pool(args.pool, args.runs, args.nsys, list(COMMITS), seed, args.scale)
    t_cap = time.monotonic() - t0
    means: dict[str, np.ndarray] = {}
    for name in ("plus1.2ms", "shift2x"):
        b, h = run_means(args.pool, name)
        means["base"], means[name] = np.asarray(b), np.asarray(h)
    base = means["base"]
    sd = float(np.std(base, ddof=1))
    print(
        f"pool: {len(base)} base, {len(means['shift2x'])} shift2x, {len(means['plus1.2ms'])} "
        f"plus1.2ms runs, real captures ({CYCLES} cycles each, offsets seeded "
        f"{args.pool_seed or 'by the OS'}; captured {t_cap:.0f} s); repetitions are seeded draws "
        f"of runs from this pool (seed {args.seed}, {args.draws} draws a cell)"
    )
    shifts = {n: float(np.mean(means[n]) - np.mean(base)) for n in ("shift2x", "plus1.2ms")}
    print(
        f"between-run SD of base's run means {sd:.3f} ms (model {SD_MODEL_MS * args.scale:.3f} "
        f"at scale {args.scale:g}); pool means: "
        + "; ".join(f"{n} {d:+.3f} ms = {d / sd:.2f}x SD" for n, d in shifts.items())
    )
    ks = [3, 4, 5, 8]
    t1 = time.monotonic()
    cells, rows, checked = measure(args.pool, means, args.draws, args.seed, args.check, ks)
    print("\n| runs a side | " + " | ".join(c.title for c in cells) + " |")
    print("|---|" + "---|" * len(cells))
    for k in ks:
        print(f"| {k} vs {k} | " + " | ".join(rows[k]) + " |")
    se = (0.05 * 0.95 / args.draws) ** 0.5
    print(
        f"\nsame vs same: the split of the drawn runs is uniformly random, so the expected rate is "
        f"the test's exact level: {', '.join(f'{k} vs {k} {exact_level(k):.2%}' for k in ks)}; "
        f"Monte Carlo SE of a rate near 5 % over {args.draws} draws: {se:.2%}"
    )
    for k in ks:
        w = [decide(base[i : i + k], base[i + k : i + 2 * k]) for i in range(len(base) - 2 * k + 1)]
        print(
            f"same commit, {k} consecutive runs vs the next {k} (capture order: drift during the "
            f"call): {sum(w)} of {len(w)} windows flagged"
        )
    print(
        f"{checked} draws re-decided by the real tracediff compare: all agree "
        f"({time.monotonic() - t1:.0f} s)"
    )


def exact_level(k: int) -> float:
    """The exact two-sided permutation test's level for k vs k runs (no ties): p takes the
    values 2j / C(2k, k); the fraction of splits with p < 0.05."""
    splits = math.comb(2 * k, k)
    return 2 * max(0, math.ceil(0.05 * splits / 2 - 1)) / splits


if __name__ == "__main__":
    main()
