"""A run's tables of which some are built on first use: `Deferred`.

Stage: the run contract (between parse and its consumers). Input: tables, and for some of them
the function that builds each; output: a dict of Arrow tables that builds a table the first
time it is asked for. A reader hands its `Run` such a dict for tables that most commands never
read: the nsys reader's `api_calls`, `syncs` and `cuda_events` are read by the replay, the
TUI, `export`, `info` and the run file, not by a report-only `compare` (~0.1 CPU-s a side at
0.9 M kernels). Whoever asks gets the same table, built from the same inputs, as an eager
reader would have made.

`d[name]`, `d.get(name)`, `name in d` and `d.copy()` build nothing else; anything that walks
the tables (iteration, `keys()`, `items()`, `values()`, `{**d}`, `dict(d)`, pickling) first
builds them all, so the dict then holds every table in its first order.

A table may also be `Partial`: some of its columns made, the others built on first need. `d.read(
name, columns)` (what `Run.read` asks) answers from the made columns where they are enough,
building nothing: the nsys reader's kernels leave their launch dimensions and graph node ids
undecoded until something reads them (the TUI, `export`, a run file; not a report's `compare`:
~40 MB and ~0.05 CPU-s a side at 0.9 M kernels).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa

Build = Callable[[], pa.Table]


class Partial:
    """A table of which `made` holds some columns, in rows as the whole table; `rest()` gives
    the others (the same rows, in the same order), made once, when first needed. Called, it is the
    whole table, its columns in `schema`'s order."""

    def __init__(self, made: pa.Table, rest: Build, schema: pa.Schema) -> None:
        self.made, self._rest, self.schema = made, rest, schema

    def __call__(self) -> pa.Table:
        rest = self._rest()
        if rest.num_rows != self.made.num_rows:
            raise ValueError(f"{rest.num_rows} rows made later for {self.made.num_rows}")
        have = {**dict(zip(rest.column_names, rest.columns, strict=True)),
                **dict(zip(self.made.column_names, self.made.columns, strict=True))}  # fmt: skip
        return pa.Table.from_arrays([have[f.name] for f in self.schema], schema=self.schema)


class Deferred(dict[str, pa.Table]):
    """Tables, some built on first use (module doc). `tables` maps a name to its table or to
    the function that builds it."""

    def __init__(self, tables: Mapping[str, pa.Table | Build]) -> None:
        super().__init__()
        self._order = list(tables)
        self._later: dict[str, Build] = {}
        self._lock = threading.Lock()
        for name, value in tables.items():
            if isinstance(value, pa.Table):
                dict.__setitem__(self, name, value)
            else:
                self._later[name] = value

    def _build(self, name: str) -> None:
        with self._lock:
            make = self._later.get(name)
            if make is not None:  # not built by another thread meanwhile
                dict.__setitem__(self, name, make())
                del self._later[name]

    def _settle(self) -> None:
        """Build every table left, and put them in their first order."""
        if not self._later:
            return
        for name in list(self._later):
            self._build(name)
        built = {name: dict.__getitem__(self, name) for name in self._order}
        dict.clear(self)
        dict.update(self, built)

    def __getitem__(self, name: str) -> pa.Table:
        if name in self._later:
            self._build(name)
        return dict.__getitem__(self, name)

    def read(self, name: str, columns: list[str] | None) -> pa.Table:
        """Table `name` (`columns` of it: None, all): from the columns a `Partial` has made where
        they are all asked for, without building the rest."""
        with self._lock:
            make = self._later.get(name)
        if isinstance(make, Partial) and columns is not None:
            if all(c in make.made.column_names for c in columns):
                return make.made.select(columns)
        table = self[name]
        return table if columns is None else table.select(columns)

    def names(self) -> list[str]:
        """The tables' names in their first order, building none."""
        return list(self._order)

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self._later

    def __setitem__(self, name: str, table: pa.Table) -> None:
        self._later.pop(name, None)
        if name not in self._order:
            self._order.append(name)
        dict.__setitem__(self, name, table)

    def __delitem__(self, name: str) -> None:
        self._settle()
        dict.__delitem__(self, name)
        self._order.remove(name)

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[str]:
        self._settle()
        return dict.__iter__(self)

    def keys(self) -> Any:
        self._settle()
        return dict.keys(self)

    def items(self) -> Any:
        self._settle()
        return dict.items(self)

    def values(self) -> Any:
        self._settle()
        return dict.values(self)

    def copy(self) -> Deferred:
        """The same tables, those not built yet still not built (each copy builds its own)."""
        return Deferred(
            {name: self._later.get(name) or dict.__getitem__(self, name) for name in self._order}
        )

    def pop(self, name: str, *default: Any) -> Any:
        self._settle()
        if name in self._order:
            self._order.remove(name)
        return dict.pop(self, name, *default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, table in dict(*args, **kwargs).items():
            self[name] = table

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            self[name] = default
        return self[name]

    def popitem(self) -> tuple[str, pa.Table]:
        self._settle()
        name = self._order.pop()
        return name, dict.pop(self, name)

    def clear(self) -> None:
        dict.clear(self)
        self._order.clear()
        self._later.clear()

    def __eq__(self, other: object) -> bool:
        self._settle()
        if isinstance(other, Deferred):
            other._settle()
        return dict.__eq__(self, other)

    __hash__ = None  # as dict's

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as a plain dict of every table (the builders stay in this process)."""
        return (dict, (dict(self.items()),))

    def __repr__(self) -> str:
        return f"Deferred({self._order!r}, not built: {sorted(self._later)!r})"
