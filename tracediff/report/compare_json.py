"""`compare --format json`: a `Comparison` (and the `--whatif` recovery, when asked) as a dict.

Stage: output. Input: a Comparison and optionally the `recover_top` table; output: the dict that
`jsonout.dumps` prints.

JSON schema (stable; `format_version` bumps on incompatible change):
  {"format_version": 1,
   "inputs": {"base": SIDE, "head": SIDE,          # what tracediff decided each side is
              "allow_missing_ranks": bool,         # (parse/decided.py); SIDE: {"line": str,
              "warnings": [str]},                  # "runs", "run_set", "identities": [IDENTITY]}
                                                   # IDENTITY: parse/identity.py, without the
                                                   # fingerprint's sketches; {} from a library call
   "runs": {"base": N, "head": M},                 # runs per side (run sets: several)
   "noise_unit": "run" | "cycle",                  # what the CIs and decisions are over: runs
                                                   # (>= 2 runs a side) or cycles of one run
   "cycle_fallback": str | null,                   # why the whole runs were compared instead of
                                                   # cycles (the cut did not fit or could not be
                                                   # checked to correspond); null: the cut held
   "base"/"head": {"label", "source", "cycles", "cycle_method", "mean_ms", "p50_ms", "p90_ms", "p99_ms",
                   "min_ms", "max_ms", "std_ms", "wall_mean_ms", "devices",
                   "runs", "run_means_ms": [each run's mean cycle time], "run_labels": [str]},
   "delta_ms_per_cycle": {"mean", "ci95": [lo, hi], "pct", "significant",
                          "p_value"},              # across-run test (run sets), else null
   "noise_floor_ms",          # cycle: pooled within-run std of the cycle time; run: base's
                              # between-run std of run means
   "residual_ms_per_cycle", "critical_device",
   "gpu_work_delta_ms_per_cycle", "host_bound_idle_delta_ms_per_cycle",   # the change split by
   "unknown_idle_delta_ms_per_cycle",                                     # part (engine/result.py);
   "what_moved": "gpu_work" | "host_bound_idle" | "both" | null,          # null: host-only or no
                                                                          # change (parts: null)
   "environment": [{"key", "base", "head"}],
   "attribution": [{"id", "kind", "name", "phase", "device", "base_ms_per_cycle", "head_ms_per_cycle",
                    "delta_ms_per_cycle", "ci95": [lo, hi], "significant",
                    "share",            # delta over the sum of every row's |delta|
                    "status",           # matched | mixed | added | removed | renamed | replaced |
                                        # host-side | -
                    "base_name", "head_name",   # renamed / replaced only (else null): the op in
                                                # base, in head
                    "base_count_per_cycle", "head_count_per_cycle",
                    "base_runs", "head_runs",  # runs of each side it occurs in
                    "consistent",       # moved the same way in every run (null: one run a side)
                    "sources": [{"file", "line", "function", "share"}]}],
                                        # sorted by |delta|; sources: launch locations in user
                                        # code, largest share first ([]: no launch stacks;
                                        # engine/sources.py)
   "across_gpus": [{"kind", "name", "phase", "devices", "top_device",      # multi-GPU only, else []:
                    "top_device_delta_ms_per_cycle", "base_ms_per_cycle",  # attribution summed
                    "head_ms_per_cycle", "delta_ms_per_cycle", "ci95",     # over GPUs
                    "significant", "share"}],
   "phases": [{"phase", "delta_ms_per_cycle"}],            # GPU attribution summed per host phase
   "host": [{"phase", "base_ms_per_cycle", "head_ms_per_cycle", "delta_ms_per_cycle", "ci95", "significant"}],
   "collectives": [{"op", "dtype", "bytes", "device", "base_ms_per_cycle", "head_ms_per_cycle", ...}],
   "device_map": [{"base": GPU|null, "head": GPU|null, "by": "given"|"rank"|"device"|"order",
                   "guessed": bool}],  # GPU: {"device_id", "rank", "rank_from", "process_id",
                   # "ordinal", "host", "file"} (parse/ranks/gpus.py); which head GPU met which base GPU
   "clocks": {"base": [RUN], "head": [RUN], "split": bool, "reason": str|null},  # only where a
       # run was joined from several hosts' files (engine/skew.py); RUN: {"run", "hosts": [{"host",
       # "offset_ns"|null, "instances", "offset_spread_ns", "reference"}], "collective_instances",
       # "residual_skew_ns": {"median", "p95", "max"}, "skew_before_correction_median_ns"};
       # split false: the collective wait/transfer split was not made (reason says why)
   "warnings": [str],
   "whatif": [{"contributor_id", "predicted_ms_per_cycle", "recovered_ms_per_cycle"}]}  # --whatif only
NaN and infinite numbers are null (jsonout.clean).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.report.jsonout import ci_pair, clean
from tracediff.report.numbers import settled

COLLECTIVE_FIELDS = (
    "op",
    "dtype",
    "bytes",
    "device_id",
    "base_ms_per_cycle",
    "base_wait_ms_per_cycle",
    "head_ms_per_cycle",
    "head_wait_ms_per_cycle",
    "base_transfer_ms_per_cycle",
    "head_transfer_ms_per_cycle",
    "delta_ms_per_cycle",
)
"""The JSON report's collective fields, in its order (each side's time beside its wait; the
frame's own order is tracediff.runs.schema.DIFF_TABLES["collectives"])."""


def _estimate(r: dict[str, Any]) -> dict[str, Any]:
    """A contributor row's estimate, as both the per-GPU and the summed JSON rows give it."""
    return {
        "base_ms_per_cycle": r["base_ms_per_cycle"],
        "head_ms_per_cycle": r["head_ms_per_cycle"],
        "delta_ms_per_cycle": r["delta_ms_per_cycle"],
        "ci95": ci_pair(r["ci95_low"], r["ci95_high"]),
        "significant": r["significant"],
        "share": clean(r["share"]),
    }


def _split(c: Comparison) -> dict[str, Any]:
    sp = settled(c.change_split)
    return {
        "gpu_work_delta_ms_per_cycle": sp and sp.gpu_work_delta_ms_per_cycle,
        "host_bound_idle_delta_ms_per_cycle": sp and sp.host_bound_idle_delta_ms_per_cycle,
        "unknown_idle_delta_ms_per_cycle": sp and sp.unknown_idle_delta_ms_per_cycle,
        "what_moved": sp and sp.moved,
    }


def _sources(c: Comparison) -> dict[str, list[dict[str, Any]]]:
    """contributor_id → its `sources` JSON list (Comparison.sources' rows, in order)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in c.sources.iter_rows(named=True):
        out.setdefault(r["contributor_id"], []).append(
            {"file": r["file"], "line": r["line"], "function": r["function"], "share": r["share"]}
        )
    return out


def phase_rollup(c: Comparison) -> pl.DataFrame:
    """GPU attribution summed per host phase, by |change| then phase (the same every run);
    no rows for a host-only comparison (its rows are the phases' wall time, not GPU time)."""
    gpu = c.attribution.filter(pl.col("kind") != "host")
    if gpu.height == 0:
        return pl.DataFrame(schema={"phase": pl.String, "delta_ms_per_cycle": pl.Float64})
    return (
        gpu.group_by("phase", maintain_order=True)  # sums in row order: every run alike
        .agg(pl.col("delta_ms_per_cycle").sum())
        .sort(pl.col("delta_ms_per_cycle").abs(), "phase", descending=[True, False])
    )


def to_dict(
    c: Comparison, top: int | None = None, *, whatif: pl.DataFrame | None = None
) -> dict[str, Any]:
    """The JSON document; `top` cuts attribution and across_gpus; `whatif` adds its key."""
    att = c.attribution if top is None else c.attribution.head(top)
    srcs = _sources(c)
    across = c.across_gpus if top is None else c.across_gpus.head(top)
    return {
        "format_version": 1,
        "inputs": c.inputs,
        "runs": {"base": c.base.runs, "head": c.head.runs},
        "noise_unit": c.noise_unit,
        "cycle_fallback": c.cycle_fallback,
        "base": {k: clean(v) for k, v in asdict(c.base).items()},
        "head": {k: clean(v) for k, v in asdict(c.head).items()},
        "delta_ms_per_cycle": {
            "mean": c.delta_ms_per_cycle,
            "ci95": [clean(x) for x in c.delta_ci95],
            "pct": clean(c.delta_pct),
            "significant": c.significant,
            "p_value": clean(c.p_value),
        },
        "noise_floor_ms": c.noise_floor_ms,
        "residual_ms_per_cycle": c.residual_ms_per_cycle,
        "critical_device": c.critical_device,
        **_split(c),
        "environment": [{"key": d.key, "base": d.base, "head": d.head} for d in c.env_diffs],
        "attribution": [
            {
                "id": r["contributor_id"],
                "kind": r["kind"],
                "name": r["name"],
                "phase": r["phase"],
                "device": r["device_id"],
                **_estimate(r),
                "status": r["status"],
                "base_name": r.get("base_name"),
                "head_name": r.get("head_name"),
                "base_count_per_cycle": r["base_count_per_cycle"],
                "head_count_per_cycle": r["head_count_per_cycle"],
                "base_runs": r["base_runs"],
                "head_runs": r["head_runs"],
                "consistent": r["consistent"],
                "sources": srcs.get(r["contributor_id"], []),
            }
            for r in att.iter_rows(named=True)
        ],
        "across_gpus": [
            {
                "kind": r["kind"],
                "name": r["name"],
                "phase": r["phase"],
                "devices": r["devices"],
                "top_device": r["top_device_id"],
                "top_device_delta_ms_per_cycle": r["top_device_delta_ms_per_cycle"],
                **_estimate(r),
            }
            for r in across.iter_rows(named=True)
        ],
        "phases": phase_rollup(c).to_dicts(),
        "host": [
            {
                "phase": r["phase"],
                "base_ms_per_cycle": r["base_ms_per_cycle"],
                "head_ms_per_cycle": r["head_ms_per_cycle"],
                "delta_ms_per_cycle": r["delta_ms_per_cycle"],
                "ci95": ci_pair(r["ci95_low"], r["ci95_high"]),
                "significant": r["significant"],
            }
            for r in c.host.iter_rows(named=True)
        ]
        if c.host.height
        else [],
        "collectives": c.collectives.select(COLLECTIVE_FIELDS)
        .rename({"device_id": "device"})
        .to_dicts()
        if c.collectives.height
        else [],
        "device_map": c.device_map,
        **({"clocks": c.clocks} if c.clocks.get("base") or c.clocks.get("head") else {}),
        "warnings": c.warnings,
        **({"whatif": whatif.to_dicts()} if whatif is not None else {}),
    }
