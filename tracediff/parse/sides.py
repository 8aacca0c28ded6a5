"""What one side of a comparison is: one run, or a run set (several runs of one workload).

Stage: parse (input dispatch, before `load`). Input: the path the user gave for BASE or HEAD;
output: the paths of that side's runs, in capture order, each of which `load` reads as one run.

A path is one run when it is a file (run file, report or trace), an `nsys export --type
parquetdir` folder, or a capture folder (`manifest.json` beside `run.arrow` or `report.*`, as
`tracediff capture` writes). A folder is a run set when it holds several of those: plain files
(`good_runs/*.nsys-rep`), capture folders, or a run-set index written by `tracediff capture
--repeat` (its runs in the index's order).

Runs or ranks. A folder of files can also be the per-rank files of *one* multi-GPU run (SGLang's
profiler writes one trace per TP rank). Those are told apart by their names: when every file's
name differs from the others only in a rank token (`rank-3`, `rank3`, `TP-3`, `tp3`, `DP-1`,
`PP-0`, `EP-2`, `-r3-`) and the ranks are distinct, the folder is one run's ranks, which tracediff
cannot join into one run yet: it says so instead of comparing rank 0 of base with rank 1 of head as
if they were repeats. `layout="runs"` (`--layout runs`) forces the run-set reading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tracediff import runset as rs
from tracediff.errors import InputError

Layout = Literal["auto", "runs", "ranks"]

_REPORT_SUFFIXES = (
    ".arrow",
    ".sqlite",
    ".nsys-rep",
    ".qdrep",
    ".qdstrm",
    ".json",
    ".json.gz",
)
_RANK = re.compile(r"(?i)(?:^|[-_.])(rank|tp|dp|pp|ep|r)[-_]?(\d+)(?=$|[-_.])")


@dataclass(frozen=True)
class Side:
    """One side of a comparison: the user's path and its runs (one path per run)."""

    path: Path
    runs: tuple[Path, ...]

    @property
    def is_run_set(self) -> bool:
        return self.path.is_dir() and not _is_one_run_folder(self.path)


def _is_report_file(p: Path) -> bool:
    name = p.name.lower()
    return p.is_file() and not name.startswith(".") and name.endswith(_REPORT_SUFFIXES)


def _is_one_run_folder(p: Path) -> bool:
    """A parquetdir export, or a capture folder (manifest + run file or report)."""
    if any(p.glob("*.parquet")):
        return True
    return (p / "manifest.json").is_file() and any(
        (p / n).exists() for n in ("run.arrow", "report.nsys-rep", "report.qdstrm", "report.sqlite")
    )


def run_of_capture_folder(p: Path) -> Path:
    """The file to read for a capture folder: its run file, else its report."""
    for n in ("run.arrow", "report.nsys-rep", "report.sqlite", "report.qdstrm"):
        if (p / n).exists():
            return p / n
    return p  # a parquetdir


def _index_runs(folder: Path) -> tuple[Path, ...] | None:
    """The finished runs of a run set's index (tracediff/runset.py), in capture order; None
    when the folder has no index."""
    if not (folder / rs.INDEX).is_file():
        return None
    index = rs.read_index(folder)
    out = []
    for r in index["runs"]:
        if r["status"] != "ok":
            continue  # an unfinished or failed run of an interrupted capture
        p = folder / r["path"]
        if p.is_dir() and _is_one_run_folder(p):
            p = run_of_capture_folder(p)
        if not p.exists():
            raise InputError(
                f"{folder / rs.INDEX}: lists {p.name}, which is missing", "re-run the capture"
            )
        out.append(p)
    return tuple(out)


def rank_of(name: str) -> tuple[str, int] | None:
    """The rank token of a file name (`rank-3` -> ("rank", 3)), when it has exactly one kind."""
    found = {(m.group(1).lower(), int(m.group(2))) for m in _RANK.finditer(name)}
    kinds = {k for k, _ in found}
    return next(iter(found)) if len(found) == 1 and len(kinds) == 1 else None


def looks_like_ranks(files: list[Path]) -> bool:
    """Whether files are one run's per-rank files: names equal but for one rank token each, with
    distinct ranks."""
    if len(files) < 2:
        return False
    ranks = [rank_of(f.name) for f in files]
    if any(r is None for r in ranks):
        return False
    if len({r for r in ranks}) != len(files):
        return False
    stems = {_RANK.sub("", f.name) for f in files}
    return len(stems) == 1


def resolve(path: Path, layout: Layout = "auto") -> Side:
    """The runs of the side the user named by `path` (see the module docstring)."""
    path = Path(path)
    if not path.is_dir() or _is_one_run_folder(path):
        return Side(path, (run_of_capture_folder(path) if path.is_dir() else path,))
    indexed = _index_runs(path)
    if indexed is not None:
        if not indexed:
            raise InputError(
                f"{path}: the run set has no finished run", "run the capture (again) to finish it"
            )
        return Side(path, indexed)
    entries = sorted(path.iterdir())
    files = [p for p in entries if _is_report_file(p)]
    folders = [p for p in entries if p.is_dir() and _is_one_run_folder(p)]
    if files and folders:
        raise InputError(
            f"{path}: holds both report files ({len(files)}) and capture folders ({len(folders)})",
            "put one run set in a folder: either the runs' files or their capture folders",
        )
    if not files and not folders:
        raise InputError(
            f"{path}: is a folder with no run in it",
            "give a run file or report, or a folder of runs (a run set)",
        )
    if folders:
        return Side(path, tuple(run_of_capture_folder(p) for p in folders))
    if layout == "ranks" or (layout == "auto" and looks_like_ranks(files)):
        names = ", ".join(f.name for f in files[:3]) + (", ..." if len(files) > 3 else "")
        raise InputError(
            f"{path}: holds the per-rank files of one run ({len(files)} ranks: {names}); "
            "joining ranks into one run is not supported yet",
            "compare one rank's file with the same rank's file, or pass --layout runs if these "
            "are repeated runs of one workload",
        )
    suffixes = {_suffix(f) for f in files}
    if len(suffixes) > 1:
        raise InputError(
            f"{path}: mixes file types ({', '.join(sorted(suffixes))})",
            "a run set holds runs of one kind; move the others out",
        )
    return Side(path, tuple(files))


def _suffix(p: Path) -> str:
    name = p.name.lower()
    return next(s for s in _REPORT_SUFFIXES[::-1] if name.endswith(s)) if name else ""


def list_runs(folder: Path) -> list[Path]:
    """The file to read for each run of the run set at `folder` (indexed or not), in order;
    what `bisect` compares. A several-commit capture folder is refused, naming its run sets."""
    folder = Path(folder)
    if (folder / rs.GROUP_INDEX).is_file():
        names = sorted(rs.read_group_index(folder).get("sets", {}))
        raise InputError(
            f"{folder}: holds several run sets ({', '.join(names)})",
            f"give one of them, e.g. {folder / names[0]}" if names else None,
        )
    return list(resolve(folder, layout="runs").runs)
