"""`compare --html FILE`: a `Comparison` as one self-contained page.

Stage: output. Input: a Comparison, and optionally the `--whatif` recovery table, the `--repo`
suspects and the `--fail-above` gate's decision; output: the HTML string (page.document).
Its words are the text reports' own (report/verdict.py, compare_text's legend), so the page
and the terminal say the same thing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from tracediff.engine.result import Comparison, SideSummary
from tracediff.report.compare_text import (
    NOISE_FLOOR,
    NOISE_FLOOR_RUNS,
    clock_lines,
    decided_lines,
    device_map_lines,
)
from tracediff.report.html import figures as fg
from tracediff.report.html import gpus
from tracediff.report.html.page import document, figure_block
from tracediff.report.html.tables import (
    across_table,
    attribution_table,
    h,
    legend,
    suspects_section,
    whatif_table,
)
from tracediff.report.html.timeline import timeline
from tracediff.report.verdict import verdict_lines, verdict_words
from tracediff.suspects import Suspects


def noise_floor_words(c: Comparison) -> str:
    """The noise floor's definition for this comparison's unit (cycles of one run, or runs)."""
    return NOISE_FLOOR_RUNS if c.noise_unit == "run" else NOISE_FLOOR


def figures_of(c: Comparison) -> list[fg.Figure]:
    """Every picture this comparison has something for, in the page's order."""
    made = [
        fg.run_means(c),
        fg.distribution(c),
        fg.attribution_bars(c) if c.attribution.height else None,
        fg.by_phase(c),
        gpus.by_gpu(c),
        gpus.heatmap(c),
        gpus.collectives(c),
        timeline(c) if c.head.devices or c.base.devices else None,
    ]
    return [f for f in made if f is not None]


def _side(name: str, s: SideSummary) -> str:
    gpus_txt = ", ".join(str(d) for d in s.devices) or "none (host only)"
    return (
        f"<tr><th>{name}</th><td>{h(s.label)}</td><td><code>{h(s.source)}</code></td>"
        f"<td>{s.runs}</td><td>{s.cycles} ({h(s.cycle_method)})</td>"
        f"<td>{s.mean_ms:.3f}</td><td>{s.p50_ms:.3f}</td><td>{s.p90_ms:.3f}</td>"
        f"<td>{h(gpus_txt)}</td></tr>"
    )


def inputs_table(c: Comparison) -> str:
    return (
        '<table class="data inputs"><thead><tr><th></th><th>label</th><th>source</th>'
        "<th>runs</th><th>cycles (cut)</th><th>mean ms</th><th>p50</th><th>p90</th><th>GPUs</th>"
        f"</tr></thead><tbody>{_side('base', c.base)}{_side('head', c.head)}</tbody></table>"
    )


def env_section(c: Comparison) -> str:
    if not c.env_diffs:
        return ""
    rows = "".join(
        f"<tr><td><code>{h(d.key)}</code></td><td>{h(d.base)}</td><td>{h(d.head)}</td></tr>"
        for d in c.env_diffs
    )
    return (
        '<section id="environment" class="warn"><h2>Environment differs</h2>'
        "<p>check before trusting the diff</p>"
        '<table class="data"><thead><tr><th>key</th><th>base</th><th>head</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></section>"
    )


def gate_banner(g: Any) -> str:
    """`--fail-above`'s decision (engine/statistics/gate.py `Gate`), or ''."""
    if g is None:
        return ""
    return (
        f'<p id="gate" class="gate {h(g.decision)}"><b>gate: {h(g.decision)}</b>: {h(g.reason)}</p>'
    )


def _verdict(c: Comparison, prefix: str = "") -> str:
    v = verdict_words(c)
    lines = "".join(f"<li>{h(line)}</li>" for line in verdict_lines(c))
    decided = "".join(f'<p class="decided">{h(line)}</p>' for line in decided_lines(c))
    return (
        f'<section id="{prefix}verdict" class="verdict {v.state}">{decided}<h2>Verdict</h2>'
        f'<p class="headline">change <b>{h(v.change)} ms/cycle</b> ({h(v.pct)}), 95% CI '
        f"{h(v.ci)}: {h(v.significance)}</p><ul>{lines}</ul></section>"
    )


def _notes(c: Comparison) -> str:
    lines = device_map_lines(c) + clock_lines(c.clocks)
    items = [f"<li>{h(x)}</li>" for x in lines] + [
        f'<li class="warning">warning: {h(w)}</li>' for w in c.warnings
    ]
    return f'<ul id="warnings">{"".join(items)}</ul>' if items else ""


def comparison_sections(
    c: Comparison,
    prefix: str = "",
    *,
    whatif: pl.DataFrame | None = None,
    suspects: Suspects | None = None,
) -> tuple[str, list[fg.Figure]]:
    """A comparison's sections (verdict to suspects) and their figures; `prefix` keeps the
    element ids of several comparisons on one page apart (bisect's culprits)."""
    figs = [replace(f, key=prefix + f.key) for f in figures_of(c)]
    body = (
        f"{_verdict(c, prefix)}{_notes(c)}"
        f'<section id="{prefix}inputs"><h2>Inputs</h2>{inputs_table(c)}</section>'
        f"{env_section(c)}"
        f'<section id="{prefix}charts" class="charts"><h2>Pictures</h2><div class="grid">'
        f"{''.join(figure_block(f) for f in figs)}</div></section>"
        f'<section id="{prefix}table"><h2>Attribution ({c.attribution.height} contributors)</h2>'
        f"{attribution_table(c, prefix)}{across_table(c)}{legend()}"
        f"<p class=dim>{h(noise_floor_words(c))}</p></section>"
        f"{whatif_table(c, whatif)}{suspects_section(suspects)}"
    )
    return body, figs


def render_compare(
    c: Comparison,
    *,
    whatif: pl.DataFrame | None = None,
    suspects: Suspects | None = None,
    gate: Any = None,
) -> str:
    """The page of one comparison (the arguments as `tracediff.report.render` takes them)."""
    title = f"tracediff: {c.base.label} vs {c.head.label}"
    sections, figs = comparison_sections(c, whatif=whatif, suspects=suspects)
    body = f"<header><h1>{h(title)}</h1>{gate_banner(gate)}</header>{sections}"
    return document(title, body, figs)
