"""The NVTX domain of function-trace ranges: `python:MODULE`, written by capture, read by parse.

Stage: plumbing, below capture and parse (stdlib only, imports nothing). `tracediff capture`
runs on a GPU host in the workload's Python, which may have no polars or pyarrow (the lent
H200's has torch only): capture/stacks.py takes the name from here, not from the nsys reader's
package (importing tracediff.parse loads polars).
"""

FUNCTION_DOMAIN = "python:"
"""NVTX domains named `python:MODULE` hold function-trace ranges of that module's functions."""
