"""The HTML report: one self-contained page of a comparison (`compare --html FILE`) or of a
bisection (`bisect --html FILE`), with its pictures drawn by plotly.js from the pinned plotly
package (bundle.py says how it is inlined; README "HTML report" says why plotly).

Stage: output. `render_compare` (compare_page.py) and `render_bisect` (bisect_page.py) return
the page; `write_html` writes it atomically (tracediff.base.outputs). Modules: page (the document
frame), figures / gpus / timeline (the pictures), tables (the HTML tables), bundle (plotly.js).
"""

from __future__ import annotations

from tracediff.report.html.compare_page import render_compare

__all__ = ["render_compare"]
