"""Whether both sides' cycles can be checked to be the same loop, before anything is compared.

Stage: engine (segmentation check), between cutting (engine/cycle/find.py) and aligning. Input: the
runs and their segmentations; output: nothing (the cut holds), a reason the caller prints when
it compares the whole runs instead (`cut_fallback`), or a refusal (`check_tracers`).

One rule applied to both sides is not enough: a kernel-period rule (an anchor op every P ops)
fits any run that happens to hold that op about every P ops, so a Memcpy-anchored rule cut a
Kineto trace of one workload and an nsys report of another (or of an unrelated model) into
"cycles" of different ops, and the per-cycle verdict read "+118.9 %, significant". Two checks:

- the tracer: Kineto and nsys name the same kernels differently ("(anonymous namespace)" vs
  "<unnamed>", "(int)8" vs "8") and time them through different paths, so the cycles of one
  cannot be checked against the other's; refused unless the user names the cut (`--cycle`);
- the composition of an inferred (kernel-period) cycle: per GPU, the share of a cycle's ops
  (mean count per cycle of each name) that both sides hold. Same-workload pairs measured on the
  bundled traces hold 0.91 (k_good/k_bad: one copy added per all-reduce) to 1.00 (the nsys-ai
  MFU pair); pairs of different workloads that the rule still cut hold 0.00-0.60 (SGLang decode
  vs prefill-decode: 0.60). Below MIN_SHARED the cut is not trusted.

Cycle counts are not a test: a run that profiled 30 iterations of the same loop as another's 12
(the bundled e_good/e_bad pair) is cut correctly, and its per-cycle mean is the comparable one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine.cycle.segmentation import CycleRule
from tracediff.engine.cycle.sequences import Sequences
from tracediff.runs.runfile import Run

MIN_SHARED = 0.75
"""Least share of a kernel-period cycle's ops found in the other side's cycle (per GPU)."""


def tracer(run: Run) -> str | None:
    """The tracer that recorded the run ("nsys", "Kineto"), None where unknown."""
    fmt = str(run.metadata.get("source_format") or "")
    if fmt.startswith("nsys"):
        return "nsys"
    if fmt.startswith("kineto"):
        return "Kineto"
    return None


def check_tracers(bases: Sequence[Run], heads: Sequence[Run], cycle: str | None) -> str | None:
    """Refuse (AnalysisError) runs of different tracers unless `--cycle` names the cut; with it,
    the warning to print (None: one tracer)."""
    known = [(r, t) for r in [*bases, *heads] if (t := tracer(r)) is not None]
    if len({t for _, t in known}) < 2:
        return None
    first = known[0]
    other = next((r, t) for r, t in known if t != first[1])
    said = f"{first[0].path} was recorded by {first[1]}, {other[0].path} by {other[1]}"
    if cycle is None:
        raise AnalysisError(
            f"{said}: the two tracers name and time the same ops differently, so cycles found "
            "in one cannot be checked to correspond to the other's",
            "profile both runs with the same tracer; to compare anyway, pass --cycle NAME of a "
            "range both runs have, or --cycle whole for the runs' totals",
        )
    return (
        f"{said}: op names differ between the tracers (an added and a removed row may be one op) "
        "and their timings are not measured alike"
    )


def per_cycle(ops: pl.DataFrame) -> pl.DataFrame:
    """device_id, name, per (mean count per cycle) of a segmentation's ops: what the check
    reads of a run (small: one row per GPU and op name; engine/pipeline/reduce.py keeps it)."""
    return (
        ops.group_by("device_id", "name")
        .agg(pl.len().alias("n"))
        .join(ops.group_by("device_id").agg(pl.col("cycle").n_unique().alias("c")), on="device_id")
        .select(
            "device_id", pl.col("name").cast(pl.String), (pl.col("n") / pl.col("c")).alias("per")
        )
    )


def per_cycle_of(seqs: Sequences) -> pl.DataFrame:
    """`per_cycle` of a file's ops from their `Sequences` (one side: a group is one device's
    cycle): each device's count of each name code over its number of groups, by numpy's
    bincount instead of two group-bys of every op (35 -> ~5 ms a side of 1.05 M ops)."""
    devs, dev_of_group = np.unique(seqs.g_dev, return_inverse=True)
    n_codes = len(seqs.texts)
    counts = np.bincount(
        dev_of_group.ravel()[seqs.gid] * n_codes + seqs.codes, minlength=len(devs) * n_codes
    ).reshape(len(devs), n_codes)
    cycles = np.bincount(dev_of_group.ravel(), minlength=len(devs))
    dev_i, code = np.nonzero(counts)
    return pl.DataFrame(
        {
            "device_id": pl.Series(devs[dev_i]).cast(seqs.ops.schema["device_id"]),
            "name": pl.Series(seqs.texts, dtype=pl.String).gather(code),
            "per": counts[dev_i, code] / cycles[dev_i],
        }
    )


def shared_share(pb: pl.DataFrame, ph: pl.DataFrame) -> list[tuple[int, float]]:
    """Per base GPU (paired with head's GPU of the same rank, as the cut pairs them): the share
    of a cycle's ops that both sides' cycles hold, sum(min(count_b, count_h)) over the larger
    cycle's op count. `pb`, `ph`: each side's `per_cycle`."""
    devs_b, devs_h = sorted(pb["device_id"].unique()), sorted(ph["device_id"].unique())
    out = []
    for i, dev in enumerate(devs_b):
        if not devs_h:
            break
        other = dev if dev in devs_h else devs_h[min(i, len(devs_h) - 1)]
        b = pb.filter(pl.col("device_id") == dev).select("name", "per")
        h = ph.filter(pl.col("device_id") == other).select("name", pl.col("per").alias("per_h"))
        j = b.join(h, on="name", how="full", coalesce=True).fill_null(0.0)
        common = float(j.select(pl.min_horizontal("per", "per_h").sum()).item())
        size = max(float(j["per"].sum()), float(j["per_h"].sum()))
        out.append((int(dev), common / size if size else 1.0))
    return out


def cut_fallback(
    rule: CycleRule, base: pl.DataFrame, others: Sequence[tuple[str, pl.DataFrame]]
) -> str | None:
    """Why the runs `others` ((label, `per_cycle`) pairs) cut by base's rule cannot be trusted
    to hold the same loop as base's cycles (`base`: base's first run's `per_cycle`); None where
    they can (or the cut is by host ranges or whole, which the user's markers or the whole run
    define)."""
    if rule.kind != "kernel-period":
        return None
    for label, seg in others:
        for dev, share in shared_share(base, seg):
            if share < MIN_SHARED:
                return (
                    f"{label}'s cycles ({rule.label}) hold other ops than base's: on GPU "
                    f"{dev} {100 * share:.0f} % of a cycle's ops are in both (same-loop pairs "
                    f"hold >= {100 * MIN_SHARED:.0f} %), so the cut cannot be checked to find "
                    "the same loop on both sides"
                )
    return None


FEW_SHARED = 0.5
"""Below this share of common ops, cycles cut at the same host range get a warning."""


def range_note(
    rule: CycleRule, base: pl.DataFrame, others: Sequence[tuple[str, pl.DataFrame]]
) -> str | None:
    """Cycles cut at host ranges correspond by the user's markers, so a low share of common
    ops does not undo the cut (the same loop in two libraries: the twostream torch and CuPy
    captures share 12 %); it is said, since most rows are then ops of one side only (ResNet50
    against an NCCL benchmark, both cut at ProfilerStep: 3 %). Arguments as `cut_fallback`'s."""
    if rule.kind != "range":
        return None
    for label, seg in others:
        low = [(d, x) for d, x in shared_share(base, seg) if x < FEW_SHARED]
        if low:
            dev, share = min(low, key=lambda t: t[1])
            return (
                f"{label}'s cycles ({rule.label}) and base's have {100 * share:.0f} % of "
                f"their ops in common on GPU {dev}: the cycle time compares as the ranges "
                "say, but most rows are ops of one side only (are these the same workload?)"
            )
    return None
