"""Workloads shipped for trying the pipeline (run inside the profiled process: torch only)."""
