"""How the main screen's rows are shared on a short terminal: the table's names before the
timeline's lanes.

Stage: presentation (layout). Input: the terminal's height and the rows the verdict and notes
line take; output: the most rows the timeline may take. The verdict panel opens with the text
report's headline (GPU work, host-bound idle, the change, base → head: 4 rows, 5 with run sets,
one more for a whole-run fallback), and at 80x24 the timeline of a 2-GPU pair (7 rows) would
leave the attribution table 3 contributors. The timeline gives up its lower lanes and legend
first (they stay one key away: `p`, a taller terminal), down to one GPU's two lanes.
"""

from __future__ import annotations

FOOTER_ROWS = 1
REPLAY_ROWS = 5  # the cycle strip's 4 rows and its top border
TABLE_ROWS = 8  # border, header and 5 contributors (and the scroll bar row)
TIMELINE_MIN = 4  # border, axis, one GPU's base and head lanes
TIMELINE_SHARE = 0.6  # of the body, as the stylesheet's max-height says on a tall terminal


def timeline_rows(height: int, verdict_rows: int, notes_rows: int) -> int:
    """The timeline's max height (rows) on a terminal `height` rows tall."""
    body = height - verdict_rows - notes_rows - FOOTER_ROWS
    room = body - REPLAY_ROWS - TABLE_ROWS
    return max(TIMELINE_MIN, min(room, int(TIMELINE_SHARE * body)))
