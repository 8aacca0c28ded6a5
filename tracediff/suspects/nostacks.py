"""Why a comparison has no launch stacks, in words: what `--repo` and the TUI's stack view say
instead of ranking or showing stacks.

Stage: consumer (suspects). Input: the runs' capture manifests (`manifest.stacks`, written by
capture/stacks.py: what was recorded, or why nothing was); output: one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NO_STACKS = (
    "these runs carry no launch stacks: PyTorch-profiler traces recorded with with_stack=True "
    "carry them, and so do nsys captures with a Python function trace (`tracediff capture` "
    "records one by default) whose traced functions start inside the capture range"
)
BEFORE_RANGE = (
    "the nsys function trace recorded {ranges} ranges but no kernel was launched inside one: a "
    "traced function that began before the capture range (a main() that calls "
    "cudaProfilerStart and then the loop) is not recorded. Trace the loop's own functions "
    "(`tracediff capture --stack-module MOD`, a module whose functions the loop calls) or start "
    "the capture range before the traced function is entered"
)


def why_no_stacks(runs: Sequence[Any]) -> str:
    """Why `runs` (parse's Run objects, both sides) carry no launch stacks: what their capture
    manifests say (nothing recorded and why; ranges recorded but none around a launch), else
    where stacks come from."""
    for run in runs:
        st = (run.metadata.get("manifest") or {}).get("stacks") or {}
        if st.get("recorded") == "none" and st.get("why"):
            return f"no launch stacks were recorded: {st['why']}"
        if st.get("recorded_ranges") and not st.get("kernels_with_stack"):
            return BEFORE_RANGE.format(ranges=st["recorded_ranges"])
    return NO_STACKS
