"""Launch-stack resolution (parse/stacks/launch_stacks.py, issue 19) against definitions, not itself.

1. A generated Kineto trace (bench/gen_kineto_stacks.py: two threads, one without launches,
   object addresses in built-in names): every kernel's stack equals the brute-force chain of
   Python calls holding its launch's midpoint in the raw JSON, the same check the real traces
   get in test_kineto_stacks.py.
2. Random frame calls with shared starts, zero-length calls, partial overlaps and several
   threads: each call's chain equals a plain-Python reading of the rules (depth by the boundary
   sweep of intervals.nesting_depth, caller = latest earlier call one level up on the thread,
   launching call = latest start at or before the midpoint, then up while it had returned).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tracediff.parse.intervals import nesting_depth
from tracediff.parse.kineto import read_kineto
from tracediff.parse.kineto import stacks as kineto_stacks
from tracediff.parse.stacks import launch_stacks

ROOT = Path(__file__).resolve().parent.parents[2]


def _gen():
    spec = importlib.util.spec_from_file_location("gen", ROOT / "bench" / "gen_kineto_stacks.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _chains(run) -> dict[int, list[str]]:
    st = pl.from_arrow(run.tables["stacks"])
    fr = pl.from_arrow(run.tables["frames"]).with_columns(pl.col(pl.Categorical).cast(pl.String))
    j = st.join(fr, on="frame_id", how="left").sort("stack_id", "depth")
    out: dict[int, list[str]] = {}
    for sid, f, line, fn in j.select("stack_id", "file", "line", "function").iter_rows():
        out.setdefault(sid, []).append(fn if f is None else f"{f}({line}): {fn}")
    return out


def test_generated_trace_resolves_as_the_brute_force_search(tmp_path: Path) -> None:
    path = tmp_path / "gen.json"
    n = _gen().write(path, 2000)
    run = read_kineto(path)
    k = pl.from_arrow(run.tables["kernels"])
    assert k.height == n and k["stack_id"].null_count() == 0
    chains = _chains(run)

    ev = json.loads(path.read_text())["traceEvents"]
    py = [e for e in ev if e["cat"] == "python_function"]
    assert {e["tid"] for e in py} == {7, 9}  # the detokenizer thread has Python calls only
    key = np.array([(e["pid"], e["tid"]) for e in py])
    t0 = np.array([round(e["ts"] * 1000) for e in py])
    t1 = t0 + np.array([round(e["dur"] * 1000) for e in py])
    names = [re.sub(r" at 0x[0-9a-fA-F]+", "", e["name"]) for e in py]
    calls = {e["args"]["correlation"]: e for e in ev if e["cat"] == "cuda_runtime"}
    for corr, sid in k.select("correlation_id", "stack_id").iter_rows():
        c = calls[corr]
        s = round(c["ts"] * 1000)
        mid = s + round(c["dur"] * 1000) // 2
        hold = np.flatnonzero(
            (key[:, 0] == c["pid"]) & (key[:, 1] == c["tid"]) & (t0 <= mid) & (t1 >= mid)
        )
        chain = sorted(hold, key=lambda i: (t0[i], -t1[i]))
        assert chains[sid] == [names[i] for i in reversed(chain)], corr
    # ops of one kind share one stack; the address-free built-in names make it so
    assert len(chains) == 8


def _parent(i: int, order: list[int], d: dict[int, int]) -> int | None:
    ups = [j for j in order[: order.index(i)] if d[j] == d[i] - 1]
    return ups[-1] if ups else None


def _reference(pid, tid, s, e, text, cp, ct, cm) -> list[list[str]]:
    """The rules in plain Python, one API call at a time (depths: intervals.nesting_depth)."""
    out = []
    for p, t, m in zip(cp, ct, cm, strict=True):
        # only calls holding some midpoint of their thread take part (the others are dropped
        # before depths are counted)
        mids = [cm[j] for j in range(len(cm)) if cp[j] == p and ct[j] == t]
        mine = [
            i for i in range(len(s))
            if pid[i] == p and tid[i] == t and any(s[i] <= x <= e[i] for x in mids)
        ]  # fmt: skip
        sub = pl.DataFrame({"s": s[mine], "e": e[mine], "g": np.zeros(len(mine), np.int64)})
        d = dict(zip(mine, nesting_depth(sub, "s", "e", ["g"]).to_list(), strict=True))
        order = sorted(mine, key=lambda i: (s[i], -e[i], i))
        before = [i for i in order if s[i] <= m]
        cur = before[-1] if before else None
        while cur is not None and e[cur] < m:
            cur = _parent(cur, order, d)
        chain = []
        while cur is not None:
            chain.append(text[cur])
            cur = _parent(cur, order, d)
        out.append(chain)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_random_frame_calls_resolve_by_the_rules(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, m = 120, 40
    pid = rng.integers(1, 3, n)
    tid = rng.integers(1, 3, n)
    s = rng.integers(0, 60, n) * 10  # a coarse clock: many shared starts
    e = s + rng.choice([0, 10, 20, 50, 100, 300], n)  # zero-length calls, partial overlaps
    text = [f"f.py({i % 17}): fn{i % 17}" for i in range(n)]
    cp, ct = rng.integers(1, 3, m), rng.integers(1, 4, m)  # thread 3 has no frame calls
    cm = rng.integers(0, 700, m)
    got = launch_stacks.resolve(cp, ct, cm, pid, tid, s, e, pl.Series(text))
    rows = dict.fromkeys(got.stack_id[got.stack_id != 0].tolist())
    st, _, fr = got.stack_rows
    texts = dict(zip(got.frame_ids.tolist(), got.frame_texts.to_pylist(), strict=True))
    chain = {sid: [texts[f] for f in fr[st == sid]] for sid in rows}
    want = _reference(pid, tid, s, e, text, cp, ct, cm)
    assert any(want) and not all(want)
    for i, w in enumerate(want):
        sid = int(got.stack_id[i])
        assert (chain[sid] if sid else []) == w, i


def _random_calls(seed: int, n: int, m: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    pid, tid = rng.integers(1, 3, n), rng.integers(1, 3, n)
    s = rng.integers(0, n // 2, n) * 10  # shared starts
    e = s + rng.choice([0, 10, 20, 50, 100, 300, 3000], n)  # zero-length, partial overlaps
    cp, ct, cm = rng.integers(1, 3, m), rng.integers(1, 4, m), rng.integers(0, n * 5, m)
    return cp, ct, cm, pid, tid, s, e


@pytest.mark.parametrize("seed", range(8))
def test_native_walk_gives_the_numpy_walk(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # _stack_walk.c replaces the numpy walk (depth, caller, hash, launching call) where it is
    # built; both must give the same stacks, ids included, on messy input (several threads,
    # shared starts, zero-length calls, partial overlaps)
    assert launch_stacks._stack_walk is not None  # built by pip install: else this tests nothing
    cp, ct, cm, pid, tid, s, e = _random_calls(seed, 3000, 800)
    text = pl.Series([f"f.py({i % 41}): fn{i % 41}" for i in range(len(s))])
    native = launch_stacks.resolve(cp, ct, cm, pid, tid, s, e, text)
    monkeypatch.setattr(launch_stacks, "_stack_walk", None)
    numpy = launch_stacks.resolve(cp, ct, cm, pid, tid, s, e, text)
    assert (native.stack_id != 0).sum() > 100
    assert np.array_equal(native.stack_id, numpy.stack_id)
    for a, b in zip(native.stack_rows, numpy.stack_rows, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(native.frame_ids, numpy.frame_ids)
    assert native.frame_texts.equals(numpy.frame_texts)


def test_native_walk_refuses_arrays_it_cannot_walk() -> None:
    # lengths that do not match, starts or midpoints out of order, ends that give a depth out of
    # range: a ValueError, no read or write outside an array
    walk = launch_stacks._stack_walk
    assert walk is not None
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    out = (np.empty(2, np.int64), np.empty(2, np.uint64), np.empty(1, np.int64))
    ok = (i64(0, 5), i64(10, 6), i64(6, 10), i64(), np.zeros(2, np.uint64), i64(7), i64())
    walk.walk(*ok, *out)
    assert out[0].tolist() == [-1, 0] and out[2].tolist() == [0]
    bad = [
        (i64(5, 0), *ok[1:]),  # starts out of order
        (*ok[:5], i64(7, 1), i64()),  # midpoints out of order (and cur too short)
        (*ok[:2], i64(6), *ok[3:]),  # e_sorted too short
        (*ok[:3], i64(1, 1), *ok[4:]),  # threads for the frame calls, none for the midpoints
        (ok[0], ok[1], i64(0, 0), *ok[3:]),  # e_sorted not e's: a depth below 0
    ]
    for args in bad:
        with pytest.raises(ValueError):
            walk.walk(*args, *out)


@pytest.mark.parametrize("order", ["nearly sorted", "random", "reversed"])
def test_native_holding_picks_the_calls_numpy_picks(order: str) -> None:
    # _stack_walk.holding searches each start from the last answer (a gallop): the same calls as
    # numpy's searchsorted whatever the order of the starts, ties and empty ends included
    rng = np.random.default_rng(7)
    s = np.sort(rng.integers(0, 5000, 20000))
    if order == "random":
        s = rng.permutation(s)
    elif order == "reversed":
        s = s[::-1].copy()
    else:
        s[rng.integers(0, len(s), 500)] -= rng.integers(0, 300, 500)  # a few out of place
    e = s + rng.choice([0, 1, 5, 40, 700], len(s))
    for mids in (np.sort(rng.integers(0, 5500, 300)), np.array([2500]), np.zeros(0, np.int64)):
        want = np.zeros(0, np.int64)
        if len(mids):
            j = np.searchsorted(mids, s, "left")
            want = np.flatnonzero((j < len(mids)) & (mids[np.minimum(j, len(mids) - 1)] <= e))
        assert np.array_equal(launch_stacks._holding(mids, s, e), want)
    with pytest.raises(ValueError):
        launch_stacks._holding(np.array([5, 1]), s, e)


@pytest.mark.parametrize("native", [True, False], ids=["C", "numpy"])
@pytest.mark.parametrize("frames", ["same thread", "two threads"])
@pytest.mark.parametrize("seed", range(3))
def test_one_launching_thread_resolves_by_the_rules(
    seed: int, frames: str, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # API calls on one thread: the frame calls are picked from the whole arrays (those of other
    # threads skipped in the pick itself, no sortable keys built), in C and in numpy alike
    if not native:
        monkeypatch.setattr(launch_stacks, "_stack_walk", None)
    rng = np.random.default_rng(100 + seed)
    n, m = 150, 40
    pid = np.ones(n, np.int64) if frames == "same thread" else rng.integers(1, 3, n)
    tid = np.ones(n, np.int64) if frames == "same thread" else rng.integers(1, 3, n)
    s = rng.integers(0, 60, n) * 10
    e = s + rng.choice([0, 10, 20, 50, 100, 300], n)
    e[:5] = s[:5] - 1  # ends before starts: no frame of anything
    text = [f"f.py({i % 17}): fn{i % 17}" for i in range(n)]
    cp, ct, cm = np.ones(m, np.int64), np.ones(m, np.int64), rng.integers(0, 1400, m)
    got = launch_stacks.resolve(cp, ct, cm, pid, tid, s, e, pl.Series(text))
    st, _, fr = got.stack_rows
    texts = dict(zip(got.frame_ids.tolist(), got.frame_texts.to_pylist(), strict=True))
    want = _reference(pid, tid, s, e, text, cp, ct, cm)
    assert any(want) and not all(want)
    for i, w in enumerate(want):
        sid = int(got.stack_id[i])
        assert ([texts[f] for f in fr[st == sid]] if sid else []) == w, i


def test_native_launches_give_numpy_launches() -> None:
    # _stack_walk.launches: each midpoint's stack id, and one frame call per distinct stack (the
    # first in midpoint order; numpy's pick is another one of the same hash)
    rng = np.random.default_rng(3)
    h = rng.integers(1, 40, 500).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    cur = rng.integers(-1, 500, 20000)  # -1: no frame call holds the midpoint
    sid, leaves = launch_stacks._launches_native(cur, h)
    want_sid, want_rep = launch_stacks._launches_numpy(cur, h)
    assert np.array_equal(sid, want_sid)
    assert sorted(h[leaves].tolist()) == sorted(h[want_rep].tolist())
    assert len(set(h[leaves].tolist())) == len(leaves) == 39
    found = cur[cur >= 0]
    first = {}
    for c in found.tolist():
        first.setdefault(int(h[c]), c)
    assert leaves.tolist() == list(first.values())
    none = launch_stacks._launches_native(np.full(3, -1), h)
    assert not none[1].size and not none[0].any()
    walk = launch_stacks._stack_walk
    assert walk is not None
    out = (np.empty(2, np.int64), np.empty(2, np.int64))
    for bad in (np.array([0, 500]), np.array([0, 1])):  # beyond h; a 0 hash
        hh = h.copy()
        hh[1] = 0
        with pytest.raises(ValueError):
            walk.launches(bad, hh if bad[1] == 1 else h, *out)
    with pytest.raises(ValueError):
        walk.launches(np.array([0, 1, 2]), h, *out)  # outputs too short


def test_native_holding_skips_the_calls_not_ok() -> None:
    rng = np.random.default_rng(11)
    s = np.sort(rng.integers(0, 5000, 5000))
    e = s + rng.choice([-1, 0, 5, 40, 700], len(s))
    mids = np.sort(rng.integers(0, 5500, 200))
    ok = rng.random(len(s)) < 0.6
    got = launch_stacks._holding(mids, s, e, ok)
    j = np.searchsorted(mids, s, "left")
    want = np.flatnonzero((j < len(mids)) & (mids[np.minimum(j, len(mids) - 1)] <= e) & ok)
    assert np.array_equal(got, want) and 0 < len(got) < ok.sum()
    walk = launch_stacks._stack_walk
    assert walk is not None
    with pytest.raises(ValueError):
        walk.holding(mids, s, e, np.empty(len(s), np.int64), ok[:-1])


def test_deep_nesting_walks_as_numpy_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    # the C walk keeps one latest call per depth, grown as the nesting deepens (past its first
    # 64 levels here, and by jumps: zero-length calls sharing starts): the same stacks as numpy
    n = 300
    s = np.concatenate([np.arange(n), np.full(50, 10), np.arange(0, 4000, 10)]) * 10
    e = np.concatenate(
        [(2 * 1000 - np.arange(n)) * 10, np.full(50, 100), np.arange(0, 4000, 10) * 10 + 5]
    )
    text = pl.Series([f"f.py({i % 97}): fn{i % 97}" for i in range(len(s))])
    one = np.ones(4, np.int64)
    cm = np.array([5_000, 150, 15_000, 39_000])
    native = launch_stacks.resolve(
        one, one, cm, np.ones(len(s), np.int64), np.ones(len(s), np.int64), s, e, text
    )
    monkeypatch.setattr(launch_stacks, "_stack_walk", None)
    numpy = launch_stacks.resolve(
        one, one, cm, np.ones(len(s), np.int64), np.ones(len(s), np.int64), s, e, text
    )
    assert np.array_equal(native.stack_id, numpy.stack_id) and native.stack_id.all()
    for a, b in zip(native.stack_rows, numpy.stack_rows, strict=True):
        assert np.array_equal(a, b)
    assert native.stack_rows[1].max() >= n - 1  # a stack of every level


def _chunked_calls(seed: int, n: int) -> tuple[pa.Table, np.ndarray]:
    """Python calls as Roles.table holds them: chunks of random sizes, each with its own names'
    dictionary, some fields null; and which calls have all four of pid, tid, start, end."""
    rng = np.random.default_rng(seed)
    pid, tid = rng.integers(1, 3, n), rng.integers(1, 3, n)
    s = rng.integers(0, n // 2, n) * 10
    e = s + rng.choice([0, 10, 20, 50, 100, 300, 3000], n)
    text = np.array([f"f.py({i % 23}): fn{i % 23} at 0x{i % 3:x}" for i in range(n)], object)
    cols = {"pid": pid, "tid": tid, "start_ns": s, "end_ns": e}
    null = {c: rng.random(n) < 0.03 for c in (*cols, "name")}
    cuts = np.unique(np.concatenate([[0, n], rng.integers(0, n, 6)]))
    chunks: dict[str, list[pa.Array]] = {c: [] for c in ("name", *cols)}
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        words = rng.permutation(np.unique(text[a:b])).tolist()  # another order per chunk
        codes = pa.array([words.index(t) for t in text[a:b]], pa.int32(), mask=null["name"][a:b])
        chunks["name"].append(pa.DictionaryArray.from_arrays(codes, pa.array(words)))
        for c, v in cols.items():
            chunks[c].append(pa.array(v[a:b], pa.int64(), mask=null[c][a:b]))
    table = pa.table({c: pa.chunked_array(v) for c, v in chunks.items()})
    return table, ~(null["pid"] | null["tid"] | null["start_ns"] | null["end_ns"])


@pytest.mark.parametrize("native", [True, False], ids=["C", "numpy"])
@pytest.mark.parametrize("seed", range(4))
def test_chunks_picked_give_the_joined_calls_stacks(
    seed: int, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one launching thread: the Kineto reader picks the frame calls chunk by chunk from the
    # scanner's pieces (kineto/stacks.py, _stack_walk.pick), never joining them; the stacks
    # must be those of the joined calls without the null ones (names null: "<unnamed>")
    if not native:
        monkeypatch.setattr(launch_stacks, "_stack_walk", None)
    py, ok = _chunked_calls(seed, 3000)
    assert py["name"].num_chunks > 2 and not ok.all()
    rng = np.random.default_rng(50 + seed)
    m = 700
    start = rng.integers(0, 15000, m)
    api = pl.DataFrame(
        {
            "process_id": np.ones(m, np.int64),
            "thread_id": np.ones(m, np.int64),
            "start_ns": start,
            "end_ns": start + rng.integers(0, 40, m),
        }  # fmt: skip
    )
    got_api, got = kineto_stacks.resolve(api, py)
    joined = py.combine_chunks()
    rows = np.flatnonzero(ok)
    names = pc.fill_null(joined["name"].combine_chunks().cast(pa.string()), "<unnamed>")
    f = [joined[c].combine_chunks().to_numpy(zero_copy_only=False)[rows] for c in
         ("pid", "tid", "start_ns", "end_ns")]  # fmt: skip
    mid = api["start_ns"].to_numpy() + (api["end_ns"] - api["start_ns"]).to_numpy() // 2
    one = np.ones(m, np.int64)
    want = launch_stacks.resolve(one, one, mid, *f, pl.Series(names.take(rows).to_pylist()))
    sid = got_api["stack_id"].fill_null(0).to_numpy()
    assert (sid != 0).sum() > 100 and (sid == 0).any()
    assert np.array_equal(sid, want.stack_id)
    st = got["stacks"]
    assert np.array_equal(st["stack_id"].to_numpy(), want.stack_rows[0])
    assert np.array_equal(st["frame_id"].to_numpy(), want.stack_rows[2])
    assert got["frames"]["frame_id"].to_numpy().tolist() == want.frame_ids.tolist()


def test_native_pick_refuses_arrays_that_do_not_fit() -> None:
    walk = launch_stacks._stack_walk
    assert walk is not None
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    s, e, one = i64(1, 5, 9), i64(4, 6, 20), i64(1, 1, 1)
    code = np.array([2, 0, 1], np.int32)
    out = (np.empty(4, np.int64), np.empty(4, np.int64), np.empty(4, np.int32))
    assert walk.pick(i64(5, 10), s, e, one, one, code, 1, 1, *out, 1) == 3  # two picked at 1
    assert out[0][1:3].tolist() == [5, 9] and out[2][1:3].tolist() == [0, 1]
    bad = [
        ((i64(5), s, e[:2], one, one, code, 1, 1, *out, 0)),  # e too short
        ((i64(5), s, e, one, one, code.astype(np.int64), 1, 1, *out, 0)),  # code not int32
        ((i64(5), s, e, one, one, code, 1, 1, *out, 2)),  # 3 calls from 2 overflow 4
        ((i64(5), s, e, one, one, code, 1, 1, *out, -1)),
        ((i64(5), s, e, one, one, code, 1, 1, *out, 0, np.ones(2, bool))),  # ok too short
    ]
    for args in bad:
        with pytest.raises(ValueError):
            walk.pick(*args)
