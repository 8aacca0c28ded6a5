"""Why a key cannot act: the sentences the main screen says instead of doing nothing.

Stage: presentation (headless: no textual). Input: the `Comparison` and what the screen knows
(the event index, whether the event edges are in); output: one sentence, or None when the key
can act. A host-only comparison (engine/hostonly.py: NVTX ranges, no GPU operation) is the common
case: its cycles are host ranges on no GPU, so everything that draws or replays GPU work says so.
"""

from __future__ import annotations

import polars as pl

from tracediff.base.errors import TracediffError
from tracediff.engine.result import Comparison
from tracediff.tui.timelinemodel import TimelineModel

HOST_ONLY = (
    "no GPU events: neither run holds a kernel, copy or memset (profiled without CUDA tracing, "
    "or captured where no GPU was found), so the cycles are host NVTX ranges and the table "
    "compares the host phases' wall time"
)
"""What the timeline says, and keys that need GPU operations say, on a host-only comparison."""


def is_host_only(c: Comparison) -> bool:
    """The comparison's cycles are host ranges on no GPU (device_id null in every row). Read
    from the cycles, not the events: those may be built on first access, a cost for a worker."""
    cyc = c.cycles
    return bool(cyc.height) and cyc["device_id"].null_count() == cyc.height


def no_timeline(host_only: bool, model: TimelineModel | None) -> str | None:
    """Why the timeline's keys (zoom, pan, fit, align) have nothing to act on."""
    if host_only:
        return HOST_ONLY
    if model is None:
        return "the timeline is still indexing events; try again in a moment"
    if not model.lanes:
        return "no GPU events in these runs: the timeline has nothing to draw"
    return None


def per_gpu_missing(host_only: bool, gpus: list[int]) -> str:
    """Why there is no per-GPU split (the comparison has no row summed over GPUs)."""
    if host_only:
        return HOST_ONLY
    if len(gpus) == 1:
        return f"these runs have one GPU ({gpus[0]})"
    return "no contributor is on several GPUs"


def edges_missing(
    c: Comparison, host_only: bool, model: TimelineModel | None, edges_ready: bool
) -> str | None:
    """Why the timeline has no cross-stream event edges to show (None: it has some)."""
    if host_only:
        return HOST_ONLY
    if model is None or not edges_ready:
        return "still looking for cross-stream CUDA event edges; try again in a moment"
    if model.edges.total:
        return None
    if not any(model.edges.traced.values()):
        calls = event_api_calls(c)
        if calls:
            return (
                f"no CUDA event records in these runs, though head calls {calls}: the run "
                "files predate tracediff's CUDA event table; re-parse the reports "
                "(tracediff parse REPORT -o RUN.arrow)"
            )
        return (
            "no CUDA event records in these runs (no cudaEventRecord / "
            "cudaStreamWaitEvent calls were traced): no event edges to draw"
        )
    return (
        "no cross-stream event edges: the runs record CUDA events, but no stream waited "
        "on an event another stream recorded (cudaStreamWaitEvent)"
    )


EVENT_CALLS = ("cudaStreamWaitEvent", "cudaEventRecord")
"""CUDA API calls whose records make the cuda_events table (cross-stream edges come from them)."""


def event_api_calls(c: Comparison) -> str:
    """How often head's traced API calls record or wait on CUDA events ("cudaEventRecord 144
    times"; "" when never): a run file without CUDA event records whose run made such calls was
    written before tracediff kept them."""
    api = c.replay_inputs.head_api
    if api is None or not getattr(api, "num_rows", getattr(api, "height", 0)):
        return ""
    frame = api if isinstance(api, pl.DataFrame) else pl.from_arrow(api.select(["name"]))
    assert isinstance(frame, pl.DataFrame)
    names = frame.select(pl.col("name").cast(pl.String))["name"]
    said = []
    for call in EVENT_CALLS:  # cudaEventRecordWithFlags, cudaStreamWaitEvent_ptsz, ... count too
        n = int(names.str.starts_with(call).sum())
        if n:
            said.append(f"{call} {n} time{'' if n == 1 else 's'}")
    return " and ".join(said)


REFUSED = {
    "whatif": "what-if cannot replay that",
    "load": "cannot compare these runs",
}
"""A worker's modal title when it refused (a TracediffError: the tool cannot answer, and says
why), by the worker's name."""


def error_modal(worker: str, err: BaseException | None) -> tuple[str, str]:
    """The title and text of the modal for a worker that raised: a refusal is titled as one and
    shows its message and hint; anything else is a failure, with the exception's type."""
    if isinstance(err, TracediffError):
        return REFUSED.get(worker, f"{worker}: cannot do that"), str(err)
    msg = str(err) if err is not None else "unknown error"
    return f"{worker} failed", f"{type(err).__name__}: {msg}"
