"""`parse --scheduler`: a run's per-rank files read on a real Dask LocalCluster give the run file
the in-process parse gives (issue 21's `tracediff parse … --scheduler ADDRESS`).

Input: HTA's two-rank `trace_filter` job (tests/data/kineto/sampled_rank-{0,1}.json.gz) as one
per-rank folder. A damaged rank file comes back as the reader's one-line refusal naming it; a
task that kills its worker each time (os._exit on the worker) is reported by its item's name
once Dask has run it twice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import cli_run
from tracediff.runs import schema
from tracediff.runs.runfile import read_run

pytestmark = [pytest.mark.dask]

pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "tests" / "data" / "kineto" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]


def cli(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return cli_run(argv, timeout=300, cwd=ROOT)


@pytest.fixture()
def job(tmp_path: Path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    for f in FILES:
        shutil.copy(f, d / f.name)
    return d


def test_parse_on_a_local_cluster_writes_the_in_process_run(job: Path, tmp_path: Path) -> None:
    here, there = tmp_path / "here.arrow", tmp_path / "there.arrow"
    p = cli("parse", job, "--allow-missing-ranks", "-o", here)
    assert p.returncode == 0, p.stderr
    d = cli(
        "parse",
        job,
        "--allow-missing-ranks",
        "-o",
        there,
        "--scheduler",
        "local:2",
        "--memory-limit",
        "2GiB",
    )
    assert d.returncode == 0, d.stderr
    assert sum(line.startswith("tracediff: read ") for line in d.stderr.splitlines()) == 2
    a, b = read_run(here), read_run(there)
    assert a.table("kernels").num_rows > 2000  # both ranks' kernels are in it
    for t in schema.TABLES:
        assert a.table(t).equals(b.table(t)), t
    meta = {k: v for k, v in a.metadata.items() if k != "run_file"}
    assert meta == {k: v for k, v in b.metadata.items() if k != "run_file"}
    assert [g["rank"] for g in b.metadata["gpus"]] == [0, 1]


def test_a_damaged_rank_file_on_the_cluster_is_one_line_naming_it(
    job: Path, tmp_path: Path
) -> None:
    bad = job / FILES[1].name
    bad.write_bytes(FILES[1].read_bytes()[:5000])
    r = cli(
        "parse", job, "--allow-missing-ranks", "-o", tmp_path / "x.arrow", "--scheduler", "local:2"
    )
    assert r.returncode == 1
    errors = [x for x in r.stderr.splitlines() if x.startswith("tracediff: error:")]
    assert len(errors) == 1 and str(bad) in errors[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "x.arrow").exists()


def test_a_task_that_kills_its_worker_twice_is_reported_by_name() -> None:
    from tracediff.base.daskclient import ClusterError, Connection
    from tracediff.parse.pool import OnDask

    conn = Connection("local:2", "1GiB")
    try:
        with pytest.raises(ClusterError) as e:
            list(OnDask(conn).map(os._exit, [7]))  # the worker process exits mid-task
    finally:
        conn.close()
    assert e.value.message == "7 failed twice on the cluster (its worker died each time it ran it)"


def test_parse_scheduler_refuses_jobs_and_a_bad_address(job: Path, tmp_path: Path) -> None:
    r = cli(
        "parse",
        job,
        "--allow-missing-ranks",
        "-o",
        tmp_path / "x.arrow",
        "--scheduler",
        "local:2",
        "--jobs",
        "2",
    )
    assert r.returncode == 2 and "--jobs" in r.stderr
    r = cli(
        "parse", job, "--allow-missing-ranks", "-o", tmp_path / "x.arrow", "--scheduler", "local:0"
    )
    assert r.returncode == 2 and "local:N with N >= 1" in r.stderr
