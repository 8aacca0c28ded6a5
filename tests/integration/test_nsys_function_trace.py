"""nsys `--python-functions-trace` on this CPU machine, and launch stacks from its ranges (issue 19).

A real capture (nsys 2024.2.3, no GPU, `-t nvtx`, no sampling) of a small package whose
`outer` calls `middle` calls `leaf`, traced through a config in the `python:ftpkg.work` domain
(parse/nsys/stacks.py). It checks that nsys records one NVTX range per call here, and that the
reader turns them into frames. There are no CUDA launches without a GPU, so the workload's own
NVTX marks, emitted at known places (inside `leaf`, in `middle` between its calls, before
`outer`), stand in for launch calls: rows with a mark's thread and time as the launch are
resolved by the reader's own code (nsys.stacks.add_stacks) against the real ranges.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from tracediff.parse import load
from tracediff.parse.nsys.stacks import add_stacks
from tracediff.runs import schema

pytestmark = [pytest.mark.nsys]

pytest.importorskip("nvtx")  # the function trace and the marks go through the nvtx package

WORK = """
import nvtx

def leaf(n):
    nvtx.mark("in-leaf")
    return sum(range(n))

def middle(k):
    for _ in range(k):
        leaf(2000)
    nvtx.mark("in-middle")

def outer():
    for _ in range(3):
        middle(2)
"""
MAIN = """
import sys
sys.path.insert(0, "pkg")
import nvtx
from ftpkg import work
nvtx.mark("before")
work.outer()
"""


@pytest.fixture(scope="module")
def capture(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ftrace")
    (d / "pkg" / "ftpkg").mkdir(parents=True)
    (d / "pkg" / "ftpkg" / "__init__.py").write_text("")
    (d / "pkg" / "ftpkg" / "work.py").write_text(WORK)
    (d / "main.py").write_text(MAIN)
    cfg = [{"domain": "python:ftpkg.work", "module": "ftpkg.work",
            "functions": ["outer", "middle", "leaf"]}]  # fmt: skip
    (d / "ft.json").write_text(json.dumps(cfg))
    r = subprocess.run(
        [nsys, "profile", "-t", "nvtx", "--sample=none", "--cpuctxsw=none",
         "--python-functions-trace=ft.json", "-o", "rep", sys.executable, "main.py"],
        cwd=d, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    # nsys imports its capture itself; on a loaded machine it has exited 0 leaving the raw
    # capture instead (suite of session 23, 3 workers on 2 cores): read that, as a user would
    rep = d / "rep.nsys-rep"
    raw = d / "rep.qdstrm"
    assert rep.exists() or raw.exists(), r.stdout[-2000:] + r.stderr[-2000:]
    return rep if rep.exists() else raw


def test_nsys_records_a_range_per_traced_call_on_this_machine(capture: Path) -> None:
    run = load(capture)
    nv = pl.from_arrow(run.tables["nvtx_ranges"]).with_columns(pl.col(pl.Categorical).cast(str))
    ft = nv.filter(pl.col("domain") == "python:ftpkg.work")
    counts = dict(ft.group_by("name").len().iter_rows())
    assert counts == {"ftpkg.work.outer": 1, "ftpkg.work.middle": 3, "ftpkg.work.leaf": 6}
    assert (ft["range_kind"] == "push_pop").all()
    assert ft.sort("start_ns")["depth"].to_list()[:3] == [0, 1, 2]
    # no GPU: no launches, so no stacks (and the reader says nothing is wrong)
    assert run.tables["kernels"].num_rows == 0 and run.tables["stacks"].num_rows == 0


def test_launches_resolve_to_the_function_ranges_around_them(capture: Path) -> None:
    run = load(capture)
    nv = pl.from_arrow(run.tables["nvtx_ranges"]).with_columns(pl.col(pl.Categorical).cast(str))
    marks = nv.filter(pl.col("range_kind") == "mark").sort("start_ns")
    assert marks["name"].value_counts().sort("name").rows() == [
        ("before", 1), ("in-leaf", 6), ("in-middle", 3)
    ]  # fmt: skip
    n = marks.height
    kernels = pa.table(
        {
            **{f.name: pa.nulls(n, f.type) for f in schema.TABLES["kernels"]},
            "process_id": marks["process_id"].to_arrow(),
            "launch_thread_id": marks["thread_id"].to_arrow(),
            "launch_start_ns": marks["start_ns"].to_arrow(),
            "launch_end_ns": marks["start_ns"].to_arrow(),
        },
        schema=schema.TABLES["kernels"],
    )
    got = add_stacks({**run.tables, "kernels": kernels})
    st = pl.from_arrow(got["stacks"]).join(pl.from_arrow(got["frames"]), on="frame_id")
    st = st.with_columns(pl.col(pl.Categorical).cast(str)).sort("stack_id", "depth")
    chain = {s: g["function"].to_list() for (s,), g in st.group_by("stack_id")}
    assert set(st["file"]) == {"ftpkg/work.py"} and st["line"].null_count() == st.height
    sid = pl.from_arrow(got["kernels"].column("stack_id")).to_list()
    want = {
        "before": None,
        "in-leaf": ["leaf", "middle", "outer"],
        "in-middle": ["middle", "outer"],
    }
    for name, s in zip(marks["name"], sid, strict=True):
        assert (chain[s] if s is not None else None) == want[name], name
    assert len(chain) == 2  # one stack per call path, the same for every call along it
