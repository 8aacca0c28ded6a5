"""Kineto event records → one polars frame per role (kernels, copies, API calls, annotations...).

Stage: parse (inside the Kineto reader). Input: the event records of one chunk of the trace
(events.py); output: per role, typed columns appended chunk by chunk, so no event record
outlives its chunk. A role's frame has `name`, `pid`, `tid`, `start_ns`, `duration_ns`,
`end_ns` and the args columns that role reads (fields.py: which categories are which role, and
which args each reads). A segment of a large trace (segments.py) is compacted into one frame per
role by the process that read it; `merge` appends segments.

Each chunk's categories become a one-byte numpy column; each role's records are picked by index
in C and turned into Arrow arrays with one C-level pass per field, so no per-event Python code
runs. Only complete ('X') events are read. Where the old whole-trace reader converted a role's
values in one go, a chunk's are converted alone: the same values, except that an id column
mixing strings and numbers reads its strings one by one (`clock.to_int64`) only in the chunks
where they are mixed -- which differs only for digits or spaces outside ASCII.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from .clock import Clock, to_int64
from .fields import (
    ARG_FIELDS,
    ARG_KEYS,
    CODED_NAMES,
    INT_LIST,
    ROLE_CODE,
    ROLE_NAMES,
    dtype,
    schema,
)
from .scan import join_calls

# a role's args are decoded into a record of only its fields (the other keys are skipped)
_ARG_TYPES: dict[tuple[str, ...], Any] = {
    fields: msgspec.defstruct(
        "Args",
        [(f, Any, msgspec.field(default=None, name=ARG_KEYS[f])) for f in fields],
        gc=False,
    )
    for fields in set(ARG_FIELDS.values())
}
_ARG_DECODERS = {f: msgspec.json.Decoder(list[t]) for f, t in _ARG_TYPES.items()}  # type: ignore[valid-type]


class _Step(NamedTuple):
    name: Any
    pid: Any
    tid: Any
    ts: Any
    dur: Any


def _take(items: Any, idx: list[int]) -> list[Any]:
    return list(itemgetter(*idx)(items)) if len(idx) > 1 else [items[i] for i in idx]


def _columns(evs: list[Any], *names: str) -> list[list[Any]]:
    """Attribute columns of a list of records: one C-level pass per attribute."""
    return [list(map(attrgetter(n), evs)) for n in names]


class Roles:
    """Per-role columns, filled a chunk at a time by `add`; `frame` assembles one role.

    Per chunk only C-level passes over the records and Arrow array builds run (no polars
    calls, whose fixed cost would dominate small chunks); times stay doubles until `frame`
    converts a role's whole column at once (clock.py)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.n_events = 0
        self.no_ts = 0
        self._cols: dict[str, dict[str, list[Any]]] = {r: {} for r in ARG_FIELDS}
        self._frames: dict[str, list[pl.DataFrame]] = {}  # compacted, in trace order
        self._coded: dict[str, list[Any]] = {}  # the CODED_NAMES role's arrays (`table`)
        self._seen: set[Any] = set()  # annotation names (ProfilerStep#N once is enough)
        self._steps: list[_Step] = []
        self._ids: dict[Any, Any] = {None: None}  # pid/tid strings already read as ints
        self._stringy: set[str] = set()  # (role, column) keys that held id strings

    def add(self, events: Any) -> None:
        """One piece's events: msgspec records (events.py), or columns from the native scan."""
        if not isinstance(events, list):
            return self._add_scanned(events)
        self.n_events += len(events)
        cats = map(attrgetter("cat"), events)
        codes = np.fromiter(map(ROLE_CODE.get, cats, repeat(0)), np.uint8, len(events))
        counts = np.bincount(codes, minlength=len(ROLE_NAMES) + 1)
        for code in np.flatnonzero(counts[1:]) + 1:
            evs = _take(events, np.flatnonzero(codes == code).tolist())
            if list(map(attrgetter("ph"), evs)).count("X") != len(evs):
                evs = [e for e in evs if e.ph == "X"]
            role = ROLE_NAMES[code - 1]
            if role == "cpu_op":
                self._cpu_ops(evs)
            else:
                self._add(role, evs)

    def _add_scanned(self, sc: Any) -> None:
        """A scan.Scanned piece: its columns are what `_add` would have appended."""
        self.n_events += sc.events
        for role, cols in sc.roles.items():
            _extend(self._cols[role], cols)
            if role == "annotation":
                for a in cols["name"]:
                    self._seen.update(pc.unique(a).to_pylist())
            # an end is null exactly where the dur is (the Python calls have no duration_ns)
            self.clock.missing_dur += sum(a.null_count for a in cols["end_ns"])
        if sc.ops:
            self._cpu_ops(sc.ops)

    def merge(self, other: Roles) -> None:
        """Append the rows of `other` (the next segment of the same trace) after these."""
        self.n_events += other.n_events
        self.no_ts += other.no_ts
        self.compact()
        other.compact()
        _extend(self._frames, other._frames)
        _extend(self._coded, other._coded)
        self._seen |= other._seen
        self._steps += other._steps
        self.clock.merge(other.clock)

    def _cpu_ops(self, evs: list[Any]) -> None:
        """Of the operators only ProfilerStep#N and record_param_comms are read; most chunks
        have neither, which one C-level search over their names tells."""
        names = _columns(evs, "name")[0]
        try:
            joined = "\n".join(names)
        except TypeError:  # a name that is not a string: look at each
            joined = "ProfilerStep#"
        if "ProfilerStep#" in joined or "record_param_comms" in names:
            arr = _strings(names)
            steps = pc.starts_with(arr, "ProfilerStep#")
            for e in _take(evs, _true(steps)):
                self._steps.append(_Step(e.name, e.pid, e.tid, e.ts, e.dur))
            comms = _take(evs, _true(pc.equal(arr, "record_param_comms")))
            if comms:
                self._add("comms", comms)

    def _add(self, role: str, evs: list[Any]) -> None:
        if not evs:
            return
        fields = ARG_FIELDS[role]
        # a C-level pass per field: faster than one pass building a tuple per event
        name, pid, tid, ts, dur = _columns(evs, "name", "pid", "tid", "ts", "dur")
        if role == "annotation":
            self._seen.update(name)
        n = ts.count(None)
        if n:  # nothing can place an event without ts: skipped (and counted for a warning)
            self.no_ts += n
            evs = [e for e, t in zip(evs, ts, strict=True) if t is not None]
            if not evs:
                return
            name, pid, tid, ts, dur = _columns(evs, "name", "pid", "tid", "ts", "dur")
        cols = self._cols[role]
        names = _strings(name)
        _append(cols, "name", names.dictionary_encode() if role == CODED_NAMES else names)
        _append(cols, "pid", self._int64(pid, role + ".pid"))
        _append(cols, "tid", self._int64(tid, role + ".tid"))
        clock = self.clock
        if clock.exact:
            start, length = clock.ns(ts, "ts", role), clock.ns(dur, "dur", role)
        else:
            start = clock.ns_of(pl.Series(clock.doubles(ts, "ts", role)), "ts", role)
            length = clock.ns_of(pl.Series(clock.doubles(dur, "dur", role)), "dur", role)
        _append(cols, "start_ns", start.to_arrow())
        if role != CODED_NAMES:  # (the Python calls: no duration_ns, fields.CODED_NAMES)
            _append(cols, "duration_ns", length.to_arrow())
        _append(cols, "end_ns", (start + length).to_arrow())
        if fields:
            recs = _args(_columns(evs, "args")[0], fields)
            for f in fields:  # a pass per field is faster than one building tuples
                _append(cols, f, self._typed(list(map(attrgetter(f), recs)), dtype(f), role + f))

    def _int64(self, values: Any, key: str = "") -> pa.Array:
        """to_int64, with id strings (2021-schema tids) read once per distinct string. `key`
        names the column: one that held strings in the last chunk is tried as strings first."""
        if key not in self._stringy:
            try:
                return pa.array(values, pa.int64())
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                pass
        try:
            strs = pa.array(values, pa.string())  # all strings: to_int64 reads each anyway
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            self._stringy.discard(key)
            if key:
                return self._int64(values)
            return to_int64(list(values))
        if key:
            self._stringy.add(key)
        coded = strs.dictionary_encode()
        distinct = coded.dictionary.to_pylist()
        ids = self._ids
        new = [v for v in distinct if v not in ids]
        if new:
            ids.update(zip(new, to_int64(new).to_pylist(), strict=True))
        return pa.array(list(map(ids.__getitem__, distinct)), pa.int64()).take(coded.indices)

    def _typed(self, values: list[Any], dtype: pl.DataType, key: str) -> pa.Array:
        if dtype == pl.Int64():
            return self._int64(values, key)
        if dtype == INT_LIST:
            try:
                return pa.array(values, pa.list_(pa.int64()))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                ok = [
                    v if isinstance(v, list) and all(type(x) is int for x in v) else None
                    for v in values
                ]
                return pa.array(ok, pa.list_(pa.int64()))
        return _strings(values)

    def frame(self, role: str) -> pl.DataFrame:
        """All chunks' rows of one role, in trace order ("annotation": with the ProfilerStep#N
        operators that no annotation of the same name covers, as in 2021-schema traces)."""
        if role == "annotation" and self._steps:
            steps, self._steps = [s for s in self._steps if s.name not in self._seen], []
            self._add("step", steps)
            return pl.concat([self.frame("annotation"), self.frame("step")])
        cols = self._cols.pop(role, {})
        parts = self._frames.pop(role, [])
        if cols:
            parts.append(self._convert(role, cols))
        if not parts:
            return pl.DataFrame(schema=schema(role))
        return parts[0] if len(parts) == 1 else pl.concat(parts)

    def compact(self) -> None:
        """The chunks' columns so far → one frame per role (a segment's: converting it in the
        process that read it takes that work off the final, single-process step)."""
        for role, cols in self._cols.items():
            if cols and role == CODED_NAMES:  # a segment's pieces joined (`table`)
                for name, arrs in cols.items():
                    self._coded.setdefault(name, []).append(join_calls(arrs))
            elif cols:
                self._frames.setdefault(role, []).append(self._convert(role, cols))
        self._cols = {r: {} for r in ARG_FIELDS}

    def table(self) -> pa.Table:
        """The CODED_NAMES role's rows (the Python calls), in trace order, as an Arrow table of
        a chunk per segment (`compact` joins a segment's pieces, so that the scanner's buffers
        of the next one reuse their memory: 15 k fewer page faults of 4 KB on a generated 1
        M-kernel trace), `name` dictionary arrays: not a polars frame, since stack resolution
        reads only numpy arrays and the names' codes of it (a frame's conversion and
        categoricals cost ~1 ms of the SGLang trace's parse, 0.26 s of a 1 M-kernel one). Not
        joined across segments: stacks.resolve picks the calls it needs from each chunk."""
        cols = self._coded
        _extend(cols, self._cols.pop(CODED_NAMES, {}))
        self._coded = {}
        if not cols:
            return _CODED_SCHEMA.empty_table()
        return pa.Table.from_arrays(
            [pa.chunked_array(cols[f.name], f.type) for f in _CODED_SCHEMA], schema=_CODED_SCHEMA
        )

    def _convert(self, role: str, cols: dict[str, list[Any]]) -> pl.DataFrame:
        return pl.from_arrow(pa.table({c: _joined(cols[c]) for c in schema(role)}))  # type: ignore[return-value]


_CODED_SCHEMA = pa.schema(
    [("name", pa.dictionary(pa.int32(), pa.string()))]
    + [(c, pa.int64()) for c in list(schema(CODED_NAMES))[1:]]
)


def _joined(parts: list[pa.Array]) -> Any:
    """One array of a column's chunks (half the cost of handing polars the chunks), or the
    chunks as they are where joined strings would pass Arrow's 2 GB offsets."""
    try:
        return pa.concat_arrays(parts)
    except pa.ArrowInvalid:  # pragma: no cover - > 2 GB of one role's text in one segment
        return pa.chunked_array(parts)


def _true(mask: pa.Array) -> list[int]:
    """Indices where a boolean array is true (null: false)."""
    return np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False)).tolist()


def _extend(into: dict[str, list[Any]], more: dict[str, list[Any]]) -> None:
    """Each key's list in `more` appended to the same key's list of `into`."""
    for key, items in more.items():
        into.setdefault(key, []).extend(items)


def _append(cols: dict[str, list[Any]], name: str, arr: Any) -> None:
    cols.setdefault(name, []).append(arr)


def _strings(values: Any) -> pa.Array:
    """A string column; values of other types as polars casts them (numbers → text)."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pl.Series(list(values), dtype=pl.String, strict=False).to_arrow().cast(pa.string())


def _args(values: list[Any], fields: tuple[str, ...]) -> list[Any]:
    """Raw JSON args → records of the role's fields, in one decode per slice of events; an args
    that is not an object (or holds a number beyond a double) reads as none."""
    out: list[Any] = []
    step = 1 << 14  # bounds the joined copy of the raw args
    for i in range(0, len(values), step):
        part = values[i : i + step]
        try:
            out += _ARG_DECODERS[fields].decode(b"[" + b",".join(part) + b"]")
        except msgspec.ValidationError:  # an arg of another shape: keep what does decode
            out += [_one_args(a, _ARG_TYPES[fields]) for a in part]
    return out


def _one_args(raw: Any, kind: type) -> Any:
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError:
        return kind()
