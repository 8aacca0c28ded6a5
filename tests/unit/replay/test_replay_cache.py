"""One replay graph per comparison, kept outside the result (tracediff.replay.cache).

The TUI's what-if, `tracediff whatif` and `compare --whatif` ask several questions of one
comparison: they share its graph and HEAD's own replay, the result stays free of it, and the
graph goes when the comparison goes.
"""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace
from pathlib import Path

from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.replay import predict, recover_top
from tracediff.replay.cache import graph_of, own_replay

H200 = Path(__file__).resolve().parent.parent.parent / "data" / "h200"


def test_one_graph_per_comparison_outside_the_result() -> None:
    c = compare(load(H200 / "g_good.sqlite"), load(H200 / "g_bad.sqlite"), n_boot=20)
    inputs_before = c.replay_inputs
    w1 = predict(c, "c0")
    g = graph_of(c)
    own = own_replay(c)
    w2 = predict(c, "all")
    top = recover_top(c, 2)
    assert graph_of(c) is g and own_replay(c) is own  # built once, shared by every question
    assert c.replay_inputs is inputs_before  # frozen: nothing cached inside the result
    assert "own" not in g.stats
    assert w1.replayed_head_ms_per_cycle == w2.replayed_head_ms_per_cycle
    assert top.height == 2
    other = replace(c)  # a copy is another comparison: its own graph, the same numbers
    assert graph_of(other) is not g
    assert predict(other, "c0").predicted_ms_per_cycle == w1.predicted_ms_per_cycle
    gone = weakref.ref(g)
    del c, g, own, other
    gc.collect()
    assert gone() is None  # dropped with its comparison: no graph outlives the result
