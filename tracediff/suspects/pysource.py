"""Python function extents and call sites of one file version, from `ast`.

Stage: commit suspects (issue 19). Input: a file's bytes at one commit; output: its functions
(qualified name, first line as the profiler writes it, last line) and, per function, the lines
of the calls it makes by callee name. A Kineto frame names a function by its first line at the
capture commit (`co_firstlineno`: the first decorator's line when decorated), so a frame is found
at that commit by (name, first line) and followed to other commits by its qualified name.
"""

from __future__ import annotations

import ast
import re
import warnings
from bisect import bisect_right
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


_HEAD = re.compile(rb"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)", re.M)
_RETRIES = 6
"""Block ends tried (the next less-indented lines) before a function is given up on."""


def _indent(line: bytes) -> int | None:
    """Indentation of a line of code; None for blank and comment lines."""
    t = line.lstrip(b" \t")
    if not t or t.startswith(b"#") or t == b"\r":
        return None
    return len(line) - len(t)


def _inside(line: bytes, indent: int) -> bool:
    """A line of a block opened at `indent` (deeper, blank or a comment)."""
    i = _indent(line)
    return i is None or i > indent


class Source:
    """One version of a Python file: its `def`/`class` lines found by a regular expression, and
    a function's extent, calls and branches parsed with `ast` from that function's own lines
    when asked for (a whole-file parse per version is what made 50 commits take seconds)."""

    def __init__(self, data: bytes) -> None:
        self.lines = data.split(b"\n")
        starts = [0]
        pos = data.find(b"\n")
        while pos >= 0:
            starts.append(pos + 1)
            pos = data.find(b"\n", pos + 1)
        self.heads: list[tuple[int, int, str, str]] = []  # (line, indent, def|class, name)
        for m in _HEAD.finditer(data):
            line = bisect_right(starts, m.start())
            kind, name = m.group(2).decode(), m.group(3).decode(errors="replace")
            self.heads.append((line, len(m.group(1)), kind, name))
        self._funcs: dict[int, Func | None] = {}

    def find(self, name: str, line: int | None) -> Func | None:
        """The function a frame names: the `def name` at `line` or under decorators starting
        there, else the one whose extent holds `line`, else the only one of that name."""
        same = [h for h in self.heads if h[2] == "def" and h[3] == name]
        if line is not None:
            for h in same:
                f = self._func(h)
                if f is not None and line in (f.first, f.def_line):
                    return f
            if 0 < line <= len(self.lines) and self.lines[line - 1].lstrip().startswith(b"@"):
                below = [h for h in same if h[0] > line]  # under a decorator spanning lines
                f = self._func(below[0]) if below else None
                if f is not None:
                    f.first = min(f.first, line)
                    return f
            inner = [f for h in same if (f := self._func(h)) and f.first <= line <= f.last]
            if inner:
                return max(inner, key=lambda f: f.first)
        return self._func(same[0]) if len(same) == 1 else None

    def _qualname(self, line: int, indent: int, name: str) -> str:
        parts = [name]
        for _ln, ind, _, nm in reversed([h for h in self.heads if h[0] < line]):
            if ind < indent:
                parts.append(nm)
                indent = ind
                if ind == 0:
                    break
        return ".".join(reversed(parts))

    def _func(self, head: tuple[int, int, str, str]) -> Func | None:
        line, indent, _, name = head
        if line in self._funcs:
            return self._funcs[line]
        lines = self.lines
        first = line
        while first > 1 and lines[first - 2].lstrip(b" \t").startswith(b"@"):
            first -= 1
        found = None
        end, tries = line, 0
        while tries < _RETRIES and end < len(lines):
            end += 1  # the next line of code at the def's indent or less ends the block
            while end <= len(lines) and _inside(lines[end - 1], indent):
                end += 1
            block = b"\n".join(
                x[indent:] if x[:indent].strip() == b"" else x.lstrip()
                for x in lines[first - 1 : end - 1]
            )
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # SyntaxWarnings of the user's code
                    tree = ast.parse(block)
            except (SyntaxError, ValueError):
                tries += 1
                continue
            w = _Walk()
            w.visit(tree)
            if w.funcs and w.funcs[0].name == name:
                found = w.funcs[0]
                off = first - 1
                found.qualname = self._qualname(line, indent, name)
                found.first += off
                found.def_line += off
                found.last += off
                found.calls = {
                    k: [(a + off, b + off) for a, b in v] for k, v in found.calls.items()
                }
                found.branches = [(a + off, b + off) for a, b in found.branches]
            break
        self._funcs[line] = found
        return found


def parse(data: bytes) -> Source:
    """A file version, its functions read when asked for (Source.find)."""
    return Source(data)


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
