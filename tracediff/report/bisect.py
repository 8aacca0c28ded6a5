"""`tracediff bisect`'s result as text: a table for the terminal, markdown, JSON.

Stage: report. Input: the result dict of `tracediff/bisect/search.run_bisect` (the JSON of
`--format json`, fields documented there and in tracediff/bisect/bisection.py); output: one string. Text
formats make commit subjects, author names and file names inert (`tracediff.base.inert.safe`): they
come from the user's repository.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tracediff.base.inert import safe, safe_lines
from tracediff.report.numbers import settled


def render_json(r: dict[str, Any]) -> str:
    return json.dumps(settled(r), indent=2, default=str) + "\n"


def p_cell(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) and math.isfinite(x) else "-"


def pct(x: Any) -> str:
    return f"{100 * x:.0f} %" if isinstance(x, float) and math.isfinite(x) else "-"


def share_ci(c: dict[str, Any]) -> str:
    lo, hi = c.get("share_ci95") or [math.nan, math.nan]
    return f"[{pct(lo)}, {pct(hi)}]"


def share_text(c: dict[str, Any]) -> str:
    """A culprit's change and share with its one CI, as every output says it (stderr, table,
    markdown; JSON: delta_ms_per_cycle, share, share_ci95)."""
    return (
        f"{c['delta_ms_per_cycle']:+.3f} ms/cycle, {pct(c['share'])} of the change "
        f"(95 % CI {share_ci(c)})"
    )


def headline(r: dict[str, Any]) -> str:
    return (
        f"bisect {r['good'][:12]}..{r['bad'][:12]}: {r['commits']} commits, following "
        f"{r['followed']}"
        + (f" ({', '.join(r['followed_contributors'])})" if r["followed_contributors"] else "")
        + f", {r['total_delta_ms_per_cycle']:+.3f} ms/cycle in all"
    )


def order_line(r: dict[str, Any]) -> str | None:
    """How the search was ordered (tracediff/bisect/order.py); None for a result without it."""
    if "search_order" not in r:
        return None
    line = f"search order: {r['search_order']} ({r['search_order_why']})"
    if r.get("suspects"):
        line += "; suspects: " + ", ".join(
            f"{s['commit'][:12]} {s['score']:.3g}" for s in r["suspects"][:3]
        )
    return line


CHOSEN = {"suspect": "[suspect]", "toward suspect": "[toward the suspect]"}


def where(t: dict[str, Any]) -> str:
    """A contributor and its phase (a copy's name alone names several rows): the top
    contributors of a culprit, and bisect's followed rows (tracediff/bisect/follow.row_label)."""
    return f"{t['name']} in {t['phase']}" if t.get("phase") else str(t["name"])


NOT_SEEN = (
    "not confirmed: fresh interleaved runs of it and its parent did not see its change again "
    "(its 95 % CI reaches 0)"
)


def guess(r: dict[str, Any]) -> str:
    """After first_bad: why it is a guess, where no culprit's change held on fresh runs."""
    if r.get("first_bad_confirmed", True) is not False:
        return ""
    return " (a best guess: no culprit's change was seen again on fresh interleaved runs)"


def step_extra(e: dict[str, Any], followed: str) -> str:
    p = e.get("p_value_vs_good", e.get("p_value"))
    # the p-values a step logs are the cycle time's; where bisect follows contributors they
    # did not decide (the rows' CIs did): say which they are, and what share had moved
    cycle = "cycle-time " if followed == "contributors" else ""
    extra = f"  {cycle}p vs good {p:.3f}" if isinstance(p, float) else ""
    frac = e.get("fraction_of_change")
    if followed == "contributors" and isinstance(frac, float) and math.isfinite(frac):
        extra = f"  {pct(0.0 if abs(frac) < 0.005 else frac)} of the change moved;" + extra[1:]
    if e.get("chosen_by") in CHOSEN:
        extra = f"  {CHOSEN[e['chosen_by']]}" + extra
    if isinstance(e.get("p_value_vs_bad"), float):
        extra += f", vs bad {e['p_value_vs_bad']:.3f}"
    if isinstance(e.get("confirm_p_value"), float):
        extra += f"; on fresh interleaved runs p {e['confirm_p_value']:.3f}"
    if e.get("by") == "closeness":
        margin = e.get("margin")
        extra += "  (undecided at the cap: by closeness only" + (
            f", {pct(frac)} of the change, {abs(100 * margin):.0f} points from the 50 % line)"
            if isinstance(margin, float) and isinstance(frac, float) and math.isfinite(margin)
            else ")"
        )
    if e.get("between"):
        extra += "  (different from both ends)"
    return extra


def captures_line(r: dict[str, Any]) -> str:
    cap = r["captures"]
    return (
        f"captures: {cap['used']} (bound {cap['bound']} = 2N + ceil(log2(commits))*N, "
        f"+ {cap['extra_runs']} extra runs, + {cap['failed_runs']} failed runs"
        + (f", + {cap['confirm_runs']} confirm runs" if cap.get("confirm_runs") else "")
        + (f", + {cap['fresh_runs']} fresh end runs" if cap.get("fresh_runs") else "")
        + ")"
        + (f"; {cap['from_pool']} from the pool" if cap.get("from_pool") else "")
        + f"; wall time {r['wall_s']:.0f} s"
    )


def render_table(r: dict[str, Any]) -> str:
    r = settled(r)  # printed precision: the same bytes on every CPU
    out = [headline(r), f"first bad: {r['first_bad']}" + guess(r)]
    order = order_line(r)
    if order:
        out.append(order)
    if r["uncertain_steps"]:
        out.append(
            "uncertain: undecided at --max-runs, decided by closeness only: "
            + ", ".join(s[:12] for s in r["uncertain_steps"])
            + " (capture more runs: --max-runs)"
        )
    out.append("")
    for c in r["culprits"]:
        out.append(f"culprit {c['commit'][:12]} {c['subject']!r}: {share_text(c)}")
        out.append(f"  parent {c['parent'][:12]}; {c['author']}, {c['date']}")
        if c.get("confirmed") is False:
            out.append(f"  {NOT_SEEN}")
        if c["skipped_between"]:
            out.append(
                "  the culprit is one of these (skipped: they do not run, or the pool had too "
                "few of their runs) or the commit above: "
                + ", ".join(s[:12] for s in c["skipped_between"])
            )
        out.append(f"  files: {', '.join(c['files']) or '-'}")
        out.append("  moved (parent -> culprit):")
        for t in c["top_contributors"]:
            sig = "significant" if t["significant"] else "not significant"
            out.append(
                f"    {t['delta_ms_per_cycle']:+9.3f} ms  {t['kind']:<8} {where(t)}  ({sig})"
            )
        out.append(f"  open: {c['compare_command']}")
        out.append("")
    for s in r["skipped"]:
        out.append(f"skipped {s['commit'][:12]} {s['subject']!r}: {s['problem']}")
    out.append("steps:")
    for e in r["steps"]:
        pool = f" ({step_pool(e)} from the pool)" if step_pool(e) else ""
        wall = f"  {e['wall_s']:.0f} s" if isinstance(e.get("wall_s"), int | float) else ""
        out.append(
            f"  {e['step']:>2}  {e['commit'][:12]}  runs {step_runs(e)}{pool}  {e['decision']}"
            f"{step_extra(e, r['followed'])}{wall}"
        )
    out.append(captures_line(r))
    return safe_lines(out)


def step_runs(e: dict[str, Any]) -> str:
    runs = e.get("runs")
    return "+".join(str(x) for x in runs) if isinstance(runs, list) else str(runs)


def step_pool(e: dict[str, Any]) -> int:
    p = e.get("from_pool") or 0
    return sum(p) if isinstance(p, list) else int(p)


def _md(text: Any) -> str:
    """A markdown table cell: inert, pipes escaped."""
    return safe(str(text)).replace("|", "\\|")


def render_markdown(r: dict[str, Any]) -> str:
    r = settled(r)  # printed precision: the same bytes on every CPU
    out = [f"## {_md(headline(r))}", "", f"First bad commit: `{r['first_bad']}`{guess(r)}", ""]
    order = order_line(r)
    if order:
        out += [_md(order[0].upper() + order[1:]), ""]
    if r["uncertain_steps"]:
        out += [
            "**Uncertain:** undecided at `--max-runs`, decided by closeness only: "
            + ", ".join(f"`{s[:12]}`" for s in r["uncertain_steps"]),
            "",
        ]
    out += [
        "| culprit | subject | parent | change ms/cycle | share | share 95 % CI | author | date "
        "| files |",
        "|---|---|---|---:|---:|---|---|---|---|",
    ]
    for c in r["culprits"]:
        out.append(
            f"| `{c['commit'][:12]}` | {_md(c['subject'])} | `{c['parent'][:12]}` | "
            f"{c['delta_ms_per_cycle']:+.3f} | {pct(c['share'])} | {share_ci(c)} | "
            f"{_md(c['author'])} | {_md(c['date'])} | {_md(', '.join(c['files']) or '-')} |"
        )
    for c in r["culprits"]:
        out += ["", f"### `{c['commit'][:12]}` {_md(c['subject'])}: what moved (parent → culprit)"]
        if c.get("confirmed") is False:
            out += ["", f"**Not confirmed:** {NOT_SEEN}"]
        if c["skipped_between"]:
            out += [
                "",
                "The culprit is one of these (skipped) or this commit: "
                + ", ".join(f"`{s[:12]}`" for s in c["skipped_between"]),
            ]
        out += [
            "",
            "| change ms/cycle | kind | contributor | significant |",
            "|---:|---|---|---|",
        ]
        for t in c["top_contributors"]:
            out.append(
                f"| {t['delta_ms_per_cycle']:+.3f} | {_md(t['kind'])} | `{_md(t['name'])}`"
                + (f" in {_md(t['phase'])}" if t.get("phase") else "")
                + f" | {'yes' if t['significant'] else 'no'} |"
            )
        out += ["", f"Open: `{c['compare_command']}`"]
    if r["skipped"]:
        out += ["", "### Skipped", ""]
        out += [
            f"- `{s['commit'][:12]}` {_md(s['subject'])}: {_md(s['problem'])}" for s in r["skipped"]
        ]
    out += [
        "",
        "### Steps",
        "",
        "| step | commit | runs | from pool | decision | p vs good | p vs bad | wall s |",
        "|---:|---|---|---:|---|---:|---:|---:|",
    ]
    for e in r["steps"]:
        p_good = e.get("p_value_vs_good", e.get("p_value"))
        wall = e.get("wall_s")
        out.append(
            f"| {e['step']} | `{e['commit'][:12]}` | {step_runs(e)} | {step_pool(e)} | "
            f"{_md(e['decision'])}{' (different from both ends)' if e.get('between') else ''}"
            f"{' ' + CHOSEN[e['chosen_by']] if e.get('chosen_by') in CHOSEN else ''} | "
            f"{p_cell(p_good)} | {p_cell(e.get('p_value_vs_bad'))} | "
            f"{wall if wall is not None else '-'} |"
        )
    out += ["", _md(captures_line(r))]
    return "\n".join(out) + "\n"
