"""Move modules to their new homes and rewrite every reference to them (issue 29's layout).

Plan: MOVES below, the one table of old module -> new module. A run (1) `git mv`s each moved
file whose old path exists and whose new one does not (a package gets its `__init__.py` made
when missing), then (2) rewrites, in every tracked or untracked-but-not-ignored text file of the
repository, each reference to an old module: `import a.b`, `from a import b` (split and aliased
so the local name stays), relative imports that reach a moved module (made absolute), dotted
names in strings (`"capture.bisect_pool.run"`, `tracediff.parse._kineto_scan`), and file paths
(`capture/bisect_ends.py`, `tracediff/parse/_kineto_scan.c`, `.pyi`). Test data, samples, golden
outputs and snapshots are never touched. The changed Python files are then sorted and formatted
by ruff (imports only move, so only the lines rewritten change).

Rerun it after rebasing onto a move, to fix code written against the old names:

    .venv/bin/python tools/relayout.py --rewrite-only      # rewrite references, move nothing
    .venv/bin/python tools/relayout.py --check             # list leftover old names, exit 1 if any

The table only grows: a landed move stays in it, so a branch that is several moves behind is
rewritten in one call.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

# old module -> new module, in the order the moves landed. A C extension module is named like a
# Python one; its .c and .pyi files move with it (see SOURCE_SUFFIXES).
MOVES: dict[str, str] = {
    # issue 29, step 2: bisect leaves capture/ for a package of its own, prefix dropped
    "capture.bisect": "tracediff.bisect.bisection",
    "capture.bisect_ends": "tracediff.bisect.ends",
    "capture.bisect_follow": "tracediff.bisect.follow",
    "capture.bisect_order": "tracediff.bisect.order",
    "capture.bisect_pool": "tracediff.bisect.pool",
    "capture.bisect_rest": "tracediff.bisect.rest",
    "capture.bisect_result": "tracediff.bisect.result",
    "capture.bisect_search": "tracediff.bisect.search",
    "capture.bisect_share": "tracediff.bisect.share",
    "capture.bisect_state": "tracediff.bisect.state",
    "capture.bisect_step": "tracediff.bisect.step",
    # step 3: the package root's loose modules into base/ (leaves) and runs/ (the run contract)
    "tracediff.errors": "tracediff.base.errors",
    "tracediff.settings": "tracediff.base.settings",
    "tracediff.inert": "tracediff.base.inert",
    "tracediff.outputs": "tracediff.base.outputs",
    "tracediff.segscan": "tracediff.base.segscan",
    "tracediff.daskclient": "tracediff.base.daskclient",
    # (not parse/nsys/: importing that package loads polars, and capture runs without it)
    "tracediff.nsys_tool": "tracediff.base.nsys_tool",
    "tracediff.schema": "tracediff.runs.schema",
    "tracediff.stackdomain": "tracediff.runs.stackdomain",
    "tracediff.runfile": "tracediff.runs.runfile",
    "tracediff.runfooter": "tracediff.runs.runfooter",
    "tracediff.runset": "tracediff.runs.runset",
    # ... info's halves: a run's summary is computed (engine), a run set's is rendered (report)
    "tracediff.runinfo": "tracediff.engine.runinfo",
    "tracediff.runsetinfo": "tracediff.report.runsetinfo",
    # ... parse/ in folders, each C module beside its reader
    "tracediff.parse._sqlite_pages": "tracediff.parse.nsys._sqlite_pages",
    "tracediff.parse._kineto_scan": "tracediff.parse.kineto._kineto_scan",
    "tracediff.parse._stack_walk": "tracediff.parse.stacks._stack_walk",
    "tracediff.parse.launch_stacks": "tracediff.parse.stacks.launch_stacks",
    "tracediff.parse.join": "tracediff.parse.ranks.join",
    "tracediff.parse.clocks": "tracediff.parse.ranks.clocks",
    "tracediff.parse.gpus": "tracediff.parse.ranks.gpus",
    "tracediff.parse.ranknames": "tracediff.parse.ranks.ranknames",
    # step 4: the engine's subsystems as folders. Named cycle/ and statistics/, not cycles/ and
    # stats/: an old module's name must never be a new package's, or a rerun would take
    # `tracediff.engine.cycles.period` for the old module's attribute.
    # ... cycle/: cutting each run into cycles, and the cycles of both sides aligned
    "tracediff.engine.segmentation": "tracediff.engine.cycle.segmentation",
    "tracediff.engine.cycles": "tracediff.engine.cycle.find",
    "tracediff.engine.period": "tracediff.engine.cycle.period",
    "tracediff.engine.ranges": "tracediff.engine.cycle.ranges",
    "tracediff.engine.sequences": "tracediff.engine.cycle.sequences",
    "tracediff.engine.correspond": "tracediff.engine.cycle.correspond",
    "tracediff.engine.align": "tracediff.engine.cycle.align",
    # ... statistics/: attribution, the tests and the decisions
    "tracediff.engine.attribute": "tracediff.engine.statistics.attribute",
    "tracediff.engine.stats": "tracediff.engine.statistics.stats",
    "tracediff.engine.runstats": "tracediff.engine.statistics.runstats",
    "tracediff.engine.blocked": "tracediff.engine.statistics.blocked",
    "tracediff.engine.split": "tracediff.engine.result",  # via statistics.split (below)
    "tracediff.engine.verdict": "tracediff.engine.statistics.verdict",
    "tracediff.engine.gate": "tracediff.engine.statistics.gate",
    # ... pipeline/: the per-file map/reduce, in this process or on a Dask cluster
    "tracediff.engine.reduce": "tracediff.engine.pipeline.reduce",
    "tracediff.engine.join": "tracediff.engine.pipeline.join",
    "tracediff.engine.rankrun": "tracediff.engine.pipeline.rankrun",
    "tracediff.engine.rankunit": "tracediff.engine.pipeline.rankunit",
    "tracediff.engine.rankmerge": "tracediff.engine.pipeline.rankmerge",
    "tracediff.engine.rankcache": "tracediff.engine.pipeline.rankcache",
    "tracediff.engine.executor": "tracediff.engine.pipeline.executor",
    "tracediff.engine.cluster": "tracediff.engine.pipeline.cluster",
    "tracediff.engine.eventslices": "tracediff.engine.pipeline.eventslices",
    # carves: the change split is computed by the result itself (Comparison.change_split)
    "tracediff.engine.statistics.split": "tracediff.engine.result",
    # session 12: no two modules of one name doing different things (issue 29's repeated basenames)
    "tracediff.parse.ranks.join": "tracediff.parse.ranks.combine",
    "tracediff.engine.host": "tracediff.engine.hostonly",
    "tracediff.replay.host": "tracediff.replay.syncs",
}

# Docstrings of packages the moves create (only written when the package is new).
NEW_PACKAGES: dict[str, str] = {
    "tracediff.bisect": (
        "`tracediff bisect`: which first-parent commit between GOOD and BAD made the workload"
        " slower.\n\nIt captures through `capture/` and compares through the engine, so it lives"
        " above both.\n`bisection.py` holds the state and rules, `search.py` drives them.\n"
    ),
    "tracediff.base": (
        "The leaves of tracediff: errors, settings, output files, the Dask client, small column"
        " helpers.\n\nThey import nothing of tracediff but each other.\n"
    ),
    "tracediff.runs": (
        "The Run contract: the Arrow schemas of every table, the run file (format, footer,"
        " checksums)\nand the run-set index. Imports only tracediff.base.\n"
    ),
    "tracediff.parse.stacks": (
        "Launch stacks: the host call stack of each GPU launch, walked by a C module"
        " (_stack_walk.c)\nover the nsys and Kineto readers' stack tables.\n"
    ),
    "tracediff.engine.cycle": (
        "Cycles: each run cut into the repetitions of its loop (by a marker, host ranges or the"
        " repeating\nop sequence), both sides checked to be the same loop, and every op aligned"
        " to a slot of a cycle\ntemplate. The rest of the engine reads its cycles from here.\n"
    ),
    "tracediff.engine.statistics": (
        "Statistics and decisions: the change attributed to contributors, tested per cycle and"
        " per run\n(or capture round), split into GPU work and host idle, and the verdict and"
        " CI gate drawn from it.\n"
    ),
    "tracediff.engine.pipeline": (
        "The per-file map/reduce: each rank file read, cut and reduced to small tables"
        " (reduce.py,\nrankunit.py), in this process or on a Dask cluster (executor.py,"
        " cluster.py), and each side's\nreduced files joined into one Comparison (join.py)."
        " eventslices.py rebuilds a GPU's events on\ndemand for the TUI.\n"
    ),
    "tracediff.parse.ranks": (
        "A run of several rank files made one: their rank names, GPUs and clocks, and the"
        " join.\n\nranknames.py names each file's rank, gpus.py maps devices, clocks.py aligns"
        " the ranks' clocks on\ntheir collectives, and combine.py makes one run of them.\n"
    ),
}

# Files of a module, by kind: a Python module, or a C extension with its type stub.
SOURCE_SUFFIXES = (".py", ".c", ".pyi")
TEXT_SUFFIXES = {".py", ".pyi", ".md", ".toml", ".sh", ".c", ".cfg", ".ini", ".yml", ".yaml"}
TEXT_NAMES = {"Makefile", "run"}
NEVER_TOUCHED = (
    "tests/data/",
    "samples/",
    "tests/golden/expected/",
    "tests/tui/__snapshots__/",
    "docs/layout.md",  # names old modules on purpose
)
SELF = "tools/relayout.py"
# Old module names that are also data: the run-set index's "kind" is "tracediff.runset", in
# every runset.json written. Quoted exactly so, they are kept.
DATA_NAMES = {"tracediff.runset"}


def module_path(module: str) -> str:
    return module.replace(".", "/")


def repo_root() -> Path:
    out = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def text_files(root: Path) -> list[Path]:
    """Tracked files and untracked files git does not ignore, that hold text we may rewrite."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    files = []
    for rel in sorted(set(filter(None, listed))):
        if rel == SELF or rel.startswith(NEVER_TOUCHED):
            continue
        path = root / rel
        if (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES) and path.is_file():
            files.append(path)
    return files


# --- moving -------------------------------------------------------------------------------------


def git_mv(root: Path, old: Path, new: Path) -> None:
    new.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "mv", str(old), str(new)], cwd=root, check=True)
    print(f"moved {old.relative_to(root)} -> {new.relative_to(root)}")


def ensure_package(root: Path, package: str) -> None:
    """Every folder from the root package down to PACKAGE has an __init__.py."""
    parts = package.split(".")
    for depth in range(1, len(parts) + 1):
        init = root / Path(*parts[:depth]) / "__init__.py"
        if init.exists():
            continue
        init.parent.mkdir(parents=True, exist_ok=True)
        doc = NEW_PACKAGES.get(".".join(parts[:depth]), f"{'.'.join(parts[:depth])}.\n")
        init.write_text(f'"""{doc}"""\n')
        subprocess.run(["git", "add", str(init)], cwd=root, check=True)
        print(f"made {init.relative_to(root)}")


def move_all(root: Path) -> dict[Path, str]:
    """`git mv` each file of a moved module; returns the new paths with their old modules."""
    moved: dict[Path, str] = {}
    for old, new in MOVES.items():
        for suffix in SOURCE_SUFFIXES:
            src = root / (module_path(old) + suffix)
            dst = root / (module_path(new) + suffix)
            if not src.exists():
                continue
            if dst.exists():
                sys.exit(f"relayout: both {src} and {dst} exist; merge them by hand first")
            ensure_package(root, new.rpartition(".")[0])
            git_mv(root, src, dst)
            moved[dst] = old
    return moved


# --- rewriting ----------------------------------------------------------------------------------

# A dotted module name, or a path to one of its files, standing alone: not part of a longer name.
_ALTERNATION = "|".join(re.escape(old) for old in sorted(MOVES, key=len, reverse=True))
DOTTED = re.compile(rf"(?<![\w.])({_ALTERNATION})(?!\w)")
_PATH_ALTERNATION = "|".join(
    re.escape(module_path(old)) for old in sorted(MOVES, key=len, reverse=True)
)
# `capture/bisect_ends.py`, `tracediff/parse/_kineto_scan.c`, or `capture/bisect_step.decide`
PATHS = re.compile(rf"(?<![\w./])({_PATH_ALTERNATION})(\.pyi|\.py|\.c|)(?![\w/])")


# The same path written from inside the package (`parse/gpus.py`, `engine/cycles.py`), as
# docstrings name their neighbours: only with a folder and a file suffix, so that a bare
# `schema.py` (there are three) is never taken for one.
SHORT = {
    module_path(old).removeprefix("tracediff/"): old
    for old in MOVES
    if old.startswith("tracediff.") and old.count(".") >= 2
}
_SHORT_ALTERNATION = "|".join(re.escape(short) for short in sorted(SHORT, key=len, reverse=True))
SHORT_PATHS = re.compile(rf"(?<![\w./])({_SHORT_ALTERNATION})(\.pyi|\.py|\.c)(?![\w/])")


def renamed(module: str) -> str:
    """MODULE's new name (MODULE itself, or one under it, may have moved)."""
    if module in MOVES:
        return MOVES[module]
    for old, new in MOVES.items():
        if module.startswith(old + "."):
            return new + module[len(old) :]
    return module


def file_module(root: Path, path: Path) -> tuple[str, bool]:
    """The module a .py file is, and whether it is a package's __init__."""
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    is_init = parts[-1] == "__init__"
    if is_init:
        parts = parts[:-1]
    return ".".join(parts), is_init


def absolute(node: ast.ImportFrom, module: str, is_init: bool) -> str:
    """The absolute module that a (possibly relative) `from X import` names."""
    if not node.level:
        return node.module or ""
    package = module if is_init else module.rpartition(".")[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def rewrite_imports(root: Path, path: Path, text: str, was: str | None) -> str:
    """Rewrite `from X import a, b` statements whose X.a moved, and relative imports that reach
    a moved module, into absolute imports of the new homes (the local names kept). WAS: the
    module the file was before this run moved it (its relative imports are read from there)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    module, is_init = file_module(root, path)
    if was is not None:
        module = was
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source_module = absolute(node, module, is_init)
        names = [(alias.name, alias.asname) for alias in node.names]
        moved_children = any(f"{source_module}.{name}" in MOVES for name, _ in names)
        relative_moved = node.level and (was is not None or renamed(source_module) != source_module)
        if not moved_children and not relative_moved:
            continue
        groups: dict[str, list[str]] = {}
        for name, asname in names:
            full = f"{source_module}.{name}"
            if name != "*" and renamed(full) != full:
                parent, _, leaf = renamed(full).rpartition(".")
                local = asname or name
                groups.setdefault(parent, []).append(
                    leaf if leaf == local else f"{leaf} as {local}"
                )
            else:
                target = renamed(source_module)
                groups.setdefault(target, []).append(f"{name} as {asname}" if asname else name)
        start, end = node.lineno - 1, (node.end_lineno or node.lineno)
        first = lines[start]
        indent = first[: len(first) - len(first.lstrip())]
        new = "".join(
            f"{indent}from {target} import {', '.join(items)}\n" for target, items in groups.items()
        )
        edits.append((start, end, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = [new]
    return "".join(lines)


def rewrite_text(text: str) -> str:
    text = PATHS.sub(lambda m: module_path(MOVES[m.group(1).replace("/", ".")]) + m.group(2), text)
    if SHORT:
        text = SHORT_PATHS.sub(
            lambda m: module_path(MOVES[SHORT[m.group(1)]]).removeprefix("tracediff/") + m.group(2),
            text,
        )
    return DOTTED.sub(lambda m: m.group(0) if is_data(m) else MOVES[m.group(1)], text)


def is_data(m: re.Match[str]) -> bool:
    """A match that is a data value ("tracediff.runset" in quotes), not a module name."""
    quoted = m.string[m.start() - 1 : m.start()] == '"' == m.string[m.end() : m.end() + 1]
    return quoted and m.group(1) in DATA_NAMES


def rewrite_all(root: Path, moved: dict[Path, str]) -> list[Path]:
    """Rewrite every text file; MOVED: the files this run moved, with the module each was."""
    changed = []
    for path in text_files(root):
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        was = moved.get(path)
        new = rewrite_imports(root, path, text, was) if path.suffix == ".py" else text
        new = rewrite_text(new)
        if new != text:
            path.write_text(new, encoding="utf-8", errors="surrogateescape")
            changed.append(path)
            print(f"rewrote {path.relative_to(root)}")
    return changed


def tidy(root: Path, changed: list[Path]) -> None:
    """Sort and format the rewritten Python files (a split import may need both)."""
    py = [str(p) for p in changed if p.suffix in (".py", ".pyi")]
    if not py:
        return
    ruff = root / ".venv" / "bin" / "ruff"
    command = str(ruff) if ruff.exists() else "ruff"
    subprocess.run([command, "check", "-q", "--fix", "--select", "I", *py], cwd=root, check=False)
    subprocess.run([command, "format", "-q", *py], cwd=root, check=False)


def leftovers(root: Path) -> list[str]:
    found = []
    for path in text_files(root):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            dotted = [m for m in DOTTED.finditer(line) if not is_data(m)]
            if dotted or PATHS.search(line) or (SHORT and SHORT_PATHS.search(line)):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--rewrite-only",
        action="store_true",
        help="rewrite references to moved modules; move nothing",
    )
    mode.add_argument(
        "--check", action="store_true", help="list references to old module names; exit 1 if any"
    )
    args = parser.parse_args()
    root = repo_root()
    if args.check:
        found = leftovers(root)
        print("\n".join(found) or "relayout: no references to old module names")
        return 1 if found else 0
    moved = {} if args.rewrite_only else move_all(root)
    print(f"relayout: {len(moved)} files moved")
    changed = rewrite_all(root, moved)
    tidy(root, changed)
    print(f"relayout: {len(changed)} files rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
