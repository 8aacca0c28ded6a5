"""The change split's and the phase roll-up's sums are the same every run (engine/result.py,
report/compare_json.py): a float group-by without maintain_order sums each group in an order of
its threads' making, and on a run of 128 rank files a side the last digit of
gpu_work_delta_ms_per_cycle and of the phase roll-up differed between two runs of one compare.
Here: one attribution frame of ~1200 rows (the size of that run's), summed many times."""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.engine.result import Comparison, change_split
from tracediff.report.compare_json import phase_rollup
from tracediff.runs import schema

ROWS, TRIES = 1200, 1000


def _attribution() -> pl.DataFrame:
    rng = np.random.default_rng(7)
    kinds = rng.choice(["kernel", "gap", "collective"], ROWS)
    names = [
        f"k{i % 40}" if k != "gap" else "idle: host-bound (launch)" for i, k in enumerate(kinds)
    ]
    base = rng.random(ROWS) / 3
    head = base + rng.normal(0, 1e-3, ROWS)
    empty = schema.empty_frame("attribution")
    frame = pl.DataFrame(
        {
            "contributor_id": [f"c{i}" for i in range(ROWS)],
            "kind": kinds,
            "name": names,
            "phase": rng.choice(["(cycle)", "prefill", "decode"], ROWS),
            "device_id": rng.integers(0, 128, ROWS),
            "base_ms_per_cycle": base,
            "head_ms_per_cycle": head,
            "delta_ms_per_cycle": head - base,
        }
    )
    return pl.concat([empty, frame], how="diagonal_relaxed").select(empty.columns)


def test_the_split_and_the_phase_sums_are_the_same_every_run() -> None:
    att = _attribution()
    splits = set()
    for _ in range(TRIES):
        s = change_split(att)
        assert s is not None
        splits.add((s.gpu_work_delta_ms_per_cycle, s.host_bound_idle_delta_ms_per_cycle))
    c = Comparison.__new__(Comparison)  # only its attribution: what phase_rollup reads
    object.__setattr__(c, "attribution", att)  # frozen: set as its __init__ sets a field
    phases = {tuple(phase_rollup(c).rows()) for _ in range(TRIES)}
    assert len(splits) == 1
    assert len(phases) == 1
