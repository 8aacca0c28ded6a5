"""Which frames of a launch stack are library code, and which are the user's.

Stage: launch stacks (a rule on their frames' files). Input: a frame's `file` column; output: a
boolean expression. Read by the engine (engine/sources.py: each launch's location is its
innermost user frame), the commit suspects (suspects/rank.py: only user files are suspects)
and the TUI's stack view, so they all fold the same frames.

A frame is library code when it has no file (`<built-in method ...>`, `nn.Module: ...`), or its
file is under `site-packages/` or `dist-packages/`, or starts with `<` (`<frozen ...>`), or its
first path component is a package of LIBRARY_PACKAGES or of the Python standard library (Kineto
writes installed files relative to sys.path: `torch/nn/modules/module.py`, `threading.py`).
"""

from __future__ import annotations

import sys

import polars as pl

LIBRARY_PACKAGES: frozenset[str] = frozenset({"torch", "numpy", "triton", "typing_extensions"})
"""Top-level packages whose frames are library code besides the standard library (the place to
make the rule configurable)."""

_LIBRARY_PATH = r"(^|/)(site-packages|dist-packages)/|^<"
_STDLIB = frozenset(sys.stdlib_module_names) | LIBRARY_PACKAGES


def is_library(file: pl.Expr) -> pl.Expr:
    """True where a frame's file is library code (null file: library); see the module doc."""
    top = file.str.extract(r"^([A-Za-z_][\w]*)(?:/|\.py$)")
    return (
        file.is_null()
        | file.str.contains(_LIBRARY_PATH)
        | top.is_in(list(_STDLIB)).fill_null(False)
    )
