"""The same inputs give the same answer, byte for byte, every run.

A run compared with itself is the hardest case: every contributor, total and phase changes by
exactly 0, so every sort by |change| is all ties, and before the tie-breakers the order of the
rows came from hash tables (a different order in each run: the totals, the collectives and the
"GPU change by phase" line of the nccl trace; the critical path of a what-if on the sampled
trace). Ties are now broken by the rows' own keys, which these tests check too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load
from tracediff.replay import predict
from tracediff.report import render
from tracediff.report.compare_json import phase_rollup

DATA = Path(__file__).parent.parent / "data"
KINETO = DATA / "kineto"
RUNS = 6


def _one(values: list) -> object:
    assert len(set(values)) == 1, f"{len(set(values))} different answers in {len(values)} runs"
    return values[0]


@pytest.fixture(scope="module")
def nccl_self() -> list[Comparison]:
    """The HTA nccl trace (phases, host ranges, collectives) compared with itself, RUNS times."""
    run = load(KINETO / "nccl_data.json.gz")
    return [compare(run, run, n_boot=100) for _ in range(RUNS)]


def test_totals_and_collectives_are_in_one_order_every_run(nccl_self: list[Comparison]) -> None:
    _one([str(c.totals.rows()) for c in nccl_self])
    _one([str(c.collectives.rows()) for c in nccl_self])
    t, co = nccl_self[0].totals, nccl_self[0].collectives
    assert t.height > 20 and (t["delta_ms"] == 0).all() and co.height >= 2
    # all ties: key order
    assert t.select("kind", "name").equals(t.select("kind", "name").sort("kind", "name"))
    key = ["op", "dtype", "bytes", "device_id"]
    assert co.select(key).equals(co.select(key).sort(key))


def test_reports_are_the_same_every_run(nccl_self: list[Comparison]) -> None:
    """JSON and table: the phase roll-up ("GPU change by phase") was in hash order."""
    _one([render(c, "json") for c in nccl_self])
    _one([render(c, "table", 10**6) for c in nccl_self])
    _one([render(c, "markdown", 10**6) for c in nccl_self])
    roll = phase_rollup(nccl_self[0])
    assert roll.height >= 4 and roll["phase"].to_list() == sorted(roll["phase"].to_list())


def test_host_phases_of_equal_change_in_phase_order(nccl_self: list[Comparison]) -> None:
    host = nccl_self[0].host
    assert host.height >= 3 and (host["delta_ms_per_cycle"] == 0).all()
    assert host["phase"].to_list() == sorted(host["phase"].to_list())


def test_whatif_critical_path_is_the_same_every_run() -> None:
    """Kineto times are whole microseconds: kernels on the path tie on ms/cycle."""
    run = load(KINETO / "sampled_rank-0.json.gz")
    c = compare(run, run, n_boot=100)
    paths = [predict(c, ["kernel"], top=50).critical_path for _ in range(RUNS)]
    _one([str(p.rows()) for p in paths])
    cp = paths[0]
    ties = cp.filter(pl.col("ms_per_cycle").is_duplicated())
    assert ties.height >= 2  # the case this test is about
    assert cp.equals(
        cp.sort("ms_per_cycle", "kind", "name", "phase", descending=[True, False, False, False])
    )


_CRITICAL_PATH = """
import sys
from pathlib import Path
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.replay import predict
run = load(Path(sys.argv[1]))
cp = predict(compare(run, run, n_boot=10), ["kernel"], top=50).critical_path
print(repr(cp.rows()))
"""


def test_whatif_critical_path_does_not_depend_on_the_thread_count() -> None:
    """polars divides a column by a number as a product with its inverse, but exactly in a
    one-row chunk; the path's rows came in two chunks, rechunked first only with several threads,
    so one row's ms/cycle and share differed in the last digit between 1 and 2 threads."""
    outs = [
        subprocess.run(
            [sys.executable, "-c", _CRITICAL_PATH, str(KINETO / "eager_trace.json.gz")],
            env={**os.environ, "POLARS_MAX_THREADS": n},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for n in ("1", "2")
    ]
    assert "idle: waiting for the host" in outs[0]
    assert outs[0] == outs[1]


def test_equal_changes_listed_in_key_order_on_two_gpus() -> None:
    """mfu_2gpu_before with itself: contributor ids (c0, c1, ...) and the rows summed over GPUs
    follow the key order where changes tie, and "most on GPU" is the lower GPU."""
    run = load(DATA / "nsys" / "nsys-ai" / "mfu_2gpu_before.sqlite")
    cs = [compare(run, run, n_boot=100) for _ in range(3)]
    _one([render(c, "json") for c in cs])
    att, across = cs[0].attribution, cs[0].across_gpus
    assert att.height > 20 and (att["delta_ms_per_cycle"] == 0).all()
    key = ["kind", "name", "phase", "device_id"]
    assert att.select(key).equals(att.select(key).sort(key))
    assert att["contributor_id"].to_list() == [f"c{i}" for i in range(att.height)]
    assert across.height > 10
    assert across.select(key[:3]).equals(across.select(key[:3]).sort(key[:3]))
    lowest = att.group_by(key[:3]).agg(pl.col("device_id").min().alias("_low"))
    j = across.join(lowest, on=key[:3])
    assert (j["top_device_id"] == j["_low"]).all()
