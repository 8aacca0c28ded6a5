"""What a code change replaced, as one story: `cudnn_…sdpa… (removed) → softmax + 2 × gemm
(added)`, instead of a replaced row and a few added rows read apart.

Stage: output. Input: a Comparison's attribution; output: `Replacement`s, one per host phase and
GPU where ops went away (removed rows, and base's op of each replaced row) and ops came (added
rows, head's op of each replaced row), largest |change| first, and their lines for the text
reports. Grouped by phase and GPU: one code change swaps ops inside one phase; two changes in
one phase read as one story (the lines say "in PHASE", not which commit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.report.text import short

SHOWN = 3
OPS = ("kernel", "memcpy", "memset", "collective")


@dataclass(frozen=True)
class Replacement:
    phase: str
    device_id: int | None
    removed: list[tuple[str, float]]  # (op name, count per cycle in base)
    added: list[tuple[str, float]]  # (op name, count per cycle in head)
    delta_ms_per_cycle: float  # the rows' summed change
    significant: bool  # one of its rows changed significantly


def replacements(c: Comparison) -> list[Replacement]:
    """Each phase × GPU where ops were both removed and added (see the module docstring)."""
    att = c.attribution
    rows = att.filter(
        pl.col("kind").is_in(OPS) & pl.col("status").is_in(["replaced", "added", "removed"])
    )
    out = []
    for (phase, dev), g in rows.group_by("phase", "device_id", maintain_order=True):
        removed: list[tuple[str, float]] = []
        added: list[tuple[str, float]] = []
        for r in g.iter_rows(named=True):
            if r["status"] == "replaced":
                removed.append((r["base_name"], r["base_count_per_cycle"]))
                added.append((r["head_name"], r["head_count_per_cycle"]))
            elif r["status"] == "removed":
                removed.append((r["name"], r["base_count_per_cycle"]))
            else:
                added.append((r["name"], r["head_count_per_cycle"]))
        if removed and added:
            out.append(
                Replacement(
                    str(phase),
                    None if dev is None else int(dev),
                    removed,
                    added,
                    float(g["delta_ms_per_cycle"].sum()),
                    bool(g["significant"].any()),
                )
            )
    return sorted(out, key=lambda x: (-abs(x.delta_ms_per_cycle), x.phase))


def display(name: str) -> str:
    """An op's name for the story: no `void `, template arguments and parameters as `<…>`."""
    name = re.sub(r"^void\s+", "", name)
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=-1)
    return short(name[:cut] + ("<…>" if name[cut] == "<" else "(…)") if cut > 0 else name, 60)


def _ops(ops: list[tuple[str, float]]) -> str:
    per_name: dict[str, float] = {}
    for name, n in ops:  # one op family may come from several rows: counted once
        per_name[display(name)] = per_name.get(display(name), 0.0) + n
    parts = [f"{round(n)} × {name}" if round(n) > 1 else name for name, n in per_name.items()]
    return " + ".join(parts)


def replacement_lines(c: Comparison, multi_gpu: bool | None = None) -> list[str]:
    """`replaced in PHASE[ on GPU n]: A (removed) → B + 2 × C (added), ±x ms/cycle` for the
    largest SHOWN replacements ([] where none)."""
    multi = len(c.head.devices) > 1 if multi_gpu is None else multi_gpu
    lines = []
    for r in replacements(c)[:SHOWN]:
        gpu = f" on GPU {r.device_id}" if multi and r.device_id is not None else ""
        sig = "" if r.significant else ", not significant"
        lines.append(
            f"replaced in {'the cycle' if r.phase == '(cycle)' else r.phase}{gpu}: {_ops(r.removed)} (removed) → {_ops(r.added)} "
            f"(added), {r.delta_ms_per_cycle:+.3f} ms/cycle{sig}"
        )
    return lines
