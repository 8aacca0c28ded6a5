"""TUI fixtures: real comparisons of bundled traces.

`comparison`: the bundled samples (H200 CUDA-graph verify, 12 cycles, one GPU). `mfu_2gpu`: the
nsys-ai pair (two GPUs, NCCL; cycles cut from the kernel period). `twostream`: the H200 two-stream
captures whose streams wait on each other's CUDA events (tests/data/README.md). `hostonly`: two
`tracediff capture` runs made on a machine without a GPU (NVTX ranges only: a host-only
comparison). `runsets`: the run-set demo, samples/runs/good vs samples/runs/bad (4 H200 runs a
side, captured interleaved: `make demo`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import textual

from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"

# Snapshots are only comparable when drawn by the exact toolchain that recorded them.
SNAPSHOT_VERSIONS = {"textual": "8.2.8"}


@pytest.fixture(scope="session")
def comparison() -> Comparison:
    return compare(load(SAMPLES / "g_good.arrow"), load(SAMPLES / "g_bad.arrow"))


@pytest.fixture(scope="session")
def runsets() -> Comparison:
    from tracediff.parse.sides import resolve

    sides = [[load(p) for p in resolve(SAMPLES / "runs" / n).runs] for n in ("good", "bad")]
    return compare(sides[0], sides[1], labels=("good", "bad"))


@pytest.fixture(scope="session")
def mfu_2gpu(data_dir: Path) -> Comparison:
    d = data_dir / "nsys" / "nsys-ai"
    return compare(load(d / "mfu_2gpu_before.sqlite"), load(d / "mfu_2gpu_after.sqlite"))


@pytest.fixture(scope="session")
def twostream(data_dir: Path) -> Callable[[str], Comparison]:
    """`twostream(lib)`: good vs slow-a of the `torch` or `cupy` capture (the engine hands over
    both sides' CUDA event tables: `replay_inputs.base_events` / `.head_events`)."""
    cache: dict[str, Comparison] = {}

    def get(lib: str) -> Comparison:
        if lib not in cache:
            d = data_dir / "h200" / "twostream"
            base, head = load(d / f"{lib}_good.sqlite"), load(d / f"{lib}_slow-a.sqlite")
            cache[lib] = compare(base, head)
        return cache[lib]

    return get


@pytest.fixture(scope="session")
def hostonly(data_dir: Path) -> Comparison:
    d = data_dir / "capture-hostonly"
    return compare(load(d / "base" / "report.sqlite"), load(d / "slow" / "report.sqlite"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if textual.__version__ == SNAPSHOT_VERSIONS["textual"]:
        return
    skip = pytest.mark.skip(
        reason=f"snapshots recorded with textual {SNAPSHOT_VERSIONS['textual']}, "
        f"this is {textual.__version__}"
    )
    for item in items:
        if "snap_compare" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)
