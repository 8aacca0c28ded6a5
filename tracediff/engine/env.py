"""Environment differences between two runs: capture manifests, tool versions, GPUs.

Stage: engine (reported before anything else). Input: two `Run`s; output: `EnvDiff`s.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from tracediff.engine.result import EnvDiff
from tracediff.runs.runfile import Run

# Manifest keys that differ between any two captures and say nothing about the environment.
_VOLATILE = (
    "time",
    "start",
    "end",
    "output",
    "label",
    "pid",
    "report",
    "duration",
    "argv",
    "command",
    "outdir",
    "cwd",
    "power_draw_w",
    "temperature",
    "utc",
    "reasons",
)
# Current clocks read before the workload starts are those of an idle GPU; compare the readings
# taken right after it (manifest.gpus_end.*), when clocks are what the workload ran at.
_IDLE_READINGS = re.compile(r"^manifest\.gpus\.\d+\.clock_(sm|mem)_mhz$")
# The code under test is what two captures are compared for: the commit, the ref and the state of
# the user's checkout (manifest.git.*) differ on purpose and are not an environment difference.
_CODE = "manifest.git."
# What the launch-stack trace recorded (manifest.stacks.*: functions and modules traced, ranges,
# stacks) follows the code too: a commit that adds two functions traces two more; not environment.
_STACKS = "manifest.stacks."
# So does what capture's NVTX check counted (manifest.nvtx.*: the files importing nvtx, the
# workload's own NVTX events, capture/nvtxcheck.py); the nvtx version is workload_python's.
_NVTX = "manifest.nvtx."
_WORKTREE = re.compile(r"/tmp/tracediff-wt-[^/:]+(/[0-9a-f]{6,40})?")


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}{i}."))
    else:
        out[prefix.rstrip(".")] = d
    return out


def env_diffs(base: Run, head: Run) -> list[EnvDiff]:
    """Environment differences: capture manifests, tool versions, GPUs."""

    def env(run: Run) -> dict[str, Any]:
        e = {f"manifest.{k}": v for k, v in _flatten(run.metadata.get("manifest") or {}).items()}
        e["nsys_version"] = run.metadata.get("nsys_version")
        devs = pl.from_arrow(run.table("devices"))
        assert isinstance(devs, pl.DataFrame)
        e["gpus"] = (
            ", ".join(sorted(str(x) for x in devs["name"].to_list())) if devs.height else None
        )
        return e

    def norm(v: Any) -> Any:
        return _WORKTREE.sub("<worktree>", v) if isinstance(v, str) else v

    b = {k: norm(v) for k, v in env(base).items()}
    h = {k: norm(v) for k, v in env(head).items()}
    diffs = []
    for k in sorted(set(b) | set(h)):
        leaf = k.rsplit(".", 1)[-1].lower()
        if any(v in leaf for v in _VOLATILE) or _IDLE_READINGS.match(k) or ".reasons." in k:
            continue
        if k.startswith((_CODE, _STACKS, _NVTX)):
            continue
        if b.get(k) != h.get(k) and b.get(k) is not None and h.get(k) is not None:
            diffs.append(EnvDiff(k, b.get(k), h.get(k)))
        elif (b.get(k) is None) != (h.get(k) is None) and k.startswith("manifest."):
            diffs.append(EnvDiff(k, b.get(k), h.get(k)))
    return diffs
