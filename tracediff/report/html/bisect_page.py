"""`bisect --html FILE`: a bisection as one self-contained page.

Stage: output. Input: the bisect result dict (the JSON of `bisect --format json`, fields in
tracediff/bisect/result.py) and, for each culprit, the comparison of its parent's and its own run
sets when the caller made it; output: the HTML string (page.document). The words are the text
report's (report/bisect.py); the picture is each step's change against good, coloured by its
decision; each culprit's comparison is drawn as `compare --html` draws one.
"""

from __future__ import annotations

from typing import Any

from tracediff.engine.result import Comparison
from tracediff.report import bisect as words
from tracediff.report.html.compare_page import comparison_sections
from tracediff.report.html.figures import NOISE, WORSE, Figure, esc, num, plot_layout
from tracediff.report.html.page import document, figure_block
from tracediff.report.html.tables import h

GOOD_COLOR = "#2ca02c"


def _decision_color(decision: str) -> str:
    d = decision.lower()
    if "good" in d:
        return GOOD_COLOR
    if "bad" in d or "regression" in d:
        return WORSE
    return NOISE


def step_share(e: dict[str, Any]) -> float | None:
    """How much of the good → bad change a step's commit shows (0: like good, 1: like bad):
    a search step's `fraction_of_change`; the ends' step (0), the bad end: 1; else None."""
    frac = num(e.get("fraction_of_change"))
    if frac is not None:
        return frac
    return 1.0 if e.get("step") == 0 and num(e.get("delta_ms_per_cycle")) is not None else None


def steps_figure(r: dict[str, Any]) -> Figure | None:
    """Each step's commit: the share of the change it shows, coloured by the decision."""
    steps = [e for e in r["steps"] if step_share(e) is not None]
    if not steps:
        return None
    data = [
        {
            "type": "scatter",
            "mode": "markers+text",
            "name": "steps",
            "x": [e["step"] for e in steps],
            "y": [100 * (step_share(e) or 0.0) for e in steps],
            "text": [e["commit"][:7] for e in steps],
            "textposition": "top center",
            "marker": {"size": 12, "color": [_decision_color(e["decision"]) for e in steps]},
            "hovertext": [
                f"step {e['step']}: {e['commit'][:12]}<br>{esc(e['decision'])}<br>"
                f"runs {esc(words.step_runs(e))}, {100 * (step_share(e) or 0.0):.0f} % of the change"
                for e in steps
            ],
            "hoverinfo": "text",
        }
    ]
    layout = plot_layout(
        "How much of good → bad each step's commit shows (%)",
        xaxis={"title": {"text": "step"}, "dtick": 1},
        yaxis={"zeroline": True, "zerolinecolor": "#444", "title": {"text": "% of the change"}},
        showlegend=False,
    )
    note = (
        "step 0 is the bad end (100 %); green: decided like good, red: like bad, grey: other; "
        f"good → bad in all: {r['total_delta_ms_per_cycle']:+.3f} ms/cycle"
    )
    return Figure("steps", "steps", data, layout, note)


def _steps_table(r: dict[str, Any]) -> str:
    rows = []
    for e in r["steps"]:
        p_good = e.get("p_value_vs_good", e.get("p_value"))
        delta = num(e.get("delta_ms_per_cycle"))
        rows.append(
            f"<tr><td class=num data-v={e['step']}>{e['step']}</td>"
            f"<td><code>{h(e['commit'][:12])}</code></td><td>{h(words.step_runs(e))}</td>"
            f"<td class=num data-v={words.step_pool(e)}>{words.step_pool(e)}</td>"
            f"<td>{h(e['decision'])}</td>"
            f"<td class=num data-v='{'' if delta is None else delta}'>"
            f"{'-' if delta is None else f'{delta:+.4f}'}</td>"
            f"<td>{h(words.p_cell(p_good))}</td><td>{h(words.p_cell(e.get('p_value_vs_bad')))}</td>"
            f"<td>{h(words.step_extra(e, r['followed']).strip())}</td></tr>"
        )
    return (
        '<table class="data sortable steps"><thead><tr><th data-type=num>step</th>'
        "<th data-type=text>commit</th><th data-type=none>runs</th>"
        "<th data-type=num>from pool</th><th data-type=text>decision</th>"
        "<th data-type=num>change ms</th><th data-type=none>p vs good</th>"
        "<th data-type=none>p vs bad</th><th data-type=none>details</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _culprit(c: dict[str, Any]) -> str:
    tops = "".join(
        f"<li>{t['delta_ms_per_cycle']:+.3f} ms {h(t['kind'])} {h(words.where(t))} "
        f"({'significant' if t['significant'] else 'not significant'})</li>"
        for t in c["top_contributors"]
    )
    warn = "<p class=warning>" + h(words.NOT_SEEN) + "</p>" if c.get("confirmed") is False else ""
    skipped = (
        "<p>the culprit is one of these (skipped) or this commit: "
        + h(", ".join(s[:12] for s in c["skipped_between"]))
        + "</p>"
        if c["skipped_between"]
        else ""
    )
    return (
        f"<h3>culprit <code>{h(c['commit'][:12])}</code> {h(c['subject'])}</h3>"
        f"<p>{c['delta_ms_per_cycle']:+.3f} ms/cycle, {h(words.pct(c['share']))} of the change "
        f"(95 % CI {h(words.share_ci(c))}); parent <code>{h(c['parent'][:12])}</code>; "
        f"{h(c['author'])}, {h(c['date'])}</p>{warn}{skipped}"
        f"<p>files: {h(', '.join(c['files']) or '-')}</p>"
        f"<p>moved (parent → culprit):</p><ul>{tops}</ul>"
        f"<p>open: <code>{h(c['compare_command'])}</code></p>"
    )


def render_bisect(r: dict[str, Any], comparisons: dict[str, Comparison] | None = None) -> str:
    """The page of a bisection; `comparisons`: culprit commit -> its parent-vs-culprit
    comparison (drawn below the culprit; left out where absent)."""
    comparisons = comparisons or {}
    title = f"tracediff bisect {r['good'][:12]}..{r['bad'][:12]}"
    summary = [words.headline(r), f"first bad: {r['first_bad']}" + words.guess(r)]
    order = words.order_line(r)
    if order:
        summary.append(order)
    if r["uncertain_steps"]:
        summary.append(
            "uncertain: undecided at --max-runs, decided by closeness only: "
            + ", ".join(s[:12] for s in r["uncertain_steps"])
        )
    summary.append(words.captures_line(r))
    figs: list[Figure] = []
    steps_fig = steps_figure(r)
    if steps_fig is not None:
        figs.append(steps_fig)
    culprits = []
    for i, c in enumerate(r["culprits"]):
        part = _culprit(c)
        comp = comparisons.get(c["commit"])
        if comp is not None:
            sections, more = comparison_sections(comp, f"culprit{i}-")
            figs += more
            part += f'<div class="culprit-compare">{sections}</div>'
        culprits.append(f'<section class="culprit" id="culprit{i}">{part}</section>')
    skipped = "".join(
        f"<li><code>{h(s['commit'][:12])}</code> {h(s['subject'])}: {h(s['problem'])}</li>"
        for s in r["skipped"]
    )
    body = (
        f"<header><h1>{h(title)}</h1></header>"
        f'<section id="summary" class="verdict"><ul>'
        f"{''.join(f'<li>{h(x)}</li>' for x in summary)}</ul></section>"
        f'<section id="steps" class="charts"><h2>Steps</h2>'
        f"{figure_block(steps_fig) if steps_fig else ''}{_steps_table(r)}</section>"
        f'<section id="culprits"><h2>Culprits</h2>{"".join(culprits) or "<p>none</p>"}</section>'
        + (f"<section id=skipped><h2>Skipped</h2><ul>{skipped}</ul></section>" if skipped else "")
    )
    return document(title, body, figs)
