"""Locate and run the Nsight Systems command-line tools (nsys, QdstrmImporter).

Stage: plumbing for parse (export) and capture; the one place that looks for these tools. nsys:
the path given (capture's --nsys), else $TRACEDIFF_NSYS (the executable or its folder), `nsys` on
PATH, then the prefix tools/install-nsys.sh installs to. QdstrmImporter: beside that nsys
(NVIDIA's layouts put it in the same folder or in a host-linux-x64/ beside or below it), then on
PATH, then (unless a capture asks for its own install's only) under that prefix.
Child output is captured, never shown; a run that exceeds its timeout is killed with its
process group.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tracediff.base import settings
from tracediff.base.errors import ToolError, UnsupportedVersionError

DEFAULT_PREFIX = Path("/opt/nsys-2024.2.3")
INSTALL_HINT = (
    "install it with `make nsys` (tools/install-nsys.sh), "
    "or set TRACEDIFF_NSYS to the nsys executable"
)
ENV = settings.NSYS.name

# Report headers: .nsys-rep "NVIDIA Tegra Profiler Report 2024@2@3@38-...",
# .qdstrm "...NVIDIA Nsight Systems Stream 2024.2.3.38-..."
_REP_HEADER = re.compile(rb"Profiler Report (\d+)@(\d+)@(\d+)@(\d+)")
_QDSTRM_HEADER = re.compile(rb"Nsight Systems Stream (\d+)\.(\d+)\.(\d+)\.(\d+)")
_VERSION = re.compile(r"(\d{4})\.(\d+)\.(\d+)(?:\.(\d+))?")
# nsys export: "Report was created in Nsight Systems version (2026.2.1.21-...), newer than your
# current version (2024.2.3.38-...)."
_NEWER = re.compile(r"version \((\d[\d.]*)[^)]*\), newer than your current version \((\d[\d.]*)")


def _exe(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_nsys(explicit: str | None = None) -> Path:
    """The nsys executable: `explicit` (capture's --nsys), else the search in the module
    docstring; a path given (either way) may be nsys's folder. ToolError saying how to install
    it, or naming the given path that holds none."""
    for given, where in ((explicit, "--nsys "), (settings.nsys(), f"{ENV}=")):
        if given:
            p = Path(given)
            if p.is_dir():
                p = p / "nsys"
            if not _exe(p):
                raise ToolError(f"{where}{given}: no nsys executable there", INSTALL_HINT)
            return p
    on_path = shutil.which("nsys")
    if on_path:
        return Path(on_path)
    p = DEFAULT_PREFIX / "bin" / "nsys"
    if _exe(p):
        return p
    raise ToolError("Nsight Systems (nsys) is not installed", INSTALL_HINT)


def find_qdstrm_importer(nsys: Path | None = None, *, installed: bool = True) -> Path:
    """QdstrmImporter, which turns a raw .qdstrm capture into a .nsys-rep: beside `nsys`
    (default: find_nsys()'s, if any), then on PATH, then (`installed`) under DEFAULT_PREFIX.
    A capture passes its nsys and installed=False: the importer of another install, such as the
    one tools/install-nsys.sh put in /opt, need not read what this nsys wrote (a target-only
    install has none; the .qdstrm is then kept for a later `tracediff parse`)."""
    candidates: list[Path] = []
    if nsys is None:
        with contextlib.suppress(ToolError):
            nsys = find_nsys()
    if nsys is not None:
        for base in dict.fromkeys((nsys.parent, nsys.resolve().parent)):
            candidates += [
                base / "QdstrmImporter",
                base.parent / "host-linux-x64" / "QdstrmImporter",
                base / "host-linux-x64" / "QdstrmImporter",
            ]
    on_path = shutil.which("QdstrmImporter")
    if on_path:
        candidates.append(Path(on_path))
    if installed:
        candidates.append(DEFAULT_PREFIX / "bin" / "QdstrmImporter")
    for c in candidates:
        if _exe(c):
            return c
    raise ToolError("QdstrmImporter (part of Nsight Systems) is not installed", INSTALL_HINT)


def parse_version(text: str) -> tuple[int, ...] | None:
    m = _VERSION.search(text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def fmt_version(v: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in v)


@cache
def version_output(exe: str) -> tuple[str, str] | None:
    """What `EXE --version` prints (stdout, stderr), run once a process: a bisection captures
    dozens of runs with one nsys, and each `nsys --version` costs ~0.07 CPU-s."""
    try:
        r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout, r.stderr


@cache
def tool_version(exe: Path) -> tuple[int, ...] | None:
    """Version of an nsys or QdstrmImporter executable, e.g. (2024, 2, 3, 38)."""
    out = version_output(str(exe))
    return parse_version(out[0] + out[1]) if out else None


def report_version(path: Path) -> tuple[int, ...] | None:
    """Nsight Systems version that wrote a .nsys-rep or .qdstrm, from its header."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    m = _REP_HEADER.search(head) or _QDSTRM_HEADER.search(head)
    return tuple(int(g) for g in m.groups()) if m else None


def check_can_open(path: Path, exe: Path) -> None:
    """Refuse a report newer than the installed tool before running it."""
    made, have = report_version(path), tool_version(exe)
    if made and have and made[:3] > have[:3]:
        raise _newer(path, fmt_version(made), fmt_version(have))


def _newer(path: Path, made: str, have: str) -> UnsupportedVersionError:
    return UnsupportedVersionError(
        f"{path}: report was written by Nsight Systems {made}; the installed nsys is {have}",
        f"open it with nsys {made} or newer (set {ENV}), "
        "or run `nsys export --type sqlite` where it was captured and give tracediff the .sqlite",
    )


@dataclass
class Result:
    returncode: int
    output: str  # stdout and stderr together, for error messages


def run(cmd: list[str], *, timeout: float, what: str, src: Path) -> Result:
    """Run a tool with its output captured; kill its whole process group on timeout."""
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as e:
        raise ToolError(f"{cmd[0]}: cannot run: {e.strerror or e}", INSTALL_HINT) from None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ToolError(
            f"{src}: {what} did not finish within {timeout:g} s",
            f"the report may be very large: set {settings.NSYS_TIMEOUT.name} to more seconds "
            f"(default {settings.DEFAULT_NSYS_TIMEOUT_S:g}), or export it with nsys yourself",
        ) from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    text = out.decode("utf-8", "replace")
    m = _NEWER.search(text)
    if m:
        raise _newer(src, m.group(1).rstrip("."), m.group(2).rstrip("."))
    return Result(proc.returncode, text)


def import_qdstrm(importer: Path, qdstrm: Path, out: Path, *, src: Path) -> str | None:
    """QdstrmImporter on `qdstrm` into `out`, run a second time when the first fails; None once
    `out` is written, else the line of its output that says why (`src`: the file to name in errors).

    Twice at most: under load QdstrmImporter has failed on a .qdstrm that it then imported
    ("InvalidArgumentException", a bisect --pool on a loaded 2-core machine, session 14)."""
    cmd = [str(importer), "-i", str(qdstrm), "-o", str(out)]
    for _ in range(2):
        out.unlink(missing_ok=True)
        r = run(cmd, timeout=settings.nsys_timeout(), what="QdstrmImporter", src=src)
        if r.returncode == 0 and out.exists():
            return None
    return last_error_line(r.output)


def last_error_line(output: str) -> str:
    """The line of tool output that says what went wrong (progress bars dropped)."""
    lines: list[str] = [ln.strip() for ln in re.split(r"[\r\n]+", output) if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("Processing") and "%" not in ln[:40]]
    for ln in reversed(lines):
        if re.search(r"error|fail|cannot|invalid|not found|mismatch", ln, re.IGNORECASE):
            return ln
    return lines[-1] if lines else "no output"
