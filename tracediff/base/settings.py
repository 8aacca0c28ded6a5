"""Every `TRACEDIFF_*` environment variable: its name, meaning, default, and the one reader of it.

Stage: plumbing, below every stage (stdlib only, imports nothing of tracediff). The tool reads
its environment only through the functions here, each at the moment its caller asks (the Kineto
scanner's two are read once, when parse/kineto/scan.py is imported, and
TRACEDIFF_KINETO_STACKS when parse/kineto/fields.py is); no other module of
tracediff or capture reads a `TRACEDIFF_*` variable itself (tests/unit/base/test_settings.py greps
for it), and README.md's "Environment variables" lists exactly `VARIABLES` (the same test).

Read by tracediff:

    TRACEDIFF_NSYS             the nsys executable (or its folder); default: nsys on PATH, then
                               /opt/nsys-2024.2.3 (tools/install-nsys.sh). QdstrmImporter is
                               looked for beside it.
    TRACEDIFF_NSYS_TIMEOUT     seconds one nsys export / QdstrmImporter run may take (default
                               1800; not a number: the default)
    TRACEDIFF_SQLITE_PAGES     "0": read nsys SQLite through SQLite (ADBC), not the page decoder
    TRACEDIFF_KINETO_SCAN      "0": read Kineto JSON with msgspec, not the native scanner
    TRACEDIFF_KINETO_STACKS    "0": skip Kineto `python_function` events (no launch stacks; for
                               timing what stack resolution costs, bench/kineto_stacks.py)
    TRACEDIFF_KINETO_THREADS   threads the native scanner splits a piece of >= 1 MB over
                               (default 2 where there are 2 or more CPUs, else 1)
    TRACEDIFF_MEMORY_BYTES     bytes of memory a Kineto parse may fill, instead of MemAvailable
                               (for containers whose limit /proc/meminfo does not show)
    TRACEDIFF_SET_ALLOC        set by the CLI itself: the allocator and OpenBLAS variables it set
                               for its own process, which `tracediff capture` leaves out of the
                               workload's environment

Set by `tracediff capture` for the profiled workload, and read inside it by the NVTX shim
(capture/shim/tracediff_nvtx_shim.py). The shim runs in the profiled process with the stdlib
only and must not import tracediff, so it reads these itself; they are listed here so that
one place names every variable:

    TRACEDIFF_NVTX_SHIM        the target set the shim patches ("sglang-eagle"); unset: nothing
    TRACEDIFF_NVTX_BACKEND     "auto" (torch.cuda.nvtx, else the nvtx package), "torch", "nvtx"
    TRACEDIFF_SHIM_DEBUG       "1": the shim says on stderr what it patched
    TRACEDIFF_CAPTURE_COMMIT   the commit being captured (for the workload; tracediff ignores it)

Read by the test suite only:

    TRACEDIFF_UPDATE_GOLDEN    "1": tests/golden rewrites its expected files
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """A variable's name and who reads it: "tracediff", "workload" (the capture shim, inside the
    profiled process) or "tests". What it means: the module docstring."""

    name: str
    read_by: str


_DECLARED: list[Variable] = []


def _variable(name: str, read_by: str) -> Variable:
    """A variable, listed in VARIABLES in the order declared."""
    v = Variable(name, read_by)
    _DECLARED.append(v)
    return v


NSYS = _variable("TRACEDIFF_NSYS", "tracediff")
NSYS_TIMEOUT = _variable("TRACEDIFF_NSYS_TIMEOUT", "tracediff")
SQLITE_PAGES = _variable("TRACEDIFF_SQLITE_PAGES", "tracediff")
KINETO_SCAN = _variable("TRACEDIFF_KINETO_SCAN", "tracediff")
KINETO_STACKS = _variable("TRACEDIFF_KINETO_STACKS", "tracediff")
KINETO_THREADS = _variable("TRACEDIFF_KINETO_THREADS", "tracediff")
MEMORY_BYTES = _variable("TRACEDIFF_MEMORY_BYTES", "tracediff")
SET_ALLOC = _variable("TRACEDIFF_SET_ALLOC", "tracediff")
NVTX_SHIM = _variable("TRACEDIFF_NVTX_SHIM", "workload")
NVTX_BACKEND = _variable("TRACEDIFF_NVTX_BACKEND", "workload")
SHIM_DEBUG = _variable("TRACEDIFF_SHIM_DEBUG", "workload")
CAPTURE_COMMIT = _variable("TRACEDIFF_CAPTURE_COMMIT", "workload")
UPDATE_GOLDEN = _variable("TRACEDIFF_UPDATE_GOLDEN", "tests")

VARIABLES: tuple[Variable, ...] = tuple(_DECLARED)
"""Every TRACEDIFF_* variable, as the docstring and README.md's "Environment variables" list them."""

DEFAULT_NSYS_TIMEOUT_S = 1800.0


def _get(var: Variable) -> str | None:
    return os.environ.get(var.name)


def nsys() -> str | None:
    """$TRACEDIFF_NSYS, or None when unset or empty (then nsys_tool searches PATH and /opt)."""
    return _get(NSYS) or None


def nsys_timeout() -> float:
    """Seconds one nsys tool run may take: $TRACEDIFF_NSYS_TIMEOUT, else (unset or not a
    number) the default."""
    raw = _get(NSYS_TIMEOUT)
    try:
        return float(raw) if raw else DEFAULT_NSYS_TIMEOUT_S
    except ValueError:
        return DEFAULT_NSYS_TIMEOUT_S


def sqlite_pages() -> bool:
    """Whether nsys SQLite tables may be read by the page decoder (anything but "0": yes)."""
    return _get(SQLITE_PAGES) != "0"


def kineto_scan() -> bool:
    """Whether Kineto JSON may be read by the native scanner (anything but "0": yes)."""
    return _get(KINETO_SCAN) != "0"


def kineto_stacks() -> bool:
    """Whether Kineto `python_function` events are read for launch stacks (anything but "0")."""
    return _get(KINETO_STACKS) != "0"


def kineto_threads() -> int:
    """Threads the native Kineto scanner may split a piece over: $TRACEDIFF_KINETO_THREADS,
    else 2 where there are 2 or more CPUs."""
    return int(_get(KINETO_THREADS) or (2 if (os.cpu_count() or 1) > 1 else 1))


def memory_bytes() -> int | None:
    """$TRACEDIFF_MEMORY_BYTES when it is a whole number of bytes, else None (MemAvailable)."""
    raw = _get(MEMORY_BYTES)
    return int(raw) if raw and raw.isdigit() else None


def mark_allocators_set(names: list[str]) -> None:
    """Record in this process's environment the allocator variables the CLI set for itself."""
    os.environ[SET_ALLOC.name] = ",".join(names)


def without_own_settings(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less $TRACEDIFF_SET_ALLOC and the allocator variables it names: the environment a
    workload gets, not the settings tracediff's CLI made for itself."""
    out = dict(env)
    for name in out.pop(SET_ALLOC.name, "").split(","):
        out.pop(name, None)
    return out
