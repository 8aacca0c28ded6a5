"""Text made inert for a terminal: what every text output (reports, TUI, errors) prints names with.

Stage: output (a leaf: standard library only, so the CLI's error path works where polars is not
installed, as on a GPU host running `tracediff capture`).
"""

from __future__ import annotations

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
