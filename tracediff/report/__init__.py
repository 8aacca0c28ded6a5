"""Every output format tracediff prints: one package, one renderer per command.

Stage: output. `compare_json` / `compare_text` render a `Comparison` (json; table, markdown,
csv), `whatif` a what-if prediction, `info` a run summary; `verdict` holds the verdict's words
that the text reports and the TUI share; `jsonout` the JSON rules (NaN/inf as null, layout);
`text` the column helpers. Each renderer module's docstring holds its JSON schema.
No module here imports textual or runs the engine: a renderer takes a result and returns a string.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.report.compare_json import phase_rollup, to_dict
from tracediff.report.compare_text import render_csv, render_markdown, render_table
from tracediff.report.jsonout import dumps
from tracediff.report.numbers import settled_comparison
from tracediff.report.verdict import verdict_lines, verdict_words

if TYPE_CHECKING:  # tracediff.suspects is imported when a --repo asks for suspects
    from tracediff.suspects import Suspects

FORMATS = ("table", "markdown", "json", "csv")

__all__ = [
    "FORMATS",
    "phase_rollup",
    "render",
    "render_csv",
    "render_markdown",
    "render_table",
    "to_dict",
    "verdict_lines",
    "verdict_words",
]


def render(
    c: Comparison,
    fmt: str,
    top: int = 15,
    *,
    whatif: pl.DataFrame | None = None,
    suspects: Suspects | None = None,
) -> str:
    """`compare`'s report in `fmt` (one of FORMATS); `whatif`: the `--whatif` recovery table
    (tracediff.replay.recover_top), shown in table and JSON when given; `suspects`: the
    `--repo` suspect commits (tracediff.suspects), in table, markdown and JSON when given."""
    c = settled_comparison(c)  # the same bytes on every CPU (report/numbers.py)
    if fmt == "json":
        d = to_dict(c, whatif=whatif)
        if suspects is None:
            return dumps(d)
        from tracediff.report.suspects import suspects_json

        return dumps({**d, **suspects_json(suspects)})
    if fmt == "markdown":
        return render_markdown(c, top, suspects=suspects)
    if fmt == "csv":
        return render_csv(c)
    return render_table(c, top, whatif=whatif, suspects=suspects)
