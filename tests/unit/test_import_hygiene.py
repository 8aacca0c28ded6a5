"""The headless core never loads textual: only tracediff/tui/ may import it.

Each module is imported in a fresh interpreter (sys.modules of this test process already holds
whatever other tests imported).
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

NAMED = [
    "tracediff.cli",
    "tracediff.schema",
    "tracediff.runfile",
    "tracediff.report",
    "tracediff.engine.compare",
    "tracediff.engine.result",
    "tracediff.parse.load",
    "tracediff.commands.compare",
    "tracediff.commands.info",
    "tracediff.commands.parse",
    "tracediff.tui.model",  # the TUI's view model is headless too: timeable and testable alone
]


def _all_headless() -> list[str]:
    """Every module of the package outside tracediff/tui (so new modules are covered too)."""
    import tracediff

    found = {
        mod.name
        for mod in pkgutil.walk_packages(tracediff.__path__, "tracediff.")
        if not mod.name.startswith("tracediff.tui") and not mod.name.endswith("__main__")
    }
    return sorted(found | set(NAMED))


HEADLESS = _all_headless()

PROBE = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
    if "textual" in sys.modules:
        print(name)  # the first module whose import pulled textual in
        break
"""


def test_headless_modules_do_not_load_textual() -> None:
    # one fresh interpreter for all (this test process already holds what other tests imported);
    # checking after each import names the first offender
    r = subprocess.run(
        [sys.executable, "-c", PROBE, *HEADLESS], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "", f"{r.stdout.strip()} loads textual"
    assert "tracediff.engine.compare" in HEADLESS and len(HEADLESS) > 15


def test_cli_help_and_parser_do_not_load_textual() -> None:
    code = (
        "import sys; from tracediff.cli import build_parser; build_parser(); "
        "assert 'textual' not in sys.modules, sorted(m for m in sys.modules if 'textual' in m)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_probe_detects_textual() -> None:
    # the probe must be able to fail: importing the TUI app does load textual
    r = subprocess.run(
        [sys.executable, "-c", PROBE, "tracediff.tui.app"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.strip() == "tracediff.tui.app"
