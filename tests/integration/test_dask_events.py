"""The TUI's events of a comparison that ran on Dask (`--scheduler`) come from the workers: a
slice (one side, GPU, cycle range) is each run file's task again on the cluster, restricted to
that GPU and those cycles, and its rows are the in-process comparison's.

A real LocalCluster of one worker process; a generated run set of 4 GPUs, 2 runs a side
(tests/unit/test_event_slices.py gen_runsets). Dask's task stream says which tasks ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_event_slices import gen_runsets, open_sets
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.parse.sides import resolve

pytest.importorskip("distributed")


def test_a_slice_runs_on_the_workers_and_is_the_in_process_one(tmp_path: Path) -> None:
    from distributed import get_task_stream

    from tracediff.engine.cluster import open_executor

    base, head = gen_runsets(tmp_path, gpus=4, runs=2, cycles=12)
    here = open_sets(base, head)
    assert here.events_slice is not None
    want = here.events_slice("head", 2, 5, 17)  # run 1's cycles 5..11, run 2's 0..4
    with open_executor("local:1", "1GiB") as ex:
        sides = [[load(p) for p in resolve(d).runs] for d in (base, head)]
        c = compare(sides[0], sides[1], n_boot=50, executor=ex)
        assert c.events_slice is not None
        with get_task_stream(client=ex.client) as ts:
            got = c.events_slice("head", 2, 5, 17)
        keys = sorted(str(t["key"]) for t in ts.data)
    assert [k.rsplit("-", 1)[0] for k in keys] == [
        "tracediff-reduce-head-0",
        "tracediff-reduce-head-1",
    ]
    assert want.height and got.equals(want)
    assert "events" not in c.__dict__  # the whole table was not built for it
