"""The .pyi stubs of the C modules say what the built modules are, and ship with the package.

Each stub's functions are the module's public callables, with the parameters (names, order, all
positional-only: METH_VARARGS) that the C side's own docstring lists, so a change to either side
fails here; and pyproject's package data carries every stub and py.typed.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parents[2]
PARSE = ROOT / "tracediff" / "parse"
# each C module sits beside its reader (parse/nsys/, parse/kineto/, parse/stacks/)
STUBS = sorted(PARSE.rglob("_*.pyi"), key=lambda p: p.stem)


def test_each_c_module_has_a_stub() -> None:
    assert [p.with_suffix("") for p in STUBS] == sorted(
        (p.with_suffix("") for p in PARSE.rglob("_*.c")), key=lambda p: p.stem
    )


def _stub_functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("stub", STUBS, ids=lambda p: p.stem)
def test_stub_matches_the_built_module(stub: Path) -> None:
    mod = importlib.import_module(".".join(stub.relative_to(ROOT).with_suffix("").parts))
    public = {n for n in dir(mod) if not n.startswith("_") and callable(getattr(mod, n))}
    funcs = _stub_functions(stub)
    assert set(funcs) == public
    for name, fn in funcs.items():
        doc = getattr(mod, name).__doc__
        m = re.match(rf"{name}\(([^)]*)\)", doc)
        assert m, f"{stub.name}: {name}'s C docstring does not start with its signature"
        # "f(a, b[, c])": c is optional, so the stub must give it (and only it) a default
        sig = m.group(1)
        required = sig.split("[", 1)[0]
        c_params = [p.strip(" []") for p in sig.split(",") if p.strip(" []")]
        n_required = len([p for p in required.split(",") if p.strip()])
        a = fn.args
        assert [p.arg for p in a.posonlyargs] == c_params, name
        assert len(a.posonlyargs) - len(a.defaults) == n_required, f"{name}: optional arguments"
        assert not (a.args or a.kwonlyargs or a.vararg or a.kwarg), f"{name}: positional only"
        assert fn.returns is not None and all(p.annotation for p in a.posonlyargs), name


def test_stubs_and_py_typed_are_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data = config["tool"]["setuptools"]["package-data"]

    def shipped(path: Path) -> bool:
        rel = path.relative_to(ROOT)
        pkg = ".".join(rel.parent.parts)
        patterns = [*data.get("*", []), *data.get(pkg, [])]
        return any(fnmatch.fnmatch(rel.name, p) for p in patterns)

    assert (ROOT / "tracediff" / "py.typed").exists()
    for path in [*STUBS, ROOT / "tracediff" / "py.typed"]:
        assert shipped(path), path
