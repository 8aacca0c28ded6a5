"""tracediff: trace replay and timeline diff for GPU inference performance work."""

__version__ = "0.1.0"
