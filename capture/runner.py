"""One capture: a workload at a git commit, run under `nsys profile`, parsed into a run file.

Stage: capture. Input: a `CaptureSpec` (repo, ref, command, nsys options); output: OUTDIR with
`report.nsys-rep` (or `report.qdstrm` when no importer is installed), `run.arrow`,
`manifest.json` and `capture.log`. OUTDIR is built in a sibling temp folder and renamed into place
at the end, so a crash never leaves half an OUTDIR, and an existing OUTDIR needs `force` (the rename
itself refuses a folder that appeared meanwhile). Missing parents of OUTDIR are created.

The worktree holds the commit only: uncommitted edits of the user's checkout are not profiled
(a warning says so) unless `include_uncommitted` applies them (allowed when the commit is HEAD).

Faults keep whatever report exists: a workload that exits non-zero, a Ctrl-C (nsys is sent one
SIGINT, finalises, and the run is marked partial) and a report that cannot be imported or parsed
all still publish OUTDIR, with the reason in the manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from capture import manifest as mf
from capture import nvtxcheck
from capture import stacks as capture_stacks
from capture import worktree as wt
from capture.outdir import check_outdir, make_parents, publish, remove_if_empty
from tracediff.base import nsys_tool, settings
from tracediff.base.errors import ToolError, TracediffError, UsageError

SHIM_DIR = Path(__file__).parent / "shim"


class NoReport(ToolError):
    """nsys ended without a report; `retried`: the failed attempts retried before this one."""

    def __init__(self, message: str, hint: str | None = None, retried: int = 0) -> None:
        super().__init__(message, hint)
        self.retried = retried


@dataclass
class CaptureSpec:
    """Everything one capture needs. `command` runs with cwd = the worktree root."""

    repo: Path
    ref: str
    outdir: Path
    command: list[str]
    label: str | None = None
    preset: str | None = None
    pythonpath: list[str] = field(default_factory=lambda: ["."])  # worktree subpaths, first wins
    nvtx_shim: str | None = None  # target set for capture/shim (e.g. "sglang-eagle")
    env: dict[str, str] = field(default_factory=dict)
    python: str | None = None  # the workload's interpreter, probed for torch/NCCL versions
    trace: str = "auto"  # nsys -t; auto: cuda,nvtx with a GPU, nvtx without
    capture_range: list[str] = field(default_factory=list)  # nsys options, e.g. --delay=5
    extra_nsys_args: list[str] = field(default_factory=list)
    force: bool = False
    nsys: str | None = None
    include_uncommitted: bool = False  # apply the user's `git diff HEAD` in the worktree
    commit: str | None = None  # `ref` already resolved (a run set pins it for all its runs)
    probe_cache: dict[Any, Any] | None = None  # shared by the runs of one call: python_info
    metadata: dict[str, Any] = field(default_factory=dict)  # extra run.metadata (e.g. "runset")
    stacks: bool = True  # record launch stacks where cheap (capture/stacks.py)
    stack_modules: list[str] | None = None  # modules to function-trace; None: the packages'


@dataclass
class CaptureResult:
    outdir: Path
    run_file: Path | None
    report: Path | None
    manifest: dict[str, Any]
    exit_code: int  # what `tracediff capture` should exit with
    problem: str | None = None  # one line for the user when exit_code != 0 or no run file
    warnings: list[str] = field(default_factory=list)  # one line each, for the user


def find_nsys(explicit: str | None = None) -> str:
    """The nsys binary: `explicit` (--nsys), else $TRACEDIFF_NSYS, PATH, /opt (nsys_tool)."""
    return str(nsys_tool.find_nsys(explicit))


def workload_env(
    spec: CaptureSpec, tree: Path, environ: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment the workload runs with in worktree `tree` (less TRACEDIFF_CAPTURE_COMMIT):
    the caller's (`environ`, default os.environ), less the allocator settings tracediff's CLI made
    for itself, with the worktree's PYTHONPATH entries (and the NVTX shim's) first, and --env.
    One function for the capture and for a run set's workload identity (capture/runsets.py)."""
    env = settings.without_own_settings(os.environ if environ is None else environ)
    paths = [str(tree / p) for p in spec.pythonpath]
    if spec.nvtx_shim:
        paths.insert(0, str(SHIM_DIR))
        env["TRACEDIFF_NVTX_SHIM"] = spec.nvtx_shim
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(spec.env)
    return env


WORKTREE_TOKEN, SHIM_TOKEN = "<worktree>", "<tracediff-nvtx-shim>"


def comparable_env(env: dict[str, str], tree: Path | str) -> dict[str, str]:
    """A manifest's `env` (mf.env_subset of workload_env) with the paths that differ from call to
    call named instead of spelled: the worktree `tree` (a temp folder per call) and tracediff's NVTX
    shim (where tracediff is installed) in PYTHONPATH. What two calls compare to decide that their
    runs had the same environment; everything else (the caller's NCCL_*, CUDA_*, ... and its own
    PYTHONPATH entries) is kept as it is."""
    out = dict(env)
    if "PYTHONPATH" in out:
        named = []
        for entry in out["PYTHONPATH"].split(os.pathsep):
            for path, token in ((str(tree), WORKTREE_TOKEN), (str(SHIM_DIR), SHIM_TOKEN)):
                if entry == path or entry.startswith(path.rstrip("/") + "/"):
                    entry = token + entry[len(path) :]
                    break
            named.append(entry)
        out["PYTHONPATH"] = os.pathsep.join(named)
    return out


def workload_identity_env(spec: CaptureSpec) -> dict[str, str]:
    """The `env` a run set records for its workload: what every run's manifest holds, compared
    with comparable_env (the same function builds both, so a resumed call compares like with like)."""
    tree = Path(tempfile.gettempdir()) / WORKTREE_TOKEN
    return comparable_env(mf.env_subset(workload_env(spec, tree)), tree)


def resolve_trace(trace: str, gpus: list[dict[str, Any]] | None) -> str:
    if trace != "auto":
        return trace
    # Without a GPU there is no CUDA activity to trace, and some nsys builds refuse -t cuda there.
    return "cuda,nvtx" if gpus else "nvtx"


def nsys_command(
    nsys: str, spec: CaptureSpec, trace: str, report_base: Path, extra: list[str] | None = None
) -> list[str]:
    cmd = [
        nsys,
        "profile",
        f"--trace={trace}",
        "--sample=none",
        "--cpuctxsw=none",
        "--trace-fork-before-exec=true",
        f"--output={report_base}",
        "--force-overwrite=true",
        # nsys names a session profile-<its pid> by default, and an nsys that was killed (a
        # Ctrl-C, a timeout) leaves its session behind: a later nsys given the same pid then
        # fails with "session name already in use". A name of our own cannot collide.
        f"--session-new=tracediff-{os.getpid()}-{secrets.token_hex(4)}",
    ]
    if "cuda" in trace.split(","):
        cmd.append("--cuda-graph-trace=node")
    return cmd + (extra or []) + spec.capture_range + spec.extra_nsys_args + list(spec.command)


def _python_of(command: list[str], fallback: str | None) -> str | None:
    if fallback:
        return fallback
    exe = Path(command[0]).name if command else ""
    if exe.startswith("python"):
        return shutil.which(command[0]) or command[0]
    return None


def _pump(
    stream: IO[bytes], log: IO[bytes], echo: IO[str] | None, rename: tuple[bytes, bytes] | None
) -> None:
    """Copy the output of nsys and the workload to capture.log and to `echo` (the CLI's stderr),
    with `rename` applied (nsys's "Generated: STAGING/report.nsys-rep" names the final OUTDIR)."""
    for raw in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
        chunk = raw.replace(*rename) if rename else raw
        log.write(chunk)
        log.flush()
        if echo is not None:
            with contextlib.suppress(OSError, ValueError):
                echo.write(chunk.decode(errors="replace"))
                echo.flush()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM to tracediff behaves like Ctrl-C, so nsys still finalises the report."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run_nsys(
    cmd: list[str],
    cwd: Path,
    env: dict[str, str],
    log_path: Path,
    echo: IO[str] | None,
    rename: tuple[bytes, bytes] | None = None,
) -> tuple[int, bool]:
    """Run nsys to completion; (exit code, interrupted). Ctrl-C/SIGTERM → one SIGINT to nsys."""
    interrupted = False
    with open(log_path, "wb") as log, _sigterm_as_interrupt():
        # own session: the terminal's Ctrl-C reaches only us, and we forward exactly one SIGINT
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdout is not None
        wt.add_owner(cwd, proc.pid)  # if we are killed, the worktree stays while nsys runs
        pump = threading.Thread(target=_pump, args=(proc.stdout, log, echo, rename), daemon=True)
        pump.start()
        signals = 0
        while True:
            try:
                # short waits, not one blocking waitpid: once polars' threads exist (a second
                # run of --repeat), Ctrl-C may land on one of them and would not interrupt it
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                continue
            except KeyboardInterrupt:
                interrupted = True
                signals += 1
                # 1st: SIGINT (nsys stops the app and writes the report); 2nd: again; 3rd: kill
                sig = signal.SIGINT if signals < 3 else signal.SIGKILL
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
        pump.join(timeout=10)
    return rc, interrupted


# What nsys prints when it fails on its own, before any report is written: seen on the shared
# 2-core machine under load ("Local Endpoint is not available" in 5 of 20 seeded bisections of
# session 8; "Connection to Agent lost" in two captures of a fresh-clone suite in session 11), and
# a line "End of file" alone (exit 1, no report: a fresh-clone suite with 4 pytest workers, so 4
# nsys sessions at once on 2 cores, session 13; matched as the whole line, being so short)
NSYS_TRANSIENT = ("Local Endpoint is not available", "Connection to Agent lost")
NSYS_TRANSIENT_LINES = ("End of file", "Generated:")
NSYS_SAID_WRITTEN = ("report.nsys-rep", "Generated:")
"""nsys's progress line on its report ending in its "Generated:" (the report's path line never
came, and no report is there: exit 0, a fresh-clone suite of session 20 under load)."""


def nsys_lost(staging: Path, rc: int, interrupted: bool) -> str | None:
    """The line of capture.log naming nsys's own transient failure, when nsys wrote no report and
    was not interrupted; None otherwise (a workload's failure leaves a report: it is not retried).
    Whatever nsys's exit code: it has exited 0 after "Connection to Agent lost" with no report (a
    fresh-clone suite's calibration pool, session 15)."""
    if interrupted or any(staging.glob("report.*")):
        return None
    try:
        log = (staging / "capture.log").read_text(errors="replace").splitlines()
    except OSError:
        return None
    return next(
        (
            ln.strip()
            for ln in log
            if any(t in ln for t in NSYS_TRANSIENT)
            or ln.strip() in NSYS_TRANSIENT_LINES
            or all(t in ln for t in NSYS_SAID_WRITTEN)
        ),
        None,
    )


def import_qdstrm(qdstrm: Path, nsys: str) -> Path | None:
    """report.qdstrm → report.nsys-rep with QdstrmImporter; None when there is no importer.

    Only the importer of the install that captured (or the user's, on PATH) is used: the one of
    another install need not read this nsys's .qdstrm (nsys_tool.find_qdstrm_importer)."""
    try:
        importer = nsys_tool.find_qdstrm_importer(Path(nsys), installed=False)
    except ToolError:
        return None
    rep = qdstrm.with_suffix(".nsys-rep")
    why = nsys_tool.import_qdstrm(importer, qdstrm, rep, src=qdstrm)
    if why is not None:
        raise ToolError(
            f"{qdstrm}: QdstrmImporter failed: {why}",
            "import it later with `tracediff parse` on a machine with the same nsys version",
        )
    qdstrm.unlink()
    return rep


def parse_report(report: Path) -> Any:
    """Report → Run, through the same reader as `tracediff parse`."""
    from tracediff.parse import load

    return load(report)


def capture(
    spec: CaptureSpec, echo: IO[str] | None = None, progress: Callable[[str], None] | None = None
) -> CaptureResult:
    """Run one capture end to end. Raises TracediffError before the workload starts; after it
    starts, problems are reported in the result (the report is kept). `echo` receives the output
    of nsys and the workload; `progress` one line per step."""
    say = progress or (lambda msg: None)
    from tracediff import __version__

    outdir = Path(spec.outdir)
    if not spec.command:
        raise UsageError("no workload to run", "give --preset NAME or `-- COMMAND ARGS...`")
    check_outdir(outdir, spec.force)
    nsys = find_nsys(spec.nsys)
    repo = wt.toplevel(spec.repo)
    sha = spec.commit or wt.resolve(repo, spec.ref)
    git = {"ref": spec.ref, "commit": sha, **wt.user_tree_state(repo)}
    patch = None
    if spec.include_uncommitted:
        if git["user_head"] != sha:
            raise UsageError(
                f"--include-uncommitted: {spec.ref} is not the checked-out HEAD of {repo}",
                "the edits are made on top of HEAD; profile HEAD, or commit them",
            )
        patch = wt.uncommitted_diff(repo)
    git["uncommitted_included"] = bool(patch)
    warnings = [w for w in [wt.dirty_warning(git, sha, bool(patch))] if w]
    for w in warnings:
        say(f"warning: {w}")

    m = mf.new_manifest(
        label=spec.label or spec.ref,
        preset=spec.preset,
        command=list(spec.command),
        git=git,
        host=mf.host_info(),
        tracediff_version=__version__,
    )
    mf.fill_gpus(m)
    m["nsys_version"] = mf.nsys_version(nsys)
    trace = resolve_trace(spec.trace, m["gpus"])
    made = make_parents(outdir)
    # absolute: nsys runs with cwd = the worktree
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.capture-", dir=outdir.parent)).resolve()
    report_base = staging / "report"
    try:
        with wt.worktree(repo, sha, patch) as tree:
            env = workload_env(spec, tree)
            env["TRACEDIFF_CAPTURE_COMMIT"] = sha
            m["env"] = mf.env_subset(env)
            m["cwd"] = str(tree)
            exe = _python_of(spec.command, spec.python)
            # one probe per interpreter and commit in a --repeat call (it imports torch: seconds)
            key = (exe, sha, tuple(spec.pythonpath), spec.nvtx_shim, bool(patch))
            cache = spec.probe_cache if spec.probe_cache is not None else {}
            if key not in cache:
                cache[key] = mf.python_info(exe, env, str(tree))
            py, why = cache[key]
            m["workload_python"] = py
            m["reasons"].update(why)
            sp = capture_stacks.plan(
                tree, spec.pythonpath, spec.stack_modules, spec.stacks, trace, staging,
                spec.extra_nsys_args,
            )  # fmt: skip
            m["stacks"] = sp.manifest
            # which files import nvtx: checked against the trace once it is parsed (_finish)
            nvtx_files = nvtxcheck.importers(tree, list(spec.command))
            cmd = nsys_command(nsys, spec, trace, report_base, sp.nsys_args)
            m["nsys_command"] = cmd
            say(f"profiling {sha[:12]} ({spec.ref}) under nsys -t {trace} → {outdir}")
            m["start_utc"] = mf.now_utc()
            t0 = time.monotonic()
            final = (str(staging).encode(), str(outdir.resolve()).encode())
            rc, interrupted = run_nsys(cmd, tree, env, staging / "capture.log", echo, final)
            lost = nsys_lost(staging, rc, interrupted)
            if lost:  # once: nsys's own failure, seen under load; a second one is reported
                say(f"retrying once: nsys produced no report (exit {rc}): {lost}")
                m["nsys_failed_attempts"] = [lost]
                (staging / "capture.log").rename(staging / "capture.attempt-1.log")
                # a session name of its own: the failed nsys may have left its session behind,
                # and the same name then fails with "session name already in use"
                cmd = nsys_command(nsys, spec, trace, report_base, sp.nsys_args)
                m["nsys_command"] = cmd
                rc, interrupted = run_nsys(cmd, tree, env, staging / "capture.log", echo, final)
            m["duration_s"] = round(time.monotonic() - t0, 3)
            m["end_utc"] = mf.now_utc()
            # clocks, P-state and power again, right after the load (start values are idle ones)
            m["gpus_end"], why = mf.gpu_info() if m["gpus"] is not None else (None, {})
            m["reasons"].update({k.replace("gpus", "gpus_end", 1): v for k, v in why.items()})
        say("importing and parsing the report")
        result = _finish(spec, m, staging, outdir, nsys, rc, interrupted, (nvtx_files, trace))
        result.warnings[:0] = warnings
        return result
    except BaseException:
        if not any(staging.glob("report.*")):  # nothing worth keeping (or already removed)
            shutil.rmtree(staging, ignore_errors=True)
            remove_if_empty(made)
        raise


def _finish(
    spec: CaptureSpec,
    m: dict[str, Any],
    staging: Path,
    outdir: Path,
    nsys: str,
    rc: int,
    interrupted: bool,
    nvtx: tuple[list[str], str] = ([], ""),
) -> CaptureResult:
    """The report parsed into run.arrow, the manifest completed (`nvtx`: the files importing
    nvtx and the nsys -t value, for nvtxcheck), the staging folder published as OUTDIR."""
    rep, qd = staging / "report.nsys-rep", staging / "report.qdstrm"
    m["nsys_exit_code"] = rc
    m["interrupted"] = interrupted
    # --output= named the staging folder; the report is read from OUTDIR from now on
    m["nsys_command"] = [a.replace(str(staging), str(outdir.resolve())) for a in m["nsys_command"]]
    m["partial"] = interrupted
    if not rep.exists() and not qd.exists():
        log = (staging / "capture.log").read_text(errors="replace").strip().splitlines()
        shutil.rmtree(staging, ignore_errors=True)
        if interrupted:
            raise KeyboardInterrupt
        raise NoReport(
            f"nsys produced no report (exit {rc}"
            + (", and on its retry" if m.get("nsys_failed_attempts") else "")
            + f"): {log[-1] if log else 'no output'}",
            "check the command runs on its own; the workload output is above",
            retried=len(m.get("nsys_failed_attempts") or []),
        )
    # nsys exits with the application's exit code once it has written a report
    m["workload_exit_code"] = rc
    problem = None
    exit_code = 0
    if interrupted:
        problem, exit_code = "interrupted: the capture is partial (metadata partial=true)", 130
    elif rc != 0:
        problem, exit_code = f"the workload exited with code {rc}; the report is kept", 1
    run_file = None
    warnings: list[str] = []
    if not rep.exists():
        try:
            rep = import_qdstrm(qd, nsys) or rep
        except ToolError as e:
            m["reasons"]["report"] = str(e)
    if rep.exists():
        m["report"] = rep.name
        try:
            run = parse_report(rep)
            run.metadata.update(
                label=m["label"], manifest=m, partial=m["partial"], commit=m["git"]["commit"]
            )
            run.metadata.update(spec.metadata)
            warnings += [w for w in [capture_stacks.recorded(m, run)] if w]
            warnings += [w for w in [nvtxcheck.check(m, run, *nvtx)] if w]
            run.metadata["source"] = str((outdir / rep.name).resolve())  # not the staging path
            # the parser named the staging folder, which is renamed to OUTDIR below
            run.warnings = [w.replace(str(staging), str(outdir.resolve())) for w in run.warnings]
            from tracediff.runs.runfile import write_run

            write_run(run, staging / "run.arrow")
            run_file = outdir / "run.arrow"
        except Exception as e:  # a parser bug must not lose the capture: the report is kept
            why = str(e) if isinstance(e, TracediffError) else f"{type(e).__name__}: {e}"
            m["reasons"]["run_file"] = why
            problem = problem or (
                f"the report could not be parsed ({why}); retry with "
                f"`tracediff parse {outdir / rep.name} -o {outdir / 'run.arrow'}`"
            )
            exit_code = exit_code or 1
    else:
        m["report"] = qd.name
        m["reasons"]["run_file"] = "no QdstrmImporter next to nsys: the .qdstrm was not imported"
        problem = problem or (
            f"no QdstrmImporter here: import later with "
            f"`tracediff parse {outdir / qd.name} -o {outdir / 'run.arrow'}`"
        )
    (staging / "manifest.json").write_text(json.dumps(m, indent=2, default=str) + "\n")
    publish(staging, outdir, spec.force)
    return CaptureResult(
        outdir=outdir,
        run_file=run_file,
        report=outdir / m["report"],
        manifest=m,
        exit_code=exit_code,
        problem=problem,
        warnings=warnings,
    )
