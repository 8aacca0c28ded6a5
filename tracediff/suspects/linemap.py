"""A function's lines carried from one commit to the next through the diff between them.

Stage: commit suspects (issue 19). Input: line spans in one version of a file and the hunks of a
commit that changed it (`git diff --unified=0`: old start, old count, new start, new count);
output: the same spans in the other version. A line above, below or between hunks moves by the
lines added and removed above it; a span's end inside a changed block goes to that block's edge
on the other side, so a function keeps covering what replaced its lines. This is how a frame's
function, found with `ast` at the capture commit only, is located at every commit of the range
without parsing each version (two parses per file instead of two per file and commit).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

Hunk = tuple[int, int, int, int]
Span = tuple[int, int]


def move(x: int, hunks: Sequence[Hunk], upper: bool) -> int:
    """Line x of the old side on the new side (swap each hunk's halves to go back). `upper`:
    x ends a span (a line inside a changed block goes to the block's last new line), else it
    starts one (to its first)."""
    starts = [a if b > 0 else a + 1 for a, b, _, _ in hunks]
    i = bisect_right(starts, x) - 1
    if i < 0:
        return x
    a, b, c, d = hunks[i]
    if b > 0 and x <= a + b - 1:  # inside the changed block
        if d == 0:  # deleted: the gap after new line c
            return c if upper else c + 1
        return c + d - 1 if upper else c
    old_end = a + b - 1 if b > 0 else a
    new_end = c + d - 1 if d > 0 else c
    return x + new_end - old_end


def carry(spans: Sequence[Span], hunks: Sequence[Hunk], forward: bool) -> list[Span]:
    """Spans of one side on the other: old → new when `forward`, else new → old."""
    hs = sorted(hunks) if forward else sorted((c, d, a, b) for a, b, c, d in hunks)
    return [(move(s, hs, False), move(e, hs, True)) for s, e in spans]
