"""The tests' nsys: the real one, reading an empty /proc/kallsyms where the machine allows.

nsys's daemon reads and parses /proc/kallsyms at every `nsys profile` (kernel symbols, for the
CPU backtraces of sampling; tracediff's captures sample nothing, `--sample=none`): ~0.5 of the
~0.85 CPU-s of a tiny capture on the development VM (121,866 lines; `perf record` of one
capture: 73 % of its samples in the daemon's AnalysisService thread, in kallsyms_expand_symbol,
vsnprintf, vfscanf, strtoull), and the suite makes ~330 captures. Where the test process may
(root, util-linux `unshare`), nsys runs in a mount namespace of its own in which /proc/kallsyms
is /dev/null: the same nsys binary and the same report of NVTX/CUDA traces, its output the same
(measured: 0.76-0.92 -> 0.33-0.35 CPU-s a capture, the whole process tree in a cpuacct cgroup).
Elsewhere the tests get the plain nsys, and the summary line says which (tests/conftest.py).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

# the real nsys is exec'ed by `sh -c SCRIPT NSYS ARGS...`: $0 is NSYS
_HIDE = 'mount --bind /dev/null /proc/kallsyms && exec "$0" "$@"'
_REAL = re.compile(r"^# real: (.+)$", re.M)
_EXEC = re.compile(r'exec "([^"$]+)"')
_LIB = re.compile(r'LD_LIBRARY_PATH="([^"$]+)')


@functools.cache
def can_hide_kallsyms() -> bool:
    """Whether nsys can be run with /proc/kallsyms empty: a mount namespace needs root here."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--mount", "sh", "-c", "mount --bind /dev/null /proc/kallsyms"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def real_nsys(nsys: str | Path) -> tuple[Path, str | None]:
    """The nsys binary behind `nsys` (through the shell wrappers of tools/install-nsys.sh and of
    this module) and the LD_LIBRARY_PATH a wrapper gives it, if any."""
    path, lib = Path(nsys), None
    for _ in range(8):
        data = path.read_bytes()[:4096] if path.is_file() else b""
        if not data.startswith(b"#!"):
            break
        text = data.decode(errors="replace")
        lib = lib or (m.group(1) if (m := _LIB.search(text)) else None)
        m = _REAL.search(text) or _EXEC.search(text)
        if m is None:
            break
        path = Path(m.group(1))
    return (path if path != Path(nsys) else path.resolve()), lib


def write_nsys(path: Path, real: Path, lib: str | None) -> Path:
    """A shell wrapper at `path` that runs the nsys binary `real` (with `lib` on
    LD_LIBRARY_PATH), with /proc/kallsyms empty when can_hide_kallsyms(). Its pid is nsys's
    (exec all the way down: a signal to it reaches nsys)."""
    env = f'export LD_LIBRARY_PATH="{lib}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\n' if lib else ""
    run = (
        f'exec unshare --mount sh -c \'{_HIDE}\' "{real}" "$@"\n'
        if can_hide_kallsyms()
        else f'exec "{real}" "$@"\n'
    )
    path.write_text(f"#!/bin/sh\n# real: {real}\n{env}{run}")
    path.chmod(0o755)
    return path


def tests_nsys(nsys: str, dest: Path) -> str:
    """The nsys the tests run: `nsys` itself where kallsyms cannot be hidden, else a wrapper in
    `dest` with the install's QdstrmImporter linked beside it (capture and the tests look for
    it beside the nsys they run)."""
    if not can_hide_kallsyms():
        return nsys
    from tracediff.base import nsys_tool
    from tracediff.base.errors import ToolError

    real, lib = real_nsys(nsys)
    wrapper = write_nsys(dest / "nsys", real, lib)
    try:
        importer = nsys_tool.find_qdstrm_importer(Path(nsys), installed=False)
    except ToolError:  # an install without one: its captures keep their .qdstrm
        return str(wrapper)
    (dest / "QdstrmImporter").symlink_to(importer)
    return str(wrapper)
