"""One nsys report per node (issue 20): the rank from RANK in the session environment, the host
from its Hostname (TARGET_INFO_SYSTEM_ENV), reports named by host joined with --layout ranks.

The reports are generated (tests/support/gen_nsys.py, the real nsys 2024.2.3 DDL); the system-environment
rows are written as nsys writes them (name / value per property; DeviceEnvironment is the
`;`-separated environment nsys was started in).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl

from tests.support.gen_nsys import DDL_PATH, write_report
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.parse.nsys.reader import identity
from tracediff.parse.ranks import gpus


def _ddl(table: str) -> str:
    text = DDL_PATH.read_text()
    start = text.index(f"CREATE TABLE {table} (")
    return text[start : text.index(");", start) + 2]


def _node(path: Path, seed: int, host: str, env: str) -> Path:
    write_report(path, 1, 20, 24, seed=seed)
    con = sqlite3.connect(path)
    con.execute(_ddl("TARGET_INFO_SYSTEM_ENV"))
    rows = [("Hostname", 619, host), ("DeviceEnvironment", 610, env), ("CpuCores", 1, "16")]
    con.executemany(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (281474976710656, 'Local (CLI)', ?, ?, ?)",
        rows,
    )
    con.commit()
    con.close()
    return path


def test_identity_reads_rank_and_host() -> None:
    env = "PATH=/bin;LOCAL_RANK=1;RANK=9;SLURM_PROCID=3;X=a=b"
    frame = pl.DataFrame({"name": ["Hostname", "DeviceEnvironment"], "value": ["n1", env]})
    got = {"host": "n1", "rank": 9, "rank_from": "env RANK", "local_rank": 1, "world_size": None}
    assert identity(frame) == got
    world = pl.DataFrame({"name": ["DeviceEnvironment"], "value": ["RANK=2;WORLD_SIZE=16"]})
    assert identity(world)["world_size"] == 16  # torchrun's; the job's rank count (issue 30)
    mpi = pl.DataFrame({"name": ["DeviceEnvironment"], "value": ["OMPI_COMM_WORLD_RANK=4"]})
    assert identity(mpi)["rank"] == 4 and identity(mpi)["host"] is None
    assert (
        identity(
            pl.DataFrame(
                {"name": [], "value": []}, schema=[("name", pl.String), ("value", pl.String)]
            )
        )["rank"]
        is None
    )


def test_two_nodes_one_report_each_are_one_run_by_env_rank(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    # named by host (%h): no rank token; node-b's report holds rank 0
    _node(d / "report_node-a.sqlite", 1, "node-a", "RANK=1;LOCAL_RANK=0")
    _node(d / "report_node-b.sqlite", 2, "node-b", "RANK=0;LOCAL_RANK=0")
    one = load(d / "report_node-a.sqlite")
    (g,) = gpus.gpus_of(one)
    assert (g.rank, g.rank_from, g.host, g.device_id) == (1, "env RANK", "node-a", 0)
    run = load(d, layout="ranks")
    ids = {(x["host"], x["rank"], x["device_id"], x["ordinal"]) for x in run.metadata["gpus"]}
    assert ids == {("node-a", 1, 1, 0), ("node-b", 0, 0, 0)}  # both ordinal 0: ids by rank
    assert any("2 hosts (node-a, node-b)" in w for w in run.warnings)
    # per-rank cycles: 20 a GPU, both GPUs in the comparison
    c = compare(run, run)
    assert c.base.cycles == 20 and sorted(c.base.devices) == [0, 1]
