"""Run-set index: the file `tracediff capture --repeat N` keeps in each run set's folder.

Stage: capture output / input dispatch. `capture/runsets.py` writes it run by run; what a BASE or
HEAD folder holds is decided by `tracediff/parse/sides.py` (which reads this index through
`read_index`, and also run sets without one: a folder of plain `.nsys-rep` files, or of capture
folders; `sides.list_runs` is what `bisect` lists runs with).

`runset.json` (format_version 1):

    {"format_version": 1, "kind": "tracediff.runset",
     "name": "good",                        the folder's name in its capture call
     "ref": "HEAD", "commit": "<40 hex>", "variant": "good" | null,
     "workload": {...},                     what makes two runs comparable: command, preset, nsys
                                            options, PYTHONPATH, NVTX shim, env; a capture into an
                                            existing run set must match it (and the commit) exactly,
                                            and `env` (the workload's, as each run's manifest holds
                                            it, its worktree path written "<worktree>") must match
                                            the finished runs' manifests
     "repeat": 4,                           runs asked for by the last call
     "created_utc": "...Z",
     "runs": [                              in capture order (by start_utc)
       {"name": "run-01",
        "path": "run-01",                   the run's capture folder, relative to the run set
        "run_file": "run-01/run.arrow" | null, "report": "run-01/report.nsys-rep" | null,
        "status": "ok" | "failed" | "interrupted" | "running",
        "start_utc": "...Z", "end_utc": "...Z" | null,
        "workload_exit_code": 0 | null, "problem": "one line" | null}]}

Only "ok" runs are finished; "running" is a run whose capture process died (a later call with the
same command redoes it). Each run folder is an ordinary capture folder (manifest.json, run.arrow,
report, capture.log).

A call with several commits or variants also writes `runsets.json` in OUTDIR (kind
"tracediff.runsets": `sets` by folder name with ref, commit and variant; `order`, the planned
capture order as [set, run] pairs; `order_rule` in words); that folder is not itself a run set.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from tracediff.base.errors import InputError, UnsupportedVersionError

INDEX = "runset.json"
GROUP_INDEX = "runsets.json"
FORMAT_VERSION = 1
KIND, GROUP_KIND = "tracediff.runset", "tracediff.runsets"
STATUSES = ("ok", "failed", "interrupted", "running")


def read_index(path: Path) -> dict[str, Any]:
    """The index of a run set (`path` is the folder or its runset.json), checked for shape."""
    return _read(Path(path), INDEX, KIND)


def read_group_index(path: Path) -> dict[str, Any]:
    """The runsets.json of a several-commit capture (`path` is OUTDIR or the file)."""
    return _read(Path(path), GROUP_INDEX, GROUP_KIND)


def _read(path: Path, name: str, kind: str) -> dict[str, Any]:
    f = path / name if path.is_dir() else path
    try:
        data = json.loads(f.read_text())
    except FileNotFoundError:
        raise InputError(
            f"{f}: no such file", "is this a folder written by tracediff capture --repeat?"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{f}: not a readable {name} ({e})", "capture the run set again") from None
    if not isinstance(data, dict) or data.get("kind") != kind:
        raise InputError(f"{f}: not a tracediff {name} (kind is not {kind!r})")
    version = data.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"{f}: format_version missing", "capture the run set again")
    if version > FORMAT_VERSION:
        raise UnsupportedVersionError(
            f"{f}: format_version {version} is newer than this tracediff reads ({FORMAT_VERSION})",
            "upgrade tracediff",
        )
    if kind == KIND and not (
        isinstance(data.get("runs"), list)
        and all(
            isinstance(r, dict) and r.get("status") in STATUSES and isinstance(r.get("path"), str)
            for r in data["runs"]
        )
    ):
        raise InputError(f"{f}: 'runs' is not a list of runs with a path and a known status")
    return data


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` through a temp file and a rename: a reader sees old or new."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=2, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_index(folder: Path, index: dict[str, Any]) -> None:
    """Write a run set's index, runs sorted into capture order."""
    rest = {k: v for k, v in index.items() if k not in ("format_version", "kind")}
    rest["runs"] = sorted(rest.get("runs", []), key=lambda r: r.get("start_utc") or "")
    write_json_atomic(
        Path(folder) / INDEX, {"format_version": FORMAT_VERSION, "kind": KIND, **rest}
    )


def finished_runs(folder: Path) -> list[Path]:
    """The capture folders of an indexed run set's finished runs, in capture order."""
    folder = Path(folder)
    return [
        folder / r["path"]
        for r in read_index(folder)["runs"]
        if r["status"] == "ok" and (folder / r["path"]).is_dir()
    ]
