"""Cross-stream waits in the replay: a two-stream timeline built as a run, with a known answer.

Per cycle on one GPU: A (stream 7) -> B (stream 8, waits for A through an event) -> D (stream 7,
waits for B); C, E, F, G queue on stream 7. Every launch is issued early, so the GPU never waits
for the host: what holds B and D back is the other stream. In head A is 20 us longer. Taking A
from base must pull B and D (and the cycle) 20 us earlier, which only happens if the replay
ties B and D to the ops of the other stream that they waited on.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tracediff.engine.compare import compare
from tracediff.replay import predict
from tracediff.replay.graph import build
from tracediff.runs import schema
from tracediff.runs.runfile import Run

US = 1_000
PID = TID = 4242


def _run(a_us: float, cycles: int, seed: int) -> tuple[Run, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {
        k: []
        for k in (
            "stream_id",
            "start_ns",
            "end_ns",
            "name",
            "launch_start_ns",
            "launch_end_ns",
            "correlation_id",
        )
    }
    ranges: dict[str, list] = {k: [] for k in ("start_ns", "end_ns")}
    spans = []
    corr = 1
    for k in range(cycles):
        t = 1_000_000 + k * 400 * US
        jit = lambda: int(rng.integers(0, 200))  # noqa: E731
        ops = {}
        ops["A"] = (7, t, t + int(a_us * US) + jit())
        ops["B"] = (8, ops["A"][2] + 2 * US + jit(), 0)
        ops["B"] = (8, ops["B"][1], ops["B"][1] + 20 * US + jit())
        ops["C"] = (7, ops["A"][2] + 1_500 + jit(), 0)
        ops["C"] = (7, ops["C"][1], ops["C"][1] + 2 * US + jit())
        ops["D"] = (7, ops["B"][2] + 1_500 + jit(), 0)
        ops["D"] = (7, ops["D"][1], ops["D"][1] + 5 * US + jit())
        prev = ops["D"][2]
        for name in ("E", "F", "G"):
            s = prev + 1_500 + jit()
            ops[name] = (7, s, s + 4 * US + jit())
            prev = ops[name][2]
        for i, (name, (stream, s, e)) in enumerate(ops.items()):
            rows["stream_id"].append(stream)
            rows["start_ns"].append(s)
            rows["end_ns"].append(e)
            rows["name"].append(f"kernel_{name}")
            launch = t - 60 * US + i * 5 * US  # all launched well ahead of the GPU
            rows["launch_start_ns"].append(launch)
            rows["launch_end_ns"].append(launch + 3 * US)
            rows["correlation_id"].append(corr)
            corr += 1
        ranges["start_ns"].append(t - 70 * US)
        ranges["end_ns"].append(t + 300 * US)
        spans.append(prev - t)
    n = len(rows["start_ns"])
    kern = pa.table(
        {
            **rows,
            "device_id": pa.array([0] * n, pa.int32()),
            "process_id": [PID] * n,
            "duration_ns": [e - s for s, e in zip(rows["start_ns"], rows["end_ns"], strict=True)],
            "short_name": rows["name"],
            "launch_thread_id": [TID] * n,
            "launch_api": ["cudaLaunchKernel"] * n,
            "grid_x": pa.array([1] * n, pa.int32()),
            "block_x": pa.array([128] * n, pa.int32()),
        }
    )
    m = len(ranges["start_ns"])
    nvtx = pa.table(
        {
            "process_id": [PID] * m,
            "thread_id": [TID] * m,
            **ranges,
            "duration_ns": [
                e - s for s, e in zip(ranges["start_ns"], ranges["end_ns"], strict=True)
            ],
            "name": ["cycle"] * m,
            "depth": pa.array([0] * m, pa.int32()),
            "range_kind": ["push_pop"] * m,
        }
    )
    run = Run(
        tables={
            "kernels": schema.conform("kernels", kern),
            "nvtx_ranges": schema.conform("nvtx_ranges", nvtx),
        },
        metadata={"source": f"synthetic-{seed}", "label": f"s{seed}"},
    )
    return run, np.array(spans) / 1e6


@pytest.fixture(scope="module")
def pair():  # noqa: ANN201
    base, base_spans = _run(10, 20, seed=1)
    head, head_spans = _run(30, 20, seed=2)
    return compare(base, head, n_boot=50), base_spans, head_spans


def test_measured_spans_are_the_generated_ones(pair) -> None:  # noqa: ANN001
    c, base_spans, head_spans = pair
    assert c.base.mean_ms == pytest.approx(base_spans.mean(), abs=1e-9)
    assert c.head.mean_ms == pytest.approx(head_spans.mean(), abs=1e-9)


def test_waits_on_the_other_stream_are_found(pair) -> None:  # noqa: ANN001
    c, _, _ = pair
    g = build(c)
    # B waits for A, D waits for B: two cross-stream edges per cycle, none left unexplained
    assert g.stats["wait_edges"] == 2 * c.head.cycles
    assert g.stats["pinned_unexplained"] == 0


def test_taking_the_slow_kernel_pulls_the_other_stream_along(pair) -> None:  # noqa: ANN001
    c, base_spans, head_spans = pair
    w = predict(c, "name:kernel_A")
    assert w.replayed_head_ms_per_cycle == pytest.approx(head_spans.mean(), abs=1e-9)
    assert w.recovered_ms_per_cycle == pytest.approx(0.020, abs=0.001)  # A's 20 us
    assert w.predicted_ms_per_cycle == pytest.approx(base_spans.mean(), rel=0.02)
    assert w.sweeps > 1
    # the path runs A -> B -> D -> E -> F -> G; C (on stream 7 between A and D) is off it
    names = set(w.critical_path["name"].to_list())
    assert {"kernel_A", "kernel_B", "kernel_D"} <= names and "kernel_C" not in names
    # taking C, which is off the critical path, changes nothing
    assert abs(predict(c, "name:kernel_C").recovered_ms_per_cycle) < 1e-4
