"""Bit-flip sweep over a run file (issue #17): every single flipped bit must give either the same
tables and metadata as the intact file, or a one-line TracediffError naming the file, never a
crash (a segfault included) and never different numbers.

The sweep runs in worker subprocesses that read each damaged copy the way `info` and `compare`
do (every table, then the engine's column subsets, through polars), so a segfault kills one
worker, is recorded against the bit it was reading, and the next worker resumes after it.

    .venv/bin/python -m tests.support.bitflip RUN.arrow [N_BITS [EVERY]]   # prints a summary per outcome
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

WORKER_TIMEOUT = 300  # s for one worker's batch; a hang counts as a failure of its current bit


def positions(data: bytes, n: int, every: int = 1, seed: int = 17) -> list[int]:
    """Bit positions to flip: every `every`-th bit of the file's structure (magic, the first and
    last bytes of each table, which hold the Arrow IPC schema and footer, the JSON footer and
    tail), then `n` bits drawn uniformly from the rest with a fixed seed."""
    import orjson

    from tracediff.runs.runfile import footer_span

    start, end = footer_span(data)
    footer = orjson.loads(data[start:end])
    structure: set[int] = set(range(0, 16 * 8))
    for off, length in footer["tables"].values():
        for lo, hi in ((off, off + min(length, 48)), (max(off, off + length - 48), off + length)):
            structure.update(range(lo * 8, hi * 8))
    # the footer is JSON: every bit of its first 256 bytes and its tail, some of the rest
    structure.update(range(start * 8, min(end, start + 256) * 8))
    structure.update(range(end * 8, len(data) * 8))
    rng = random.Random(seed)
    rest = [b for b in rng.sample(range(len(data) * 8), min(n * 2, len(data) * 8))]
    return sorted(structure)[::every] + [b for b in rest if b not in structure][:n]


def _snapshot(path: Path) -> tuple[dict, dict, list, list]:
    """What `info` and `compare` read from a run file: every table, the column subsets the
    engine reads, the per-device kernel totals (through polars), metadata and warnings."""
    import polars as pl

    from tracediff.runs import schema
    from tracediff.runs.runfile import read_run

    run = read_run(path)
    tables = {name: run.table(name) for name in schema.TABLES}
    subsets = {}
    for name in ("kernels", "memops", "api_calls"):
        cols = [
            c for c in ("start_ns", "end_ns", "name", "device_id") if c in tables[name].schema.names
        ]
        subsets[name] = run.read(name, cols)
    k = pl.from_arrow(tables["kernels"])
    totals = k.group_by("device_id").agg(pl.col("duration_ns").sum()).sort("device_id").rows()
    return (
        tables | {f"{n}[cols]": t for n, t in subsets.items()},
        run.metadata,
        run.warnings,
        totals,
    )


def _worker(original: str, damaged: str) -> None:
    """Read bit positions from stdin; for each, flip it in a copy and report the outcome on
    stdout: `ok`, `error MESSAGE` (a TracediffError), `diff WHAT` or `raise TYPE: MESSAGE`."""
    from tracediff.base.errors import TracediffError

    data = bytearray(Path(original).read_bytes())
    ref_tables, ref_meta, ref_warn, ref_totals = _snapshot(Path(original))
    ref_meta = {k: v for k, v in ref_meta.items() if k != "run_file"}
    for line in sys.stdin:
        bit = int(line)
        data[bit // 8] ^= 1 << (bit % 8)
        Path(damaged).write_bytes(data)
        data[bit // 8] ^= 1 << (bit % 8)
        print(f"start {bit}", flush=True)
        try:
            tables, meta, warn, totals = _snapshot(Path(damaged))
        except TracediffError as e:
            msg = str(e)
            ok = "\n" not in msg and damaged in msg
            print(f"{'error' if ok else 'raise bad-message'} {bit} {msg!r}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - any other exception is the finding
            print(f"raise {bit} {type(e).__name__}: {str(e)[:200]!r}", flush=True)
            continue
        meta = {k: v for k, v in meta.items() if k != "run_file"}
        what = [n for n, t in ref_tables.items() if not t.equals(tables[n])]
        what += ["metadata"] if meta != ref_meta else []
        what += ["warnings"] if warn != ref_warn else []
        what += ["kernel totals"] if totals != ref_totals else []
        print(f"{'diff' if what else 'ok'} {bit} {','.join(what)}", flush=True)


def sweep(path: Path, bits: list[int]) -> dict[int, str]:
    """Run the sweep in worker processes: bit -> outcome line (`segfault`/`hang` for a worker
    that died or stopped while reading that bit)."""
    outcomes: dict[int, str] = {}
    todo = list(bits)
    with tempfile.TemporaryDirectory(prefix="tracediff-bitflip-") as tmp:
        damaged = str(Path(tmp) / "damaged.arrow")
        while todo:
            p = subprocess.run(
                [sys.executable, "-m", "tests.support.bitflip", "--worker", str(path), damaged],
                input="".join(f"{b}\n" for b in todo),
                capture_output=True,
                text=True,
                timeout=WORKER_TIMEOUT,
                env={**os.environ, "POLARS_MAX_THREADS": "1"},
                cwd=Path(__file__).resolve().parents[2],
            )
            current = None
            for line in p.stdout.splitlines():
                kind, bit, *rest = line.split(" ", 2)
                if kind == "start":
                    current = int(bit)
                else:
                    outcomes[int(bit)] = line
                    current = None
            if current is not None:  # died while reading this bit
                outcomes[current] = f"died {current} rc={p.returncode} {p.stderr[-300:]!r}"
            done = set(outcomes)
            if p.returncode != 0 and current is None:
                raise RuntimeError(f"bit-flip worker failed: {p.stderr[-2000:]}")
            todo = [b for b in todo if b not in done]
    return outcomes


def main() -> int:
    path = Path(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    every = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    bits = positions(path.read_bytes(), n, every)
    outcomes = sweep(path, bits)
    kinds = Counter(line.split(" ", 1)[0] for line in outcomes.values())
    print(f"{len(bits)} bits flipped in {path}: {dict(kinds)}")
    for line in sorted(outcomes.values()):
        if not line.startswith(("ok", "error")):
            print(line)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        _worker(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
