"""Where the per-file work runs: in this process, or (engine/pipeline/cluster.py) on other processes.

Stage: engine (scheduling). Input: `FileTask`s (engine/pipeline/reduce.py); output: their `Reduced`, in
task order. The driver (engine/compare.py) sends every file of both sides through one
`Executor`; only the reduced tables come back, so the driver's memory is that of the tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from tracediff.engine.pipeline.rankrun import RankRun
from tracediff.engine.pipeline.reduce import FileTask, Reduced, reduce_file


class Executor(Protocol):
    def run_one(self, task: FileTask, say: Callable[[str], None] | None = None) -> Reduced:
        """One task's `Reduced`; `say`, where given, gets `map`'s progress lines (a run of rank
        files: a line per file back)."""
        ...

    def map(self, tasks: Sequence[FileTask], say: Callable[[str], None]) -> Iterator[Reduced]: ...


def quiet(_msg: str) -> None:
    """A `say` that shows nothing."""


def progress_line(done: dict[str, int], total: dict[str, int], verb: str = "reduced") -> str:
    """`files reduced: base 3/5, head 1/5`."""
    return f"files {verb}: " + ", ".join(f"{s} {done[s]}/{total[s]}" for s in total if total[s])


class InProcess:
    """One file after the other in this process: memory is one file's work plus the tables."""

    def run_one(self, task: FileTask, say: Callable[[str], None] | None = None) -> Reduced:
        return next(self.map([task], say or quiet))

    def map(self, tasks: Sequence[FileTask], say: Callable[[str], None]) -> Iterator[Reduced]:
        total = {s: sum(t.side == s for t in tasks) for s in ("base", "head")}
        done = dict.fromkeys(total, 0)
        for t in tasks:
            out = _reduce(t)
            done[t.side] += 1
            say(progress_line(done, total))
            yield out


def _reduce(task: FileTask) -> Reduced:
    """One task here: a run of rank files (engine/pipeline/rankrun.py) file after file."""
    if isinstance(task.source, RankRun):
        from tracediff.engine.pipeline import rankunit

        return rankunit.in_process(task)
    return reduce_file(task)
