"""The selected contributor's code: its launch stacks and the suspect commits (key `c`).

Stage: presentation. Input: a `Comparison` (`launch_stacks`, `sources`), the contributor's id
and, with `compare --repo`, the `Suspects`; output: the text of a dialog. Each stack is listed
innermost first with its share of the contributor's time, library frames dimmed, the frames of
user code bright; then the suspect commits whose evidence names this contributor, with how
their diff hit its stacks, and the first suspect's diff of that file. Where there is nothing to show the dialog says why.
"""

from __future__ import annotations

import polars as pl
from rich.text import Text

from tracediff.engine.result import Comparison
from tracediff.parse.stacks.library import is_library
from tracediff.report.text import frame_label, safe, short
from tracediff.suspects import Suspects
from tracediff.suspects.nostacks import NO_STACKS

STACKS_SHOWN = 4
FRAMES_SHOWN = 14
HUNK_SHOWN = 10


def why_none(c: Comparison, kind: str) -> str:
    """Why a contributor has no launch stack."""
    if kind in ("gap", "overlap", "host"):
        return (
            "idle time and stream overlap are not launched by code: no launch stack "
            "(the ops around the gap have theirs)"
        )
    if not c.launch_stacks.height:
        return NO_STACKS
    return "none of this contributor's launches resolved to a Python stack in these runs"


def stack_text(c: Comparison, cid: str, suspects: Suspects | None) -> Text:
    row = c.attribution.filter(pl.col("contributor_id") == cid)
    kind = row["kind"][0] if row.height else ""
    name = row["name"][0] if row.height else cid
    t = Text()
    t.append(f"{cid}  {safe(short(str(name), 90))}\n\n", "bold")
    ls = c.launch_stacks.filter(pl.col("contributor_id") == cid)
    if not ls.height:
        t.append(why_none(c, kind) + "\n", "#ffaf00")
    else:
        ls = ls.with_columns(is_library(pl.col("file")).alias("_lib"))
        per = ls.unique(["side", "stack_id"]).sort(
            ["share", "side", "stack_id"], descending=[True, False, False]
        )
        for i, s in enumerate(per.head(STACKS_SHOWN).iter_rows(named=True)):
            frames = ls.filter(
                (pl.col("side") == s["side"]) & (pl.col("stack_id") == s["stack_id"])
            ).sort("depth")
            t.append(f"stack {i + 1}: {100 * s['share']:.0f} % of its time ({s['side']})\n", "bold")
            for f in frames.head(FRAMES_SHOWN).iter_rows(named=True):
                label = frame_label(f["file"], f["line"], f["function"])
                t.append(f"  {f['depth']:>3} {safe(label)}\n", "#8a8a8a" if f["_lib"] else "")
            if frames.height > FRAMES_SHOWN:
                t.append(f"      … {frames.height - FRAMES_SHOWN} outer frames\n", "#8a8a8a")
        if per.height > STACKS_SHOWN:
            t.append(f"… {per.height - STACKS_SHOWN} more stacks\n", "#8a8a8a")
    t.append("\nsuspect commits\n", "bold")
    if suspects is None:
        t.append("not ranked: give compare --repo DIR (the workload's git checkout)\n", "#8a8a8a")
        return t
    mine = [
        (r, next(e for e in r["evidence"] if e["contributor"] == cid))
        for r in suspects.rows
        if any(e["contributor"] == cid for e in r["evidence"])
    ]
    if not mine:
        why = "; ".join(suspects.notes) or (
            f"none of the {suspects.commits} commits touched this contributor's stacks"
        )
        t.append(safe(why) + "\n", "#ffaf00")
        return t
    for r, e in mine[:8]:
        t.append(f"  {r['commit'][:12]} ", "bold")
        t.append(f"{safe(short(r['subject'], 60))}\n")
        t.append(
            f"      {e['kind']}: {safe(frame_label(e['file'], e['line'], e['function'], 60))}"
            f"  (score {r['score']:.4f})\n",
            "#8a8a8a",
        )
        if r is mine[0][0]:  # the top suspect's change, as the diff shows it
            for h in r.get("hunk", [])[:HUNK_SHOWN]:
                style = (
                    "#5fd75f"
                    if h.startswith("+")
                    else "#ff5f5f"
                    if h.startswith("-")
                    else "#5fafff"
                )
                t.append(f"        {safe(short(h, 90))}\n", style)
    return t
