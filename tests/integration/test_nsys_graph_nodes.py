"""CUDA-graph ops in nsys reports take the stack of the call that created their node, only where
the report shows it (parse/nsys/graph_nodes.py, issue 19), on altered copies of a real capture.

The report: tests/data/h200-suspects, minispec c5 in graph mode (12 replays of 60 kernels and 4
memsets, the stream capture inside the window, function-trace ranges around the capture-time
launches), exported to SQLite with the real nsys. Removing the node table, or the creation rows
of some capture-time nodes, or moving those creations into the instantiate call, must leave the
affected ops with their cudaGraphLaunch stack (none here: bench.py is not traced) and say so;
the node table under its 2023.4 name (CUDA_GRAPH_EVENTS with graphNodeId) reads the same.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import polars as pl
import pytest

from tracediff.parse import load

pytestmark = [pytest.mark.nsys]

REP = (
    Path(__file__).resolve().parents[1]
    / "data/h200-suspects/nsys/2d346e8cc171_graph/run-01/report.nsys-rep"
)
GRAPH_OPS = 12 * (60 + 4)  # kernels and memsets replayed from the graph


@pytest.fixture(scope="module")
def sqlite(nsys: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gn") / "c5_graph.sqlite"
    subprocess.run(
        [nsys, "export", "--type", "sqlite", "--quiet=true", "-o", str(out), str(REP)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return out


def _copy(sqlite: Path, tmp_path: Path, *sql: str) -> Path:
    p = tmp_path / "altered.sqlite"
    shutil.copy(sqlite, p)
    con = sqlite3.connect(p)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return p


def _graph_ops(path: Path) -> tuple[pl.DataFrame, list[str]]:
    """(every graph op: kind, graph_node_id, stack_id; the warnings) of a report."""
    run = load(path)
    ops = pl.concat(
        [
            pl.from_arrow(run.tables[t])
            .select("graph_node_id", "stack_id")
            .with_columns(pl.lit(t).alias("table"))
            for t in ("kernels", "memops")
        ]
    ).filter(pl.col("graph_node_id").is_not_null())
    return ops, run.warnings


def _gwarn(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "CUDA-graph" in w]


# capture-time nodes: created with no original, inside a launch (not the instantiate)
_CAPTURED = """(SELECT g.graphNodeId FROM CUDA_GRAPH_NODE_EVENTS g WHERE g.originalGraphNodeId
  IS NULL AND NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s
  ON s.id = r.nameId WHERE r.globalTid = g.globalTid AND r.start <= g.start AND g.start <= r.end
  AND s.value LIKE 'cudaGraphInstantiate%'))"""


def test_the_real_report_maps_every_graph_op(sqlite: Path) -> None:
    ops, warnings = _graph_ops(sqlite)
    assert ops.height == GRAPH_OPS and ops["stack_id"].null_count() == 0
    assert _gwarn(warnings) == []
    # 60 + 4 nodes, each replayed 12 times with the one stack of its creating launch
    per_node = ops.group_by("graph_node_id").agg(pl.col("stack_id").n_unique(), pl.len())
    assert per_node.height == 64 and (per_node["stack_id"] == 1).all()
    assert (per_node["len"] == 12).all()


def test_without_the_node_table_the_launch_stack_stays_and_it_says_so(
    sqlite: Path, tmp_path: Path
) -> None:
    ops, warnings = _graph_ops(_copy(sqlite, tmp_path, "DROP TABLE CUDA_GRAPH_NODE_EVENTS"))
    assert ops.height == GRAPH_OPS
    assert ops["stack_id"].null_count() == GRAPH_OPS  # g.replay() in bench.py: no frame
    (w,) = _gwarn(warnings)
    assert f"{GRAPH_OPS} of {GRAPH_OPS} CUDA-graph kernels and memory ops keep their " in w
    assert "no graph-node events" in w and "--cuda-graph-trace=node" in w


def test_nodes_whose_capture_is_missing_keep_the_launch_stack(sqlite: Path, tmp_path: Path) -> None:
    """The creation rows of the capture-time memset nodes removed (as if captured before the
    window): those 48 memsets fall back, every kernel is still mapped."""
    memset_nodes = """(SELECT g.graphNodeId FROM CUDA_GRAPH_NODE_EVENTS g JOIN
      CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = g.globalTid AND r.start <= g.start
      AND g.start <= r.end JOIN StringIds s ON s.id = r.nameId
      WHERE s.value LIKE 'cudaMemsetAsync%')"""
    ops, warnings = _graph_ops(
        _copy(
            sqlite,
            tmp_path,
            f"DELETE FROM CUDA_GRAPH_NODE_EVENTS WHERE graphNodeId IN "
            f"{memset_nodes} AND originalGraphNodeId IS NULL",
        )  # fmt: skip
    )
    lost = ops.filter(pl.col("stack_id").is_null())
    assert lost.height == 48 and set(lost["table"]) == {"memops"}
    (w,) = _gwarn(warnings)
    assert f"48 of {GRAPH_OPS} CUDA-graph" in w and "not in the report" in w


def test_a_node_created_by_the_instantiate_is_no_match(sqlite: Path, tmp_path: Path) -> None:
    """The capture-time launches that created the kernel nodes renamed cudaGraphInstantiate (an
    instantiated node whose capture the report lacks looks so): their nodes are not matched to
    that call, though it runs inside minispec's functions; the memset nodes still are."""
    held = f"""(SELECT r.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUDA_GRAPH_NODE_EVENTS g
      ON r.globalTid = g.globalTid AND r.start <= g.start AND g.start <= r.end
      JOIN StringIds s ON s.id = r.nameId
      WHERE g.graphNodeId IN {_CAPTURED} AND s.value NOT LIKE 'cudaMemsetAsync%')"""
    inst = "(SELECT id FROM StringIds WHERE value LIKE 'cudaGraphInstantiate%' LIMIT 1)"
    ops, warnings = _graph_ops(
        _copy(
            sqlite,
            tmp_path,
            f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = {inst} WHERE rowid IN {held}",
        )  # fmt: skip
    )
    lost = ops.filter(pl.col("stack_id").is_null())
    assert lost.height == 12 * 60 and set(lost["table"]) == {"kernels"}
    (w,) = _gwarn(warnings)
    assert f"{12 * 60} of {GRAPH_OPS}" in w


def test_the_2023_4_table_name_reads_the_same(sqlite: Path, tmp_path: Path) -> None:
    """Up to nsys 2023.4 the node ids (graphNodeId, originalGraphNodeId) were in
    CUDA_GRAPH_EVENTS (domain-reference §1.1)."""
    want, _ = _graph_ops(sqlite)
    got, warnings = _graph_ops(
        _copy(
            sqlite,
            tmp_path,
            "DROP TABLE IF EXISTS CUDA_GRAPH_EVENTS",
            "ALTER TABLE CUDA_GRAPH_NODE_EVENTS RENAME TO CUDA_GRAPH_EVENTS",
        )
    )
    assert _gwarn(warnings) == [] and got.equals(want)
