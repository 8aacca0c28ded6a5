"""`tracediff capture --repeat N`: each commit (and variant) captured N times, interleaved.

Stage: capture. Input: a `CaptureSpec` template, the refs, optional variants, N; output: one run
set per (commit, variant) in the format of `tracediff/runs/runset.py` (runset.json + run-01 ... run-N,
each an ordinary capture folder), written run by run so an interrupted call loses nothing.

Layout: with one commit and no variants OUTDIR itself is the run set. Otherwise OUTDIR holds
runsets.json (the sets and the planned order) and one run set per folder, named after the ref
(`HEAD~1` → `HEAD-1`; a sha → its first 12 digits), or the variant, or `REF_VARIANT` when there
are both.

Order (deterministic, recorded in runsets.json): round r = 1..N captures run r of every set,
in the order given on odd rounds and reversed on even ones: for A, B: A B B A A B B A ...; for
A, B, C: A B C C B A A B C ... Each set thus sees early and late slots alike, so a drift of the
machine (clocks, thermals, caches) over the call does not favour one side.

Resume: running the same command again reuses every finished run (status ok) and captures the
rest, in the same order. A run set whose index names another commit or another workload
(command, preset, nsys options, PYTHONPATH, shim), or whose finished runs' manifests hold another
`env` (runner.comparable_env: the variables the workload depends on, its worktree path named), is
refused with one line, never mixed;
`--force` starts such a set over. A lock file (OUTDIR/.capture.lock) keeps two calls apart.
The first failed or interrupted run stops the call (exit 1 or 130); what finished is kept.

Library use (bisect): `capture_runsets(spec, [sha, ...], n)` with spec.outdir = a folder per step
or one for all; calling it again with a larger n adds runs to the same run sets (the finished
ones are reused); `RunSetsResult.sets[i].folder` is each run set, `tracediff.parse.sides.list_runs()`
its run files. A ref given as a sha names its folder by the sha's first 12 digits.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from capture import manifest as mf
from capture import worktree as wt
from capture.outdir import locked, prepare_runset_outdir
from capture.runner import (
    CaptureSpec,
    NoReport,
    capture,
    comparable_env,
    find_nsys,
    workload_identity_env,
)
from tracediff.base.errors import OutputError, ToolError, TracediffError, UsageError
from tracediff.runs import runset as rs

PLACEHOLDER = "{variant}"


@dataclass
class SetPlan:
    name: str  # folder under OUTDIR; "" when OUTDIR itself is the run set
    ref: str
    commit: str
    variant: str | None
    command: list[str]
    folder: Path
    workload: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSetsResult:
    outdir: Path
    sets: list[SetPlan]
    captured: int  # runs captured by this call
    reused: int  # finished runs found from an earlier call
    exit_code: int
    problem: str | None = None
    warnings: list[str] = field(default_factory=list)
    # the failed run failed in an external tool (nsys gave no report and capture did not retry
    # it already, git), not by the workload's own exit code: a retry may pass (bisect retries once)
    tool_failure: bool = False


def interleave(n_sets: int, repeat: int) -> list[tuple[int, int]]:
    """(set index, run number from 1) in capture order: forward on odd rounds, reversed on even."""
    order = []
    for r in range(1, repeat + 1):
        sets = range(n_sets) if r % 2 else reversed(range(n_sets))
        order += [(s, r) for s in sets]
    return order


def spread(counts: list[int]) -> list[tuple[int, int]]:
    """(set index, run number from 1) in capture order for sets of unequal run counts: run j of a
    set of c runs sits at (j - 1/2) / c of the call, so every set's mean capture time is the
    call's middle and a linear drift over the call moves all sets alike (bisect: a step's 4 runs
    with a fresh run of each end, X X A B X X). Slots at the same time go in set order in the
    call's first half and in reverse in its second, so that a tie moves no set off the middle.
    Equal counts: `interleave`'s order."""
    if len(set(counts)) == 1:
        return interleave(len(counts), counts[0])
    slots = [
        ((j - 0.5) / c, s if (j - 0.5) / c <= 0.5 else -s, s, j)
        for s, c in enumerate(counts)
        for j in range(1, c + 1)
    ]
    return [(s, j) for _, _, s, j in sorted(slots)]


def folder_name(ref: str, commit: str) -> str:
    """A file-name-safe name for a ref: the ref itself where it can be, a sha's first 12 digits."""
    if re.fullmatch(r"[0-9a-fA-F]{7,40}", ref) and commit.startswith(ref.lower()):
        return commit[:12]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", ref).strip("-.") or commit[:12]


def run_name(i: int) -> str:
    return f"run-{i:02d}"


def good_capture(d: Path) -> bool:
    """A finished capture folder: a run file, and a manifest saying the workload exited 0."""
    try:
        m = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(m, dict)
        and (d / "run.arrow").is_file()
        and m.get("workload_exit_code") == 0
        and not m.get("partial")
    )


def substitute(command: list[str], variant: str | None) -> list[str]:
    return command if variant is None else [a.replace(PLACEHOLDER, variant) for a in command]


def plan_sets(
    spec: CaptureSpec, refs: list[str], variants: list[str] | None
) -> tuple[list[SetPlan], Path]:
    """Resolve every ref once (a branch that moves during the call does not move the runs)."""
    if len(set(refs)) != len(refs):
        raise UsageError("a --commit value is given twice", "give each commit once")
    if variants is not None:
        if not variants or len(set(variants)) != len(variants) or "" in variants:
            raise UsageError("--variants needs distinct names, e.g. --variants good,bad")
        if not any(PLACEHOLDER in a for a in spec.command):
            raise UsageError(
                f"--variants needs {PLACEHOLDER} in the command",
                f"e.g. -- python bench.py --variant {PLACEHOLDER}",
            )
    repo = wt.toplevel(spec.repo)
    shas = [wt.resolve(repo, ref) for ref in refs]
    if spec.include_uncommitted:
        head = wt.user_tree_state(repo)["user_head"]
        if any(sha != head for sha in shas):
            raise UsageError(
                f"--include-uncommitted: every --commit must be the checked-out HEAD of {repo}",
                "the edits are made on top of HEAD; profile HEAD, or commit them",
            )
    names = [folder_name(r, c) for r, c in zip(refs, shas, strict=True)]
    if len(set(names)) != len(names):  # HEAD and HEAD^ would both be "HEAD"
        names = [f"{n}-{c[:12]}" for n, c in zip(names, shas, strict=True)]
    outdir = Path(spec.outdir)
    plans = []
    each: list[str | None] = list(variants) if variants is not None else [None]
    for ref, sha, name in zip(refs, shas, names, strict=True):
        for v in each:
            if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v):
                raise UsageError(
                    f"--variants: {v!r} cannot name a folder", "use letters, digits, ._-"
                )
            parts = ([name] if len(refs) > 1 else []) + ([v] if v is not None else [])
            set_name = "_".join(parts)
            plans.append(
                SetPlan(
                    name=set_name,
                    ref=ref,
                    commit=sha,
                    variant=v,
                    command=substitute(list(spec.command), v),
                    folder=outdir / set_name if set_name else outdir,
                )
            )
    for p in plans:
        p.workload = {
            "command": p.command,
            "preset": spec.preset,
            "trace": spec.trace,
            "nsys_options": list(spec.capture_range) + list(spec.extra_nsys_args),
            "pythonpath": list(spec.pythonpath),
            "nvtx_shim": spec.nvtx_shim,
            # what the workload sees of NCCL_*/CUDA_*/..., as every run's manifest records it
            "env": workload_identity_env(spec),
            "include_uncommitted": spec.include_uncommitted,
        }
    return plans, repo


def _load_set(p: SetPlan, repeat: int, force: bool) -> dict[str, Any]:
    """The index of p's run set: read (and checked against p) or new."""
    fresh: dict[str, Any] = {
        "name": p.name or p.folder.name,
        "ref": p.ref,
        "commit": p.commit,
        "variant": p.variant,
        "workload": p.workload,
        "repeat": repeat,
        "created_utc": mf.now_utc(),
        "runs": [],
    }
    if (p.folder / rs.INDEX).is_file():
        index = rs.read_index(p.folder)
        problem: str | None
        if index.get("commit") != p.commit:
            problem, hint = f"another commit ({index.get('commit')})", ""
        else:
            problem, hint = _workload_differs(p, index)
        if problem is None:
            index["repeat"] = repeat
            index["workload"] = p.workload  # the env as this tracediff records it
            return index
        if not force:
            raise OutputError(
                f"{p.folder}: this run set holds runs of {problem}",
                f"{hint}choose another -o, or pass --force to start this run set over",
            )
        shutil.rmtree(p.folder)
    elif p.folder.is_dir() and p.name and any(p.folder.iterdir()):
        if not force:
            raise OutputError(
                f"{p.folder}: already exists and is not a run set",
                "pass --force to replace it, or choose another -o",
            )
        shutil.rmtree(p.folder)
    p.folder.mkdir(parents=True, exist_ok=True)
    return fresh


def _workload_differs(p: SetPlan, index: dict[str, Any]) -> tuple[str | None, str]:
    """(what differs, a hint) between p's workload and the runs of an existing run set, or None.

    The environment is compared with what the finished runs ran with, their manifests' `env`
    (comparable_env: the per-call worktree path named), not with the index's own record: an index
    written by an older tracediff recorded the caller's variables differently (issue 22: "env {}"
    beside manifests holding CUDA_HOME=..., so a resume from the very same shell was refused)."""
    old = index.get("workload") or {}
    for key in p.workload:
        if key != "env" and old.get(key) != p.workload[key]:
            was, now = json.dumps(old.get(key)), json.dumps(p.workload[key])
            return f"another workload ({key} was {was}, now {now})", ""
    now_env = p.workload["env"]
    for r in index["runs"]:
        d = p.folder / r["path"]
        if r["status"] != "ok" or not good_capture(d):
            continue
        m = json.loads((d / "manifest.json").read_text())
        if not isinstance(m.get("env"), dict) or not isinstance(m.get("cwd"), str):
            continue  # a manifest without an env says nothing either way
        ran = comparable_env(m["env"], m["cwd"])
        if ran != now_env:
            name = sorted(k for k in set(ran) | set(now_env) if ran.get(k) != now_env.get(k))[0]
            was, now = ran.get(name, "<unset>"), now_env.get(name, "<unset>")
            return (
                f"another workload ({r['name']}: env {name} was {json.dumps(was)}, "
                f"now {json.dumps(now)})",
                f"run with the environment of {d / 'manifest.json'} ('env'), ",
            )
    return None, ""


def _finished(folder: Path, index: dict[str, Any]) -> set[int]:
    """Run numbers already done; a run whose process died after publishing is adopted."""
    done = set()
    for r in index["runs"]:
        m = re.fullmatch(r"run-(\d+)", r.get("name", ""))
        if not m:
            continue
        d = folder / r["path"]
        if r["status"] == "running" and good_capture(d):
            report = json.loads((d / "manifest.json").read_text()).get("report")
            r.update(status="ok", run_file=f"{r['path']}/run.arrow", problem=None)
            r.update(report=f"{r['path']}/{report}" if report else None)
        if r["status"] == "ok" and d.is_dir():
            done.add(int(m.group(1)))
    for stale in folder.glob(".run-*"):  # staging of a killed call (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink()
    return done


def _record(folder: Path, index: dict[str, Any], entry: dict[str, Any]) -> None:
    index["runs"] = [r for r in index["runs"] if r.get("name") != entry["name"]] + [entry]
    rs.write_index(folder, index)


def capture_runsets(
    spec: CaptureSpec,
    refs: list[str],
    repeat: int,
    variants: list[str] | None = None,
    echo: IO[str] | None = None,
    progress: Callable[[str], None] | None = None,
    counts: list[int] | None = None,
) -> RunSetsResult:
    """Capture every set `repeat` times in the interleaved order, resuming what exists; `counts`:
    each set's own run count instead (in `spread`'s order)."""
    say = progress or (lambda msg: None)
    if repeat < 1:
        raise UsageError(f"--repeat {repeat}: needs at least 1 run")
    plans, _ = plan_sets(spec, refs, variants)
    if spec.probe_cache is None:  # the workload's Python probed once per commit (a caller's
        spec = replace(spec, probe_cache={})  # cache, bisect's, spans its calls)
    find_nsys(spec.nsys)  # before OUTDIR is made: a missing nsys is not a failed run
    outdir = Path(spec.outdir)
    grouped = bool(plans[0].name)
    prepare_runset_outdir(outdir, grouped, spec.force)
    with locked(outdir):
        per = counts if counts is not None else [repeat] * len(plans)
        if len(per) != len(plans) or min(per) < 1:
            raise UsageError(f"run counts {per} do not fit {len(plans)} run sets")
        repeat = max(per)
        indexes = [_load_set(p, k, spec.force) for p, k in zip(plans, per, strict=True)]
        done = [_finished(p.folder, ix) for p, ix in zip(plans, indexes, strict=True)]
        for p, ix in zip(plans, indexes, strict=True):
            rs.write_index(p.folder, ix)
        order = spread(per)
        if grouped:
            _write_group(outdir, plans, order, repeat)
        todo = [(s, i) for s, i in order if i not in done[s]]
        reused = len(order) - len(todo)
        if reused:
            say(f"resuming: {reused} of {len(order)} runs already captured")
        seen_warnings: list[str] = []
        unparsed = 0
        for k, (s, i) in enumerate(todo, 1):
            p, ix = plans[s], indexes[s]
            tag = f"[{k}/{len(todo)}] {p.name or p.ref} run {i}/{per[s]} ({p.commit[:12]})"

            def step(msg: str, tag: str = tag) -> None:
                if msg.startswith("warning: "):
                    if msg in seen_warnings:
                        return
                    seen_warnings.append(msg)
                say(f"{tag}: {msg}")

            problem, code = _one_run(spec, p, ix, i, per[s], echo, step)
            if code:
                tool = next(r for r in ix["runs"] if r["name"] == run_name(i)).get("tool_failure")
                return RunSetsResult(
                    outdir,
                    plans,
                    k - 1,
                    reused,
                    code,
                    problem,
                    [w[9:] for w in seen_warnings],
                    tool_failure=bool(tool),
                )
            if problem:
                unparsed += 1
        warnings = [w[9:] for w in seen_warnings]
        if unparsed:  # one line for all, not one per run (e.g. a GPU host with nsys's target only)
            runs = shlex.quote(str(outdir)) + ("/*/run-*" if grouped else "/run-*")
            warnings.append(
                f"{unparsed} runs have a report but no run file (see 'problem' in their "
                f"runset.json); import them where QdstrmImporter is: for r in {runs}; do "
                'tracediff parse "$r/report.qdstrm" -o "$r/run.arrow"; done'
            )
        return RunSetsResult(outdir, plans, len(todo), reused, 0, None, warnings)


def _one_run(
    spec: CaptureSpec,
    p: SetPlan,
    index: dict[str, Any],
    i: int,
    repeat: int,
    echo: IO[str] | None,
    say: Callable[[str], None],
) -> tuple[str | None, int]:
    """Capture run i of p and record it: (problem, exit code); exit code 0 when it finished."""
    name = run_name(i)
    entry: dict[str, Any] = {
        "name": name,
        "path": name,
        "run_file": None,
        "report": None,
        "status": "running",
        "start_utc": mf.now_utc(),
        "end_utc": None,
        "workload_exit_code": None,
        "problem": None,
    }
    # this slot's earlier attempts that did not finish (failed, interrupted, or a killed call's
    # "running"): the entry is replaced, so they are counted here (bisect counts every run)
    prev = next((r for r in index["runs"] if r.get("name") == name), None)
    if prev is not None:
        entry["failed_attempts"] = int(prev.get("failed_attempts") or 0) + (prev["status"] != "ok")
    _record(p.folder, index, entry)
    run_spec = replace(
        spec,
        ref=p.ref,
        commit=p.commit,
        outdir=p.folder / name,
        command=p.command,
        label=spec.label or p.name or None,
        force=True,  # this slot is unfinished (a failed or killed run): its folder is redone
        metadata={
            **spec.metadata,
            "runset": {"name": index["name"], "run": i, "repeat": repeat, "variant": p.variant},
        },
    )
    code, problem = 0, None
    retried = 0  # nsys attempts that capture itself retried: counted as failed attempts
    try:
        result = capture(run_spec, echo=echo, progress=say)
    except KeyboardInterrupt:
        code, problem, status = 130, "interrupted", "interrupted"
    except TracediffError as e:
        code, problem, status = e.exit_code, str(e), "failed"
        retried = e.retried if isinstance(e, NoReport) else 0
        if isinstance(e, ToolError) and not retried:  # a retry may pass; not once capture has
            entry["tool_failure"] = True
    else:
        code, problem = result.exit_code, result.problem
        status = {0: "ok", 130: "interrupted"}.get(code, "failed")
        retried = len(result.manifest.get("nsys_failed_attempts") or [])
        for w in result.warnings:  # once per distinct warning (capture_runsets' `step`)
            say(f"warning: {w}")
        entry.update(
            run_file=None if result.run_file is None else f"{name}/run.arrow",
            report=None if result.report is None else f"{name}/{result.report.name}",
            workload_exit_code=result.manifest.get("workload_exit_code"),
        )
    if retried:
        entry["failed_attempts"] = int(entry.get("failed_attempts") or 0) + retried
    entry.update(status=status, end_utc=mf.now_utc(), problem=problem)
    _record(p.folder, index, entry)
    if code == 0:
        return problem, 0  # a finished run; a problem here is a report left unparsed
    what = f"{p.name or p.ref} run {i}/{repeat}"
    if code == 130:
        kept = p.folder / name
        where = f"; its partial capture is in {kept}, not counted" if kept.is_dir() else ""
        return f"{what} was interrupted{where}", code
    log = p.folder / name / "capture.log"
    return f"{what}: {problem}" + (f" (log: {log})" if log.is_file() else ""), code


def _write_group(outdir: Path, plans: list[SetPlan], order: list[tuple[int, int]], n: int) -> None:
    old: dict[str, Any] = {}
    if (outdir / rs.GROUP_INDEX).is_file():
        old = rs.read_group_index(outdir).get("sets", {})
    sets = {
        **old,
        **{p.name: {"ref": p.ref, "commit": p.commit, "variant": p.variant} for p in plans},
    }
    rs.write_json_atomic(
        outdir / rs.GROUP_INDEX,
        {
            "format_version": rs.FORMAT_VERSION,
            "kind": rs.GROUP_KIND,
            "sets": sets,
            "repeat": n,
            "order_rule": "round r captures run r of every set: given order on odd r, reversed on even r",
            "order": [[plans[s].name, run_name(i)] for s, i in order],
        },
    )
