"""`compare --repo DIR`: the suspect commits, as JSON and as the table/markdown block.

Stage: output. Input: tracediff.suspects.Suspects; output: the JSON part and text lines.

JSON (added to compare's document when --repo is given):
  "suspects": [{"commit" (full hash), "subject", "author", "date" (ISO 8601),
                "score",                # sum over the weighed contributors of |delta| x hit
                "share",                # of the weighed |delta| whose stacks run through a
                                        # function it changed (line, function or branch hits)
                "delta_ms_per_cycle",   # those contributors' summed change
                "files", "functions",   # every file it changed; "path:qualname" on the stacks
                "contributors",         # ids with line or function hits, largest |delta| first
                "evidence": [{"contributor", "file", "line", "function",
                              "kind": "line" | "function" | "branch" | "file"}],  # best hit
                "hunk": [str]}],        # the diff of its heaviest evidence's file (<= 16 lines)
               # sorted by score; commits that touched no file of the stacks are left out
  "suspects_range": {"base", "head", "from": "--commits" | "capture manifests",
                     "commits": N, "notes": [str]}   # notes: why none, what was left out
The rule: tracediff/suspects/rank.py.
"""

from __future__ import annotations

from typing import Any

from tracediff.report.text import short
from tracediff.suspects import Suspects

SHOWN = 5


def suspects_json(s: Suspects) -> dict[str, Any]:
    return {
        "suspects": s.rows,
        "suspects_range": {
            "base": s.base,
            "head": s.head,
            "from": s.range_from,
            "commits": s.commits,
            "notes": s.notes,
        },
    }


def _head(s: Suspects) -> str:
    return (
        f"suspect commits: {s.commits} first-parent commit{'s' if s.commits != 1 else ''} "
        f"{s.base[:12]}..{s.head[:12]} (range from {s.range_from}), ranked by the change "
        "through the code each touched"
    )


def _why(r: dict[str, Any]) -> str:
    ev = r["evidence"][0] if r["evidence"] else None
    if ev is None:
        return ""
    where = ev["file"] if ev["kind"] == "file" else f"{ev['file']}:{ev['function']}"
    return f"{ev['kind']} {where} ({ev['contributor']})"


def suspects_lines(s: Suspects) -> list[str]:
    out = ["", _head(s)]
    for r in s.rows[:SHOWN]:
        out.append(
            f"  {r['commit'][:12]} score {r['score']:7.4f}  share {100 * r['share']:3.0f}%  "
            f"{short(r['subject'], 50):<50}  {short(_why(r), 60)}"
        )
    if len(s.rows) > SHOWN:
        out.append(f"  ... {len(s.rows) - SHOWN} more (--format json lists them)")
    out += [f"  {n}" for n in s.notes]
    return out


def suspects_markdown(s: Suspects) -> list[str]:
    out = ["", f"**{_head(s)[0].upper()}{_head(s)[1:]}**", ""]
    if s.rows:
        out += ["| commit | score | share | subject | best evidence |", "|---|---:|---:|---|---|"]
        for r in s.rows[:SHOWN]:
            subject = short(r["subject"], 70).replace("|", "\\|")
            out.append(
                f"| `{r['commit'][:12]}` | {r['score']:.4f} | {100 * r['share']:.0f}% | "
                f"{subject} | {_why(r).replace('|', '/')} |"
            )
    out += [f"- {n}" for n in s.notes]
    return out
