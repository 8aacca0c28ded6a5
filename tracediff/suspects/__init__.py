"""Commit suspects (issue 19): which commits between base and head touched the code the change
runs through. `suspects_for` picks the range (`--commits A..B`, else the commits the capture
manifests recorded) and ranks it (rank.py; git reading in gitlog.py, Python extents in
pysource.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tracediff.base.errors import UsageError
from tracediff.engine.result import Comparison
from tracediff.suspects import gitlog
from tracediff.suspects.nostacks import NO_STACKS, why_no_stacks
from tracediff.suspects.rank import Suspects, rank

__all__ = ["Suspects", "manifest_commit", "suspects_for"]


def manifest_commit(runs: Sequence[Any]) -> str | None:
    """The one commit a side's runs were captured at (`tracediff capture` manifests), None when
    a run has no manifest commit; UsageError when the runs of one side disagree."""
    shas = set()
    for run in runs:
        git = (run.metadata.get("manifest") or {}).get("git") or {}
        if not git.get("commit"):
            return None
        shas.add(git["commit"])
    if len(shas) > 1:
        raise UsageError(
            f"the runs of one side were captured at {len(shas)} different commits "
            f"({', '.join(sorted(s[:12] for s in shas))})",
            "compare runs of one commit a side, or give --commits A..B",
        )
    return shas.pop() if shas else None


def suspects_for(
    c: Comparison,
    bases: Sequence[Any],
    heads: Sequence[Any],
    repo: Path,
    commits: str | None,
) -> Suspects:
    """The ranked commits of the range for this comparison (UsageError: not a repo, no range,
    a commit the repo lacks)."""
    top = gitlog.toplevel(repo)
    if commits is not None:
        a, sep, b = commits.partition("..")
        if not sep or not a or not b or b.startswith("."):
            raise UsageError(
                f"--commits {commits}: give a range A..B (base's commit, then head's)",
                "e.g. --commits v1.2..HEAD",
            )
        base = gitlog.resolve(top, a, "--commits base")
        head = gitlog.resolve(top, b, "--commits head")
        origin = "--commits"
    else:
        mb, mh = manifest_commit(bases), manifest_commit(heads)
        if mb is None or mh is None:
            side = "base" if mb is None else "head"
            raise UsageError(
                f"--repo: the {side} runs carry no capture manifest commit, so the range is unknown",
                "give --commits A..B (the commits base and head were captured at)",
            )
        base = gitlog.resolve(top, mb, "base's capture commit")
        head = gitlog.resolve(top, mh, "head's capture commit")
        origin = "capture manifests"
    why = why_no_stacks([*bases, *heads]) if not c.launch_stacks.height else NO_STACKS
    return rank(c.launch_stacks, c.attribution, top, base, head, origin, why)
