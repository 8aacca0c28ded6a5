"""`tracediff whatif BASE HEAD --take SELECTOR...`: replay HEAD with chosen durations from BASE.

SELECTOR: `all`; a kind (kernel, memcpy, memset, collective, gap); a contributor id from
`tracediff compare` (c3); `name:REGEX`; or a plain pattern (a regex searched in contributor names).

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

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "base", type=Path, help="the good run: run file (.arrow) or any report tracediff parses"
    )
    p.add_argument("head", type=Path, help="the run to replay")
    p.add_argument(
        "--take",
        nargs="+",
        action="extend",
        required=True,
        metavar="SELECTOR",
        help="contributors whose durations come from BASE: all, a kind (kernel, memcpy, memset, "
        "collective, gap), an id from `compare` (c3), name:REGEX, or a pattern",
    )
    p.add_argument(
        "--cycle",
        help="NVTX range that delimits a cycle (as for compare); default: found automatically",
    )
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--top", type=int, default=10, help="critical-path rows shown (default 10)")


def to_dict(w: Any) -> dict[str, Any]:
    import math

    def f(x: Any) -> Any:
        return None if isinstance(x, float) and (math.isnan(x) or math.isinf(x)) else x

    return {
        "format_version": 1,
        "selectors": w.selectors,
        "base_ms_per_cycle": w.base_ms_per_cycle,
        "head_ms_per_cycle": w.head_ms_per_cycle,
        "replayed_head_ms_per_cycle": w.replayed_head_ms_per_cycle,
        "predicted_ms_per_cycle": w.predicted_ms_per_cycle,
        "recovered_ms_per_cycle": w.recovered_ms_per_cycle,
        "recovered_share": f(w.recovered_share),
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


def render_table(w: Any) -> str:
    share = "" if w.recovered_share is None else f" ({100 * w.recovered_share:.0f} % of the change)"
    out = [
        f"base  measured {w.base_ms_per_cycle:.3f} ms/cycle",
        f"head  measured {w.head_ms_per_cycle:.3f} ms/cycle, "
        f"replayed {w.replayed_head_ms_per_cycle:.3f} (model check)",
        f"what-if {w.predicted_ms_per_cycle:.3f} ms/cycle: "
        f"recovers {w.recovered_ms_per_cycle:+.3f} ms/cycle{share}",
        "",
        f"taken from base ({w.selected.height} contributors):",
    ]
    for r in w.selected.head(12).iter_rows(named=True):
        dev = "-" if r["device_id"] is None else str(r["device_id"])
        out.append(
            f"  {r['contributor_id']:>5} {r['kind']:<10} GPU {dev:>2} {r['phase'][:12]:<12} "
            f"{r['delta_ms_per_cycle']:+9.3f}  {r['name'][:70]}"
        )
    if w.selected.height > 12:
        out.append(f"  ... {w.selected.height - 12} more")
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
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    import orjson

    from tracediff.engine.compare import compare
    from tracediff.errors import UsageError
    from tracediff.parse import load
    from tracediff.replay import predict

    if args.top < 1:
        raise UsageError("--top must be >= 1")

    def say(msg: str) -> None:
        if sys.stderr.isatty():
            print(f"tracediff: {msg}…", file=sys.stderr)

    say(f"reading {args.base}")
    base = load(args.base)
    say(f"reading {args.head}")
    head = load(args.head)
    result = compare(base, head, cycle=args.cycle, n_boot=200, progress=say)
    say("replaying")
    w = predict(result, args.take, top=args.top)
    if args.format == "json":
        sys.stdout.write(
            orjson.dumps(
                to_dict(w), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
            ).decode()
            + "\n"
        )
    else:
        sys.stdout.write(render_table(w))
    return 0
