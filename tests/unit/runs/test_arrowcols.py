"""runs/arrowcols.py: the readers' string conversions equal what Arrow's compute functions give."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tracediff.runs import arrowcols as ac

CASES = [
    ["b", None, "a", "b", "c", None],
    [],
    [None, None],
    ["only"] * 5,
    ["é", "", "ü" * 40, "", None, "é"],
]


@pytest.mark.parametrize("given", ["polars", "string", "large_string"])
@pytest.mark.parametrize("arrow", [False, True])
@pytest.mark.parametrize("values", CASES)
def test_encoded_is_arrows_dictionary_encode(
    values: list[str | None], arrow: bool, given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (this module imports pyarrow.compute: Arrow would encode all; each way is tested)
    monkeypatch.setattr(ac, "arrow_pays", lambda rows: arrow)
    source = (
        pl.Series(values, dtype=pl.String)
        if given == "polars"
        else pa.array(values, getattr(pa, given)())
    )
    got = ac.encoded(source)
    want = pa.array(values, pa.string()).dictionary_encode()
    assert got.type == ac.DICT_STRING
    assert got.indices.equals(want.indices) and got.dictionary.equals(want.dictionary)
    assert got.to_pylist() == values


@pytest.mark.parametrize("values", CASES)
def test_narrow_is_arrows_cast_to_string(values: list[str | None]) -> None:
    wide = pa.array(values, pa.large_string())
    for arr in (wide, wide.slice(1), wide.slice(0, max(len(values) - 1, 0))):
        got = ac.narrow(arr)
        assert got.type == pa.string()
        assert got.equals(pc.cast(arr, pa.string()))


def test_narrow_leaves_strings_and_casts_other_types() -> None:
    s = pa.array(["x"], pa.string())
    assert ac.narrow(s) is s
    assert ac.narrow(pa.nulls(2)).equals(pa.nulls(2, pa.string()))


def test_series_reads_dictionaries_as_categorical_and_chunks_whole() -> None:
    d = pa.array(["b", None, "a"]).dictionary_encode()
    assert ac.series(d).dtype == pl.Categorical
    assert ac.series(d).cast(pl.String).to_list() == ["b", None, "a"]
    chunked = pa.chunked_array([pa.array([1, 2]), pa.array([3])])
    assert ac.series(chunked).to_list() == [1, 2, 3]


def test_arrow_encodes_long_columns_or_once_its_compute_module_is_loaded() -> None:
    assert ac.arrow_pays(ac.LONG)  # (loaded here anyway: this module imports it)
    code = (
        "import sys; from tracediff.runs import arrowcols as ac; "
        "print(ac.arrow_pays(ac.LONG - 1), ac.arrow_pays(ac.LONG)); "
        "import pyarrow.compute; print(ac.arrow_pays(1))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "True", "True"], out.stderr
