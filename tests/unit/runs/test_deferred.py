"""runs/deferred.py: tables built on first use, the same dict to every other reader."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from tracediff.runs.deferred import Deferred, Partial


def _tables() -> tuple[Deferred, list[str]]:
    built: list[str] = []

    def later(name: str, value: int) -> pa.Table:
        built.append(name)
        return pa.table({"x": [value]})

    d = Deferred(
        {
            "a": pa.table({"x": [1]}),
            "b": lambda: later("b", 2),
            "c": pa.table({"x": [3]}),
            "d": lambda: later("d", 4),
        }
    )
    return d, built


def test_a_table_is_built_when_asked_for_and_once() -> None:
    d, built = _tables()
    assert "b" in d and "d" in d and "z" not in d and len(d) == 4
    assert built == []
    assert d["b"].column("x").to_pylist() == [2]
    assert d.get("b") is d["b"]
    assert d.get("z") is None
    assert built == ["b"]


def test_walking_the_tables_builds_them_all_in_their_first_order() -> None:
    for walk in (list, lambda d: list(d.keys()), lambda d: list({**d}), lambda d: list(dict(d))):
        d, built = _tables()
        d["d"]  # built out of order
        assert walk(d) == ["a", "b", "c", "d"]
        assert sorted(built) == ["b", "d"]
    d, _ = _tables()
    assert [t.column("x")[0].as_py() for t in d.values()] == [1, 2, 3, 4]


def test_a_copy_keeps_unbuilt_tables_unbuilt_and_new_keys_go_last() -> None:
    d, built = _tables()
    out = d.copy()
    out["a"] = pa.table({"x": [10]})
    out["e"] = pa.table({"x": [5]})
    assert built == []
    assert list(out) == ["a", "b", "c", "d", "e"]
    assert out["a"].column("x")[0].as_py() == 10 and d["a"].column("x")[0].as_py() == 1


def test_pickled_as_a_plain_dict_of_every_table() -> None:
    d, _ = _tables()
    got = pickle.loads(pickle.dumps(d))
    assert type(got) is dict
    assert list(got) == ["a", "b", "c", "d"]
    assert got["d"].equals(pa.table({"x": [4]}))


def _partial() -> tuple[Deferred, list[int]]:
    made_later: list[int] = []

    def rest() -> pa.Table:
        made_later.append(1)
        return pa.table({"b": [10, 20, 30]})

    schema = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("c", pa.string())])
    made = pa.table({"c": ["x", "y", "z"], "a": [1, 2, 3]})
    return Deferred({"t": Partial(made, rest, schema), "u": pa.table({"x": [1]})}), made_later


def test_a_partial_table_answers_from_its_made_columns_without_the_rest() -> None:
    d, made_later = _partial()
    assert d.read("t", ["a", "c"]).to_pydict() == {"a": [1, 2, 3], "c": ["x", "y", "z"]}
    assert d.read("u", ["x"]).to_pydict() == {"x": [1]}
    assert made_later == []
    assert d.read("t", ["b"]).to_pydict() == {"b": [10, 20, 30]}  # a later column: all built
    assert made_later == [1]
    t = d["t"]
    assert t.column_names == ["a", "b", "c"] and t.num_rows == 3  # the schema's order
    assert d.read("t", None) is t and made_later == [1]  # built once


def test_a_partial_table_is_whole_for_every_other_reader() -> None:
    d, made_later = _partial()
    assert d["t"].to_pydict() == {"a": [1, 2, 3], "b": [10, 20, 30], "c": ["x", "y", "z"]}
    d2, _ = _partial()
    assert pickle.loads(pickle.dumps(d2))["t"].column_names == ["a", "b", "c"]


def test_rest_of_other_rows_is_refused() -> None:
    made = pa.table({"a": [1, 2]})
    p = Partial(
        made, lambda: pa.table({"b": [1]}), pa.schema([("a", pa.int64()), ("b", pa.int64())])
    )
    with pytest.raises(ValueError, match="1 rows made later for 2"):
        p()


def test_let_go_drops_the_tables_and_reads_them_again_once_when_asked() -> None:
    from tracediff.runs.runfile import Run, let_go

    made = {"kernels": pa.table({"x": [1, 2]}), "memops": pa.table({"y": [3]})}
    run = Run(tables=Deferred({**made, "later": lambda: pa.table({"z": [4]})}), metadata={})
    reads: list[int] = []

    def read() -> Run:
        reads.append(1)
        return Run(tables=dict(made, later=pa.table({"z": [4]})), metadata={})

    let_go(run, read)
    assert isinstance(run.tables, Deferred) and run.tables.names() == ["kernels", "memops", "later"]
    assert reads == [] and not dict.__len__(run.tables)  # nothing held, nothing read yet
    assert run.table("kernels").equals(made["kernels"]) and reads == [1]
    assert run.table("memops").equals(made["memops"]) and run.table("later")["z"].to_pylist() == [4]
    assert reads == [1]  # one read for every table
