"""CUDA-graph kernels take their capture-time launch's stack only where that is sound
(parse/kineto/graph_stacks.py, issue 19), on altered copies of a real H200 graph trace.

The trace (tests/data/h200-suspects, minispec c5, graph mode) holds one stream capture of 60
kernel launches and 10 replays of 60 kernels. A replay that lost a kernel, a second capture and
a reordered replay must each keep the cudaGraphLaunch stack where the position mapping could be
wrong, and say so in a warning; untouched replays are still mapped.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from tracediff.parse.kineto import read_kineto

TRACE = (
    Path(__file__).resolve().parent.parents[1] / "data/h200-suspects/kineto/c5_unused_graph.json.gz"
)


@pytest.fixture(scope="module")
def doc() -> dict:
    return json.loads(gzip.decompress(TRACE.read_bytes()))


def _graph_launches(doc: dict) -> list[int]:
    return sorted(
        e["args"]["correlation"]
        for e in doc["traceEvents"]
        if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch"
    )


def _read(doc: dict, tmp_path: Path) -> tuple[pl.DataFrame, list[str]]:
    """(the replayed kernels, the warnings) of a copy of the trace."""
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    run = read_kineto(p)
    k = pl.from_arrow(run.tables["kernels"]).filter(pl.col("launch_api") == "cudaGraphLaunch")
    return k, run.warnings


def _replay_site(doc: dict, tmp_path: Path) -> int:
    """The stack id the replays had before the mapping: that of the cudaGraphLaunch calls,
    read with the capture removed (then nothing is mapped)."""
    d = copy.deepcopy(doc)
    d["traceEvents"] = [e for e in d["traceEvents"] if "Capture" not in e.get("name", "")]
    k, warnings = _read(d, tmp_path)
    assert not warnings and k["stack_id"].n_unique() == 1
    return k["stack_id"][0]


def test_the_real_trace_maps_every_replay(doc: dict, tmp_path: Path) -> None:
    site = _replay_site(doc, tmp_path)
    k, warnings = _read(doc, tmp_path)
    assert not warnings
    assert k.height == 600 and k["stack_id"].null_count() == 0
    assert site not in k["stack_id"].to_list()
    assert k["stack_id"].n_unique() > 3  # norm, attend, mlp, block residuals


def test_a_replay_with_a_missing_kernel_keeps_its_launch_stack(doc: dict, tmp_path: Path) -> None:
    site = _replay_site(doc, tmp_path)
    third = _graph_launches(doc)[2]
    d = copy.deepcopy(doc)
    ev = d["traceEvents"]
    i = next(
        i
        for i, e in enumerate(ev)
        if e.get("cat") == "kernel" and e["args"].get("correlation") == third
    )
    del ev[i]
    k, warnings = _read(d, tmp_path)
    assert len(warnings) == 1 and "1 replays whose kernel count differs" in warnings[0]
    cut = k.filter(pl.col("correlation_id") == third)
    assert cut.height == 59 and (cut["stack_id"] == site).all()
    rest = k.filter(pl.col("correlation_id") != third)
    assert rest.height == 540 and not (rest["stack_id"] == site).any()


def test_two_captures_map_nothing(doc: dict, tmp_path: Path) -> None:
    site = _replay_site(doc, tmp_path)
    d = copy.deepcopy(doc)
    ev = d["traceEvents"]
    begin = next(e for e in ev if e.get("name") == "cudaStreamBeginCapture")
    twin = copy.deepcopy(begin)
    twin["ts"] -= 50.0
    twin["args"]["correlation"] = 10**9
    ev.append(twin)
    k, warnings = _read(d, tmp_path)
    assert len(warnings) == 1 and "2 stream captures begun and 1 ended" in warnings[0]
    assert (k["stack_id"] == site).all()


def test_a_reordered_replay_maps_nothing(doc: dict, tmp_path: Path) -> None:
    """Two kernels of one replay swapped in time: the replays no longer run one sequence."""
    site = _replay_site(doc, tmp_path)
    first = _graph_launches(doc)[0]
    d = copy.deepcopy(doc)
    ks = sorted(
        (
            e
            for e in d["traceEvents"]
            if e.get("cat") == "kernel" and e["args"].get("correlation") == first
        ),
        key=lambda e: e["ts"],
    )
    a, b = next((x, y) for x, y in zip(ks, ks[1:], strict=False) if x["name"] != y["name"])
    a["ts"], b["ts"] = b["ts"], a["ts"]
    k, warnings = _read(d, tmp_path)
    assert len(warnings) == 1 and "different kernel sequences" in warnings[0]
    assert (k["stack_id"] == site).all()
