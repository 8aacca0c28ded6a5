"""`tracediff bisect --pool DIR`: runs captured ahead of time, taken instead of capturing.

Stage: bisect (input of `tracediff/bisect/bisection.py`). Input: a pool folder; output: runs copied (or
imported) into bisect's OUTDIR/<sha12>/ run sets, one `pool-NN` capture folder per run taken.

Why: on a GPU host that can only write `.qdstrm` files (nsys's target package, no importer), or
whose time is lent by the minute, every commit of the range is captured there in one call and the
search runs here, where the reports can be imported and nothing costs device time.

Pool layout: what `tracediff capture --repeat N --commit A --commit B ... -o DIR` writes
(capture/runsets.py, tracediff/runs/runset.py): DIR/runsets.json and one run set per commit,
DIR/<name>/runset.json + run-01/ ... (each an ordinary capture folder: manifest.json, and
run.arrow or only the report, e.g. report.qdstrm). Also read: DIR itself one run set, or a folder
whose sub-folders (two levels at most) are such capture outputs. A run set is matched to a commit
by the full hash in its runset.json (`commit`); its finished runs (status "ok") are taken in
capture order. A commit with run sets of several variants is refused (which one?). The pool is
only read: a run without a run file is imported into OUTDIR (the same `load` + `write_run` as
`tracediff parse`; the QdstrmImporter is found as `tracediff parse` finds it).

Every run set of the pool must be of one workload (command, preset, nsys options, PYTHONPATH,
shim). With a workload command given to bisect as well, it must be the pool's command: runs
captured live for the commits the pool lacks (or has too few runs of) are compared with pool runs.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracediff.base.errors import InputError, TracediffError
from tracediff.runs import runset as rs

POOL_RUN = "pool-{:02d}"
HAND_RUN = (
    "hand-{:02d}"  # a plain report's run: no capture round (tracediff/bisect/bisection.round_of)
)
# what makes two pools' runs comparable (the env differs between a device call and this machine)
SAME_WORKLOAD = ("command", "preset", "trace", "nsys_options", "pythonpath", "nvtx_shim")


@dataclass
class Pool:
    root: Path
    sets: dict[str, Path]  # full commit hash -> its run set folder (or folder of reports)
    workload: dict[str, Any]
    # per-commit folders of plain reports (captured by hand): full hash -> its runs, in name
    # order; their capture order is unknown, so they are not paired in rounds
    plain: dict[str, list[Path]] = field(default_factory=dict)

    def runs(self, sha: str) -> list[dict[str, Any]]:
        """The pool's finished runs of `sha` in capture order (entries of its runset.json, with
        `src`: the run's capture folder; a plain report's entry has only `src`)."""
        if self.plain:
            return [{"src": p} for p in self.plain.get(sha, [])]
        folder = self.sets.get(sha)
        if folder is None:
            return []
        out = []
        for r in rs.read_index(folder)["runs"]:
            if r["status"] == "ok" and (folder / r["path"]).is_dir():
                out.append({**r, "src": folder / r["path"]})
        return out


def _run_set_folders(root: Path) -> list[Path]:
    if (root / rs.INDEX).is_file():
        return [root]
    found = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        if (d / rs.INDEX).is_file():
            found.append(d)
        elif d.is_dir():
            found += [e for e in sorted(d.iterdir()) if (e / rs.INDEX).is_file()]
    return found


def open_pool(root: Path, repo: Path | None = None, commits: list[str] | None = None) -> Pool:
    """Index the pool at `root` by commit; InputError for anything that is not a pool. With no
    run set in it, its folders are read as one per commit named by hash or ref in `repo`
    (`plain_pool`)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: no such folder", "give --pool the OUTDIR of capture --repeat")
    if repo is not None and not _run_set_folders(root):
        return plain_pool(root, repo, commits or [])
    sets: dict[str, Path] = {}
    workload: dict[str, Any] | None = None
    first: Path | None = None
    for folder in _run_set_folders(root):
        index = rs.read_index(folder)
        sha = index.get("commit")
        if not isinstance(sha, str):
            raise InputError(f"{folder / rs.INDEX}: names no commit", "capture it again")
        if sha in sets:
            raise InputError(
                f"{root}: two run sets of commit {sha[:12]} ({sets[sha].name}, {folder.name})",
                "a pool holds one run set per commit: move the other out",
            )
        w = {k: (index.get("workload") or {}).get(k) for k in SAME_WORKLOAD}
        if workload is None:
            workload, first = w, folder
        elif w != workload:
            key = next(k for k in SAME_WORKLOAD if w[k] != workload[k])
            raise InputError(
                f"{folder}: another workload than {first} ({key} {json.dumps(w[key])} vs "
                f"{json.dumps(workload[key])})",
                "a pool holds runs of one workload: capture every commit in one call",
            )
        sets[sha] = folder
    if workload is None:
        raise InputError(
            f"{root}: holds no run set (no runset.json in it or its sub-folders)",
            "give --pool the OUTDIR of `tracediff capture --repeat N --commit A --commit B ...`",
        )
    return Pool(root, sets, workload)


def plain_pool(root: Path, repo: Path, commits: list[str]) -> Pool:
    """A pool of reports captured by hand: one folder per commit, named by its hash (a unique
    prefix of >= 7 digits) or a ref git resolves in `repo`, holding the repeated runs' plain
    reports (.nsys-rep, .sqlite, .qdstrm, Kineto traces; every file one run) or capture
    folders. Folders of commits outside the range are left out. Refused, naming the folder: a
    name that is no commit (or an ambiguous prefix), two folders of one commit, a run whose
    manifest names another commit, the same report twice (same bytes: one run counted twice
    would be two samples)."""
    from capture import worktree as wt
    from tracediff.base.errors import UsageError
    from tracediff.parse import sides

    in_range = set(commits)
    plain: dict[str, list[Path]] = {}
    named: dict[str, Path] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if re.fullmatch(r"[0-9a-fA-F]{1,6}", d.name):
            raise InputError(
                f"{d}: {d.name!r} is too short a hash prefix to name a commit",
                "name each folder by its commit's hash (>= 7 digits) or a ref",
            )
        try:
            sha = wt.resolve(repo, d.name)
        except UsageError:
            raise InputError(
                f"{d}: its name is no commit of {repo} (or an ambiguous prefix)",
                "name each folder by its commit's hash (a unique prefix of >= 7 digits) or a "
                "ref, or move it out of the pool",
            ) from None
        if sha not in in_range:
            continue
        if sha in named:
            raise InputError(
                f"{root}: two folders of commit {sha[:12]} ({named[sha].name}, {d.name})",
                "a pool holds one folder per commit: move the other out",
            )
        runs = list(sides.resolve(d, layout="runs").runs)
        _check_runs(d, sha, runs)
        named[sha], plain[sha] = d, runs
    if not plain:
        raise InputError(
            f"{root}: holds no run set and no folder named by a commit of the range",
            "give --pool the OUTDIR of `tracediff capture --repeat N --commit A ...`, or a "
            "folder with one sub-folder of reports per commit, named by its hash",
        )
    return Pool(root, named, {}, plain)


def _check_runs(folder: Path, sha: str, runs: list[Path]) -> None:
    """The identity checks a per-commit folder's runs can have: a capture manifest's commit,
    and no report twice (same bytes)."""
    seen: dict[str, Path] = {}
    for run in runs:
        manifest = (run if run.is_dir() else run.parent) / "manifest.json"
        if run.parent != folder and manifest.is_file():
            commit = (json.loads(manifest.read_text()).get("git") or {}).get("commit")
            if isinstance(commit, str) and commit and commit != sha:
                raise InputError(
                    f"{run}: its manifest says commit {commit[:12]}, but its folder names "
                    f"{sha[:12]}",
                    "move it to its commit's folder",
                )
        if run.is_file():
            digest = hashlib.sha256(run.read_bytes()).hexdigest()
            if digest in seen:
                raise InputError(
                    f"{folder}: {seen[digest].name} and {run.name} are the same report",
                    "one run counted twice is two samples of one: remove the copy",
                )
            seen[digest] = run


def check_command(pool: Pool, command: list[str], preset: str | None) -> None:
    """A workload command given beside --pool must be the pool's (its runs are mixed in)."""
    if pool.plain:
        raise InputError(
            f"{pool.root}: a pool of plain reports does not say their command",
            "bisect it without a workload command (only its runs), or capture the pool with "
            "`tracediff capture --repeat N --commit ...`",
        )
    if pool.workload["command"] != command or pool.workload["preset"] != preset:
        have = " ".join(pool.workload["command"] or []) or f"--preset {pool.workload['preset']}"
        raise InputError(
            f"{pool.root}: its runs are of `{have}`, not of the command given",
            "give the pool's command (or none: then only the pool's runs are used)",
        )


def take(pool: Pool, sha: str, folder: Path, n: int, workload: dict[str, Any]) -> int:
    """Make the run set at `folder` hold min(n, available) of the pool's runs of `sha` (more are
    never removed); returns how many pool runs it holds. A run without a run file is imported."""
    index: dict[str, Any]
    if (folder / rs.INDEX).is_file():
        index = rs.read_index(folder)
    else:
        folder.mkdir(parents=True, exist_ok=True)
        index = {
            "name": folder.name,
            "ref": sha,
            "commit": sha,
            "variant": None,
            "workload": workload,
            "repeat": n,
            "runs": [],
        }
    have = [r for r in index["runs"] if r.get("pool") and r["status"] == "ok"]
    avail = pool.runs(sha)
    for k in range(len(have), min(n, len(avail))):
        src = avail[k]
        name = (HAND_RUN if pool.plain else POOL_RUN).format(k + 1)
        _copy_run(src["src"], folder / name)
        entry = {
            "name": name,
            "path": name,
            "run_file": f"{name}/run.arrow",
            "report": None,
            "status": "ok",
            "start_utc": src.get("start_utc"),
            "end_utc": src.get("end_utc"),
            "workload_exit_code": src.get("workload_exit_code"),
            "problem": None,
            "pool": str(src["src"].resolve()),
        }
        index["runs"] = [r for r in index["runs"] if r.get("name") != name] + [entry]
        rs.write_index(folder, index)
        have.append(entry)
    if not (folder / rs.INDEX).is_file():
        rs.write_index(folder, index)
    return len(have)


def _copy_run(src: Path, dst: Path) -> None:
    """src's capture folder -> dst: manifest.json and run.arrow (imported from the report when
    the pool has none). Built in a staging folder and renamed: a killed call leaves no half run."""
    from tracediff.parse import load
    from tracediff.parse.sides import run_of_capture_folder
    from tracediff.runs.runfile import write_run

    staging = dst.with_name(f".{dst.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    if dst.exists():  # an earlier call died between the rename and the index write
        shutil.rmtree(dst)
    staging.mkdir()
    try:
        if (src / "manifest.json").is_file():
            shutil.copyfile(src / "manifest.json", staging / "manifest.json")
        elif src.is_file():
            # a report captured by hand has no capture manifest; this note (no
            # manifest_version: not read as one) makes the folder a capture folder that says so
            note = {"captured_by": "hand", "source": str(src.resolve())}
            (staging / "manifest.json").write_text(json.dumps(note, indent=2) + "\n")
        report = src if src.is_file() else run_of_capture_folder(src)
        if report.name == "run.arrow":
            shutil.copyfile(report, staging / "run.arrow")
        else:
            if report == src and src.is_dir():
                raise InputError(f"{src}: a pool run with no run file and no report")
            run = load(report)  # the manifest beside the report comes along (parse.load)
            run.metadata["source"] = str(report.resolve())
            write_run(run, staging / "run.arrow")
        staging.rename(dst)
    except TracediffError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise type(e)(f"pool run {src}: {e.message}", e.hint) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
