"""What-if replay: HEAD's cycles re-simulated with chosen durations taken from BASE.

`graph.py` builds the dependency graph of HEAD's GPU ops from a `Comparison`; `simulate.py`
replays it and reports the predicted cycle time and critical path. Front door: `predict`.
"""

from tracediff.replay.simulate import WhatIf, predict, recover_top

__all__ = ["WhatIf", "predict", "recover_top"]
