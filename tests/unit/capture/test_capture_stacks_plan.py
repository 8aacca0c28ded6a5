"""capture/stacks.plan (issue 19): which functions a capture traces for launch stacks, and when
it traces none (what the manifest's `stacks` says). Real files in a temp worktree, no nsys."""

from __future__ import annotations

import json
from pathlib import Path

from capture import stacks


def _tree(tmp_path: Path, functions: int = 2) -> Path:
    pkg = tmp_path / "src" / "app"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("def top():\n    pass\n")
    body = "".join(f"def f{i}():\n    pass\n" for i in range(functions))
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text(
        body + "class C:\n    def m(self):\n        def inner():\n            pass\n"
    )
    (pkg / "notpkg").mkdir()
    (pkg / "notpkg" / "x.py").write_text(
        "def hidden():\n    pass\n"
    )  # no __init__.py: not importable as app.notpkg
    (pkg / "broken.py").write_text("def (\n")
    (tmp_path / "script.py").write_text(
        "def main():\n    pass\n"
    )  # top-level script: run as __main__
    return tmp_path


def test_the_packages_functions_and_methods_are_traced(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    p = stacks.plan(tree, ["src"], None, True, "cuda,nvtx", tmp_path)
    cfg = json.loads((tmp_path / stacks.CONFIG_NAME).read_text())
    assert cfg == [
        {"domain": "python:app", "module": "app", "functions": ["top"]},
        {"domain": "python:app.sub.mod", "module": "app.sub.mod", "functions": ["f0", "f1", "C.m"]},
    ]
    assert p.nsys_args == [f"--python-functions-trace={tmp_path / stacks.CONFIG_NAME}"]
    assert p.manifest == {
        "recorded": "nsys function trace",
        "config": stacks.CONFIG_NAME,
        "modules": 2,
        "functions": 4,
    }


def test_named_modules_only(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    p = stacks.plan(tree, ["src"], ["app.sub"], True, "cuda,nvtx", tmp_path)
    assert p.manifest["functions"] == 3
    p = stacks.plan(tree, ["src"], ["nosuch"], True, "cuda,nvtx", tmp_path)
    assert p.nsys_args == [] and "nosuch" in p.manifest["why"]


def test_when_nothing_is_traced_the_manifest_says_why(tmp_path: Path) -> None:
    tree = _tree(tmp_path, functions=stacks.MAX_FUNCTIONS)
    big = stacks.plan(tree, ["src"], None, True, "cuda,nvtx", tmp_path)
    assert big.nsys_args == [] and "over 2000" in big.manifest["why"]
    assert not (tmp_path / stacks.CONFIG_NAME).exists()
    root = stacks.plan(tree, ["."], None, True, "cuda,nvtx", tmp_path)  # script.py, no package
    assert root.nsys_args == [] and "no Python package" in root.manifest["why"]
    off = stacks.plan(tree, ["src"], None, False, "cuda,nvtx", tmp_path)
    assert off.manifest == {"recorded": "none", "why": "turned off (--no-stacks)"}
    cuda = stacks.plan(tree, ["src"], None, True, "cuda", tmp_path)
    assert cuda.nsys_args == [] and "no NVTX" in cuda.manifest["why"]
    own = stacks.plan(
        tree,
        ["src"],
        None,
        True,
        "cuda,nvtx",
        tmp_path,
        ["--python-functions-trace=/tmp/mine.json"],
    )
    assert (
        own.nsys_args == []
        and own.manifest["nsys_arg"] == "--python-functions-trace=/tmp/mine.json"
    )
