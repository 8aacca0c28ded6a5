"""`compare --scheduler` with a rank file as the worker's unit (issue 21, engine/pipeline/rankunit.py).

Runs of several rank files: HTA's two-rank `trace_filter` job (tests/data/kineto) as a pair and
as run sets of rank folders; generated multi-node jobs (2 nodes x 4 GPUs as per-rank Kineto
traces, tests/support/gen_kineto_nodes.py; 2 nodes x 8 GPUs as per-node nsys reports,
tests/support/gen_nodes.py), each node on its own clock, head with a straggler rank and a slower
all-reduce. On a real LocalCluster (`local:2`) and on a real `dask scheduler` with two `dask
worker` processes: the JSON is byte for byte the in-process one, a run's rank files are reduced
on both workers (the workers' own logs say which ran which file: a whole run as one task could
not be split), and a worker killed while it reduces a rank file changes nothing.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.dask import ROOT, cli, compare_json, padded_kineto
from tests.support.gen_kineto_nodes import write_kineto_nodes
from tests.support.gen_nodes import split_nodes
from tests.support.gen_nsys import SlowerCollective, Straggler, write_report

pytestmark = [pytest.mark.dask]

pytest.importorskip("distributed")

KINETO = ROOT / "tests" / "data" / "kineto"
HEAD_CHANGES = [Straggler(5, 25_000), SlowerCollective(15_000)]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("rank-jobs")
    out: dict[str, tuple[Path, Path]] = {}
    for side in ("base", "head"):  # HTA's job, as one run and as a run set of two
        for f in (KINETO / f"sampled_rank-{r}.json.gz" for r in (0, 1)):
            for run in ("hta", "hta-set/run-1", "hta-set/run-2"):
                (d / side / run).mkdir(parents=True, exist_ok=True)
                shutil.copy(f, d / side / run / f.name)
    out["hta"] = (d / "base" / "hta", d / "head" / "hta")
    out["hta-set"] = (d / "base" / "hta-set", d / "head" / "hta-set")
    kin, nsys = [], []
    for side, seed, changes, err in (("b", 1, [], 4_100_000), ("h", 2, HEAD_CHANGES, -2_900_000)):
        r8 = write_report(d / f"{side}8.sqlite", 8, 16, 30, changes, seed=seed)
        kin.append(d / f"kineto-{side}")
        write_kineto_nodes(r8.path, kin[-1], 4, [0, err])
        r16 = write_report(d / f"{side}16.sqlite", 16, 10, 20, changes, seed=seed)
        nsys.append(d / f"nsys-{side}")
        split_nodes(r16.path, nsys[-1], 8, [0, err], [0, 1_500_000])
    out["kineto"] = (kin[0], kin[1])
    out["nsys"] = (nsys[0], nsys[1])
    return out


LAYOUT = {
    "kineto": ["--layout", "ranks"],
    "nsys": ["--layout", "ranks"],
    "hta": ["--allow-missing-ranks"],  # HTA's job: 2 of its 128 ranks (issue 30)
    "hta-set": ["--allow-missing-ranks"],
}


def _pair(jobs: dict[str, tuple[Path, Path]], name: str) -> tuple[Path, Path, list[str]]:
    return *jobs[name], LAYOUT.get(name, [])


in_process = functools.cache(compare_json)
"""The in-process answer of a pair, computed once for the module's tests."""


def test_local_cluster_gives_the_in_process_answer(jobs: dict[str, tuple[Path, Path]]) -> None:
    """A LocalCluster started by compare itself, on HTA's job as run sets of rank folders and on
    the nsys nodes (the Kineto nodes go through the `dask scheduler` below; HTA's job as one run
    is the run sets' unit). Each `local:2` starts 4 processes: 2 of the 4 pairs keep the suite
    short. Its stderr is a file, not a terminal: no progress lines (test_progress_lines_on_a_terminal)."""
    for name in ("hta-set", "nsys"):
        base, head, extra = _pair(jobs, name)
        here = in_process(base, head, *extra)
        there = cli("compare", str(base), str(head), "--format", "json", "--bootstrap", "100",
                    *extra, "--scheduler", "local:2")  # fmt: skip
        assert there.returncode == 0, there.stderr
        assert there.stdout == here, name
        assert "files read" not in there.stderr and "files reduced" not in there.stderr
    assert '"Straggler' not in here  # (the names below are the generated changes' rows)


def _reduced_on(addr: str) -> dict[str, list[str]]:
    """worker address -> the base rank files it reduced, from the worker's own log: the keys it
    ran to the end (a transition executing -> memory). A key can appear in the log of a worker
    that did not run it (a task stolen from it before it started, a result it fetched): a
    fresh-clone suite failed once on counting those as reduced there."""
    from distributed import Client

    def files(dask_worker: object) -> list[str]:
        log = dask_worker.state.log  # type: ignore[attr-defined]
        keys = {
            str(x[0])
            for x in log
            if str(x[0]).startswith("tracediff-reduced-base-")
            and len(x) >= 4
            and x[1] == "executing"
            and x[3] == "memory"
        }
        return sorted({k[len("tracediff-reduced-base-") :].rsplit("-", 1)[0] for k in keys})

    with Client(addr, timeout="30s") as c:
        return c.run(files)  # type: ignore[no-any-return]


def test_a_runs_rank_files_are_spread_over_both_workers_and_each_parsed_once(
    cluster: tuple[str, list[subprocess.Popen[bytes]]], jobs: dict[str, tuple[Path, Path]]
) -> None:
    """One compare on a `dask scheduler` with two workers: the run's rank files are reduced on
    both workers, each file once (the workers' own logs); and engine/pipeline/rankcache.py: each
    rank file's reduce round reads the parse its scan kept on its worker (the worker's own events
    say so), the answer is the same, and the compare leaves no kept parse behind on either
    worker."""
    from distributed import Client

    from tracediff.engine.pipeline.rankcache import EVENT

    addr, _ = cluster
    base, head, extra = _pair(jobs, "kineto")
    with Client(addr, timeout="30s") as c:
        seen = len(c.get_events(EVENT))
    assert compare_json(base, head, *extra, "--scheduler", addr) == in_process(base, head, *extra)
    by_worker = _reduced_on(addr)
    assert len(by_worker) == 2
    names = sorted(p.name for p in base.iterdir())
    assert len(names) == 8
    assert all(by_worker.values()), by_worker  # each worker reduced some of the run's files
    assert sorted(f for fs in by_worker.values() for f in fs) == names  # each file once

    def left(dask_worker: object) -> list[str]:
        d = Path(dask_worker.local_directory)  # type: ignore[attr-defined]
        return sorted(str(p) for p in d.glob("tracediff-*"))

    with Client(addr, timeout="30s") as c:
        reads = [e for _, e in c.get_events(EVENT)[seen:]]
        kept_dirs = c.run(left)
    files = {str(p) for p in base.iterdir()} | {str(p) for p in head.iterdir()}
    assert {e["file"] for e in reads} == files  # every file's reduce read on a worker
    kept = [e["file"] for e in reads if e["kept"]]
    # Dask may move a task off the worker that holds its parse (then it is parsed): a few at most
    assert len(reads) >= len(files) and len(kept) >= len(reads) - 2, reads
    assert all(not d for d in kept_dirs.values()), kept_dirs


def test_a_worker_killed_while_it_reduces_a_rank_file_changes_nothing(
    cluster: tuple[str, list[subprocess.Popen[bytes]]], jobs: dict[str, tuple[Path, Path]]
) -> None:
    from distributed import Client

    addr, workers = cluster
    base, head, extra = _pair(jobs, "nsys")
    expected = in_process(base, head, *extra)
    args = [sys.executable, "-m", "tracediff", "compare", str(base), str(head), *extra,
            "--format", "json", "--bootstrap", "100", "--scheduler", addr]  # fmt: skip
    killed = None
    with Client(addr, timeout="30s") as c:
        pids = c.run(os.getpid)
        run = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        deadline = time.monotonic() + 240
        while killed is None and run.poll() is None and time.monotonic() < deadline:
            for w, tasks in c.processing().items():
                if any(str(k).startswith("tracediff-reduced-head-") for k in tasks):
                    os.kill(pids[w], signal.SIGKILL)
                    killed = pids[w]
                    break
            time.sleep(0.02)
    out, err = run.communicate(timeout=300)
    assert killed is not None, "the compare finished before a worker held a rank file"
    assert next(w for w in workers if w.pid == killed).wait(timeout=30) == -signal.SIGKILL
    assert run.returncode == 0, err.decode()
    assert out.decode() == expected


def test_a_damaged_rank_file_is_one_line_naming_it(
    jobs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    base = tmp_path / "base"
    shutil.copytree(jobs["hta"][0], base)
    bad = base / "sampled_rank-1.json.gz"
    bad.write_bytes(bad.read_bytes()[:5000])
    p = cli("compare", str(base), str(jobs["hta"][1]), "--format", "json",
            "--scheduler", "local:1", "--allow-missing-ranks")  # fmt: skip
    assert p.returncode == 1 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0], p.stderr


def test_a_rank_file_whose_worker_dies_twice_is_named_in_one_line(
    jobs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """A memory limit below what reading a rank file needs (above the ~228 MiB refused before the
    work: tests/cli/test_bad_options.py): the nanny kills the worker holding it, Dask runs it
    again on the restarted worker, which dies too; one line names the file. Every rank file of
    both sides needs ~560 MiB to read (a 400 MiB string field): HTA's own ranks need ~205 MiB of
    a worker, which a 240 MiB limit killed on one machine and not on another (or only under load)."""
    big = tmp_path / "padded.json.gz"
    padded_kineto(jobs["hta"][0] / "sampled_rank-1.json.gz", big, 400)
    sides = {side: tmp_path / side for side in ("base", "head")}
    files = [d / f"sampled_rank-{r}.json.gz" for d in sides.values() for r in (0, 1)]
    for f in files:
        f.parent.mkdir(exist_ok=True)
        shutil.copy(big, f)
    p = cli("compare", str(sides["base"]), str(sides["head"]), "--format", "json",
            "--allow-missing-ranks", "--scheduler", "local:1", "--memory-limit", "240MiB")  # fmt: skip
    assert p.returncode == 1 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "rank file failed twice" in lines[0], lines[0]
    assert any(lines[0].startswith(f"tracediff: error: {f}: ") for f in files), lines[0]


def _on_a_terminal(*argv: str) -> tuple[int, str, str]:
    """The CLI with its stderr on a real pseudo-terminal (stdout a pipe, stdin none): exit
    status, stdout, and what the terminal showed."""
    import pty
    import threading

    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "tracediff", *argv], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, text=True,
    )  # fmt: skip
    os.close(slave)
    shown = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                return
            if not chunk:
                return
            shown.extend(chunk)

    t = threading.Thread(target=drain)
    t.start()
    out, _ = p.communicate(timeout=300)
    t.join(timeout=30)
    os.close(master)
    return p.returncode, out, shown.decode(errors="replace")


def test_progress_lines_on_a_terminal(jobs: dict[str, tuple[Path, Path]]) -> None:
    """`compare --scheduler`'s progress (engine/pipeline/cluster.py `gather`): on a terminal, a line per
    rank file back, per side, each round's counts going up to every file of the side; none
    when stderr is not a terminal."""
    import re

    base, head, extra = _pair(jobs, "kineto")
    n = {"base": len(list(base.iterdir())), "head": len(list(head.iterdir()))}
    argv = ["compare", str(base), str(head), *extra, "--format", "json", "--bootstrap", "100",
            "--scheduler", "local:2"]  # fmt: skip
    rc, out, shown = _on_a_terminal(*argv)
    assert rc == 0, shown
    assert json.loads(out)["delta_ms_per_cycle"]
    seen: dict[tuple[str, str], list[int]] = {}
    for verb, sides in re.findall(r"tracediff: files (\w+): ([^\r\n…]+)…", shown):
        for side, k, total in re.findall(r"(base|head) (\d+)/(\d+)", sides):
            assert int(total) == n[side], sides
            seen.setdefault((verb, side), []).append(int(k))
    for side in ("base", "head"):
        for verb in ("read", "reduced"):
            counts = seen.get((verb, side), [])
            # one line per file back, each round from 1 up to every file of the side
            assert counts and counts[-1] == n[side], (verb, side, counts)
            assert set(counts) - {0} == set(range(1, n[side] + 1)), (verb, side, counts)
    assert "tracediff: attributing…" in shown
    # the same answer as in one process (piped, no progress: test_local_cluster_gives_the_...)
    assert out == in_process(base, head, *extra)
