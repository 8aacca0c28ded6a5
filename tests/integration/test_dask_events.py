"""The TUI's events of a comparison that ran on Dask (`--scheduler`) come from the workers: a
slice (one side, GPU, cycle range) is each run file's task again on the cluster, restricted to
that GPU and those cycles, and its rows are the in-process comparison's.

A real LocalCluster of one worker process; a generated run set of 4 GPUs, 2 runs a side
(tests/unit/engine/test_event_slices.py gen_runsets), and HTA's two-rank job as one run of two rank files
a side (a rank file is the worker's unit: only the file holding the GPU is read). Dask's task
stream says which tasks ran.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.eventslices import gen_runsets, open_sets
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.parse.sides import resolve

pytestmark = [pytest.mark.dask]

pytest.importorskip("distributed")


def test_a_slice_runs_on_the_workers_and_is_the_in_process_one(tmp_path: Path) -> None:
    from distributed import get_task_stream

    from tracediff.engine.pipeline.cluster import open_executor

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
        "tracediff-reduced-head-run-01.arrow",
        "tracediff-reduced-head-run-02.arrow",
    ]
    assert want.height and got.equals(want)
    assert "events" not in c.__dict__  # the whole table was not built for it


def test_a_slice_of_a_rank_run_reads_the_gpus_rank_file_only(tmp_path: Path) -> None:
    from distributed import get_task_stream

    from tracediff.engine.inputs import load_sides
    from tracediff.engine.pipeline.cluster import open_executor

    kineto = Path(__file__).resolve().parents[1] / "data" / "kineto"
    for side in ("base", "head"):
        (tmp_path / side).mkdir()
        for r in (0, 1):
            shutil.copy(kineto / f"sampled_rank-{r}.json.gz", tmp_path / side)
    base, head = tmp_path / "base", tmp_path / "head"
    quiet = lambda _m: None  # noqa: E731
    # two ranks of HTA's 128-rank job
    sides = load_sides(base, head, "auto", quiet, allow_missing_ranks=True)
    here = compare(
        sides.bases, sides.heads, n_boot=50
    )  # the two files joined into one run, in this process
    assert here.events_slice is not None
    with open_executor("local:1", "1GiB") as ex:
        sides = load_sides(base, head, "auto", quiet, cluster=ex, allow_missing_ranks=True)
        c = compare(sides.bases, sides.heads, n_boot=50, executor=ex)
        assert c.events_slice is not None
        devices = sorted(set(c.cycles["device_id"].to_list()))
        assert len(devices) == 2
        read = set()
        for d in devices:
            with get_task_stream(client=ex.client) as ts:
                got = c.events_slice("base", d, 0, 3)
            keys = [str(t["key"]).rsplit("-", 1)[0] for t in ts.data]
            want = here.events_slice("base", d, 0, 3)
            assert want.height and got.equals(want), d
            # one rank file read for it: the one holding GPU d
            assert len(keys) == 1 and keys[0].startswith("tracediff-reduced-base-sampled_rank-")
            read.add(keys[0])
    assert len(read) == 2  # each GPU's own file
