"""runs/deferred.py: tables built on first use, the same dict to every other reader."""

from __future__ import annotations

import pickle

import pyarrow as pa

from tracediff.runs.deferred import Deferred


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
