"""What-if replay: HEAD's cycles re-simulated with chosen durations taken from BASE.

Modules, in the order data flows (none imports a later one; no import circles):

- `types.py`: the data types (ReplayGraph, HostSyncs, Replayed, WhatIf), no algorithms;
- `order.py`, `contributors.py`, `events.py`, `syncs.py`: pieces of the graph (timeline order,
  contributor codes and BASE values, cross-stream edges, host syncs);
- `graph.py`: builds the dependency graph of HEAD's GPU ops from a `Comparison`;
- `simulate.py`: replays it (the vectorised max-plus sweep);
- `path.py`: the critical path of one replay;
- `cache.py`: one graph (and HEAD's own replay) per comparison, kept outside the result;
- `whatif.py`: selectors, `predict` and `recover_top`, the front door.

The segmented scans the sweep uses live in `tracediff/base/segscan.py`, shared with the engine.
"""

from tracediff.replay.types import WhatIf
from tracediff.replay.whatif import predict, recover_top

__all__ = ["WhatIf", "predict", "recover_top"]
