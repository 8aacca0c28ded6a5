"""One replay graph per comparison, kept beside the result rather than inside it.

Stage: replay (memo). Input: a `Comparison`; output: its `ReplayGraph` (graph.build) and HEAD's
replay with its own durations, each computed on first use. The TUI's what-if, `tracediff whatif`
and `compare --whatif` (whatif.predict / recover_top) all come through here, so a session that
asks several questions of one comparison builds its graph once.

A `WeakKeyDictionary` keyed by the comparison (whose equality is identity), so an entry goes with
its comparison; the graph holds no reference back to it. A copy (`dataclasses.replace`) is
another comparison and gets its own graph.
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


_ENTRIES: weakref.WeakKeyDictionary[Comparison, _Entry] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()  # the TUI predicts in worker threads


def _entry(c: Comparison) -> _Entry:
    with _LOCK:
        e = _ENTRIES.get(c)
    if e is not None:
        return e
    g = build(c)  # outside the lock: a long build does not hold up other comparisons
    with _LOCK:
        # another thread may have built it meanwhile: keep the first
        return _ENTRIES.setdefault(c, _Entry(g))


def graph_of(c: Comparison) -> ReplayGraph:
    """The comparison's replay graph, built on first use."""
    return _entry(c).graph


def own_replay(c: Comparison) -> Replayed:
    """HEAD replayed with its own durations (the same for every selector), on first use."""
    e = _entry(c)
    if e.own is None:
        e.own = replay(e.graph)
    return e.own
