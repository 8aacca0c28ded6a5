"""The capture manifest: nvidia-smi parsing, the workload-Python probe, null with reason, git."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from capture import manifest as mf
from capture import worktree as wt
from tracediff.base.errors import UsageError

pytestmark = [pytest.mark.git]

# Real output of `nvidia-smi --query-gpu=<mf.GPU_FIELDS> --format=csv,noheader,nounits` on the lent
# H200 (driver 580.159.04), taken by a capture there.
H200_ROW = (
    "0, NVIDIA H200, GPU-04b2dbe9-54f0-429e-0f90-619194e48bbf, 00000000:00:06.0, 580.159.04, P0, "
    "345, 1980, 3201, 3201, 79.08, 700.00, 5, 5, 16, 16, 143771"
)


def test_parse_real_h200_row() -> None:
    gpus, reasons = mf.parse_nvidia_smi_csv(H200_ROW + "\n", list(mf.GPU_FIELDS))
    assert reasons == {}
    assert gpus == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": "GPU-04b2dbe9-54f0-429e-0f90-619194e48bbf",
            "pci_bus_id": "00000000:00:06.0",
            "driver_version": "580.159.04",
            "pstate": "P0",
            "clock_sm_mhz": 345,
            "clock_sm_max_mhz": 1980,
            "clock_mem_mhz": 3201,
            "clock_mem_max_mhz": 3201,
            "power_draw_w": 79.08,
            "power_limit_w": 700,
            "pcie_gen_current": 5,
            "pcie_gen_max": 5,
            "pcie_width_current": 16,
            "pcie_width_max": 16,
            "memory_total_mib": 143771,
        }
    ]


def test_not_available_cells_are_null_with_a_reason() -> None:
    row = H200_ROW.replace("79.08", "[N/A]").replace(", 5, 5,", ", [Not Supported], 5,")
    gpus, reasons = mf.parse_nvidia_smi_csv(
        row + "\n" + H200_ROW.replace("0, NVIDIA", "1, NVIDIA", 1), list(mf.GPU_FIELDS)
    )
    assert len(gpus) == 2 and gpus[1]["index"] == 1
    assert gpus[0]["power_draw_w"] is None and gpus[0]["pcie_gen_current"] is None
    assert reasons == {
        "gpus.0.power_draw_w": "nvidia-smi reported [N/A]",
        "gpus.0.pcie_gen_current": "nvidia-smi reported [Not Supported]",
    }


def test_wrong_cell_count_is_an_error() -> None:
    with pytest.raises(ValueError, match="expected 17"):
        mf.parse_nvidia_smi_csv("0, NVIDIA H200\n", list(mf.GPU_FIELDS))


def test_fill_gpus_without_nvidia_smi(tmp_path: Path) -> None:
    m = mf.new_manifest()
    mf.fill_gpus(m, str(tmp_path / "nvidia-smi"))
    assert m["gpus"] is None and m["driver_version"] is None
    assert m["reasons"]["gpus"] == "nvidia-smi not found (no NVIDIA driver on this host)"
    assert m["reasons"]["driver_version"] == m["reasons"]["gpus"]


def test_fill_gpus_through_a_failing_nvidia_smi(tmp_path: Path) -> None:
    # the shape seen on hosts whose driver is gone: nvidia-smi exists, exits 9 with a message
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn''t communicate with the "
        "NVIDIA driver.'\nexit 9\n"
    )
    smi.chmod(0o755)
    m = mf.new_manifest()
    mf.fill_gpus(m, str(smi))
    assert m["gpus"] is None
    assert m["reasons"]["gpus"].startswith("nvidia-smi exited 9: NVIDIA-SMI has failed")


def test_every_key_present_even_when_unknown() -> None:
    m = mf.new_manifest()
    for key in (
        "gpus",
        "driver_version",
        "workload_python",
        "nsys_version",
        "env",
        "git",
        "command",
        "start_utc",
        "end_utc",
        "workload_exit_code",
        "partial",
        "reasons",
    ):
        assert key in m


def test_probe_of_this_python() -> None:
    values, reasons = mf.python_info(sys.executable)
    assert set(values) == set(mf.PYTHON_KEYS)
    assert values["executable"] and values["python_version"] == ".".join(
        map(str, sys.version_info[:3])
    )
    assert values["nvtx_version"] == "0.2.10"
    for key in ("torch_version", "torch_cuda_version", "nccl_version", "sglang_version"):
        if values[key] is None:
            assert reasons[f"workload_python.{key}"], key


def test_probe_of_a_missing_python() -> None:
    values, reasons = mf.python_info("/nonexistent/python3")
    assert all(v is None for v in values.values())
    assert "could not be probed" in reasons["workload_python"]
    values, reasons = mf.python_info(None)
    assert reasons == {"workload_python": "the workload is not a Python command"}


def test_env_subset() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0",
        "SGLANG_ENABLE_SPEC_V2": "1",
        "HOME": "/root",
        "TORCH_CUDA_ARCH_LIST": "9.0a",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "HF_TOKEN": "secret",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert mf.env_subset(env) == {k: v for k, v in env.items() if k not in ("HOME", "HF_TOKEN")}


# ---- git state ----


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "r"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    (r / "a.py").write_text("x = 1\n")
    _git(r, "add", "a.py")
    _git(r, "commit", "-qm", "one")
    return r


def test_clean_then_dirty_tree(repo: Path) -> None:
    clean = wt.user_tree_state(repo)
    assert (
        clean["dirty"] is False and clean["diff_sha256"] is None and clean["user_branch"] == "main"
    )
    (repo / "new.txt").write_text("untracked")
    s = wt.user_tree_state(repo)
    assert s["dirty"] is False and s["untracked_files"] == 1
    (repo / "a.py").write_text("x = 2\n")
    s = wt.user_tree_state(repo)
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "HEAD", "--binary"], capture_output=True
    ).stdout
    assert s["dirty"] is True and s["diff_sha256"] == hashlib.sha256(diff).hexdigest()


def test_worktree_is_the_commit_and_is_removed(repo: Path) -> None:
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "a.py").write_text("x = 3\n")
    _git(repo, "commit", "-qam", "two")
    (repo / "a.py").write_text("x = dirty\n")
    with wt.worktree(repo, wt.resolve(repo, first)) as tree:
        assert (tree / "a.py").read_text() == "x = 1\n"
        assert _git(repo, "worktree", "list").count("\n") == 1
    assert not tree.exists()
    assert _git(repo, "worktree", "list").count("\n") == 0
    assert (repo / "a.py").read_text() == "x = dirty\n"  # the user's edit is untouched


def test_bad_repo_and_ref_are_usage_errors(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a git repository"):
        wt.toplevel(tmp_path)
    with pytest.raises(UsageError, match="no commit 'nope'"):
        wt.resolve(repo, "nope")
