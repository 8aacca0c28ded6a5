"""JSON rules shared by every report: what a number that is not a number becomes, and the layout.

Stage: output. Every JSON document tracediff prints goes through `dumps`; every float that may be
NaN or infinite goes through `clean` first (JSON has neither: they become null, the schema's
"unknown"), and every float is printed at the documented precision (report/numbers.py).
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from tracediff.report.numbers import settled


def clean(x: Any) -> Any:
    """NaN and ±inf as None (JSON null); every other value unchanged."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return x


def ci_pair(lo: float, hi: float) -> list[Any]:
    """A 95 % CI as the JSON pair `[lo, hi]`, null ends where it is unknown."""
    return [clean(lo), clean(hi)]


def dumps(obj: Any) -> str:
    """The printed document: two-space indent, numpy scalars as numbers, every float at the
    printed precision (report/numbers.py), one trailing newline."""
    doc = settled(obj)
    return (
        orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
    )
