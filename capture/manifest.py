"""The environment manifest of a capture: what the run depended on besides the code.

Stage: capture. Input: the host (nvidia-smi), the workload's Python (probed in a subprocess), the
nsys binary, the environment and the git state; output: a JSON-able dict stored as
`run.metadata["manifest"]` and `OUTDIR/manifest.json`.

Unknown is null, never missing: every key below is always present. When a value is null because it
could not be read, `reasons` says why, keyed by the field's dotted path, e.g.
`{"gpus": "nvidia-smi not found", "workload_python.torch_version": "torch not importable"}`.
Per-GPU fields nvidia-smi reports as "[N/A]" are null with reason `gpus.<i>.<field>`. `gpus` is read
before the workload starts, `gpus_end` right after it ends (null, without a reason, when `gpus` is).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
from datetime import UTC, datetime
from typing import Any

from tracediff.base import nsys_tool

MANIFEST_VERSION = 1

# nvidia-smi --query-gpu field -> manifest key (units are nvidia-smi's with nounits)
GPU_FIELDS: dict[str, str] = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "pci.bus_id": "pci_bus_id",
    "driver_version": "driver_version",
    "pstate": "pstate",
    "clocks.sm": "clock_sm_mhz",
    "clocks.max.sm": "clock_sm_max_mhz",
    "clocks.mem": "clock_mem_mhz",
    "clocks.max.mem": "clock_mem_max_mhz",
    "power.draw": "power_draw_w",
    "power.limit": "power_limit_w",
    "pcie.link.gen.current": "pcie_gen_current",
    "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.width.current": "pcie_width_current",
    "pcie.link.width.max": "pcie_width_max",
    "memory.total": "memory_total_mib",
}
_TEXT_FIELDS = {"name", "uuid", "pci.bus_id", "driver_version", "pstate"}

ENV_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "TORCH_", "PYTORCH_", "NVIDIA_", "NVTX_")
ENV_NAMES = ("PYTHONPATH", "OMP_NUM_THREADS", "TRACEDIFF_NVTX_SHIM", "TRACEDIFF_NVTX_BACKEND")

# Run by the workload's own interpreter: it sees the torch/NCCL/SGLang the workload will import.
_PROBE = r"""
import json, sys, platform
from importlib import metadata
out = {"executable": sys.executable, "python_version": platform.python_version()}
why = {}
for dist in ("torch", "sglang", "nvtx"):
    try:
        out[dist + "_version"] = metadata.version(dist)
    except Exception as e:
        out[dist + "_version"] = None; why[dist + "_version"] = dist + " not installed"
try:
    import torch
    out["torch_cuda_version"] = torch.version.cuda
    if torch.version.cuda is None:
        why["torch_cuda_version"] = "torch is a CPU-only build"
    try:
        v = torch.cuda.nccl.version()
        out["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as e:
        out["nccl_version"] = None
        why["nccl_version"] = "torch.cuda.nccl.version() failed: " + type(e).__name__
except Exception as e:
    out["torch_cuda_version"] = None; out["nccl_version"] = None
    why["torch_cuda_version"] = why["nccl_version"] = "torch not importable: " + type(e).__name__
print(json.dumps({"values": out, "reasons": why}))
"""
PYTHON_KEYS = (
    "executable",
    "python_version",
    "torch_version",
    "torch_cuda_version",
    "nccl_version",
    "sglang_version",
    "nvtx_version",
)


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_nvidia_smi_csv(
    text: str, fields: list[str]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Rows of `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits` as manifest dicts."""
    gpus: list[dict[str, Any]] = []
    reasons: dict[str, str] = {}
    for i, line in enumerate(ln for ln in text.splitlines() if ln.strip()):
        cells = [c.strip() for c in line.split(", ")]
        if len(cells) != len(fields):
            raise ValueError(
                f"nvidia-smi row has {len(cells)} cells, expected {len(fields)}: {line!r}"
            )
        gpu: dict[str, Any] = {}
        for field, cell in zip(fields, cells, strict=True):
            key = GPU_FIELDS[field]
            if cell.startswith("[") or cell in (
                "",
                "N/A",
            ):  # [N/A], [Not Supported], [Unknown Error]
                gpu[key] = None
                reasons[f"gpus.{i}.{key}"] = f"nvidia-smi reported {cell or 'nothing'}"
            elif field in _TEXT_FIELDS:
                gpu[key] = cell
            else:
                num = float(cell)
                gpu[key] = int(num) if num.is_integer() else num
        gpus.append(gpu)
    return gpus, reasons


def gpu_info(nvidia_smi: str | None = None) -> tuple[list[dict[str, Any]] | None, dict[str, str]]:
    """GPUs as nvidia-smi sees them now, or (None, {"gpus": why})."""
    exe = nvidia_smi or shutil.which("nvidia-smi")
    if exe is None or not os.path.exists(exe):
        return None, {"gpus": "nvidia-smi not found (no NVIDIA driver on this host)"}
    fields = list(GPU_FIELDS)
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, {"gpus": f"nvidia-smi failed: {e}"}
    if proc.returncode != 0:
        msg = (proc.stdout + proc.stderr).strip().splitlines()
        return None, {
            "gpus": f"nvidia-smi exited {proc.returncode}: {msg[-1] if msg else ''}".strip()
        }
    try:
        return parse_nvidia_smi_csv(proc.stdout, fields)
    except ValueError as e:
        return None, {"gpus": str(e)}


def python_info(
    python: str | None, env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """Versions seen by the workload's interpreter; every key present, null with a reason."""
    values: dict[str, Any] = dict.fromkeys(PYTHON_KEYS)
    prefix = "workload_python."
    if python is None:
        return values, {prefix.rstrip("."): "the workload is not a Python command"}
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=cwd,
            check=False,
        )
        probe = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        return values, {prefix.rstrip("."): f"{python} could not be probed: {e}"}
    if probe is None:
        return values, {prefix.rstrip("."): f"{python} -c probe exited {proc.returncode}"}
    values.update({k: probe["values"].get(k) for k in PYTHON_KEYS})
    return values, {prefix + k: v for k, v in probe["reasons"].items()}


def nsys_version(nsys: str) -> str | None:
    out = nsys_tool.version_output(nsys)
    if out is None:
        return None
    return out[0].strip().removeprefix("NVIDIA Nsight Systems version ").strip() or None


def env_subset(environ: dict[str, str]) -> dict[str, str]:
    """The variables that change GPU/NCCL/SGLang/torch behaviour (NCCL_*, CUDA_*, ...)."""
    return {
        k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES
    }


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def new_manifest(**fields: Any) -> dict[str, Any]:
    """A manifest with every key present (null until filled)."""
    m: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "tracediff_version": None,
        "label": None,
        "preset": None,
        "command": None,
        "nsys_command": None,
        "cwd": None,
        "git": None,
        "host": None,
        "gpus": None,  # before the workload
        "gpus_end": None,  # right after it: clocks, P-state and power under (recent) load
        "driver_version": None,
        "workload_python": None,
        "nsys_version": None,
        "env": None,
        "start_utc": None,
        "end_utc": None,
        "duration_s": None,
        "workload_exit_code": None,
        "nsys_exit_code": None,
        "interrupted": False,
        "partial": False,
        "report": None,
        "reasons": {},
    }
    m.update(fields)
    return m


def fill_gpus(m: dict[str, Any], nvidia_smi: str | None = None) -> None:
    gpus, reasons = gpu_info(nvidia_smi)
    m["gpus"] = gpus
    drivers = sorted({g["driver_version"] for g in gpus or [] if g.get("driver_version")})
    m["driver_version"] = drivers[0] if len(drivers) == 1 else (", ".join(drivers) or None)
    if m["driver_version"] is None:
        reasons.setdefault(
            "driver_version", reasons.get("gpus", "nvidia-smi gave no driver version")
        )
    m["reasons"].update(reasons)
