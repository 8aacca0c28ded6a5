"""`compare --format table|markdown|csv`: a `Comparison` as text for a terminal, a PR, a sheet.

Stage: output. Input: a Comparison (and optionally the `--whatif` recovery table, columns
contributor_id, predicted_ms_per_cycle, recovered_ms_per_cycle); output: a string for stdout.
The CSV is the attribution table as it is (its columns are documented in engine/result.py).
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.report.compare_json import phase_rollup
from tracediff.report.numbers import settle, settle_frame
from tracediff.report.text import (
    ci_cell,
    frame_label,
    op_label,
    plural,
    safe,
    safe_lines,
    short,
)
from tracediff.report.verdict import verdict_lines

if TYPE_CHECKING:  # tracediff.suspects is imported when a --repo asks for suspects
    from tracediff.suspects import Suspects

SIGNIFICANT = "95% CI excludes 0 and the change is at least 1 µs and 1% of its base time"
STATUSES = {
    "matched": "in both runs, as often per cycle",
    "mixed": "in both, a different number of times per cycle",
    "added": "in head only",
    "removed": "in base only",
    "renamed": "the same op under a new name in the same place of the cycle (a re-tune: new tile shapes or widths; base → head)",
    "replaced": "another op in the same place of the cycle (base → head)",
    "host-side": "GPU idle because the CPU launched late",
    "-": "other idle time, stream overlap",
}
"""Every value of the attribution's `status` column, as the legend and the README define it."""
NOISE_FLOOR = (
    "noise floor: how much the cycle time varies from cycle to cycle within one run (pooled std);"
    " a change far below it is hard to tell from chance"
)
NOISE_FLOOR_RUNS = (
    "noise floor: how much the mean cycle time varies from run to run (the between-run std of"
    " base's run means); a change far below it is hard to tell from chance"
)
ID = "id: the contributor's id, as `tracediff whatif BASE HEAD --take ID` takes it"
PARTS = (
    "GPU work = kernels, copies, memsets, collectives, stream overlap and idle waiting on a"
    " dependency; host-bound idle = GPU idle because the CPU launched late (host-bound and"
    " launch-latency gaps)"
)
SHARE = (
    "share: the row's change over the sum of every row's |change| (rows that grew and rows that"
    " shrank do not cancel: the sizes of all shares add up to 100%)"
)
LEGEND_WIDTH = 100


def legend(mark: str = "* significant", noise_unit: str = "cycle") -> list[str]:
    """The words of the report, one definition per item (the table wraps them); `mark`: how
    the report marks a significant row; `noise_unit`: the comparison's (Comparison.noise_unit:
    the noise floor of run sets is between runs, of one run a side within it)."""
    status = "status: " + "; ".join(f"{k} = {v}" for k, v in STATUSES.items())
    floor = NOISE_FLOOR_RUNS if noise_unit == "run" else NOISE_FLOOR
    return [f"{mark}: {SIGNIFICANT}", ID, PARTS, SHARE, status, floor]


def _wrapped(items: list[str]) -> list[str]:
    return [
        line
        for item in items
        for line in textwrap.wrap(
            item, LEGEND_WIDTH, subsequent_indent="  ", break_on_hyphens=False
        )
    ]


def renamed_names(c: Comparison) -> dict[str, dict[str, str]]:
    """label -> {base_name, head_name, status} of the renamed or replaced contributors (for the summed-over-GPU
    rows, which carry the label only)."""
    if "base_name" not in c.attribution.columns:
        return {}
    r = c.attribution.filter(pl.col("base_name").is_not_null())
    cols = ("name", "base_name", "head_name", "status")
    return {
        row["name"]: {k: row[k] for k in cols[1:]}
        for row in r.select(cols)
        .unique("name", keep="first", maintain_order=True)
        .iter_rows(named=True)
    }


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
    two = renamed_names(c)
    for r in a.head(top).iter_rows(named=True):
        mark = "*" if r["significant"] else " "
        ci = ci_cell(r["ci95_low"], r["ci95_high"])
        most = f"GPU {r['top_device_id']} {r['top_device_delta_ms_per_cycle']:+.3f}"
        out.append(
            f"{r['kind']:<10} {short(r['phase'], 12):<12} {r['base_ms_per_cycle']:9.3f} "
            f"{r['head_ms_per_cycle']:9.3f} {r['delta_ms_per_cycle']:+9.3f}{mark}{ci:>19} "
            f"{most:>12}  {op_label({**r, **two.get(r['name'], {})}, 60, status=False)}"
        )
    out += ["", "per GPU:"]
    return out


def _whatif_lines(c: Comparison, w: pl.DataFrame | None) -> list[str]:
    if w is None or w.height == 0:
        return []
    names = dict(zip(c.attribution["contributor_id"], c.attribution["name"], strict=True))
    out = [
        "",
        "what-if: replay head with one contributor taken from base (tracediff whatif --take ID):",
    ]
    for r in w.iter_rows(named=True):
        out.append(
            f"  {r['contributor_id']:>5}  predicted {r['predicted_ms_per_cycle']:9.3f} ms/cycle, "
            f"recovers {r['recovered_ms_per_cycle']:+.3f}  {short(names.get(r['contributor_id'], ''), 60)}"
        )
    return out


FROM_WIDTH = 34
"""The table's `launched from` column (runs with launch stacks only)."""


def launched_from(c: Comparison, width: int) -> dict[str, str]:
    """contributor_id → its largest launch location in user code (`…/layers.py:18 mlp`), with
    ` +N` when N other locations share its time; runs without stacks: empty."""
    if not c.sources.height:
        return {}
    out: dict[str, str] = {}
    for cid, g in c.sources.group_by("contributor_id", maintain_order=True):
        r = g.row(0, named=True)
        more = f" +{g.height - 1}" if g.height > 1 else ""
        out[str(cid[0])] = (
            frame_label(r["file"], r["line"], r["function"], width - len(more)) + more
        )
    return out


def decided_lines(c: Comparison) -> list[str]:
    """What tracediff decided each side is (parse/decided.py): one line a side; none where the
    caller set no `inputs` (a library compare)."""
    return [str(c.inputs[s]["line"]) for s in ("base", "head") if s in c.inputs]


def render_table(
    c: Comparison,
    top: int = 15,
    *,
    whatif: pl.DataFrame | None = None,
    suspects: Suspects | None = None,
) -> str:
    out = decided_lines(c)
    if c.env_diffs:
        out.append("ENVIRONMENT DIFFERS (check before trusting the diff):")
        out += [f"  {d.key}: {d.base!r} -> {d.head!r}" for d in c.env_diffs]
        out.append("")
    out += verdict_lines(c)
    out += _across_table(c, min(top, 10))
    out.append("")
    src = launched_from(c, FROM_WIDTH)
    col = f"{'launched from':<{FROM_WIDTH}}  " if src else ""
    out.append(
        f"{'id':>4} {'kind':<10} {'GPU':>3} {'phase':<12} {'base ms':>9} {'head ms':>9} {'change':>9} {'95% CI':>19} {'share':>6}  {col}name"
    )
    for r in c.attribution.head(top).iter_rows(named=True):
        mark = "*" if r["significant"] else " "
        share = f"{100 * r['share']:5.0f}%" if r["share"] is not None else "     -"
        ci = ci_cell(r["ci95_low"], r["ci95_high"])
        dev = "-" if r["device_id"] is None else str(r["device_id"])
        out.append(
            f"{r['contributor_id']:>4} {r['kind']:<10} {dev:>3} {short(r['phase'], 12):<12} {r['base_ms_per_cycle']:9.3f} {r['head_ms_per_cycle']:9.3f} "
            f"{r['delta_ms_per_cycle']:+9.3f}{mark}{ci:>19} {share}  "
            + (f"{src.get(r['contributor_id'], '-'):<{FROM_WIDTH}}  " if src else "")
            + op_label(r, 70)
        )
    if c.attribution.height > top:
        rest = settle(float(c.attribution.slice(top)["delta_ms_per_cycle"].sum()))
        out.append(
            f"... {plural(c.attribution.height - top, 'more contributor')}, together {rest:+.3f} ms/cycle"
        )
    if suspects is not None:
        from tracediff.report.suspects import suspects_lines

        out += suspects_lines(suspects) + [""]
    out += _wrapped(legend(noise_unit=c.noise_unit))
    if any(
        s == "host-side" and sig
        for s, sig in zip(c.attribution["status"], c.attribution["significant"], strict=True)
    ):
        out.append(
            "note: host-bound idle follows CPU launch speed and swings from run to run; the CI covers cycle-to-cycle"
            " noise within these two runs only: repeat the capture before blaming the code"
        )
    out += _whatif_lines(c, whatif)
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
    out += device_map_lines(c) + clock_lines(c.clocks)
    for warning in c.warnings:
        out.append(f"warning: {warning}")
    return safe_lines(out)


def device_map_lines(c: Comparison) -> list[str]:
    """`GPUs matched by rank: base GPU 0 (rank 0) = head GPU 1 (rank 0), ...` where a GPU was
    compared with one of another id, or one side lacks it (parse/ranks/gpus.py); else nothing."""
    pairs = c.device_map

    def same(p: dict[str, Any]) -> bool:
        b, h = p["base"], p["head"]
        return b is not None and h is not None and b["device_id"] == h["device_id"]

    if all(same(p) and not p["guessed"] for p in pairs):
        return []

    def one(g: dict[str, Any] | None) -> str:
        if g is None:
            return "-"
        r = f" (rank {g['rank']})" if g.get("rank") is not None else ""
        o = g.get("ordinal")
        dev = f" on device {o}" if o is not None and o != g["device_id"] else ""
        return f"GPU {g['device_id']}{r}{dev}"

    by = pairs[0]["by"] + (", a guess" if pairs[0]["guessed"] else "")
    return [
        f"GPUs matched by {by}: "
        + ", ".join(f"base {one(p['base'])} = head {one(p['head'])}" for p in pairs)
    ]


def clock_lines(clocks: dict[str, Any]) -> list[str]:
    """`host clocks: base node-1 -5.300 ms vs node-0 (36 collectives), residual skew 0.3 us p95;
    head ...` for runs joined across hosts; else nothing."""
    parts = []
    for side in ("base", "head"):
        for r in clocks.get(side, []):
            hosts = r["hosts"]
            ref = next((h["host"] for h in hosts if h.get("reference")), "?")
            offs = ", ".join(
                f"{h['host']} "
                + (f"{h['offset_ns'] / 1e6:+.3f} ms" if h["offset_ns"] is not None else "unknown")
                for h in hosts
                if not h.get("reference")
            )
            p95 = (r.get("residual_skew_ns") or {}).get("p95")
            skew = f"residual skew {p95 / 1e3:.1f} us p95" if p95 is not None else "no skew"
            parts.append(
                f"{side} {offs} vs {ref} ({r['collective_instances']} collectives), {skew}"
            )
    return [f"host clocks: {'; '.join(parts)}"] if parts else []


def render_markdown(c: Comparison, top: int = 20, *, suspects: Suspects | None = None) -> str:
    out = ["## tracediff", ""]
    out += [f"- {safe(line)}" for line in decided_lines(c)] + ([""] if c.inputs else [])
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
        two = renamed_names(c)
        for r in c.across_gpus.head(min(top, 10)).iter_rows(named=True):
            name = op_label({**r, **two.get(r["name"], {})}, 90, status=False).replace("|", "\\|")
            out.append(
                f"| {r['kind']} | {r['phase']} | {r['base_ms_per_cycle']:.3f} | "
                f"{r['head_ms_per_cycle']:.3f} | {r['delta_ms_per_cycle']:+.3f} | "
                f"[{r['ci95_low']:+.3f}, {r['ci95_high']:+.3f}] | "
                f"{'yes' if r['significant'] else 'no'} | "
                f"{r['top_device_id']} ({r['top_device_delta_ms_per_cycle']:+.3f}) | "
                f"`{name}` |"
            )
        out += ["", "Per GPU:", ""]
    src = launched_from(c, 60)
    out += [
        "| id | kind | GPU | phase | base ms | head ms | change ms | 95% CI | sig | share | status | "
        + ("launched from | " if src else "")
        + "name |",
        "|---|---|---|---|---:|---:|---:|---|---|---:|---|" + ("---|" if src else "") + "---|",
    ]
    for r in c.attribution.head(top).iter_rows(named=True):
        share = f"{100 * r['share']:.0f}%" if r["share"] is not None else "-"
        name = op_label(r, 90, status=False).replace("|", "\\|")
        if src:
            where = src.get(r["contributor_id"], "-").replace("|", "\\|")
            name = f"{where} | `{name}"
        else:
            name = f"`{name}"
        out.append(
            f"| {r['contributor_id']} | {r['kind']} | {r['device_id'] if r['device_id'] is not None else '-'} | {r['phase']} | {r['base_ms_per_cycle']:.3f} | "
            f"{r['head_ms_per_cycle']:.3f} | {r['delta_ms_per_cycle']:+.3f} | [{r['ci95_low']:+.3f}, {r['ci95_high']:+.3f}] | "
            f"{'yes' if r['significant'] else 'no'} | {share} | {r['status']} | {name}` |"
        )
    if suspects is not None:
        from tracediff.report.suspects import suspects_markdown

        out += suspects_markdown(suspects)
    out += [""] + [f"- {item}" for item in legend("sig yes", c.noise_unit)] + [""]
    out += [f"> {line}" for line in device_map_lines(c) + clock_lines(c.clocks)]
    out += [f"> warning: {w}" for w in c.warnings]
    return safe_lines(out)


def render_csv(c: Comparison) -> str:
    """The attribution table; text cells made `safe` (a CSV cell may hold a newline, but not
    an escape sequence for whoever `cat`s the file)."""
    att = settle_frame(c.attribution)
    fixes = []
    for col, dtype in att.schema.items():
        if dtype not in (pl.String, pl.Categorical):
            continue
        values = att[col].cast(pl.String).unique().drop_nulls().to_list()
        bad = {v: safe(v) for v in values if not v.isprintable()}
        if bad:
            fixes.append(pl.col(col).cast(pl.String).replace(bad))
    return (att.with_columns(fixes) if fixes else att).write_csv()
