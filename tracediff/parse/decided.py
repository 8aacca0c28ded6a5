"""What tracediff decided a side is: checked against its data (`decide`), then said in one line
and one JSON object at the top of every output (`describe`).

Stage: parse (after the sides are read and checked). Input: a side's runs (their identities,
parse/identity.py) and whether it is a run set; output: `{"line": "base: 4 runs of one workload
(4 processes on GPU-83132acf…, 2026-12-01 10:50:49–10:53:12 UTC)", ...}`, which the compare
result carries as `inputs` and every format prints first (report/, tui/).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracediff.parse import identity as idn
from tracediff.parse import sides
from tracediff.runs.runfile import Run


def _clock(md: dict[str, Any], ident: dict[str, Any]) -> str:
    """How a joined run's files were put on one clock."""
    offs = md.get("clock_offsets")
    if isinstance(offs, dict) and offs.get("residual_skew_ns"):
        skew = offs["residual_skew_ns"]
        med = skew.get("p95") if isinstance(skew, dict) else skew
        if isinstance(med, (int, float)):
            return f"clocks aligned within {med / 1e3:.0f} µs (p95)"
    if ident["window"]["clock"] != "utc":
        return "each file on its own clock"
    hosts = ident.get("hosts") or []
    if not hosts:
        return "each file's UTC origin (hosts unknown)"
    return "one host's clock" if len(hosts) == 1 else f"{len(hosts)} hosts' clocks"


def _one(md: dict[str, Any], ident: dict[str, Any]) -> str:
    """`1 run (process 545 on GPU-83132acf…, …)` or `1 run of 8 ranks (world size 8, …)`."""
    files = int(ident.get("files") or 1)
    window = idn.window_text([ident])
    if files <= 1:
        pids = ident["process_ids"]
        who = f"process {pids[0]}" if len(pids) == 1 else idn.processes_text([ident])
        return f"1 run ({who} on {idn.gpus_text([ident])}, {window})"
    ranks = [r for r in ident.get("ranks") or [] if r is not None]
    world = ident.get("world_size")
    parts = [f"world size {world}" if world is not None else "world size unknown", "one job"]
    missing = ident.get("missing_ranks") or []
    if missing:
        parts.append(f"{len(missing)} rank(s) missing, allowed")
    parts += [_clock(md, ident), window]
    what = f"{files} ranks" if len(ranks) == files else f"{files} rank files"
    return f"1 run of {what} ({', '.join(parts)})"


def describe(side: str, runs: list[Run], run_set: bool) -> dict[str, Any]:
    """The side's line and JSON object (the module docstring)."""
    for r in runs:
        idn.of(r)  # derived where the run file has none
    return describe_metadata(side, [r.metadata for r in runs], run_set)


def describe_metadata(side: str, metas: list[dict[str, Any]], run_set: bool) -> dict[str, Any]:
    """`describe` from the runs' metadata (each holding its identity)."""
    ids = [m["identity"] for m in metas]
    runs = metas
    if not run_set and len(runs) == 1:
        line = f"{side}: {_one(metas[0], ids[0])}"
    else:
        files = {int(i.get("files") or 1) for i in ids}
        each = f" of {files.pop()} ranks each" if len(files) == 1 and max(files | {1}) > 1 else ""
        line = (
            f"{side}: {len(runs)} run{'s' if len(runs) != 1 else ''}{each} of one workload "
            f"({idn.processes_text(ids)} on {idn.gpus_text(ids)}, {idn.window_text(ids)})"
        )
    return {
        "line": line,
        "runs": len(runs),
        "run_set": run_set,
        "identities": [compact(i) for i in ids],
    }


def compact(ident: dict[str, Any]) -> dict[str, Any]:
    """An identity without its fingerprint's sketches (for the JSON report)."""
    fp = ident["fingerprint"]
    keep = {k: v for k, v in ident.items() if k not in ("fingerprint", "version")}
    return keep | {
        "fingerprint": {
            "gpu_count": fp["gpu_count"],
            "kernel_names": fp["kernel_names"],
            "nvtx_names": fp["nvtx_names"],
        }
    }


@dataclass
class Decided:
    """A side as decided from its data (`decide`): its `Side`, the runs already read to decide
    it (None: not read yet), and what the decision overruled, to say in a warning."""

    side: sides.Side
    runs: list[Any] | None
    warnings: list[str]


def decide(
    path: Path,
    layout: sides.Layout = "auto",
    *,
    say: Callable[[str], None] | None = None,
    allow_missing_ranks: bool = False,
    executor: Any = None,
) -> Decided:
    """The side at `path`, named by `resolve`, checked against its data: a folder whose names say
    one run's ranks is read (it must be, to decide), and where its files are separate runs
    (grouping.py) it is the run set of them, with a warning; refusals propagate."""
    from tracediff.parse import grouping
    from tracediff.parse.load import load

    side = sides.resolve(path, layout)
    only = side.runs[0]
    if side.is_run_set or not only.is_dir() or any(only.glob("*.parquet")):
        return Decided(side, None, [])
    if sides.rank_files(only, layout) is None:
        return Decided(side, None, [])
    try:
        run = load(
            only,
            layout=layout,
            say=say,
            executor=executor,
            allow_missing_ranks=allow_missing_ranks,
        )
    except grouping.NotOneRun as e:
        n = len(e.paths)
        return Decided(
            sides.Side(side.path, tuple(e.paths), True),
            list(e.runs) or None,
            [f"{e.message}: read as a run set of {n} runs (--layout runs says so)"],
        )
    return Decided(side, [run], [])
