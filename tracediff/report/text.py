"""Text helpers shared by the table and markdown renderers: names cut to a column, CI cells.

Stage: output.
"""

from __future__ import annotations

import math


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


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def safe(text: str) -> str:
    """`text` with every character a terminal would act on or hide shown as an escape (`\\x1b`,
    `\\n`, `\\u202e`...): control characters, format characters (bidi overrides), line and
    paragraph separators, lone surrogates. A kernel name holding ESC[2J must not clear the
    reader's screen, nor a newline split a table row. The common case (all printable) is one
    check."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def safe_lines(lines: list[str]) -> str:
    """Lines of a text report joined, each made `safe`, with the closing newline."""
    return "\n".join(safe(line) for line in lines) + "\n"


def plural(n: int | float, word: str) -> str:
    """`1 cycle`, `12 cycles`, `0 contributors`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
