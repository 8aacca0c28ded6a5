"""Shared by the tests (moved from tests/unit/engine/test_event_slices.py, so no test module imports another)."""

from __future__ import annotations

from pathlib import Path

from tests.support.gen_nsys import Straggler, write_report
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load
from tracediff.parse.sides import resolve
from tracediff.runs.runfile import write_run


def gen_runsets(out: Path, gpus: int = 4, runs: int = 2, cycles: int = 12) -> tuple[Path, Path]:
    """Run sets of `runs` generated runs a side (run files) on `gpus` GPUs with all-reduces;
    head: rank 1 launches every all-reduce 20 us late."""
    for side in ("base", "head"):
        (out / side).mkdir(parents=True)
        for i in range(runs):
            sql = out / f"{side}{i}.sqlite"
            changes = [Straggler(rank=1, late_ns=20_000)] if side == "head" else []
            seed = (1 if side == "base" else 11) + i
            write_report(sql, gpus, cycles, 24, changes, seed=seed, allreduce_every=6)
            write_run(load(sql), out / side / f"run-{i + 1:02d}.arrow")
            sql.unlink()
    return out / "base", out / "head"


def open_sets(base: Path, head: Path) -> Comparison:
    sides = [[load(p) for p in resolve(d).runs] for d in (base, head)]
    return compare(sides[0], sides[1], n_boot=50)
