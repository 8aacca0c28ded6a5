"""`tracediff export RUN... --parquet DIR [--force]`: every table of the runs as a Parquet dataset.

Inputs are run files, any report `tracediff parse` reads, or run-set folders (parse/sides.py),
each of which stands for its runs: `run=<set>-<run>` partitions, e.g. `run=good-run-01`; a
several-commit capture folder (DIR/runsets.json) stands for every run of each of its run sets.
stdout: rows written per table;
stderr: progress (on a terminal). docs/parquet-schema.md describes the folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracediff.commands.common import add_allow_missing, progress, say


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="run file (.arrow), any report tracediff parses, or a run-set folder (each of its "
        "runs); several go into one dataset",
    )
    p.add_argument(
        "--parquet",
        type=Path,
        required=True,
        metavar="DIR",
        help="folder to write: DIR/<table>/run=<label>/[device_id=<N>/]part-0.parquet",
    )
    p.add_argument("--force", action="store_true", help="replace DIR if it is an earlier export")
    add_allow_missing(p)


def run(args: argparse.Namespace) -> int:
    from tracediff.base.outputs import refuse_inputs
    from tracediff.export.parquet import export_runs
    from tracediff.parse.decided import decide
    from tracediff.parse.sides import capture_group

    paths: list[Path] = []
    labels: list[str | None] = []
    sets: list[tuple[Path, list[int], bool]] = []
    for given in args.runs:
        group = capture_group(given)  # a several-commit capture folder: each of its run sets
        for folder in [f for _, f in group] if group is not None else [given]:
            decided = decide(folder, allow_missing_ranks=args.allow_missing_ranks)
            side = decided.side
            for w in decided.warnings:
                say(f"warning: {w}")
            if side.is_run_set:
                at = len(paths)
                sets.append((side.path, list(range(at, at + len(side.runs))), side.indexed))
            paths += side.runs
            labels += [member_label(side.path, r) if side.is_run_set else None for r in side.runs]
    # the folders given and every run in them: replacing DIR would delete them
    refuse_inputs(args.parquet, [*args.runs, *paths], "--parquet folder")

    info = export_runs(
        paths,
        args.parquet,
        force=args.force,
        progress=progress,
        labels=labels,
        sets=sets,
        allow_missing_ranks=args.allow_missing_ranks,
    )
    tables = info["tables"]
    width = max(len(t) for t in tables)
    lines = [f"{'table':<{width}}  {'rows':>12}"]
    lines += [f"{t:<{width}}  {n:>12,}" for t, n in tables.items()]
    sys.stdout.write("\n".join(lines) + "\n")
    print(f"tracediff: wrote {len(info['runs'])} run(s) to {args.parquet}", file=sys.stderr)
    return 0


def member_label(folder: Path, run: Path) -> str:
    """A run set's run as `<set>-<run>`: the run's capture folder, else its file name's stem."""
    set_name = folder.resolve().name
    inner = run.parent if run.parent.resolve() != folder.resolve() else run
    stem = inner.name.split(".")[0] if inner == run else inner.name
    return f"{set_name}-{stem}"
