"""The NVTX domain of function-trace ranges: `python:MODULE`, written by capture, read by parse.

Stage: plumbing, below capture and parse (stdlib only, imports nothing). `tracediff capture`
runs on a GPU host in the workload's Python, which may have no polars or pyarrow (the lent
H200's has torch only): capture/stacks.py takes the name from here, not from the nsys reader's
package (importing tracediff.parse loads polars).
"""

FUNCTION_DOMAIN = "python:"
"""NVTX domains named `python:MODULE` hold function-trace ranges of that module's functions."""

TOOL_DOMAIN_PREFIXES = (FUNCTION_DOMAIN,)
"""NVTX domains that the tooling adds, not the workload: their ranges are call frames, never
cycles or phases. `tracediff capture` adds ranges of no other domain: its only other ranges are
`--nvtx-shim`'s, which the user asks for to mark cycles (capture/shim)."""

NVTX_DROPPED = (
    "nsys 2024.2 drops the ranges of the Python nvtx package 0.2.12 and later (seen: 0.2.12 to "
    "0.2.17 under nsys 2024.2.3; 0.2.10 and 0.2.11 are recorded)"
)
"""Why a workload that marks its loop with `nvtx` can have no range of its own in the trace."""
NVTX_FIX = (
    "pin nvtx==0.2.10 in the workload's environment (or use torch.cuda.nvtx) and capture again"
)
