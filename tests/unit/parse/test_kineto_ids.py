"""Kineto ids in strings ("25738", "stream 7") read the same by both of clock.to_int64's paths.

A handful of plain ASCII strings is read by Python's regex (no polars call); any other list by
polars' vectorised extraction. The two engines differ on some characters (Python's \\s matches
\\x1c-\\x1f, its \\d non-ASCII digits), which send a list to polars; on the rest they must agree.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tracediff.parse.kineto import clock

_PIECES = ["", " ", "  ", "\t", "\n", "\r", "\x0b", "\x0c", "stream", "Stream", "-", "+", "0", "7",
           "25738", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
           "99999999999999999999", "a", "x1", "\x1c", "\x1f", "\x00", "\x7f", "٣", "\u00a0"]  # fmt: skip


def _polars(values: list[str | None]) -> list[int | None]:
    s = pl.Series(pa.array(values, pa.string())).str.extract(r"^\s*(?:stream\s*)?(-?\d+)\s*$")
    return s.cast(pl.Int64, strict=False).to_list()


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.sampled_from(_PIECES), max_size=5).map("".join)),
        max_size=12,
    )
)
def test_few_plain_strings_read_as_polars_reads_them(values: list[str | None]) -> None:
    assert clock.to_int64(values).to_pylist() == _polars(values)


def test_the_fast_path_is_taken_only_for_plain_ascii() -> None:
    assert clock._PLAIN.fullmatch(" stream 7\t")
    for odd in ("\x1c7", "٣", "7\x00", "\u00a07"):
        assert not clock._PLAIN.fullmatch(odd)
