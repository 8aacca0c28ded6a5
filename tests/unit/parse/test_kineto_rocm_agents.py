"""ROCm agent ids (issue 17): roctracer numbers GPUs after the CPU agents, so the TraceLens SGLang
MI300X traces record their kernels on device 9 while deviceProperties names device 0. The reader
maps the ids where that is one to one and warns where it is not."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

from tests.support.cli import cli_run
from tracediff.parse.kineto import read_kineto
from tracediff.parse.kineto.agents import agent_map

KINETO = Path(__file__).parent.parent.parent / "data" / "kineto"
SGLANG = ["sglang_Qwen3-8B_decode.json.gz", "sglang_Qwen3-8B_prefilldecode.json.gz"]


def _raw(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _raw_gpu_devices(doc: dict) -> set[int]:
    return {
        e["args"]["device"]
        for e in doc["traceEvents"]
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "device" in e.get("args", {})
    }


@pytest.mark.parametrize("name", SGLANG)
def test_sglang_kernels_are_on_the_named_gpu(name: str) -> None:
    doc = _raw(KINETO / name)
    # the premise, read from the JSON itself: kernels on agent 9, one listed device, id 0
    assert _raw_gpu_devices(doc) == {9}
    assert [p["id"] for p in doc["deviceProperties"]] == [0]
    run = read_kineto(KINETO / name)
    kern = pl.from_arrow(run.tables["kernels"])
    mem = pl.from_arrow(run.tables["memops"])
    devs = pl.from_arrow(run.tables["devices"])
    assert set(kern["device_id"].unique()) == {0}
    assert set(mem["device_id"].unique()) == {0}
    named = kern.join(devs.select("device_id", gpu="name"), on="device_id", how="left")
    assert named["gpu"].null_count() == 0
    assert set(named["gpu"]) == {"AMD Instinct MI300X"}
    assert run.metadata["device_id_map"] == {"9": 0}
    assert not [w for w in run.warnings if "deviceProperties" in w]


def test_info_shows_no_empty_gpu_beside_an_unnamed_one() -> None:
    r = cli_run(["info", str(KINETO / SGLANG[0])], timeout=120)
    assert r.returncode == 0, r.stderr
    gpu_lines = [ln for ln in r.stdout.splitlines() if re.match(r"\s+GPU \d+ ", ln)]
    assert len(gpu_lines) == 1, r.stdout
    assert "AMD Instinct MI300X" in gpu_lines[0] and "555 kernels" in gpu_lines[0]
    assert "?" not in gpu_lines[0]


def test_ids_already_listed_are_kept() -> None:
    # HTA's MI250 trace: kernels on device 2 of the 4 listed: nothing to map, nothing to warn
    run = read_kineto(KINETO / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert set(pl.from_arrow(run.tables["kernels"])["device_id"].unique()) == {2}
    assert "device_id_map" not in run.metadata
    assert not [w for w in run.warnings if "deviceProperties" in w]


def test_unmatchable_agents_are_kept_and_warned(tmp_path: Path) -> None:
    # the SGLang trace with two listed devices for its one recorded agent: which GPU agent 9 is
    # cannot be read from the trace, so the id stays 9 and a warning says why
    doc = _raw(KINETO / SGLANG[0])
    second = dict(doc["deviceProperties"][0], id=1)
    doc["deviceProperties"] = [doc["deviceProperties"][0], second]
    path = tmp_path / "two_devices.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    run = read_kineto(path)
    assert set(pl.from_arrow(run.tables["kernels"])["device_id"].unique()) == {9}
    warned = [w for w in run.warnings if "deviceProperties" in w]
    assert len(warned) == 1 and str(path) in warned[0] and "device ids 9" in warned[0]
    assert "device_id_map" not in run.metadata


def test_agent_map_rule() -> None:
    assert agent_map([9], [0]) == ({9: 0}, None)
    assert agent_map([9, 10, 11], [0, 1, 2]) == ({9: 0, 10: 1, 11: 2}, None)
    assert agent_map([2], [0, 1, 2, 3]) == ({}, None)  # listed: as recorded
    assert agent_map([3], []) == ({}, None)  # nothing listed (CUDA traces often)
    for recorded, listed in (([9], [0, 1]), ([0, 9], [0, 1]), ([9, 10], [0])):
        mapping, warning = agent_map(recorded, listed)
        assert mapping == {} and warning is not None
