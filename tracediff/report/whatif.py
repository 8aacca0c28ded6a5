"""`tracediff whatif`: a `WhatIf` prediction (tracediff.replay) as a table or JSON.

Stage: output. Input: a WhatIf; output: a string for stdout.

JSON schema (stable; `format_version` bumps on incompatible change):
  {"format_version": 1, "selectors": [str],
   "base_ms_per_cycle", "head_ms_per_cycle": measured mean cycle GPU span (as `compare` reports),
   "replayed_head_ms_per_cycle": HEAD replayed with its own durations (the model's own check),
   "predicted_ms_per_cycle": HEAD replayed with the selected contributors from BASE,
   "recovered_ms_per_cycle": replayed_head - predicted (> 0: faster),
   "recovered_share": recovered / (head - base) (null when the runs are equal),
   "selected": [{"id", "kind", "name", "phase", "device", "delta_ms_per_cycle", "status"}],
   "critical_path": [{"kind", "name", "phase", "ms_per_cycle", "share"}],   # of the predicted cycle
   "cycles": [{"cycle", "measured_ms", "replayed_ms", "predicted_ms"}],
   "sweeps": int, "warnings": [str]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracediff.report.jsonout import clean, dumps
from tracediff.report.numbers import settled
from tracediff.report.text import plural, safe_lines

if TYPE_CHECKING:  # the report never needs the replay at run time, only its result's shape
    from tracediff.replay.types import WhatIf

FORMATS = ("table", "json")
SELECTED_ROWS = 12  # selected contributors listed before "... N more"


def to_dict(w: WhatIf) -> dict[str, Any]:
    return {
        "format_version": 1,
        "selectors": w.selectors,
        "base_ms_per_cycle": w.base_ms_per_cycle,
        "head_ms_per_cycle": w.head_ms_per_cycle,
        "replayed_head_ms_per_cycle": w.replayed_head_ms_per_cycle,
        "predicted_ms_per_cycle": w.predicted_ms_per_cycle,
        "recovered_ms_per_cycle": w.recovered_ms_per_cycle,
        "recovered_share": clean(w.recovered_share),
        "selected": [
            {
                "id": r["contributor_id"],
                "kind": r["kind"],
                "name": r["name"],
                "phase": r["phase"],
                "device": r["device_id"],
                "delta_ms_per_cycle": r["delta_ms_per_cycle"],
                "status": r["status"],
            }
            for r in w.selected.iter_rows(named=True)
        ],
        "critical_path": w.critical_path.to_dicts(),
        "cycles": w.cycles.to_dicts(),
        "sweeps": w.sweeps,
        "warnings": w.warnings,
    }


def render_table(w: WhatIf) -> str:
    share = "" if w.recovered_share is None else f" ({100 * w.recovered_share:.0f} % of the change)"
    out = [
        f"base  measured {w.base_ms_per_cycle:.3f} ms/cycle",
        f"head  measured {w.head_ms_per_cycle:.3f} ms/cycle, "
        f"replayed {w.replayed_head_ms_per_cycle:.3f} (model check)",
        f"what-if {w.predicted_ms_per_cycle:.3f} ms/cycle: "
        f"recovers {w.recovered_ms_per_cycle:+.3f} ms/cycle{share}",
        "",
        f"taken from base ({plural(w.selected.height, 'contributor')}):",
    ]
    for r in w.selected.head(SELECTED_ROWS).iter_rows(named=True):
        dev = "-" if r["device_id"] is None else str(r["device_id"])
        out.append(
            f"  {r['contributor_id']:>5} {r['kind']:<10} GPU {dev:>2} {r['phase'][:12]:<12} "
            f"{r['delta_ms_per_cycle']:+9.3f}  {r['name'][:70]}"
        )
    if w.selected.height > SELECTED_ROWS:
        out.append(f"  ... {w.selected.height - SELECTED_ROWS} more")
    out += [
        "",
        "critical path of the predicted cycle:",
        f"  {'ms/cycle':>9} {'share':>6}  {'kind':<10} {'phase':<12} name",
    ]
    for r in w.critical_path.iter_rows(named=True):
        out.append(
            f"  {r['ms_per_cycle']:9.3f} {100 * r['share']:5.1f}%  {r['kind']:<10} "
            f"{r['phase'][:12]:<12} {r['name'][:70]}"
        )
    out += [f"warning: {x}" for x in w.warnings]
    return safe_lines(out)


def render(w: WhatIf, fmt: str) -> str:
    w = settled(w)  # printed precision: the same bytes on every CPU (report/numbers.py)
    return dumps(to_dict(w)) if fmt == "json" else render_table(w)
