"""`compare --scheduler`: the per-file work on a real Dask cluster gives the in-process answer.

A LocalCluster of worker processes (`local:2`), and a real `dask scheduler` with two `dask worker`
processes on 127.0.0.1 (free ports, started and stopped here). Inputs: the bundled H200 run sets
(samples/runs) and generated nsys-schema run sets of 2 GPUs with all-reduces and a straggler
(tests/support/gen_nsys.py, parsed to run files the workers read themselves). One worker is killed
(SIGKILL) while it holds a file's task: Dask runs the task again on the other, and the answer
is the same. Dask missing: a one-line error saying how to install it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.dask import ROOT, cli, compare_json, padded_kineto
from tests.support.gen_nsys import SlowerKernel, Straggler, write_report
from tracediff.base.daskclient import Connection, MemoryStall, each_done
from tracediff.parse import load
from tracediff.runs.runfile import write_run

pytestmark = [pytest.mark.dask]

pytest.importorskip("distributed")

RUNS = ROOT / "samples" / "runs"


@pytest.fixture(scope="module")
def gen_sets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Run sets of 4 runs a side (run files), 2 GPUs; head: rank 1 late to every all-reduce
    and a slower kernel."""
    d = tmp_path_factory.mktemp("dask-sets")
    for side in ("base", "head"):
        (d / side).mkdir()
        for i in range(4):
            seed = (1 if side == "base" else 11) + i
            changes = (
                [Straggler(rank=1, late_ns=20_000), SlowerKernel("flash_fwd_kernel", 4_000)]
                if side == "head"
                else []
            )
            sql = d / f"{side}{i}.sqlite"
            write_report(
                sql, n_gpus=2, n_cycles=40, kernels_per_cycle=40, changes=changes, seed=seed
            )
            write_run(load(sql), d / side / f"run-{i + 1:02d}.arrow")
            sql.unlink()
    return d / "base", d / "head"


# The generated runs share one time origin (their windows overlap, as ranks' do), so the data
# cannot say they are separate runs: the tests say so, as a user of such files would.
AS_RUNS = ("--layout", "runs")


def test_local_cluster_gives_the_in_process_answer(gen_sets: tuple[Path, Path]) -> None:
    """Bundled H200 run sets and generated ones: byte-identical JSON."""
    for base, head in ((RUNS / "good", RUNS / "bad"), gen_sets):
        assert compare_json(base, head, *AS_RUNS, "--scheduler", "local:2") == compare_json(
            base, head, *AS_RUNS
        )


def test_scheduler_and_workers_give_the_in_process_answer(
    cluster: tuple[str, list[subprocess.Popen[bytes]]], gen_sets: tuple[Path, Path]
) -> None:
    addr, _ = cluster
    base, head = gen_sets
    assert compare_json(base, head, *AS_RUNS, "--scheduler", addr) == compare_json(
        base, head, *AS_RUNS
    )


def test_a_worker_killed_mid_run_does_not_change_the_answer(
    cluster: tuple[str, list[subprocess.Popen[bytes]]], gen_sets: tuple[Path, Path]
) -> None:
    """SIGKILL to a worker while it holds a file's task: Dask runs the task again on the
    other worker; same JSON, exit 0."""
    from distributed import Client

    addr, workers = cluster
    base, head = gen_sets
    expected = compare_json(base, head, *AS_RUNS)
    args = [sys.executable, "-m", "tracediff", "compare", str(base), str(head), "--format",
            "json", "--bootstrap", "100", *AS_RUNS, "--scheduler", addr]  # fmt: skip
    killed = None
    with Client(addr, timeout="30s") as c:
        pids = c.run(os.getpid)  # worker address -> its process id
        run = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        deadline = time.monotonic() + 240
        while killed is None and run.poll() is None and time.monotonic() < deadline:
            for w, tasks in c.processing().items():
                if any("tracediff-reduce" in str(k) for k in tasks):
                    pid = pids[w]
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
                    break
            time.sleep(0.05)
    out, err = run.communicate(timeout=300)
    assert killed is not None, "the compare finished before a worker held a task"
    assert any(w.pid == killed for w in workers)
    assert next(w for w in workers if w.pid == killed).wait(timeout=30) == -signal.SIGKILL
    assert run.returncode == 0, err.decode()
    assert out.decode() == expected


def test_without_dask_one_line_saying_how_to_install() -> None:
    code = (
        "import sys; sys.modules['distributed'] = None; sys.modules['dask'] = None; "
        "from tracediff.cli import main; "
        f"sys.exit(main(['compare', '{RUNS / 'good'}', '{RUNS / 'bad'}', '--format', 'json', "
        "'--scheduler', 'local:2']))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Dask is not installed" in lines[0]
    assert "pip install 'tracediff[dask]'" in lines[0]


def test_a_file_whose_worker_dies_twice_is_named_in_one_line(tmp_path: Path) -> None:
    """A memory limit below what reading a run needs (a limit below what a worker holds is refused
    before the work, tests/cli/test_bad_options.py): Dask's nanny kills the worker holding base's
    run, Dask runs the task again on the restarted worker, which dies too; the error names the
    file, in one line (Dask's own log lines silenced). Each rank file needs ~560 MiB to read (a
    Kineto trace with a 400 MiB string field): the demo's run files, used before, needed ~240 MiB, which
    a 240MiB limit killed in one session and not in the next."""
    big = tmp_path / "padded.json.gz"
    padded_kineto(ROOT / "tests" / "data" / "kineto" / "sampled_rank-1.json.gz", big, 400)
    base, head = tmp_path / "base", tmp_path / "head"  # run sets of two runs of two rank files
    for d in (base, head):
        for r in ("run-1", "run-2"):
            (d / r).mkdir(parents=True)
            for k in (0, 1):
                (d / r / f"sampled_rank-{k}.json.gz").write_bytes(big.read_bytes())
    p = cli(
        "compare", str(base), str(head), "--format", "json", "--allow-missing-ranks",
        "--scheduler", "local:1", "--memory-limit", "240MiB",
    )  # fmt: skip
    assert p.returncode == 1 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "failed twice" in lines[0], lines[0]
    assert lines[0].startswith((f"tracediff: error: {base}/run-", f"tracediff: error: {head}/run-"))


class _Heavy:
    """A task's result that takes 400 MiB to pickle, as its worker sends it to the driver."""

    def __reduce__(self) -> tuple[type, tuple[()]]:
        held = b"x" * (400 << 20)  # noqa: F841 (held while the nanny looks, every 0.1 s)
        time.sleep(10)
        return (_Heavy, ())


def _heavy(_item: object) -> _Heavy:
    return _Heavy()


def test_workers_restarted_for_memory_with_no_file_back_stop_in_one_line() -> None:
    """A real LocalCluster of one worker under a 300MiB limit, a task whose result takes 400
    MiB to send: the nanny restarts the worker while the driver fetches the result, not while
    the task runs, so no task fails; Dask computes the lost result again on the restarted
    worker, and again, for ever (as compare did at --memory-limit 215MiB on HTA's ranks,
    session 12). The watch in each_done stops it once no task came back for `stall_s` with 3
    memory restarts or more: a MemoryStall (exit 2) naming the limit, in one line."""
    import threading

    conn = Connection("local:1", "300MiB")
    raised: list[BaseException] = []

    def run() -> None:
        try:
            list(each_done(conn.client, _heavy, [0], ["a task"], stall_s=5))
        except BaseException as e:  # noqa: BLE001 (asserted below)
            raised.append(e)

    # bounded here, whatever happens (the suite must not wait for ever either)
    t0 = time.monotonic()
    waiting = threading.Thread(target=run, daemon=True)
    waiting.start()
    waiting.join(timeout=180)
    took = time.monotonic() - t0
    restarts = len(conn.client.get_events("worker-restart-memory"))
    closing = threading.Thread(target=conn.close, daemon=True)
    closing.start()
    closing.join(timeout=60)
    assert not waiting.is_alive(), f"no MemoryStall in {took:.0f} s ({restarts} memory restarts)"
    e = raised[0] if len(raised) == 1 else None
    assert isinstance(e, MemoryStall), raised
    assert e.exit_code == 2 and restarts >= 3
    assert "--memory-limit 300.00 MiB a worker" in e.message, e.message
    assert "restarted its workers" in e.message and "higher --memory-limit" in (e.hint or "")
    assert "\n" not in e.message + (e.hint or "")
    assert 5 <= took < 90, took
