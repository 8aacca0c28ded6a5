"""Readers: turn a profiler's output into a `Run` (see `load`)."""

from tracediff.parse.load import detect, load

__all__ = ["detect", "load"]
