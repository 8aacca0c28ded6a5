"""The tracediff package as it was at a git revision, for benches that time it against this
checkout (`--before REV`): `git archive` of REV's tracediff/ with REV's own C modules built as
pyproject builds them (REV's Python may not read this checkout's modules: the Kineto scanner's
columns changed in 733fdc9); a module that does not build stops the bench."""

from __future__ import annotations

import subprocess
import sysconfig
import tarfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extract(rev: str, into: Path) -> None:
    """REV's tracediff package into `into` (put `into` first on PYTHONPATH to run it)."""
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "tracediff"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    parse = into / "tracediff" / "parse"
    include, suffix = sysconfig.get_paths()["include"], sysconfig.get_config_var("EXT_SUFFIX")
    for src in parse.rglob("_*.c"):  # beside their readers (parse/nsys/...) since issue 29
        so = src.with_name(f"{src.stem}{suffix}")
        cc = ["gcc", "-shared", "-fPIC", "-O2", "-std=c11", f"-I{include}", str(src), "-o", str(so)]
        done = subprocess.run([*cc, "-lpthread", "-lm"], capture_output=True, text=True)
        if done.returncode:  # this checkout's module may not fit REV's Python: no comparison
            raise SystemExit(f"building {rev}'s {src.name} failed: {done.stderr.strip()[-500:]}")
