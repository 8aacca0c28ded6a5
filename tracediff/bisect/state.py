"""`tracediff bisect`'s OUTDIR: which folder a bisection may use, and which state it resumes.

Stage: bisect (around tracediff/bisect/bisection.py's `Bisection`: before its first capture and after each
step). Input: OUTDIR and the bisection's settings (its `key`: the resolved ends, --repeat,
--max-runs, --contributor, --cycle, --pool, whether a workload is given); output: the lock held
for the call and the state dict kept in OUTDIR/bisect.json (the settings, the skipped commits,
the step log, later the result), written atomically after every change.

A folder is a bisection's when it holds the state, or at least the lock (a call killed during
the ends' captures has not written the state yet); any other folder that holds anything is
refused, never replaced. A state with other settings is refused too: its run sets and skips
were made for another question; but a larger --repeat or --max-runs only adds evidence (issue
31: the tool's own advice "--repeat 8" was refused on the same -o, throwing away 16 captures),
so it resumes, reusing every capture (a smaller one is refused: the runs beyond it would be
ignored by some steps and not others). Of a resumed state the skipped commits are kept, the
earlier calls' wall time (`wall_s_before`) and their step log (`earlier_log`: a step recomputed
from its captures keeps the time its captures took); the step log is rebuilt from the captures
(tracediff/bisect/bisection.py: decisions are recomputed).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from capture import outdir as od
from tracediff.base.errors import OutputError
from tracediff.runs import runset as rs

STATE = "bisect.json"
LOCK = ".bisect.lock"
KIND = "tracediff.bisect"


@contextlib.contextmanager
def hold(out: Path) -> Iterator[None]:
    """OUTDIR created (or checked to be a bisection's) and locked for the call: a second bisect
    on it is refused; the lock goes with the process (exit, Ctrl-C, kill)."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder", "choose another -o")
    mine = (out / STATE).is_file() or (out / LOCK).is_file()
    if out.is_dir() and not mine and any(out.iterdir()):
        raise OutputError(
            f"{out}: already exists and is not a bisect folder (no {STATE} in it)",
            "choose another -o (bisect never replaces a folder)",
        )
    out.mkdir(parents=True, exist_ok=True)
    with od.locked(out, LOCK, "another tracediff bisect is running on this folder"):
        yield


GROWS = ("repeat", "max_runs")
"""Settings a resume may raise: more runs only add evidence."""


def load(out: Path, key: dict[str, Any]) -> dict[str, Any]:
    """The state to start from: a fresh one for `key`, with the skipped commits, wall time and
    step log of OUTDIR's state when it holds one of the same settings (or smaller GROWS ones);
    OutputError when it is unreadable or holds other settings."""
    f = out / STATE
    fresh = {"format_version": 1, "kind": KIND, **key, "skipped": {}, "log": []}
    if not f.is_file():
        return fresh
    try:
        old = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise OutputError(f"{f}: not a readable bisect state ({e})", "choose another -o") from None
    # a state from before --pool has no "pool"/"live": it was live, without a pool
    was = {"pool": None, "live": True}
    differs = [k for k, v in key.items() if k not in GROWS and old.get(k, was.get(k)) != v]
    if old.get("kind") != KIND or differs:
        raise OutputError(
            f"{f}: holds a bisection with other settings ({', '.join(differs) or 'kind'})",
            "run it with the same --good/--bad/--contributor/--cycle/--pool and workload "
            "(a larger --repeat or --max-runs resumes it), or choose another -o",
        )
    shrinks = [
        f"--{k.replace('_', '-')} {key[k]} < {old[k]}"
        for k in GROWS
        if isinstance(old.get(k), int) and key[k] < old[k]
    ]
    if shrinks:
        raise OutputError(
            f"{f}: holds a bisection with more runs ({', '.join(shrinks)})",
            "give at least the earlier values (a larger one resumes it), or choose another -o",
        )
    grown = {k: old[k] for k in GROWS if old.get(k) != key[k]}
    return {
        **fresh,
        "skipped": old.get("skipped", {}),
        "wall_s_before": float(old.get("wall_s_before", 0.0)) + float(old.get("wall_s_call", 0.0)),
        "earlier_log": old.get("log", []) or old.get("earlier_log", []),
        **({"resumed_from": grown} if grown else {}),
    }


def save(out: Path, state: dict[str, Any]) -> None:
    """OUTDIR/bisect.json replaced by `state` in one rename."""
    out.mkdir(parents=True, exist_ok=True)
    rs.write_json_atomic(out / STATE, state)
