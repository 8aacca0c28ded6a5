"""Shared fixtures: paths to the real traces bundled under tests/data and the nsys CLI."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def nsys_path() -> str | None:
    env = os.environ.get("TRACEDIFF_NSYS")
    if env and Path(env).exists():
        return env
    for cand in (shutil.which("nsys"), "/opt/nsys-2024.2.3/bin/nsys"):
        if cand and Path(cand).exists():
            return cand
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def nsys() -> str:
    path = nsys_path()
    if path is None:
        pytest.fail("nsys is not installed: run `make nsys` (tools/install-nsys.sh)")
    return path
