"""Shared by the tests (moved from tests/hostile/test_hostile.py, so no test module imports another)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from tests.support.cli import cli_run

TRACEDIFF = Path(sys.executable).with_name("tracediff")


TIMEOUT = 60  # s; every case here finishes in a few seconds, so hitting this is a hang


Result = subprocess.CompletedProcess[str]
K = TypeVar("K", bound=Hashable)


def cli(*args: object, timeout: float = TIMEOUT, **kw: object) -> Result:
    """The `tracediff` script on ARGS; forked from the CLI server (tests/support/cli.py) unless
    the call needs more of subprocess (a preexec_fn, an environment of its own)."""
    if not kw:
        return cli_run(args, timeout=timeout, errors="replace")
    return subprocess.run(
        [str(TRACEDIFF), *map(str, args)],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        **kw,  # type: ignore[call-overload]
    )


def assert_error(r: Result, names: object, *phrases: str, code: int = 1) -> str:
    """Exit `code`, stdout empty, one stderr line `tracediff[ CMD]: error: ...` naming `names`."""
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == code, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("tracediff"), lines[0]  # argparse says `tracediff parse: error:`
    assert ": error: " in lines[0], lines[0]
    if names is not None:
        assert str(names) in lines[0], lines[0]
    for p in phrases:
        assert p in lines[0], lines[0]
    assert r.stdout == ""
    return lines[0]


# One Python process running many CLI calls, each through tracediff.cli.main as the `tracediff`
# script runs it, with file descriptors 1 and 2 sent to files of its own (so what C code writes
# there is kept too) and the script's exit rules: main's return value, SystemExit's code, or a
# traceback and 1 for an uncaught exception. Used where a test runs dozens of independent calls
# whose outputs it then checks one by one: each process start costs ~0.5 CPU-s of imports.
_BATCH = """\
import json, os, sys, traceback, warnings
from tracediff.cli import main

FILTERS = list(warnings.filters)

def run(argv, out, err):
    # a warning shows in every call, as in a process of its own: the registries of warnings
    # already shown are dropped (resetwarnings makes them stale) and the filters put back
    warnings.resetwarnings()
    warnings.filters[:] = FILTERS
    warnings.onceregistry.clear()
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(out, "wb") as o, open(err, "wb") as e:
        os.dup2(o.fileno(), 1); os.dup2(e.fileno(), 2)
        try:
            try:
                code = main(argv)
            except SystemExit as x:
                code = x.code
            except BaseException:
                traceback.print_exc()
                code = 1
            if code is None:
                code = 0
            elif not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
            os.close(saved[0]); os.close(saved[1])
    return code

calls = json.loads(sys.stdin.read())
print(json.dumps([run(c["argv"], c["out"], c["err"]) for c in calls]))
"""


def cli_batch(calls: list[list[object]], where: Path, timeout: float = 300) -> list[Result]:
    """`tracediff ARGV` for each ARGV in calls, in one process (see _BATCH), in order; each
    call's exit code, stdout and stderr as `cli` gives them. `where`: a folder for the outputs."""
    where.mkdir(parents=True, exist_ok=True)
    argvs = [[str(a) for a in argv] for argv in calls]
    outs = [(where / f"{i}.out", where / f"{i}.err") for i in range(len(calls))]
    spec = [
        {"argv": argv, "out": str(o), "err": str(e)}
        for argv, (o, e) in zip(argvs, outs, strict=True)
    ]
    p = subprocess.run(
        [sys.executable, "-c", _BATCH],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert p.returncode == 0, p.stderr
    codes: list[int] = json.loads(p.stdout)
    return [
        subprocess.CompletedProcess(
            ["tracediff", *argv], code, o.read_text(errors="replace"), e.read_text(errors="replace")
        )
        for argv, (o, e), code in zip(argvs, outs, codes, strict=True)
    ]


def cli_batches(calls: dict[K, list[object]], where: Path, processes: int = 2) -> dict[K, Result]:
    """cli_batch over `processes` processes side by side: key -> its call's result."""
    keys = list(calls)
    parts = [keys[k::processes] for k in range(processes)]
    with ThreadPoolExecutor(processes) as pool:
        done = pool.map(
            lambda k: cli_batch([calls[key] for key in parts[k]], where / f"batch{k}"),
            range(processes),
        )
        return {key: r for k, got in enumerate(done) for key, r in zip(parts[k], got, strict=True)}
