"""One replay graph per comparison, kept beside the result rather than inside it.

Stage: replay (memo). Input: a `Comparison`; output: its `ReplayGraph` (graph.build) and HEAD's
replay with its own durations, each computed on first use. The TUI's what-if, `tracediff whatif`
and `compare --whatif` (whatif.predict / recover_top) all come through here, so a session that
asks several questions of one comparison builds its graph once.

Keyed by the comparison's identity (a `Comparison` is a mutable dataclass: not hashable, so not a
`WeakKeyDictionary` key) and dropped when the comparison is garbage-collected (weakref.finalize
runs before its id can be reused). The graph holds no reference back to the comparison. A copy
(`dataclasses.replace`) is another comparison and gets its own graph.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from tracediff.engine.result import Comparison
from tracediff.replay.graph import build
from tracediff.replay.simulate import replay
from tracediff.replay.types import Replayed, ReplayGraph

__all__ = ["graph_of", "own_replay"]


@dataclass
class _Entry:
    graph: ReplayGraph
    own: Replayed | None = None  # HEAD replayed with its own durations: one per graph


_ENTRIES: dict[int, _Entry] = {}
_LOCK = threading.Lock()  # the TUI predicts in worker threads


def _entry(c: Comparison) -> _Entry:
    key = id(c)
    with _LOCK:
        e = _ENTRIES.get(key)
    if e is not None:
        return e
    g = build(c)  # outside the lock: a long build does not hold up other comparisons
    with _LOCK:
        e = _ENTRIES.get(key)
        if e is None:  # another thread may have built it meanwhile: keep the first
            e = _ENTRIES[key] = _Entry(g)
            weakref.finalize(c, _ENTRIES.pop, key, None)
    return e


def graph_of(c: Comparison) -> ReplayGraph:
    """The comparison's replay graph, built on first use."""
    return _entry(c).graph


def own_replay(c: Comparison) -> Replayed:
    """HEAD replayed with its own durations (the same for every selector), on first use."""
    e = _entry(c)
    if e.own is None:
        e.own = replay(e.graph)
    return e.own
