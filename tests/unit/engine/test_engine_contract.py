"""The engine's contract: every frame of a `Comparison` is the table tracediff/runs/schema.py declares
(columns, order, types), `events` is built on first read only, and the engine's modules import
each other without a circle and without another module's private names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import polars as pl
import pytest

from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load
from tracediff.runs import schema
from tracediff.runs.runfile import Run

ROOT = Path(__file__).resolve().parent.parent.parent.parent
ENGINE = ROOT / "tracediff" / "engine"


def _host_only(run: Run) -> Run:
    tables = {name: run.table(name) for name in schema.TABLES}
    tables["kernels"], tables["memops"] = schema.empty("kernels"), schema.empty("memops")
    return Run(tables=tables, metadata=dict(run.metadata))


@pytest.fixture(scope="module")
def comparisons() -> dict[str, Comparison]:
    g = [load(ROOT / "samples" / f"g_{s}.arrow") for s in ("good", "bad")]
    mfu = [load(ROOT / f"tests/data/nsys/nsys-ai/mfu_2gpu_{s}.sqlite") for s in ("before", "after")]
    nccl = load(ROOT / "tests/data/kineto/nccl_data.json.gz")
    spec = load(ROOT / "samples" / "specloop_good.arrow")
    sgl = load(ROOT / "tests/data/kineto/sglang_Qwen3-8B_decode.json.gz")
    return {
        "g (NVTX, CUDA graph)": compare(*g, n_boot=20),
        "mfu (2 GPUs, no markers)": compare(*mfu, n_boot=20),
        "nccl (collectives, phases)": compare(nccl, nccl, n_boot=20),
        "host-only": compare(_host_only(spec), _host_only(spec), n_boot=20),
        "sglang (launch stacks)": compare(sgl, sgl, n_boot=20),
    }


def _conforms(frame: pl.DataFrame, table: str) -> list[str]:
    want = schema.frame_schema(table)
    if frame.columns != want.names():
        return [f"{table}: columns {frame.columns} != {want.names()}"]
    bad = []
    for name, dtype in want.items():
        got = frame.schema[name]
        stringlike = dtype == pl.String and isinstance(got, (pl.Categorical, pl.Enum))
        if got != dtype and not stringlike:
            bad.append(f"{table}.{name}: {got} != {dtype}")
    return bad


def test_every_frame_is_the_declared_table(comparisons: dict[str, Comparison]) -> None:
    seen = set()
    for case, c in comparisons.items():
        for table in schema.DIFF_TABLES:
            frame = getattr(c, table)
            assert not _conforms(frame, table), (case, _conforms(frame, table))
            if frame.height:
                seen.add(table)
    assert seen == set(schema.DIFF_TABLES)  # each table checked with rows at least once


def test_conform_refuses_a_frame_that_is_not_the_table() -> None:
    att = schema.empty_frame("attribution")
    with pytest.raises(ValueError, match="schema.py"):
        schema.conform_diff("attribution", att.drop("status"))
    with pytest.raises(ValueError, match="schema.py"):
        schema.conform_diff("attribution", att.with_columns(pl.lit(1).alias("extra")))
    # a column of another type is cast; a differing order is put right
    t = schema.empty_frame("totals").with_columns(pl.col("base_count").cast(pl.UInt32))
    t = t.select(reversed(t.columns))
    assert _conforms(schema.conform_diff("totals", t), "totals") == []


def test_events_are_built_on_first_read_only(comparisons: dict[str, Comparison]) -> None:
    c = comparisons["g (NVTX, CUDA graph)"]
    calls = []
    ev = c.events

    def builder() -> pl.DataFrame:
        calls.append(1)
        return ev

    from dataclasses import replace

    lazy = replace(c, events_builder=builder)
    assert calls == []
    assert lazy.events.height == ev.height > 0 and lazy.events is lazy.events
    assert calls == [1]


def test_a_comparison_is_frozen_and_its_split_is_computed_once(
    comparisons: dict[str, Comparison],
) -> None:
    """Every field is given when it is built (a caller adds with dataclasses.replace), and the
    change split every reader prints is the one value of the comparison's own attribution."""
    from dataclasses import FrozenInstanceError, replace

    from tracediff.engine.result import change_split

    c = comparisons["g (NVTX, CUDA graph)"]
    with pytest.raises(FrozenInstanceError):
        c.device_map = []  # type: ignore[misc]
    split = c.change_split
    assert split is not None and split is c.change_split  # computed once, then kept
    assert split == change_split(c.attribution)
    host_only = replace(c, attribution=c.attribution.with_columns(pl.lit("host").alias("kind")))
    assert host_only.change_split is None and c.change_split is split  # its own attribution


def _engine_imports(engine: Path = ENGINE) -> dict[str, list[tuple[str, list[str]]]]:
    """module -> [(imported tracediff module, names used from it)], function-level imports too;
    a module imported whole (`from tracediff.engine.cycle import find as cy`) lists the attributes
    read from it (`cy._ranges`). Every module of the engine, in its folders too."""
    paths = sorted(engine.rglob("*.py"))
    top = engine.parent.parent  # the folder that holds tracediff/

    def name_of(path: Path) -> str:
        return ".".join(path.relative_to(top).with_suffix("").parts)

    modules = {name_of(p) for p in paths} | {name_of(p.parent) for p in paths}
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for path in paths:
        tree = ast.parse(path.read_text())
        deps: list[tuple[str, list[str]]] = []
        alias: dict[str, str] = {}  # local name -> module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tracediff"):
                for a in node.names:
                    if f"{node.module}.{a.name}" in modules:
                        alias[a.asname or a.name] = f"{node.module}.{a.name}"
                    else:
                        deps.append((node.module or "", [a.name]))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("tracediff"):
                        alias[a.asname or a.name] = a.name
        used: dict[str, list[str]] = {m: [] for m in alias.values()}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in alias:
                    used[alias[node.value.id]].append(node.attr)
        out[name_of(path)] = deps + list(used.items())
    return out


def _private(engine: Path = ENGINE) -> list[tuple[str, str, str]]:
    return [
        (mod, dep, n)
        for mod, deps in _engine_imports(engine).items()
        for dep, names in deps
        for n in names
        if n.startswith("_") and n != "__version__"
    ]


def test_engine_modules_import_no_private_names() -> None:
    assert _private() == []


def _circles(engine: Path = ENGINE) -> list[str]:
    graph = {
        mod: {d for d, _ in deps if d.startswith("tracediff.engine.")}
        for mod, deps in _engine_imports(engine).items()
    }
    state: dict[str, int] = {}
    found = []

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 2:
            return
        if state.get(m) == 1:
            found.append(" -> ".join([*path, m]))
            return
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            visit(d, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        visit(m, [])
    return found


def test_engine_modules_import_each_other_without_a_circle() -> None:
    assert _circles() == []


def test_engine_root_holds_its_subsystems_in_folders() -> None:
    """Issue 29: the engine's root keeps at most 16 modules (cycle/, statistics/ and pipeline/
    hold the rest), and every module of a folder is seen by the checks above."""
    root = [p for p in ENGINE.glob("*.py") if p.name != "__init__.py"]
    assert len(root) <= 16, sorted(p.name for p in root)
    folders = {p.parent.name for p in ENGINE.rglob("*.py") if p.parent != ENGINE}
    assert {"cycle", "statistics", "pipeline"} <= folders
    seen = _engine_imports()
    assert "tracediff.engine.cycle.find" in seen and "tracediff.engine.pipeline.join" in seen
