"""Loaded inside the profiled process: this folder goes first on PYTHONPATH (sitecustomize.py)."""
