"""The replay's data types: the dependency graph, the host's sync windows, one replay's result
and a what-if prediction. Types only; the algorithms that fill them are in the stage modules.

Stage: replay (shared vocabulary). graph.py builds a `ReplayGraph` (with syncs.py's `HostSyncs`);
simulate.py replays it into a `Replayed`; whatif.py turns replays into a `WhatIf`; path.py reads
one `Replayed` for the critical path. Imports numpy and polars only, so every replay module may
import it without an import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

__all__ = ["HostSyncs", "ReplayGraph", "Replayed", "WhatIf"]


@dataclass
class HostSyncs:
    """Sync windows inside cycles, sorted by (host thread, start). Times relative to the cycle."""

    host: np.ndarray  # host thread id (ReplayGraph.host's encoding)
    start: np.ndarray
    end: np.ndarray
    wake: np.ndarray  # end - max(start, end of W)
    w: np.ndarray  # op the host waited for
    prev_op: np.ndarray  # last op the thread launched before the window
    op_win: np.ndarray  # per op: the thread's last window before its launch (-1: none)

    @property
    def n(self) -> int:
        return len(self.start)


@dataclass
class ReplayGraph:
    """HEAD's ops as arrays in chain order. Times are int64 ns relative to the cycle's origin.

    Contributors are coded as attribution row numbers (contributor "c7" is 7; -1: none)."""

    keys: pl.DataFrame  # distinct (kind, contributor, phase, device_id, gap_cause) of HEAD's ops
    key: np.ndarray  # per op: row of `keys`
    cid: np.ndarray  # per op: contributor of its duration
    tid: np.ndarray  # per op: contributor of its transfer time (collectives on >= 2 GPUs)
    gid: np.ndarray  # per op: contributor of the idle before it
    chain: np.ndarray  # chain id (cycle, device, stream)
    first: np.ndarray  # bool: first op of its chain
    cycle: np.ndarray  # cycle index (dense, 0..n_cycles-1)
    device: np.ndarray  # device id
    start: np.ndarray  # measured
    end: np.ndarray
    dur: np.ndarray  # measured duration (end - start)
    release: np.ndarray  # host release (NEG: none)
    lag: np.ndarray  # gap after the stream predecessor's end
    devprev: np.ndarray  # index of the op that ends last among earlier ops of the device (-1)
    edge_src: np.ndarray  # cross-stream edges: start[dst] >= end[src] + lag
    edge_dst: np.ndarray
    edge_lag: np.ndarray
    coll_group: np.ndarray  # collective instance across GPUs (-1: none or a single rank)
    coll_tail: np.ndarray  # end - last arrival (transfer after the last rank arrived)
    base_dur: np.ndarray  # BASE duration of the aligned instance (-1: none: the op is removed)
    base_tail: np.ndarray  # BASE transfer time (collectives on >= 2 GPUs)
    base_gap: np.ndarray  # BASE idle before the aligned instance (slot mean)
    gap_scale: np.ndarray  # per contributor code: BASE / HEAD idle per cycle (gap rows; 1 else)
    host: np.ndarray  # host thread of the launch within the cycle, hashed (0: unknown)
    host_perm: np.ndarray  # op indices in (host thread, launch start) order
    gap_old: np.ndarray  # HEAD's idle before the op on its device (attribute.py's gap_ns)
    missing: pl.DataFrame  # template slots absent from a HEAD cycle: _next (op), _cid, _bd, _bg
    syncs: HostSyncs  # where the host waited for the GPU inside a cycle (syncs.py)
    cycle_labels: np.ndarray  # original cycle numbers, by dense index
    stats: dict[str, Any] = field(default_factory=dict)  # counts, for tests and diagnostics


@dataclass
class Replayed:
    """One replay of every cycle (simulate.replay): op times and the inputs it settled with."""

    start: np.ndarray
    end: np.ndarray
    sweeps: int
    release: np.ndarray
    lag: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_lag: np.ndarray
    shift: np.ndarray  # host speed-up from idle taken away (cumulative per thread, graph order)


@dataclass
class WhatIf:
    """The prediction. Times are ms per cycle (mean over HEAD's cycles)."""

    selectors: list[str]
    selected: pl.DataFrame  # contributor_id, kind, name, phase, device_id, delta_ms_per_cycle
    base_ms_per_cycle: float  # measured (compare's mean critical-device span)
    head_ms_per_cycle: float  # measured
    replayed_head_ms_per_cycle: float  # HEAD replayed with its own durations (model check)
    predicted_ms_per_cycle: float  # HEAD replayed with the selected durations from BASE
    recovered_ms_per_cycle: float  # replayed_head - predicted (> 0: faster)
    recovered_share: float | None  # recovered / (head - base): the part of the change explained
    critical_path: pl.DataFrame  # kind, name, phase, ms_per_cycle, share (of the predicted span)
    cycles: pl.DataFrame  # cycle, measured_ms, replayed_ms, predicted_ms
    sweeps: int
    warnings: list[str] = field(default_factory=list)
