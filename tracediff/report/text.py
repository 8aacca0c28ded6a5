"""Text helpers shared by the table and markdown renderers: names cut to a column, CI cells.

Stage: output.
"""

from __future__ import annotations

import math

from tracediff.base.inert import safe, safe_lines

__all__ = ["ci_cell", "frame_label", "plural", "safe", "safe_lines", "short"]


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


RENAMED_FROM = " (renamed from {})"
REPLACED = " (in place of {})"


def renamed(base: str, head: str, width: int, template: str = RENAMED_FROM) -> str:
    """A renamed op as `head (renamed from base)` (`template`: REPLACED for another op in its
    place) in `width` characters: the head name first (what runs now), each name shortened only
    as far as both need, the head name keeping at least two thirds of the room."""
    room = width - len(template.format(""))
    if len(head) + len(base) > room:
        head_w = max(room - len(base), (2 * room) // 3)
        head = short(head, head_w)
        base = short(base, room - len(head))
    return head + template.format(base)


def op_label(row: dict[str, object], width: int, *, status: bool = True) -> str:
    """An attribution row's name for a text column: renamed ops by both names (`renamed`),
    others by their name, followed by " (status)" for added / removed / mixed when `status`."""
    base, head = row.get("base_name"), row.get("head_name")
    if isinstance(base, str) and isinstance(head, str):
        return renamed(
            base, head, width, REPLACED if row.get("status") == "replaced" else RENAMED_FROM
        )
    name = str(row["name"])
    if status and row.get("status") not in (None, "matched", "-", "host-side"):
        name = f"{name} ({row['status']})"
    return short(name, width)


def frame_label(file: str | None, line: int | None, function: str, width: int = 70) -> str:
    """`…/layers.py:18 mlp`: the file cut from the left so the line and function fit."""
    if file is None:
        return short(function, width)
    tail = f":{line} {function}" if line is not None else f" {function}"
    room = width - len(tail)
    if len(file) > room:
        file = "…" + file[-max(room - 1, 8) :]
    return short(file + tail, width)
