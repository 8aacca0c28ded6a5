"""The HTML page's tables: the whole attribution (sorted, filtered and searched in the page by
page.js), the rows summed over GPUs, the what-if recovery and the suspect commits.

Stage: output. Input: a Comparison (and the what-if table, the Suspects); output: HTML strings.
Every text from the traces or the repository is escaped (`h`). Each row carries what the page
filters on as data attributes, and each number cell its value (`data-v`), so sorting compares
numbers, not their printed form.
"""

from __future__ import annotations

import html
import math
from typing import Any

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.report.compare_text import SIGNIFICANT, STATUSES, launched_from
from tracediff.suspects import Suspects


def h(text: object) -> str:
    """Escaped text for an element or an attribute."""
    return html.escape("" if text is None else str(text), quote=True)


def _num_cell(x: Any, fmt: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return '<td class="num" data-v="">-</td>'
    return f'<td class="num" data-v="{float(x)!r}">{format(x, fmt)}</td>'


def _ci(lo: Any, hi: Any) -> str:
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "-"
    return f"[{lo:+.3f}, {hi:+.3f}]"


def _name(r: dict[str, Any]) -> str:
    base, head = r.get("base_name"), r.get("head_name")
    if isinstance(base, str) and isinstance(head, str):
        how = "in place of" if r.get("status") == "replaced" else "renamed from"
        return f"{h(head)} <span class=dim>({how} {h(base)})</span>"
    return h(r["name"])


COLUMNS = (
    ("id", "text"),
    ("kind", "text"),
    ("GPU", "num"),
    ("phase", "text"),
    ("base ms", "num"),
    ("head ms", "num"),
    ("change ms", "num"),
    ("95% CI", "none"),
    ("sig", "text"),
    ("share", "num"),
    ("status", "text"),
    ("runs b/h", "none"),
)


def attribution_table(c: Comparison, prefix: str = "") -> str:
    """Every contributor, in the attribution's order (|change| descending), with filters;
    `prefix` tells the elements of several tables on one page apart (bisect's culprits)."""
    src = launched_from(c, 60)
    cols = [*COLUMNS, *((("launched from", "text"),) if src else ()), ("name", "text")]
    head = "".join(
        f'<th data-type="{t}" title="{"click to sort" if t != "none" else ""}">{h(n)}</th>'
        for n, t in cols
    )
    rows = []
    for r in c.attribution.iter_rows(named=True):
        dev = r["device_id"]
        cells = [
            f'<td class="id">{h(r["contributor_id"])}</td>',
            f"<td>{h(r['kind'])}</td>",
            _num_cell(dev, "d") if dev is not None else '<td class="num" data-v="">-</td>',
            f"<td>{h(r['phase'])}</td>",
            _num_cell(r["base_ms_per_cycle"], ".4f"),
            _num_cell(r["head_ms_per_cycle"], ".4f"),
            _num_cell(r["delta_ms_per_cycle"], "+.4f"),
            f"<td>{_ci(r['ci95_low'], r['ci95_high'])}</td>",
            f"<td>{'yes' if r['significant'] else 'no'}</td>",
            _num_cell(None if r["share"] is None else 100 * r["share"], ".1f"),
            f"<td>{h(r['status'])}</td>",
            f"<td>{r['base_runs']}/{r['head_runs']}</td>",
        ]
        if src:
            cells.append(f"<td>{h(src.get(r['contributor_id'], '-'))}</td>")
        cells.append(f'<td class="name">{_name(r)}</td>')
        sig = " sig" if r["significant"] else ""
        rows.append(
            f'<tr class="row{sig}" data-kind="{h(r["kind"])}" data-phase="{h(r["phase"])}" '
            f'data-gpu="{"-" if dev is None else dev}" '
            f'data-name="{h((r["name"] or "").lower())}">' + "".join(cells) + "</tr>"
        )
    return (
        '<div class="attr-block"><div class="filters">'
        '<label>kind <select data-filter="kind"><option value="">all</option></select></label>'
        '<label>phase <select data-filter="phase"><option value="">all</option></select></label>'
        '<label>GPU <select data-filter="gpu"><option value="">all</option></select></label>'
        '<label>name <input type="search" class="search" placeholder="search names"></label>'
        '<label><input type="checkbox" class="sigonly"> significant only</label>'
        '<span class="shown dim"></span></div>'
        f'<table id="{prefix}attribution" class="data attribution"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def across_table(c: Comparison) -> str:
    """Multi-GPU: the contributors summed over GPUs ('' for one GPU)."""
    a = c.across_gpus
    if a.height == 0:
        return ""
    rows = []
    for r in a.iter_rows(named=True):
        rows.append(
            "<tr>"
            f"<td>{h(r['kind'])}</td><td>{h(r['phase'])}</td>"
            + _num_cell(r["base_ms_per_cycle"], ".4f")
            + _num_cell(r["head_ms_per_cycle"], ".4f")
            + _num_cell(r["delta_ms_per_cycle"], "+.4f")
            + f"<td>{_ci(r['ci95_low'], r['ci95_high'])}</td>"
            f"<td>{'yes' if r['significant'] else 'no'}</td>"
            f"<td>GPU {r['top_device_id']} ({r['top_device_delta_ms_per_cycle']:+.3f})</td>"
            f'<td class="name">{h(r["name"])}</td></tr>'
        )
    return (
        "<h3>Summed over GPUs</h3><p class=dim>each cycle counted on the GPU that finished "
        'last</p><table class="data"><thead><tr><th>kind</th><th>phase</th><th>base ms</th>'
        "<th>head ms</th><th>change ms</th><th>95% CI</th><th>sig</th><th>most on</th>"
        f"<th>name</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def whatif_table(c: Comparison, w: pl.DataFrame | None) -> str:
    if w is None or w.height == 0:
        return ""
    names = dict(zip(c.attribution["contributor_id"], c.attribution["name"], strict=True))
    rows = "".join(
        f'<tr><td class="id">{h(r["contributor_id"])}</td>'
        + _num_cell(r["predicted_ms_per_cycle"], ".3f")
        + _num_cell(r["recovered_ms_per_cycle"], "+.3f")
        + f'<td class="name">{h(names.get(r["contributor_id"], ""))}</td></tr>'
        for r in w.iter_rows(named=True)
    )
    return (
        '<section id="whatif"><h2>What-if</h2><p>head replayed with one contributor taken '
        "from base (<code>tracediff whatif BASE HEAD --take ID</code>)</p>"
        '<table class="data"><thead><tr><th>id</th><th>predicted ms/cycle</th>'
        f"<th>recovers ms</th><th>name</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _evidence(r: dict[str, Any]) -> str:
    items = "".join(
        f"<li>{h(e['kind'])}: <code>{h(e['file'])}</code>"
        + (f" {h(e['function'])}" if e.get("function") else "")
        + f" ({h(e['contributor'])})</li>"
        for e in r["evidence"]
    )
    hunk = "\n".join(r.get("hunk") or [])
    return f"<ul>{items}</ul>" + (f"<pre class=hunk>{h(hunk)}</pre>" if hunk else "")


def suspects_section(s: Suspects | None) -> str:
    """`--repo`: the ranked commits, each with its evidence and diff hunk ('' without)."""
    if s is None:
        return ""
    rows = []
    for r in s.rows:
        rows.append(
            f'<details class="suspect"><summary><code>{h(r["commit"][:12])}</code> '
            f"score {r['score']:.4f} · share {100 * r['share']:.0f}% · "
            f"{r['delta_ms_per_cycle']:+.3f} ms/cycle · {h(r['subject'])} "
            f"<span class=dim>{h(r['author'])}, {h(r['date'])}</span></summary>"
            f"<p>contributors: {h(', '.join(r['contributors']) or '-')}; files: "
            f"{h(', '.join(r['files']))}</p>{_evidence(r)}</details>"
        )
    notes = "".join(f"<li>{h(n)}</li>" for n in s.notes)
    return (
        '<section id="suspects"><h2>Suspect commits</h2>'
        f"<p>{s.commits} first-parent commit{'s' if s.commits != 1 else ''} "
        f"<code>{h(s.base[:12])}..{h(s.head[:12])}</code> (range from {h(s.range_from)}), "
        "ranked by the change through the code each touched</p>"
        + ("".join(rows) or "<p>no commit touched a file of the launch stacks</p>")
        + (f"<ul class=dim>{notes}</ul>" if notes else "")
        + "</section>"
    )


def legend() -> str:
    items = [f"<li><b>sig</b>: {h(SIGNIFICANT)}</li>"] + [
        f"<li><b>{h(k)}</b>: {h(v)}</li>" for k, v in STATUSES.items()
    ]
    return f"<ul class=legend>{''.join(items)}</ul>"
