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
    "tracediff.runs.schema",
    "tracediff.runs.runfile",
    "tracediff.report",
    "tracediff.engine.compare",
    "tracediff.engine.result",
    "tracediff.parse.load",
    "tracediff.commands.compare",
    "tracediff.commands.info",
    "tracediff.commands.parse",
    "tracediff.tui.model",  # the TUI's view model is headless too: timeable and testable alone
    "tracediff.tui.reasons",  # what keys say when they cannot act: headless as well
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


# On the GPU host `tracediff capture` runs in the workload's Python, which has no polars or
# pyarrow (the lent H200's has torch only): the command and its error path must not need them.
_NO_DATA_LIBS = r"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("polars", "pyarrow", "textual", "msgspec", "orjson"):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
from tracediff.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_capture_and_its_errors_need_no_data_libraries(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A capture that fails (here: a repo that is not a git repository) prints one line, exit 1/2,
    in a Python where polars/pyarrow cannot be imported (the error path imported the report
    package, which loads polars: a traceback on the H200)."""
    argv = ["capture", "--repo", str(tmp_path), "--commit", "HEAD", "-o", str(tmp_path / "o")]
    proc = subprocess.run(
        [sys.executable, "-c", _NO_DATA_LIBS, *argv, "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode in (1, 2), proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("tracediff: error: ") and len(lines) <= 3, proc.stderr


_MODULES_AFTER = r"""
import sys
from tracediff.cli import main
code = main(sys.argv[1:])
print(code, *sorted(m for m in sys.modules if m.startswith(("tracediff.commands.", "pyarrow.compute"))))
"""


def test_a_compare_of_exports_imports_only_what_it_runs() -> None:
    """Start-up is part of every command's time: `tracediff compare` of two nsys exports imports
    no other subcommand's module (cli.build_parser builds the options of the one asked for,
    ~15 ms) and not pyarrow.compute (~37 ms: runs/arrowcols.py converts the strings)."""
    data = "tests/data/h200"
    argv = ["compare", f"{data}/g_good.sqlite", f"{data}/g_bad.sqlite", "--format", "json"]
    r = subprocess.run(
        [sys.executable, "-c", _MODULES_AFTER, *argv], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    code, *loaded = r.stdout.strip().splitlines()[-1].split()
    assert code == "0", r.stderr
    assert "tracediff.commands.compare" in loaded
    others = ("bisect", "capture", "export", "whatif", "parse", "info")
    assert [m for m in loaded if m.startswith("tracediff.") and m.split(".")[2] in others] == []
    assert "pyarrow.compute" not in loaded, loaded
