"""Render a `Comparison` as text table, markdown, JSON or CSV.

Stage: output. Input: a Comparison; output: a string for stdout.

JSON schema (stable; `format_version` bumps on incompatible change):
  {"format_version": 1,
   "base"/"head": {"label", "source", "cycles", "cycle_method", "mean_ms", "p50_ms", "p90_ms", "p99_ms",
                   "min_ms", "max_ms", "std_ms", "wall_mean_ms", "devices"},
   "delta_ms_per_cycle": {"mean", "ci95": [lo, hi], "pct", "significant"},
   "noise_floor_ms", "residual_ms_per_cycle", "critical_device",
   "environment": [{"key", "base", "head"}],
   "attribution": [{"id", "kind", "name", "phase", "device", "base_ms_per_cycle", "head_ms_per_cycle",
                    "delta_ms_per_cycle", "ci95": [lo, hi], "significant", "share", "status",
                    "base_count_per_cycle", "head_count_per_cycle"}],   # sorted by |delta|
   "across_gpus": [{"kind", "name", "phase", "devices", "top_device",      # multi-GPU only, else []:
                    "top_device_delta_ms_per_cycle", "base_ms_per_cycle",  # attribution summed
                    "head_ms_per_cycle", "delta_ms_per_cycle", "ci95",     # over GPUs
                    "significant", "share"}],
   "phases": [{"phase", "delta_ms_per_cycle"}],            # GPU attribution summed per host phase
   "host": [{"phase", "base_ms_per_cycle", "head_ms_per_cycle", "delta_ms_per_cycle", "ci95", "significant"}],
   "collectives": [{"op", "dtype", "bytes", "device", "base_ms_per_cycle", "head_ms_per_cycle", ...}],
   "warnings": [str]}
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import orjson
import polars as pl

from tracediff.engine.result import Comparison

FORMATS = ("table", "markdown", "json", "csv")


def _f(x: Any) -> Any:
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return x


def _estimate(r: dict[str, Any]) -> dict[str, Any]:
    """A contributor row's estimate, as both the per-GPU and the summed JSON rows give it."""
    return {
        "base_ms_per_cycle": r["base_ms_per_cycle"],
        "head_ms_per_cycle": r["head_ms_per_cycle"],
        "delta_ms_per_cycle": r["delta_ms_per_cycle"],
        "ci95": [_f(r["ci95_low"]), _f(r["ci95_high"])],
        "significant": r["significant"],
        "share": _f(r["share"]),
    }


def to_dict(c: Comparison, top: int | None = None) -> dict[str, Any]:
    att = c.attribution if top is None else c.attribution.head(top)
    return {
        "format_version": 1,
        "base": {k: _f(v) for k, v in asdict(c.base).items()},
        "head": {k: _f(v) for k, v in asdict(c.head).items()},
        "delta_ms_per_cycle": {
            "mean": c.delta_ms_per_cycle,
            "ci95": [_f(x) for x in c.delta_ci95],
            "pct": _f(c.delta_pct),
            "significant": c.significant,
        },
        "noise_floor_ms": c.noise_floor_ms,
        "residual_ms_per_cycle": c.residual_ms_per_cycle,
        "critical_device": c.critical_device,
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
                "base_count_per_cycle": r["base_count_per_cycle"],
                "head_count_per_cycle": r["head_count_per_cycle"],
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
            for r in (c.across_gpus if top is None else c.across_gpus.head(top)).iter_rows(
                named=True
            )
        ],
        "phases": phase_rollup(c).to_dicts(),
        "host": [
            {
                "phase": r["phase"],
                "base_ms_per_cycle": r["base_ms_per_cycle"],
                "head_ms_per_cycle": r["head_ms_per_cycle"],
                "delta_ms_per_cycle": r["delta_ms_per_cycle"],
                "ci95": [_f(r["ci95_low"]), _f(r["ci95_high"])],
                "significant": r["significant"],
            }
            for r in c.host.iter_rows(named=True)
        ]
        if c.host.height
        else [],
        "collectives": c.collectives.rename({"device_id": "device"}).to_dicts()
        if c.collectives.height
        else [],
        "warnings": c.warnings,
        **({"whatif": wi.to_dicts()} if (wi := _whatif(c)) is not None else {}),
    }


def _whatif(c: Comparison) -> pl.DataFrame | None:
    """`compare --whatif`: predicted recovery per top contributor (tracediff.replay.recover_top):
    contributor_id, predicted_ms_per_cycle, recovered_ms_per_cycle. None when not computed."""
    w = (getattr(c, "replay_inputs", None) or {}).get("whatif")
    return w if isinstance(w, pl.DataFrame) else None


def phase_rollup(c: Comparison) -> pl.DataFrame:
    if c.attribution.height == 0:
        return pl.DataFrame(schema={"phase": pl.String, "delta_ms_per_cycle": pl.Float64})
    return (
        c.attribution.group_by("phase")
        .agg(pl.col("delta_ms_per_cycle").sum())
        .sort(pl.col("delta_ms_per_cycle").abs(), "phase", descending=[True, False])
    )


def verdict_lines(c: Comparison) -> list[str]:
    b, h = c.base, c.head
    if math.isnan(c.delta_ci95[0]):
        sig = "no CI with fewer than 2 cycles a side (try --cycle NAME)"
    else:
        sig = "significant" if c.significant else "not significant (within noise)"
    lo, hi = c.delta_ci95
    ci = "-" if math.isnan(lo) else f"[{lo:+.3f}, {hi:+.3f}]"
    lines = [
        f"base  {b.label}: {b.cycles} cycles ({b.cycle_method}), mean {b.mean_ms:.3f} ms  p50 {b.p50_ms:.3f}  p90 {b.p90_ms:.3f}",
        f"head  {h.label}: {h.cycles} cycles ({h.cycle_method}), mean {h.mean_ms:.3f} ms  p50 {h.p50_ms:.3f}  p90 {h.p90_ms:.3f}",
        f"change {c.delta_ms_per_cycle:+.3f} ms/cycle ({c.delta_pct:+.1f} %), 95% CI {ci}: {sig}; "
        f"noise floor {c.noise_floor_ms:.3f} ms; residual {c.residual_ms_per_cycle:+.2e} ms",
    ]
    if c.critical_device is not None and len(h.devices) > 1:
        lines.append(f"critical GPU (finishes last in most head cycles): {c.critical_device}")
    if b.wall_mean_ms is not None and h.wall_mean_ms is not None and h.devices:
        dw = h.wall_mean_ms - b.wall_mean_ms
        lines.append(
            f"host range wall time per cycle: {b.wall_mean_ms:.3f} -> {h.wall_mean_ms:.3f} ms ({dw:+.3f} ms)"
        )
        if abs(dw) > 3 * max(abs(c.delta_ms_per_cycle), c.noise_floor_ms):
            lines.append(
                "the change is on the host side, outside the GPU span of the cycle (data loading,"
                " Python, syncs): see the host phases below"
            )
    return lines


def _short(name: str, width: int) -> str:
    """name cut to width; a trailing " [...]" tag (a collective's wait / transfer part) is kept."""
    if len(name) <= width:
        return name
    head, sep, tag = name.rpartition(" [")
    if sep and tag.endswith("]") and len(tag) + 4 < width // 2:
        return head[: width - len(tag) - 3] + "… [" + tag
    return name[: width - 1] + "…"


def _across_table(c: Comparison, top: int) -> list[str]:
    """Multi-GPU: the contributors summed over GPUs, before the per-GPU rows."""
    a = c.across_gpus
    if a.height == 0:
        return []
    out = [
        "",
        "summed over GPUs (each cycle counted on the GPU that finished last):",
        f"{'kind':<10} {'phase':<12} {'base ms':>9} {'head ms':>9} {'change':>9} {'95% CI':>19} "
        f"{'most on':>12}  name",
    ]
    for r in a.head(top).iter_rows(named=True):
        mark = "*" if r["significant"] else " "
        ci = "-" if math.isnan(r["ci95_low"]) else f"[{r['ci95_low']:+.3f},{r['ci95_high']:+.3f}]"
        most = f"GPU {r['top_device_id']} {r['top_device_delta_ms_per_cycle']:+.3f}"
        out.append(
            f"{r['kind']:<10} {_short(r['phase'], 12):<12} {r['base_ms_per_cycle']:9.3f} "
            f"{r['head_ms_per_cycle']:9.3f} {r['delta_ms_per_cycle']:+9.3f}{mark}{ci:>19} "
            f"{most:>12}  {_short(r['name'], 60)}"
        )
    out += ["", "per GPU:"]
    return out


def render_table(c: Comparison, top: int = 15) -> str:
    out = []
    if c.env_diffs:
        out.append("ENVIRONMENT DIFFERS (check before trusting the diff):")
        out += [f"  {d.key}: {d.base!r} -> {d.head!r}" for d in c.env_diffs]
        out.append("")
    out += verdict_lines(c)
    out += _across_table(c, min(top, 10))
    out.append("")
    out.append(
        f"{'kind':<10} {'GPU':>3} {'phase':<12} {'base ms':>9} {'head ms':>9} {'change':>9} {'95% CI':>19} {'share':>6}  name"
    )
    for r in c.attribution.head(top).iter_rows(named=True):
        mark = "*" if r["significant"] else " "
        share = f"{100 * r['share']:5.0f}%" if r["share"] is not None else "     -"
        ci = "-" if math.isnan(r["ci95_low"]) else f"[{r['ci95_low']:+.3f},{r['ci95_high']:+.3f}]"
        dev = "-" if r["device_id"] is None else str(r["device_id"])
        name = (
            r["name"]
            if r["status"] in ("matched", "-", "host-side")
            else f"{r['name']} ({r['status']})"
        )
        out.append(
            f"{r['kind']:<10} {dev:>3} {_short(r['phase'], 12):<12} {r['base_ms_per_cycle']:9.3f} {r['head_ms_per_cycle']:9.3f} "
            f"{r['delta_ms_per_cycle']:+9.3f}{mark}{ci:>19} {share}  {_short(name, 70)}"
        )
    if c.attribution.height > top:
        rest = c.attribution.slice(top)["delta_ms_per_cycle"].sum()
        out.append(
            f"... {c.attribution.height - top} more contributors, together {rest:+.3f} ms/cycle"
        )
    out.append(
        "* significant: 95% CI excludes 0 and the change is at least 1 µs and 1% of its base time"
    )
    if any(
        s == "host-side" and sig
        for s, sig in zip(c.attribution["status"], c.attribution["significant"], strict=True)
    ):
        out.append(
            "note: host-bound idle follows CPU launch speed and swings from run to run; the CI covers cycle-to-cycle"
            " noise within these two runs only: repeat the capture before blaming the code"
        )
    w = _whatif(c)
    if w is not None and w.height:
        names = dict(zip(c.attribution["contributor_id"], c.attribution["name"], strict=True))
        out.append("")
        out.append(
            "what-if: replay head with one contributor taken from base (tracediff whatif --take ID):"
        )
        for r in w.iter_rows(named=True):
            out.append(
                f"  {r['contributor_id']:>5}  predicted {r['predicted_ms_per_cycle']:9.3f} ms/cycle, "
                f"recovers {r['recovered_ms_per_cycle']:+.3f}  {_short(names.get(r['contributor_id'], ''), 60)}"
            )
    roll = phase_rollup(c)
    if roll.height > 1:
        out.append("")
        out.append(
            "GPU change by phase: "
            + ", ".join(
                f"{r['phase']} {r['delta_ms_per_cycle']:+.3f} ms"
                for r in roll.iter_rows(named=True)
            )
        )
    if c.host.height:
        out.append(
            "host wall time by phase: "
            + ", ".join(
                f"{r['phase']} {r['delta_ms_per_cycle']:+.3f} ms{'*' if r['significant'] else ''}"
                for r in c.host.iter_rows(named=True)
            )
        )
    for warning in c.warnings:
        out.append(f"warning: {warning}")
    return "\n".join(out) + "\n"


def render_markdown(c: Comparison, top: int = 20) -> str:
    out = ["## tracediff", ""]
    if c.env_diffs:
        out += (
            ["**Environment differs:**", ""]
            + [f"- `{d.key}`: `{d.base}` → `{d.head}`" for d in c.env_diffs]
            + [""]
        )
    out += [f"- {line}" for line in verdict_lines(c)] + [""]
    if c.across_gpus.height:
        out += [
            "Summed over GPUs (each cycle counted on the GPU that finished last):",
            "",
            "| kind | phase | base ms | head ms | change ms | 95% CI | sig | most on GPU | name |",
            "|---|---|---:|---:|---:|---|---|---|---|",
        ]
        for r in c.across_gpus.head(min(top, 10)).iter_rows(named=True):
            name = r["name"].replace("|", "\\|")
            out.append(
                f"| {r['kind']} | {r['phase']} | {r['base_ms_per_cycle']:.3f} | "
                f"{r['head_ms_per_cycle']:.3f} | {r['delta_ms_per_cycle']:+.3f} | "
                f"[{r['ci95_low']:+.3f}, {r['ci95_high']:+.3f}] | "
                f"{'yes' if r['significant'] else 'no'} | "
                f"{r['top_device_id']} ({r['top_device_delta_ms_per_cycle']:+.3f}) | "
                f"`{_short(name, 90)}` |"
            )
        out += ["", "Per GPU:", ""]
    out += [
        "| kind | GPU | phase | base ms | head ms | change ms | 95% CI | sig | share | status | name |",
        "|---|---|---|---:|---:|---:|---|---|---:|---|---|",
    ]
    for r in c.attribution.head(top).iter_rows(named=True):
        share = f"{100 * r['share']:.0f}%" if r["share"] is not None else "-"
        name = r["name"].replace("|", "\\|")
        out.append(
            f"| {r['kind']} | {r['device_id'] if r['device_id'] is not None else '-'} | {r['phase']} | {r['base_ms_per_cycle']:.3f} | "
            f"{r['head_ms_per_cycle']:.3f} | {r['delta_ms_per_cycle']:+.3f} | [{r['ci95_low']:+.3f}, {r['ci95_high']:+.3f}] | "
            f"{'yes' if r['significant'] else 'no'} | {share} | {r['status']} | `{_short(name, 90)}` |"
        )
    out += [""] + [f"> warning: {w}" for w in c.warnings]
    return "\n".join(out) + "\n"


def render_csv(c: Comparison) -> str:
    return c.attribution.write_csv()


def render(c: Comparison, fmt: str, top: int = 15) -> str:
    if fmt == "json":
        return (
            orjson.dumps(
                to_dict(c), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
            ).decode()
            + "\n"
        )
    if fmt == "markdown":
        return render_markdown(c, top)
    if fmt == "csv":
        return render_csv(c)
    return render_table(c, top)
