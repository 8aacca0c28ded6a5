"""Launch stacks in a capture: the nsys function-trace config for the workload's own packages.

Stage: capture. Input: the worktree and its PYTHONPATH folders (CaptureSpec.pythonpath), or the
modules the user named (--stack-module); output: a `Plan` -- the `--python-functions-trace`
config (written into the capture's staging folder), the nsys argument, and what the manifest
says about stacks (`manifest["stacks"]`), or why none are recorded.

`nsys profile --python-functions-trace=CONFIG.json` (nsys 2024.2+) wraps the listed Python
functions in NVTX ranges with no code change and no CPU sampling; tracediff's nsys reader turns
the ranges of `python:MODULE` domains into launch stacks (parse/nsys/stacks.py). Default: every
function and method (read with `ast`, nothing imported) of every module of the Python packages
(folders with `__init__.py`) at the top of the PYTHONPATH folders, tests excepted, when they are
at most MAX_FUNCTIONS -- a range per call costs time on the launching thread, so a large code
base (SGLang: thousands) is not traced unless modules are named. The workload needs the Python
`nvtx` package (0.2.10 works with nsys 2024.2.3); a capture whose trace recorded no range says
so (`recorded_ranges` 0 and a warning).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracediff.runs.stackdomain import FUNCTION_DOMAIN

MAX_FUNCTIONS = 2000
CONFIG_NAME = "function-trace.json"
_SKIP_DIRS = {"tests", "test", "__pycache__", "build", "dist", ".git"}


@dataclass
class Plan:
    nsys_args: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)


def plan(
    tree: Path, pythonpath: list[str], modules: list[str] | None, enabled: bool, trace: str,
    staging: Path, nsys_args: list[str] | None = None,
) -> Plan:  # fmt: skip
    """What this capture records for stacks; writes the config into `staging` when it does.
    Needs neither polars nor pyarrow (the GPU host's Python may lack them)."""
    if not enabled:
        return Plan(manifest={"recorded": "none", "why": "turned off (--no-stacks)"})
    own = [a for a in nsys_args or [] if a.startswith("--python-functions-trace")]
    if own:  # the user's config wins (nsys takes one); stacks only from python:MODULE domains
        return Plan(manifest={"recorded": "the user's nsys function trace", "nsys_arg": own[-1]})
    if "nvtx" not in trace.split(","):
        return Plan(manifest={"recorded": "none", "why": f"nsys -t {trace} traces no NVTX"})
    found = _modules(tree, pythonpath, modules)
    n = sum(len(f) for f in found.values())
    if not n:
        why = (
            f"none of the modules {', '.join(modules)} found in the worktree"
            if modules
            else "no Python package (folder with __init__.py) at the top of the PYTHONPATH "
            f"folders {', '.join(pythonpath)}"
        )
        return Plan(manifest={"recorded": "none", "why": why})
    if modules is None and n > MAX_FUNCTIONS:
        return Plan(
            manifest={
                "recorded": "none",
                "why": f"the workload's packages have {n} functions (over {MAX_FUNCTIONS}): a "
                "range per call is not cheap there; name modules with --stack-module",
            }
        )
    config = [
        {"domain": FUNCTION_DOMAIN + mod, "module": mod, "functions": fns}
        for mod, fns in sorted(found.items())
        if fns
    ]
    path = staging / CONFIG_NAME
    path.write_text(json.dumps(config, indent=1) + "\n")
    return Plan(
        nsys_args=[f"--python-functions-trace={path}"],
        manifest={
            "recorded": "nsys function trace",
            "config": CONFIG_NAME,
            "modules": len(config),
            "functions": n,
        },
    )


def _modules(tree: Path, pythonpath: list[str], named: list[str] | None) -> dict[str, list[str]]:
    """module → its functions and methods (`f`, `Class.f`), from the worktree's sources."""
    out: dict[str, list[str]] = {}
    for entry in pythonpath:
        root = (tree / entry).resolve()
        if not root.is_dir():
            continue
        for pkg in sorted(p for p in root.iterdir() if (p / "__init__.py").is_file()):
            for f in sorted(pkg.rglob("*.py")):
                rel = f.relative_to(root)
                if _SKIP_DIRS & set(rel.parts[:-1]) or not _is_package_path(root, rel):
                    continue
                parts = list(rel.with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                mod = ".".join(parts)
                if named is not None and not any(
                    mod == m or mod.startswith(m + ".") for m in named
                ):
                    continue
                out.setdefault(mod, _functions(f))
    return out


def _is_package_path(root: Path, rel: Path) -> bool:
    """Every folder from the top package down to the file has an __init__.py (importable)."""
    d = root
    for part in rel.parts[:-1]:
        d = d / part
        if not (d / "__init__.py").is_file():
            return False
    return True


def _functions(path: Path) -> list[str]:
    """Module-level functions and the methods of module-level classes (nested ones are not
    reachable by name); a file that does not parse has none."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return []
    fns = (ast.FunctionDef, ast.AsyncFunctionDef)
    out = []
    for node in tree.body:
        if isinstance(node, fns):
            out.append(node.name)
        elif isinstance(node, ast.ClassDef):
            out += [f"{node.name}.{m.name}" for m in node.body if isinstance(m, fns)]
    return out


def recorded(manifest: dict[str, Any], run: Any) -> str | None:
    """Fill what the trace recorded into manifest["stacks"]; a warning when it recorded nothing."""
    st = manifest.get("stacks") or {}
    if st.get("recorded") not in ("nsys function trace", "the user's nsys function trace"):
        return None
    import polars as pl

    nv = pl.from_arrow(run.tables["nvtx_ranges"].select(["domain"]))
    assert isinstance(nv, pl.DataFrame)
    dom = nv["domain"].cast(pl.String)
    st["recorded_ranges"] = int(dom.str.starts_with(FUNCTION_DOMAIN).sum())
    st["stacks"] = len(set(run.tables["stacks"].column("stack_id").to_pylist()))
    k = run.tables["kernels"].column("stack_id")
    st["kernels_with_stack"] = len(k) - k.null_count
    if not st["recorded_ranges"]:
        if st["recorded"] != "nsys function trace":
            return (
                f"the function trace of {st['nsys_arg']} recorded no range in a python:MODULE "
                "domain: launch stacks are read from those only (docs/launch-stacks.md)"
            )
        return (
            "the function trace recorded no ranges: is the Python nvtx package installed in the "
            "workload's environment (0.2.10 works with nsys 2024.2)?"
        )
    return None
