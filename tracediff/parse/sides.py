"""What one side of a comparison is: one run, or a run set (several runs of one workload).

Stage: parse (input dispatch, before `load`). Input: the path the user gave for BASE or HEAD;
output: the paths of that side's runs, in capture order, each of which `load` reads as one run.

A path is one run when it is a file (run file, report or trace), an `nsys export --type
parquetdir` folder, or a capture folder (`manifest.json` beside `run.arrow` or `report.*`, as
`tracediff capture` writes). A folder is a run set when it holds several of those: plain files
(`good_runs/*.nsys-rep`), capture folders, or a run-set index written by `tracediff capture
--repeat` (its runs in the index's order).

Runs or ranks. A folder of files can also be the per-rank files of *one* multi-GPU run (SGLang's
profiler writes one trace per TP rank; PyTorch jobs one Kineto trace per rank; nsys one report per
rank or node). Those are told apart by their names (ranknames.py has the rule): such a folder is
one run, which `load` joins (ranks/combine.py); a folder of such folders is a run set. `layout="runs"`
(`--layout runs`) forces the run-set reading of a folder of files, `layout="ranks"` the one-run
reading (names without rank tokens: `report_%h.nsys-rep`). A folder whose names hold several
groups of per-rank files, or per-rank files beside others, is refused, saying what was found.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tracediff.base.errors import InputError
from tracediff.parse.ranks import ranknames as rn
from tracediff.runs import runset as rs

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


@dataclass(frozen=True)
class Side:
    """One side of a comparison: the user's path and its runs (one path per run)."""

    path: Path
    runs: tuple[Path, ...]
    run_set: bool = False
    indexed: bool = False  # its runs are listed by a run-set index (runset.json)

    @property
    def is_run_set(self) -> bool:
        return self.run_set


def _is_report_file(p: Path) -> bool:
    name = p.name.lower()
    return p.is_file() and not name.startswith(".") and name.endswith(_REPORT_SUFFIXES)


def _is_one_run_folder(p: Path, ranks: bool = True) -> bool:
    """A parquetdir export, a capture folder (manifest + run file or report), or (`ranks`) a
    folder of one run's per-rank files."""
    if any(p.glob("*.parquet")):
        return True
    if (p / "manifest.json").is_file() and any(
        (p / n).exists() for n in ("run.arrow", "report.nsys-rep", "report.qdstrm", "report.sqlite")
    ):
        return True
    return ranks and rank_files(p) is not None


def report_files(folder: Path) -> list[Path]:
    """The report and run files directly in `folder`, in name order."""
    return [p for p in sorted(folder.iterdir()) if _is_report_file(p)]


def rank_files(folder: Path, layout: Layout = "auto") -> list[Path] | None:
    """The files of one run's ranks in `folder`, in rank order, when its names say so (or
    `layout="ranks"`: all its report files); None when the folder is not that. A folder of one
    run's ranks mixed with other files is refused."""
    if not folder.is_dir() or layout == "runs":
        return None
    files = report_files(folder)
    if layout == "ranks":
        g = rn.group(files)
        return [n.path for n in g.groups[0]] if len(g.groups) == 1 and not g.plain else files
    g = rn.group(files)
    rank_groups = [x for x in g.groups if rn.is_rank_group(x)]
    if not rank_groups:
        return None
    if len(g.groups) == 1 and not g.plain:
        return [n.path for n in g.groups[0]]  # one suffix: it is part of the name compared
    raise InputError(
        f"{folder}: ambiguous: per-rank files of more than one run, or beside other files "
        f"({g.describe()})",
        "put each run's per-rank files in a folder of their own (a folder of such folders is a "
        "run set), or pass --layout runs to read every file as a run",
    )


def run_of_capture_folder(p: Path) -> Path:
    """The file to read for a capture folder: its run file, else its report."""
    for n in ("run.arrow", "report.nsys-rep", "report.sqlite", "report.qdstrm"):
        if (p / n).exists():
            return p / n
    return p  # a parquetdir


def _index_runs(folder: Path) -> tuple[Path, ...] | None:
    """The finished runs of a run set's index (tracediff/runs/runset.py), in capture order; None
    when the folder has no index."""
    if not (folder / rs.INDEX).is_file():
        return None
    index = rs.read_index(folder)
    out = []
    where = folder / rs.INDEX
    for r in index["runs"]:
        if r["status"] != "ok":
            continue  # an unfinished or failed run of an interrupted capture
        _inside(folder, str(r["path"]), where)
        p = folder / r["path"]
        if p.is_dir() and _is_one_run_folder(p):
            p = run_of_capture_folder(p)
        if not p.exists():
            raise InputError(f"{where}: lists {p.name}, which is missing", "re-run the capture")
        out.append(p)
    _distinct_runs(out, where)
    return tuple(out)


def _inside(folder: Path, entry: str, where: Path) -> None:
    """A run of an index lies in the index's folder: no absolute path, no `..`, no link out."""
    rel = Path(entry)
    inside = folder.resolve()
    if (
        rel.is_absolute()
        or ".." in rel.parts
        or not (folder / rel).resolve().is_relative_to(inside)
    ):
        raise InputError(
            f"{where}: lists {entry!r}, outside the run set's folder",
            "a run set's index names runs inside its folder; move the run there, or remove the entry",
        )


def _distinct_runs(paths: list[Path], where: Path) -> None:
    """No run listed twice: by path, or by content (files of equal size are hashed)."""
    import hashlib

    seen: dict[Path, Path] = {}
    by_size: dict[int, list[Path]] = {}
    for p in paths:
        key = p.resolve()
        if key in seen:
            raise InputError(f"{where}: lists {p} twice", "list each run once in the index")
        seen[key] = p
        if p.is_file():
            by_size.setdefault(p.stat().st_size, []).append(p)
    for same in (g for g in by_size.values() if len(g) > 1):
        digests: dict[str, Path] = {}
        for p in same:
            h = hashlib.blake2b(digest_size=16)
            with open(p, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            d = h.hexdigest()
            if d in digests:
                raise InputError(
                    f"{where}: lists {digests[d]} and {p}, which are the same file (same content)",
                    "list each run once in the index; a copied run is not a repeat",
                )
            digests[d] = p


def resolve(path: Path, layout: Layout = "auto") -> Side:
    """The runs of the side the user named by `path` (see the module docstring). A run is a
    file or a folder `load` reads as one run (parquetdir, capture folder, per-rank files)."""
    path = Path(path)
    if not path.is_dir() or _is_one_run_folder(path, ranks=layout == "auto"):
        return Side(path, (run_of_capture_folder(path) if path.is_dir() else path,))
    refuse_group(path)
    indexed = _index_runs(path)
    if indexed is not None:
        if not indexed:
            raise InputError(
                f"{path}: the run set has no finished run", "run the capture (again) to finish it"
            )
        return Side(path, indexed, True, True)
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
        return Side(path, tuple(run_of_capture_folder(p) for p in folders), True)
    if layout == "ranks":
        return Side(path, (path,))
    suffixes = {_suffix(f) for f in files}
    if len(suffixes) > 1:
        raise InputError(
            f"{path}: mixes file types ({', '.join(sorted(suffixes))})",
            "a run set holds runs of one kind; move the others out",
        )
    return Side(path, tuple(files), True)


def _suffix(p: Path) -> str:
    name = p.name.lower()
    return next(s for s in _REPORT_SUFFIXES[::-1] if name.endswith(s)) if name else ""


def capture_group(folder: Path) -> list[tuple[str, Path]] | None:
    """The run sets of a several-commit capture folder (`capture --commit A --commit B ... -o
    DIR`: DIR/runsets.json, one run-set folder per commit or variant): each set's name and
    folder, in the index's order; None for any other path."""
    folder = Path(folder)
    if not (folder / rs.GROUP_INDEX).is_file():
        return None
    names = list(rs.read_group_index(folder).get("sets", {}))
    return [(name, folder / name) for name in names]


def refuse_group(folder: Path) -> None:
    """InputError for a several-commit capture folder where one side is wanted, naming its
    run sets (compare, whatif and bisect compare one run set a side)."""
    group = capture_group(folder)
    if group is not None:
        names = [n for n, _ in group]
        raise InputError(
            f"{folder}: holds several run sets ({', '.join(names)})",
            f"give one of them, e.g. {group[0][1]}" if group else None,
        )


def list_runs(folder: Path) -> list[Path]:
    """The file to read for each run of the run set at `folder` (indexed or not), in order;
    what `bisect` compares. A several-commit capture folder is refused, naming its run sets."""
    folder = Path(folder)
    refuse_group(folder)
    return list(resolve(folder, layout="runs").runs)
