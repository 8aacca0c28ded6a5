"""The per-file work on a Dask distributed cluster (`--scheduler ADDRESS`), or a local pool.

Stage: engine (scheduling; engine/pipeline/executor.py's `Executor` on other processes). Input:
`FileTask`s; a run read from a run file goes as its path (engine/pipeline/reduce.py `portable`: the
workers read the files themselves, so they must see the same filesystem), a run of several rank
files (engine/pipeline/rankrun.py) file by file (engine/pipeline/rankunit.py's rounds: `scan`, then each file
reduced; each file's parse kept by the worker that scanned it, engine/pipeline/rankcache.py); output:
their `Reduced` tables, the only thing that travels back.

The connection (tracediff/base/daskclient.py, shared with `parse --scheduler`): `tcp://host:8786`
connects to a running scheduler (`dask scheduler` / `dask worker`, or dask-jobqueue); `local:N` starts a LocalCluster of N worker processes, one thread each, each with
`memory_limit` (Dask's nanny restarts a worker past it). A task whose worker dies is run again by
Dask on another worker; a file whose task fails twice (its worker died twice, or it raised twice)
is reported by name as a `ClusterError`. A file the tracediff code refuses (a damaged report,
a run that base's rule cannot cut) is not retried: the refusal comes back as it is.

Dask is an optional dependency (`pip install 'tracediff[dask]'`); without it `open_executor`
says how to install it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from tracediff.base.daskclient import ClusterError, Connection, each_done
from tracediff.engine.pipeline import rankcache, rankunit
from tracediff.engine.pipeline.executor import progress_line, quiet
from tracediff.engine.pipeline.rankrun import RankRun
from tracediff.engine.pipeline.reduce import FileTask, Reduced, portable, reduce_file

__all__ = ["ClusterError", "Dask", "open_executor"]


class Dask:
    """An `Executor` on a Dask distributed client (module doc; the connection: daskclient.py)."""

    def __init__(self, address: str, memory_limit: str | None = None) -> None:
        import uuid

        self.address = address
        self._conn = Connection(address, memory_limit)
        self.client = self._conn.client
        self.token = uuid.uuid4().hex[
            :12
        ]  # this compare's kept parses (engine/pipeline/rankcache.py)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a worker gone: Dask removes its scratch folder
            self.client.run(rankcache.clear, self.token)
        self._conn.close()

    def __enter__(self) -> Dask:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_one(self, task: FileTask, say: Callable[[str], None] | None = None) -> Reduced:
        return next(iter(self.map([task], say or quiet)))

    def map(self, tasks: Sequence[FileTask], say: Callable[[str], None]) -> Iterator[Reduced]:
        """Every task submitted at once; results in task order once all are back (they are
        the small tables). A run of rank files (engine/pipeline/rankrun.py) is spread file by file
        (engine/pipeline/rankunit.py)."""
        if not tasks:
            return iter(())
        ranked = [i for i, t in enumerate(tasks) if isinstance(t.source, RankRun)]
        plain = [i for i, t in enumerate(tasks) if not isinstance(t.source, RankRun)]
        out: list[Reduced | None] = [None] * len(tasks)
        if plain:
            items = [replace(tasks[i], source=portable(tasks[i].source)) for i in plain]
            got = self.gather(reduce_file, items, [f"{t.name}: its {t.side} file" for t in items],
                              [t.side for t in items], say, "reduced")  # fmt: skip
            for i, r in zip(plain, got, strict=True):
                out[i] = r
        if ranked:
            got = rankunit.reduce_runs([tasks[i] for i in ranked], self.round(say))
            for i, r in zip(ranked, got, strict=True):
                out[i] = r
        return iter([r for r in out if r is not None])

    def round(self, say: Callable[[str], None]) -> rankunit.Map:
        """A round of per-file work (engine/pipeline/rankunit.py) on the cluster."""

        def run(
            fn: Callable[[Any], Any],
            items: Sequence[Any],
            sides: Sequence[str],
            verb: str,
            each: rankunit.Each | None = None,
        ) -> list[Any]:
            names = [_file_of(x) for x in items]
            kept = [x.task.source.files[0].worker for x in items]  # the worker that scanned it
            return self.gather(fn, items, names, sides, say, verb, each, kept)

        return run

    def gather(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        names: Sequence[str],
        sides: Sequence[str],
        say: Callable[[str], None],
        verb: str,
        each: rankunit.Each | None = None,
        workers: Sequence[str | None] | None = None,
    ) -> list[Any]:
        """fn(item) for every item on the workers, in item order; a progress line per item
        back (`files reduced: base 3/8, head 1/8`); an item failing twice named by `names`;
        `each(i, result)` kept in place of a result, as it comes back (rankunit.Map);
        `workers`: the worker each item would best run on (its file's parse is kept there).
        The workers keep their parses under this executor's token (engine/pipeline/rankcache.py)."""
        keys = [_key(verb, sides[i], names[i]) for i in range(len(items))]
        total = {s: sum(x == s for x in sides) for s in ("base", "head")}
        done = dict.fromkeys(total, 0)
        out: list[Any] = [None] * len(items)
        task = partial(rankcache.within, self.token, fn)
        for i, value in each_done(self.client, task, items, names, keys, workers):
            out[i] = value if each is None else each(i, value)
            done[sides[i]] += 1
            say(progress_line(done, total, verb))
        return out

    def scan(
        self, items: Sequence[tuple[str, bool]], sides: Sequence[str], say: Callable[[str], None]
    ) -> list[Any]:
        """Round 1 of engine/pipeline/rankunit.py: every rank file's scan ((path, probe) items)."""
        names = [f"{f}: its rank file" for f, _ in items]
        return self.gather(rankunit.scan, items, names, sides, say, "read")


def _file_of(x: Any) -> str:
    return f"{x.task.source.files[0].path}: its {x.task.side} rank file"


def _key(verb: str, side: str, name: str) -> str:
    """`tracediff-reduced-base-rank-3.json.gz-1a2b3c4d`: the work, its side and file (a test
    reads which worker ran which file from the workers' logs)."""
    import re
    import uuid

    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name.split(":")[0]).name)
    return f"tracediff-{verb}-{side}-{stem}-{uuid.uuid4().hex[:8]}"


def open_executor(address: str, memory_limit: str | None = None) -> Dask:
    """The executor `--scheduler ADDRESS` names (module doc)."""
    return Dask(address, memory_limit)
