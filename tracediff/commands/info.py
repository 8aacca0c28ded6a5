"""`tracediff info RUN|REPORT|FOLDER [--format json] [--layout runs|ranks|auto]`: what a run (or
each run of a set) holds; a folder of files is read as compare reads it (parse/sides.py).

The summary: tracediff/engine/runinfo.py; the output and its JSON schema: tracediff/report/info.py.
A run set (parse/sides.py) lists its runs with their cycles and kernels: computed by
tracediff/engine/runinfo.py (summarize_set), rendered by tracediff/report/runsetinfo.py.
A several-commit capture folder (`capture --commit A --commit B ... -o DIR`, DIR/runsets.json)
lists each of its run sets so; JSON: {"run_sets": [{"name", "commit", "ref", ...run set info}]}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracediff.commands.common import add_layout, say


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        type=Path,
        help="run file, any report tracediff can parse, or a run-set folder (lists its runs)",
    )
    p.add_argument("--format", choices=["table", "json"], default="table")
    add_layout(p)


def run(args: argparse.Namespace) -> int:
    from tracediff.engine.runinfo import summarize
    from tracediff.parse import load
    from tracediff.parse.decided import decide
    from tracediff.parse.sides import capture_group
    from tracediff.report.info import render

    group = capture_group(args.path)
    if group is not None:  # a several-commit capture folder: each of its run sets
        return _group(group, args.format)
    decided = decide(args.path, args.layout, allow_missing_ranks=args.allow_missing_ranks)
    side = decided.side
    if side.is_run_set:
        from tracediff.engine.runinfo import summarize_set
        from tracediff.report import runsetinfo

        info = summarize_set(side, allow_missing_ranks=args.allow_missing_ranks, layout=args.layout)
        info["warnings"][:0] = decided.warnings
        if args.format == "table":
            for w in dict.fromkeys(info["warnings"]):  # each once: runs of a set repeat them
                say(f"warning: {w}")
        sys.stdout.write(runsetinfo.render(info, args.format))
        return 0
    run = (
        decided.runs[0]
        if decided.runs
        else load(side.runs[0], layout=args.layout, allow_missing_ranks=args.allow_missing_ranks)
    )
    info = summarize(run)
    if args.format == "table":  # JSON holds them; the table's reader sees them on stderr
        for w in info["warnings"]:
            say(f"warning: {w}")
        if info["run_file_checksums"] is False:
            say(
                f"warning: {args.path}: an older run file without checksums: damage "
                "to it cannot be detected (parse the report again to add them)"
            )
    sys.stdout.write(render(info, args.format))
    return 0


def _group(group: list[tuple[str, Path]], fmt: str) -> int:
    """Each run set of a several-commit capture folder, in its index's order."""
    from tracediff.engine.runinfo import summarize_set
    from tracediff.parse.sides import resolve
    from tracediff.report import runsetinfo
    from tracediff.report.jsonout import dumps
    from tracediff.report.text import safe
    from tracediff.runs.runset import read_group_index

    sets = read_group_index(group[0][1].parent).get("sets", {})
    infos = []
    for name, folder in group:
        info = summarize_set(resolve(folder, "runs"))
        meta = sets.get(name) or {}
        infos.append({"name": name, "commit": meta.get("commit"), "ref": meta.get("ref"), **info})
    if fmt == "json":
        sys.stdout.write(dumps({"run_sets": infos}))
        return 0
    for w in dict.fromkeys(w for info in infos for w in info["warnings"]):
        say(f"warning: {w}")
    parts = [
        f"{len(infos)} run sets (a several-commit capture; compare two of them: "
        f"tracediff compare {group[0][1]} {group[-1][1]})\n"
    ]
    for info in infos:
        commit = (info["commit"] or "-")[:12]
        parts.append(f"\n[{safe(info['name'])}] commit {commit} (ref {safe(str(info['ref']))})\n")
        parts.append(runsetinfo.render(info, "table"))
    sys.stdout.write("".join(parts))
    return 0
