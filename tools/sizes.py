"""The house's size limits: no module over 600 lines, no function over 100 (issue 29).

    python3 tools/sizes.py              # tracediff/ and capture/
    python3 tools/sizes.py tests bench  # any folders

Lists each module over MODULE_LINES lines and each function over FUNCTION_LINES (from its `def`
to its last line, docstring included, decorators not); exit 1 if any.
"""

from __future__ import annotations

import ast
import subprocess
import sys

MODULE_LINES = 600
FUNCTION_LINES = 100


def over(path: str) -> list[str]:
    text = open(path, encoding="utf-8").read()
    found = []
    lines = text.count("\n")
    if lines > MODULE_LINES:
        found.append(f"{path}: module of {lines} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > FUNCTION_LINES:
                found.append(f"{path}:{node.lineno}: {node.name} of {length} lines")
    return found


def main() -> int:
    folders = [f.rstrip("/") + "/" for f in sys.argv[1:]] or ["tracediff/", "capture/"]
    listed = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, check=True)
    paths = [p for p in listed.stdout.split() if p.startswith(tuple(folders))]
    found = [line for path in paths for line in over(path)]
    print("\n".join(found) or f"none over {MODULE_LINES} / {FUNCTION_LINES} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
