"""TUI fixtures: one real comparison of the bundled samples (H200 CUDA-graph verify, 12 cycles)."""

from __future__ import annotations

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
