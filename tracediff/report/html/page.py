"""One self-contained HTML page: the document frame that the compare and bisect pages share.

Stage: output. Input: the page's body (HTML) and its figures; output: one HTML string holding
everything it needs: the style and script beside this module (page.css, page.js), the figures
as JSON, and plotly.js from the installed plotly package (bundle.py), packed. A Content Security
Policy forbids every fetch (`default-src 'none'`), so the page cannot reach the network even if
a library tried; it opens from disk or a CI artifact. The tables and words are plain HTML and
read without script; the pictures need a browser with DecompressionStream (2023 on).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import orjson

from tracediff.report.html.bundle import bundle
from tracediff.report.html.figures import Figure
from tracediff.report.html.tables import h

CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:"
)


def _asset(name: str) -> str:
    return resources.files("tracediff.report.html").joinpath(name).read_text(encoding="utf-8")


def json_script(obj: Any) -> str:
    """JSON that is safe inside a <script> element: no `<` can close it early."""
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("<", "\\u003c")


WIDE = ("attribution", "timeline", "heatmap", "steps")
"""Figures that take a whole row of the page's grid (long labels, many lanes)."""


def figure_block(f: Figure) -> str:
    note = f'<p class="note">{h(f.note)}</p>' if f.note else ""
    wide = " wide" if f.key.endswith(WIDE) else ""
    return (
        f'<figure class="chart-box{wide}"><div class="chart" id="fig-{f.key}"></div>{note}</figure>'
    )


def document(title: str, body: str, figures: list[Figure]) -> str:
    """The page: `body` (escaped HTML built by the caller) and `figures` drawn into their
    `fig-KEY` elements by page.js."""
    payload = {
        "figures": [
            {"key": f.key, "data": f.data, "layout": f.layout, "zoom": f.zoom} for f in figures
        ]
    }
    b = bundle()
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="tracediff; plotly.js {h(b.version)}">'
        f"<title>{h(title)}</title><style>{_asset('page.css')}</style></head>\n"
        f"<body>{body}\n"
        f'<script type="application/json" id="td-data">{json_script(payload)}</script>\n'
        f'<script type="application/octet-stream" id="td-plotly">{b.packed}</script>\n'
        f"<script>{_asset('page.js')}</script>\n"
        "</body></html>\n"
    )
