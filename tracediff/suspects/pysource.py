"""Python function extents and call sites of one file version, from `ast`.

Stage: commit suspects (issue 19). Input: a file's bytes at one commit; output: its functions
(qualified name, first line as the profiler writes it, last line) and, per function, the lines
of the calls it makes by callee name. A Kineto frame names a function by its first line at the
capture commit (`co_firstlineno`: the first decorator's line when decorated), so a frame is found
at that commit by (name, first line) and followed to other commits by its qualified name.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field


@dataclass
class Func:
    qualname: str
    name: str
    first: int  # the first decorator's line, else the def line (co_firstlineno)
    def_line: int
    last: int
    calls: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """callee name (a call's `f` or `x.f`) → the line spans of those calls, nested defs included"""
    branches: list[tuple[int, int]] = field(default_factory=list)
    """line spans of conditional blocks (an `if`'s body or else, an `except` handler)"""


@dataclass
class Source:
    funcs: list[Func]

    def find(self, name: str, line: int | None) -> Func | None:
        """The function a frame names: by name and first (or def) line; else the only one of
        that name; else None."""
        same = [f for f in self.funcs if f.name == name]
        for f in same:
            if line is not None and line in (f.first, f.def_line):
                return f
        return same[0] if len(same) == 1 else None

    def by_qualname(self, qualname: str) -> Func | None:
        for f in self.funcs:
            if f.qualname == qualname:
                return f
        return None


def _callee(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


class _Walk(ast.NodeVisitor):
    def __init__(self) -> None:
        self.funcs: list[Func] = []
        self.scope: list[str] = []
        self.open: list[Func] = []

    def _def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        q = ".".join([*self.scope, node.name])
        f = Func(q, node.name, first, node.lineno, node.end_lineno or node.lineno)
        self.funcs.append(f)
        self.scope.append(node.name)
        self.open.append(f)
        self.generic_visit(node)
        self.open.pop()
        self.scope.pop()

    visit_FunctionDef = _def
    visit_AsyncFunctionDef = _def

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def _block(self, body: list[ast.stmt]) -> None:
        if body and self.open:
            span = (body[0].lineno, body[-1].end_lineno or body[-1].lineno)
            self.open[-1].branches.append(span)

    def visit_If(self, node: ast.If) -> None:
        self._block(node.body)
        self._block(node.orelse)
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._block(node.body)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _callee(node)
        if name is not None:
            span = (node.lineno, node.end_lineno or node.lineno)
            for f in self.open:
                f.calls.setdefault(name, []).append(span)
        self.generic_visit(node)


def parse(data: bytes) -> Source | None:
    """The functions of a Python file's text; None when it does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings of the user's code are not ours
            tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    w = _Walk()
    w.visit(tree)
    return Source(w.funcs)


def callee_name(function: str | None) -> str | None:
    """The name a caller's code calls a frame by: `<built-in method arange of type object>` →
    arange, `<built-in function gelu>` → gelu, `mlp` → mlp; None where no call names it
    (`nn.Module: Linear_0`, `<lambda>`)."""
    if not function:
        return None
    for lead in ("<built-in method ", "<built-in function "):
        if function.startswith(lead):
            return function[len(lead) :].split(" ", 1)[0].rstrip(">") or None
    if function.startswith("<") or ":" in function or " " in function:
        return None
    return function
