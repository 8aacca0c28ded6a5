"""Text helpers shared by the table and markdown renderers: names cut to a column, CI cells.

Stage: output.
"""

from __future__ import annotations

import math

from tracediff.inert import safe, safe_lines

__all__ = ["ci_cell", "plural", "safe", "safe_lines", "short"]


def short(name: str, width: int) -> str:
    """name cut to width; a trailing " [...]" tag (a collective's wait / transfer part) is kept."""
    if len(name) <= width:
        return name
    head, sep, tag = name.rpartition(" [")
    if sep and tag.endswith("]") and len(tag) + 4 < width // 2:
        return head[: width - len(tag) - 3] + "… [" + tag
    return name[: width - 1] + "…"


def ci_cell(lo: float, hi: float) -> str:
    """A table row's CI: `[+lo,+hi]`, or "-" where there is none (fewer than 2 cycles a side)."""
    return "-" if math.isnan(lo) else f"[{lo:+.3f},{hi:+.3f}]"


def plural(n: int | float, word: str) -> str:
    """`1 cycle`, `12 cycles`, `0 contributors`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
