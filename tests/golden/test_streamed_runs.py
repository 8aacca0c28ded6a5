"""Run sets reduced one run at a time (engine/pipeline/reduce.py, engine/pipeline/join.py): the same answer as
aligning every run at once, also where base's first run is not like the rest.

Each run is aligned to the template found on base's first run; the template is base's most
frequent cycle over all its runs, so where the first run differs (here: one of its kernels is
renamed in every cycle) the runs are aligned again to the right one. Generated nsys-schema
reports (tests/support/gen_nsys.py, the rename made in the report's string table), 2 GPUs with
all-reduces.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from tests.support.gen_nsys import POOL, write_report
from tracediff.engine.compare import compare
from tracediff.parse import load

OLD, NEW = POOL[2][0], "void flash_fwd_kernel_v2(Flash_fwd_params)"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    d = tmp_path_factory.mktemp("streamed")
    out: dict[str, list[Path]] = {"base": [], "head": []}
    for side, seeds in (("base", (1, 2, 3)), ("head", (4, 5))):
        for s in seeds:
            p = d / f"{side}{s}.sqlite"
            write_report(p, n_gpus=2, n_cycles=12, kernels_per_cycle=24, seed=s)
            if s == 1:
                with sqlite3.connect(p) as db:
                    for name in POOL[2][:2]:  # flash_fwd_kernel: demangled and short name
                        db.execute("UPDATE StringIds SET value = ? WHERE value = ?", (NEW, name))
            out[side].append(p)
    return out


def test_first_run_unlike_the_rest_is_aligned_to_the_sides_template(runs) -> None:  # type: ignore[no-untyped-def]
    """The kernel only base's first run renamed is `old → new` in that run (the template is the
    other runs'), never `new → old` in all the others (aligned to the first run's cycles)."""
    c = compare([load(p) for p in runs["base"]], [load(p) for p in runs["head"]], n_boot=100)
    names = set(c.attribution["name"].to_list())
    assert f"{OLD} → {NEW}" in names and f"{NEW} → {OLD}" not in names
    row = c.attribution.filter(pl.col("name") == f"{OLD} → {NEW}").row(0, named=True)
    assert (row["base_runs"], row["head_runs"]) == (1, 0)
    ev = c.events.filter(pl.col("name").cast(pl.String) == NEW)
    assert ev.height > 0 and set(ev["side"]) == {"base"} and ev["slot"].null_count() == 0


def test_paths_and_open_runs_give_the_same_answer(runs) -> None:  # type: ignore[no-untyped-def]
    """A run given as a path is read by the per-file stage itself (as a worker does)."""
    from tracediff.report import render

    opened = compare([load(p) for p in runs["base"]], [load(p) for p in runs["head"]], n_boot=100)
    paths = compare(runs["base"], runs["head"], n_boot=100)
    assert render(paths, "json", 15) == render(opened, "json", 15)
