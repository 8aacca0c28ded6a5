"""tracediff/base/settings.py is the one reader of TRACEDIFF_* variables, and the README lists them.

Greps the shipped code (tracediff/, capture/ less the shim, which runs inside the profiled
process and may not import tracediff) for reads of the environment naming a TRACEDIFF_ variable,
and every file of the repository's code for TRACEDIFF_ names settings.VARIABLES does not list.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracediff.base import settings

ROOT = Path(__file__).resolve().parent.parents[2]
NAMES = {v.name for v in settings.VARIABLES}
NAME = re.compile(r"TRACEDIFF_[A-Z0-9_]*[A-Z0-9]")


def _code(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py") if "data" not in p.parts)


def test_variables_are_distinct_and_named_tracediff() -> None:
    assert len(NAMES) == len(settings.VARIABLES)
    assert all(NAME.fullmatch(n) for n in NAMES)
    assert {v.read_by for v in settings.VARIABLES} <= {"tracediff", "workload", "tests"}


def test_readme_lists_exactly_the_variables() -> None:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^#+ Environment variables\n(.*?)(?=^#)", text, re.M | re.S)
    assert m, "README.md has no 'Environment variables' section"
    assert set(NAME.findall(m.group(1))) == NAMES


def test_settings_docstring_documents_exactly_the_variables() -> None:
    assert set(NAME.findall(settings.__doc__ or "")) == NAMES


def test_no_other_module_reads_a_tracediff_variable() -> None:
    readers = []
    for path in _code("tracediff", "capture"):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "tracediff/base/settings.py" or rel.startswith("capture/shim/"):
            continue
        text = path.read_text()
        # names bound to a TRACEDIFF_ string in this module count as the variable itself
        aliases = re.findall(r"^(\w+)\s*=\s*[\"']TRACEDIFF_", text, re.M)
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"\b(environ|getenv)\b", line) and (
                "TRACEDIFF_" in line or any(re.search(rf"\b{a}\b", line) for a in aliases)
            ):
                readers.append(f"{rel}:{n}: {line.strip()}")
    assert readers == []


def test_every_tracediff_name_in_the_code_is_listed() -> None:
    spelled = {}
    for path in _code("tracediff", "capture", "tests", "bench", "tools"):
        for name in NAME.findall(path.read_text()):
            spelled.setdefault(name, path.relative_to(ROOT).as_posix())
    unlisted = {n: p for n, p in spelled.items() if n not in NAMES}
    assert unlisted == {}


def test_the_shim_reads_its_own_variables() -> None:
    shim = (ROOT / "capture/shim/tracediff_nvtx_shim.py").read_text()
    read = {v.name for v in settings.VARIABLES if v.read_by == "workload"} - {
        settings.CAPTURE_COMMIT.name
    }
    assert {n for n in read if n in shim} == read
    assert "import tracediff" not in shim and "from tracediff" not in shim


@pytest.mark.parametrize(
    ("raw", "seconds"), [(None, 1800.0), ("", 1800.0), ("2.5", 2.5), ("soon", 1800.0)]
)
def test_nsys_timeout(monkeypatch: pytest.MonkeyPatch, raw: str | None, seconds: float) -> None:
    if raw is None:
        monkeypatch.delenv(settings.NSYS_TIMEOUT.name, raising=False)
    else:
        monkeypatch.setenv(settings.NSYS_TIMEOUT.name, raw)
    assert settings.nsys_timeout() == seconds


def test_switches_and_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (settings.SQLITE_PAGES, settings.KINETO_SCAN, settings.MEMORY_BYTES):
        monkeypatch.delenv(var.name, raising=False)
    assert settings.sqlite_pages() and settings.kineto_scan() and settings.memory_bytes() is None
    monkeypatch.setenv(settings.SQLITE_PAGES.name, "0")
    monkeypatch.setenv(settings.KINETO_SCAN.name, "0")
    monkeypatch.setenv(settings.MEMORY_BYTES.name, "4096")
    monkeypatch.setenv(settings.KINETO_THREADS.name, "3")
    assert not settings.sqlite_pages() and not settings.kineto_scan()
    assert settings.memory_bytes() == 4096 and settings.kineto_threads() == 3
    monkeypatch.setenv(settings.MEMORY_BYTES.name, "4 GB")
    assert settings.memory_bytes() is None


def test_workload_environment_drops_what_the_cli_set() -> None:
    env = {"A": "1", "B": "2", "C": "3", settings.SET_ALLOC.name: "A,B"}
    assert settings.without_own_settings(env) == {"C": "3"}
    assert settings.without_own_settings({"C": "3"}) == {"C": "3"}
