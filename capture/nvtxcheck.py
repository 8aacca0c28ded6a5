"""Did the workload's own NVTX ranges reach the trace? The check `tracediff capture` makes of every run.

Stage: capture. Input: the worktree (before the workload runs: which of its Python files import
the `nvtx` package) and, once the report is parsed, the run's `nvtx_ranges`; output:
`manifest["nvtx"]` and one warning where a workload that imports `nvtx` recorded no NVTX event
of its own. nsys 2024.2 drops the ranges of nvtx 0.2.12 and later (stackdomain.NVTX_DROPPED)
while it still records the function-trace ranges capture adds (`python:MODULE`): without this
check `compare` had only those to cut cycles at (issue 30). The cause is named only where the
workload's nvtx version is one nsys 2024.2 drops; otherwise the warning says it is not known.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from tracediff.runs.stackdomain import NVTX_DROPPED, NVTX_FIX, TOOL_DOMAIN_PREFIXES

IMPORT = r"^\s*(import|from)\s+nvtx\b"
"""A line that imports the nvtx package (`import nvtx`, `from nvtx import annotate`)."""
SHOWN = 5
"""At most this many importing files are named in the manifest."""
FIRST_DROPPED = (0, 2, 12)
"""The first nvtx version whose ranges nsys 2024.2.3 dropped here (0.2.11 recorded; 0.2.12,
0.2.13, 0.2.14, 0.2.15, 0.2.16 and 0.2.17 did not: tests/integration/test_capture_nvtx.py)."""


def importers(tree: Path, command: list[str]) -> list[str]:
    """The worktree's Python files (and the command's own .py arguments outside it) that import
    nvtx, by `git grep` (the worktree is a git checkout; nothing is imported or run)."""
    found: list[str] = []
    r = subprocess.run(
        ["git", "-C", str(tree), "grep", "-l", "-E", IMPORT, "--", "*.py"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if r.returncode == 0:
        found += r.stdout.splitlines()
    pattern = re.compile(IMPORT, re.M)
    for arg in command:
        path = Path(arg) if Path(arg).is_absolute() else tree / arg
        if arg.endswith(".py") and path.is_file() and not _inside(path, tree):
            try:
                if pattern.search(path.read_text(errors="replace")):
                    found.append(str(path))
            except OSError:
                continue
    return found


def _inside(path: Path, tree: Path) -> bool:
    try:
        path.resolve().relative_to(tree.resolve())
        return True
    except ValueError:
        return False


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = re.findall(r"\d+", text)[:3]
    return tuple(int(p) for p in parts) if parts else None


def check(manifest: dict[str, Any], run: Any, files: list[str] | None, trace: str) -> str | None:
    """Fill manifest["nvtx"] from the parsed run; the warning of a workload that imports nvtx
    and recorded no NVTX event of its own (None otherwise). `files`: `importers`' answer, None
    when the worktree was not scanned."""
    import polars as pl

    nv = pl.from_arrow(run.tables["nvtx_ranges"].select(["domain", "name"]))
    assert isinstance(nv, pl.DataFrame)
    domain = pl.col("domain").cast(pl.String).fill_null("")
    tool = pl.any_horizontal(domain.str.starts_with(p) for p in TOOL_DOMAIN_PREFIXES)
    # NCCL's own ranges are the library's, not the workload's (engine/cycle/ranges.py read_ranges)
    nccl = (domain == "NCCL") | pl.col("name").cast(pl.String).fill_null("").str.contains(
        r"^nccl[A-Z]"
    )
    counts = nv.select(tool.sum().alias("tool"), (~tool & ~nccl).sum().alias("own"))
    n_tool, n_own = int(counts["tool"][0] or 0), int(counts["own"][0] or 0)
    version = (manifest.get("workload_python") or {}).get("nvtx_version")
    st: dict[str, Any] = {
        "workload_imports": (files or [])[:SHOWN],
        "workload_imports_count": len(files or []),
        "nvtx_version": version,
        "own_events": n_own,
        "tool_ranges": n_tool,
        "problem": None,
    }
    manifest["nvtx"] = st
    if "nvtx" not in trace.split(","):
        st["problem"] = f"not checked: nsys -t {trace} traces no NVTX"
        return None
    if not files or n_own:
        return None
    where = ", ".join(files[:2]) + (f" and {len(files) - 2} more" if len(files) > 2 else "")
    v = _version(version)
    if v is not None and v >= FIRST_DROPPED:
        st["problem"] = (
            f"the workload imports nvtx ({where}), nvtx {version} in its Python, and the trace "
            f"holds no NVTX range of its own: {NVTX_DROPPED}; {NVTX_FIX}"
        )
    else:
        st["problem"] = (
            f"the workload imports nvtx ({where}) but the trace holds no NVTX range of its own; "
            f"nvtx {version or '(version unknown)'} is not one nsys 2024.2 is known to drop: "
            "check that the code opening the ranges runs inside the capture"
        )
    return f"{st['problem']} (compare will not cut cycles at capture's function-trace ranges)"
