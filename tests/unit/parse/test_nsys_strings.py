"""parse/nsys/columns.py `Strings`: names of ids found the same way whatever the ids look like:
dense from 0 (positions), sparse over a small range (a table), spread wide (a binary search)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracediff.parse.nsys.columns import Strings


def _strings(ids: list[int]) -> Strings:
    return Strings(pl.DataFrame({"id": ids, "value": [f"s{i}" for i in ids]}))


def _expected(ids: list[int], asked: list[int | None]) -> tuple[list[str | None], int]:
    known = {i: f"s{i}" for i in ids}
    names = [known.get(a) if a is not None else None for a in asked]
    return names, sum(1 for a in asked if a is not None and a not in known)


@pytest.mark.parametrize(
    ("ids", "way"),
    [
        (list(range(6)), "dense"),
        ([1, 2, 3, 5, 8, 13, 17], "table"),  # nsys numbers from 1: not dense
        ([3, 10**9, 4 * 10**9], "search"),  # too wide for a table
    ],
)
def test_names_and_missing_ids_whichever_way_they_are_found(ids: list[int], way: str) -> None:
    s = _strings(ids)
    assert (s.dense, s.rows is not None) == {
        "dense": (True, False), "table": (False, True), "search": (False, False)
    }[way]  # fmt: skip
    rng = np.random.default_rng(0)
    pool = [*ids, -1, 0, 2, 7, max(ids) + 1, 10**10, None]
    asked = [pool[i] for i in rng.integers(0, len(pool), 500)]
    names, missing = _expected(ids, asked)
    got = s.strings(pl.Series(asked, dtype=pl.Int64))
    assert got.to_list() == names
    assert s.missing == missing
    again = s.with_values(s.values)  # the API names' copy keeps the way of finding
    assert again.strings(pl.Series(asked, dtype=pl.Int64)).to_list() == names
