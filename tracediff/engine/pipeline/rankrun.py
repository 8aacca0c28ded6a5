"""A run of several rank files that the driver has not read: what the workers need to read each.

Stage: engine (input of the per-file stage, engine/pipeline/rankunit.py). Built by the driver from each
file's facts (engine/pipeline/rankunit.py `plan_runs`, read on the workers): per file its path and where
the join (parse/ranks/combine.py) puts it (clock shift, process-id offset, device ids, the last already
matched to base's GPUs, parse/ranks/gpus.py); the run's metadata and warnings, as the joined run's;
its host ranges (small), from which the driver numbers the cycles of every file alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from tracediff.parse.ranks import gpus as gp
from tracediff.runs.runfile import Run


@dataclass(frozen=True)
class RankFile:
    path: str
    shift: int
    pid_offset: int
    ids: dict[int, int]  # the file's device id -> the joined run's (parse/ranks/combine.py)
    pids: tuple[int, ...] = ()  # its processes, on the joined run's ids
    worker: str | None = None  # the Dask worker that keeps its parse (engine/pipeline/rankcache.py)


@dataclass
class RankRun:
    """One run's rank files, not read here (module doc). Quacks as a `Run` where the driver
    only reads metadata (path, label, GPUs, warnings)."""

    files: list[RankFile]
    metadata: dict[str, Any]
    warnings: list[str]
    ranges: pl.DataFrame  # engine/cycle/ranges.py read_ranges of the joined run
    kernels: int = 0
    relabel: dict[int, int] = field(default_factory=dict)  # joined id -> base's (gpus.relabel)
    all_devices: list[int] | None = None  # a `slim` run: every GPU of the whole run
    coverage: tuple[list[dict[Any, int]], int] | None = None  # base's first: its scans' `covered`

    @property
    def path(self) -> str:
        return str(self.metadata.get("source") or "run")

    @property
    def label(self) -> str:
        return str(self.metadata.get("label") or Path(self.path).stem)

    @property
    def devices(self) -> list[int]:
        """Every GPU of the run, under the ids the engine sees."""
        if self.all_devices is not None:
            return self.all_devices
        return sorted({self.relabel.get(d, d) for f in self.files for d in f.ids.values()})

    def slim(self, i: int) -> RankRun:
        """What a worker needs of the run to reduce file i: that file alone, the run's name,
        GPUs and relabelling (not the other files, ranges, metadata: a task each file)."""
        meta: dict[str, Any] = {
            k: self.metadata[k] for k in ("source", "label") if k in self.metadata
        }
        return RankRun([self.files[i]], meta, [], pl.DataFrame(), 0, self.relabel, self.devices)

    def placed(self, i: int, run: Run) -> Run:
        """File i's run as its part of the joined, relabelled run (its tables moved onto the
        run's clock and ids; the run's metadata, no warnings: they are the run's)."""
        from tracediff.parse.ranks.combine import shifted
        from tracediff.runs import schema

        f = self.files[i]
        tables = {}
        for name in schema.TABLES:
            t = shifted(run.table(name), name, f.shift, f.pid_offset, f.ids)
            if self.relabel and name in gp.DEVICE_TABLES:
                t = gp.relabel_table(t, self.relabel)
            tables[name] = t
        return Run(tables=tables, metadata=dict(self.metadata), warnings=[])

    def relabelled(self, m: gp.DeviceMatch) -> RankRun:
        """The run with its GPUs relabelled onto the reference's (gpus.relabel's rule)."""
        if m.is_identity():
            return self
        mapping = gp.relabel_mapping(m)
        meta = gp.relabelled_metadata(self.metadata, m, mapping)
        return replace(self, relabel=mapping, metadata=meta, warnings=list(self.warnings))

    def open(self) -> Run:
        """The joined run, read here (host-only runs and the rare paths that need all of it)."""
        from tracediff.parse import load
        from tracediff.parse.ranks.combine import concat
        from tracediff.runs import schema

        runs = [self.placed(i, load(Path(f.path))) for i, f in enumerate(self.files)]
        tables = {name: concat(name, [r.table(name) for r in runs]) for name in schema.TABLES}
        return Run(tables=tables, metadata=dict(self.metadata), warnings=list(self.warnings))
