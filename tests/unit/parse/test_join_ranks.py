"""One run from many files (issue 20): real per-rank Kineto traces read as one run, and GPUs
matched across runs by rank, id or order (parse/ranks/combine.py, parse/ranks/gpus.py).

Data: HolisticTraceAnalysis `trace_filter/sampled_rank-{0,1}.json.gz` (MIT; tests/data/README.md):
two ranks of one 128-rank job, each its own process on its own GPU (ordinal 0 and 1),
`distributedInfo` rank 0 and 1, times already Unix µs (time origin 0).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.support.cli import cli_run
from tracediff.base.errors import InputError, UsageError
from tracediff.engine.compare import compare
from tracediff.parse import load
from tracediff.parse.load import load_files
from tracediff.parse.ranks import gpus
from tracediff.runs.runfile import Run, read_run

KINETO = Path(__file__).resolve().parent.parents[1] / "data" / "kineto"
R0, R1 = KINETO / "sampled_rank-0.json.gz", KINETO / "sampled_rank-1.json.gz"


@pytest.fixture
def ranks(tmp_path: Path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    for f in (R0, R1):
        shutil.copy(f, d / f.name)
    return d


def test_a_folder_of_rank_traces_is_one_run_with_both_gpus(ranks: Path) -> None:
    one, two = load(R0), load(R1)
    run = load(ranks, allow_missing_ranks=True)
    k = run.table("kernels")
    assert k.num_rows == one.table("kernels").num_rows + two.table("kernels").num_rows
    assert sorted(set(k.column("device_id").to_pylist())) == [0, 1]
    g = {x["rank"]: x for x in run.metadata["gpus"]}
    assert set(g) == {0, 1}
    assert g[0]["rank_from"] == g[1]["rank_from"] == "distributedInfo"
    assert g[0]["process_id"] == 4037 and g[1]["process_id"] == 4045
    assert g[1]["ordinal"] == 1 and g[1]["file"].endswith("sampled_rank-1.json.gz")
    # one clock (both traces give Unix µs): rank 1's kernels keep their own times
    assert k.filter(k.column("device_id").to_numpy() == 1).column("start_ns").to_pylist() == (
        two.table("kernels").column("start_ns").to_pylist()
    )
    assert run.metadata["clock"].startswith("one clock")


def test_the_same_files_given_one_by_one_are_the_same_run(ranks: Path) -> None:
    a, b = (
        load(ranks, allow_missing_ranks=True),
        load_files([R1, R0], allow_missing_ranks=True),
    )  # given in another order

    def ids(run: object) -> list[dict[str, object]]:
        gs = [{k: v for k, v in g.items() if k != "file"} for g in run.metadata["gpus"]]  # type: ignore[attr-defined]
        return sorted(gs, key=lambda g: g["rank"])  # type: ignore[arg-type,return-value]

    assert ids(a) == ids(b)
    for t in ("kernels", "collectives", "api_calls"):
        assert a.table(t).num_rows == b.table(t).num_rows


def test_parse_writes_one_run_file_from_the_files(ranks: Path, tmp_path: Path) -> None:
    out = tmp_path / "job.arrow"
    r = cli_run(["parse", str(R0), str(R1), "-o", str(out), "--allow-missing-ranks"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "read 2/2" in r.stderr  # per-file progress
    run = read_run(out)
    assert [g["rank"] for g in run.metadata["gpus"]] == [0, 1]
    assert (
        run.table("kernels").num_rows
        == load(ranks, allow_missing_ranks=True).table("kernels").num_rows
    )


def _compare(base: Path, head: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    r = cli_run(
        ["compare", str(base), str(head), "--format", "json", "--cycle", "whole", *extra],
        timeout=180,
        text=False,
    )
    assert r.returncode == 0, r.stderr
    return orjson.loads(r.stdout)  # type: ignore[no-any-return]


def test_single_gpu_runs_on_different_ordinals_compare_op_by_op() -> None:
    """Rank 0 on GPU 0 vs rank 1 on GPU 1: before the GPU matching every op was "removed" on
    GPU 0 and "added" on GPU 1 (0 matched rows); now the only GPUs are paired, by order, and
    the guess is said."""
    d = _compare(R0, R1)
    status = [a["status"] for a in d["attribution"]]
    assert status.count("matched") > 100
    assert {a["device"] for a in d["attribution"] if a["device"] is not None} == {0}
    (pair,) = d["device_map"]
    assert pair["by"] == "order" and pair["guessed"] is True
    assert (pair["base"]["rank"], pair["head"]["rank"]) == (0, 1)
    assert any("matched by order" in w for w in d["warnings"])


def test_device_map_pairs_them_without_a_guess() -> None:
    d = _compare(R0, R1, "--device-map", "0=1")
    (pair,) = d["device_map"]
    assert pair["by"] == "given" and not pair["guessed"]
    assert not any("matched by order" in w for w in d["warnings"])
    assert [a["status"] for a in d["attribution"]].count("matched") > 100


def test_device_map_naming_a_gpu_the_run_lacks_is_a_usage_error() -> None:
    ref, other = gpus.gpus_of(load(R0)), gpus.gpus_of(load(R1))
    with pytest.raises(UsageError, match="head run has no GPU 5"):
        gpus.match(ref, other, gpus.parse_device_map("0=5"))
    with pytest.raises(UsageError, match="not BASE=HEAD"):
        gpus.parse_device_map("0:1")


def test_joined_runs_match_by_rank(ranks: Path) -> None:
    """Two-rank runs (the same job folder twice) match rank to rank, not guessed."""
    run = load(ranks, allow_missing_ranks=True)
    m = gpus.match(gpus.gpus_of(run), gpus.gpus_of(load(ranks, allow_missing_ranks=True)))
    assert m.by == "rank" and not m.guessed and m.mapping == {0: 0, 1: 1}
    # head's GPUs in the other order of ids: still matched by rank
    swapped = gpus.relabel(run, gpus.match(gpus.gpus_of(run), gpus.gpus_of(run), {1: 0, 0: 1}))
    m2 = gpus.match(gpus.gpus_of(run), gpus.gpus_of(swapped))
    assert m2.by == "rank" and m2.mapping == {1: 0, 0: 1}


@pytest.mark.parametrize(
    "name,device,rank,pid",
    [
        ("nccl_data.json.gz", 0, 0, 2910249),  # HTA nccl_parser_config: rank 0 of 2, A100
        ("eager_trace.json.gz", 0, 0, 6583),  # TraceLens vLLM TP=8, rank 0, B200
        ("sglang_Qwen3-8B_decode.json.gz", 0, 0, None),  # TraceLens SGLang, MI300X, world 1
        ("graph_execution.json.gz", 2, 0, None),  # TraceLens vLLM decode, MI300
    ],
)
def test_public_single_rank_traces_read_with_their_rank_and_gpu(
    name: str, device: int, rank: int, pid: int | None
) -> None:
    run = load(KINETO / name)
    (g,) = gpus.gpus_of(run)  # one GPU with work, though the trace lists up to 8
    assert (g.device_id, g.rank, g.rank_from) == (device, rank, "distributedInfo")
    assert pid is None or g.process_id == pid


def test_two_copies_of_one_trace_named_as_ranks_are_refused(tmp_path: Path) -> None:
    """Two copies of TraceLens' SGLang trace under SGLang's per-rank names (TP-0, TP-1): the
    names say ranks 0 and 1, both traces say rank 0 over the same window: not one job's ranks
    (issue 30: joined before as two GPUs), refused whether the names or the user say ranks."""
    src = KINETO / "sglang_Qwen3-8B_decode.json.gz"
    for tp in (0, 1):
        shutil.copy(src, tmp_path / f"1764000000.25-TP-{tp}.trace.json.gz")
    for layout in ("auto", "ranks"):
        with pytest.raises(InputError, match="cannot be one run: .*2 files say rank 0"):
            load(tmp_path, layout=layout)  # type: ignore[arg-type]


def _without(run: Run, pid: int, name: str) -> Run:
    """The run without one rank's range `name`, as a rank whose profiling began a step later
    records it (an in-memory copy; the trace is not changed)."""
    t = run.table("nvtx_ranges")
    drop = pc.and_(
        pc.equal(t.column("process_id"), pid), pc.equal(t.column("name").cast(pa.string()), name)
    )
    tables = {n: run.table(n) for n in run.tables} | {"nvtx_ranges": t.filter(pc.invert(drop))}
    return Run(tables=tables, metadata=dict(run.metadata), warnings=[])


def test_cycles_of_ranks_are_matched_by_step_number(ranks: Path) -> None:
    """Both ranks ran ProfilerStep#551 and #552. Rank 1 without #551 (it began a step later):
    by order its #552 would be cycle 0 beside rank 0's #551; by step number the one cycle
    both ranks have is #552, on both GPUs."""
    run = load(ranks, allow_missing_ranks=True)
    whole = compare(run, run)
    assert whole.base.cycles == 2
    late = _without(run, 4045, "ProfilerStep#551")
    c = compare(late, late)
    assert c.base.cycles == 1
    steps = pl.from_arrow(run.table("nvtx_ranges")).filter(
        pl.col("name").cast(pl.String) == "ProfilerStep#552"
    )
    cyc = c.cycles.filter(pl.col("side") == "base")
    assert sorted(cyc["device_id"].to_list()) == [0, 1]
    # each GPU's cycle starts inside that rank's step #552 range (launched in it)
    for dev, pid in ((0, 4037), (1, 4045)):
        s = steps.filter(pl.col("process_id") == pid).row(0, named=True)
        start = cyc.filter(pl.col("device_id") == dev)["start_ns"][0]
        assert s["start_ns"] <= start <= s["end_ns"] + 50_000_000


def test_files_read_in_worker_processes_join_to_the_same_run(ranks: Path) -> None:
    """The process pool (spawned workers, each told its memory share) gives the run the
    in-process reading gives, and one progress line per file."""
    from tracediff.parse import pool

    files = [R0, R1]
    said: list[str] = []
    local = pool.read_all(files, load, pool.Local())
    procs = pool.read_all(
        files, load, pool.Processes(2, {"TRACEDIFF_MEMORY_BYTES": str(1 << 30)}), said.append
    )
    assert len(said) == 2 and all(s.startswith("read ") for s in said)
    for a, b in zip(local, procs, strict=True):
        for t in ("kernels", "api_calls", "nvtx_ranges", "collectives"):
            assert a.table(t).equals(b.table(t))


def test_the_pool_is_used_only_for_enough_input_per_worker() -> None:
    from tracediff.parse import pool

    mb = 1 << 20
    assert isinstance(pool.executor_for([3 * mb] * 16), pool.Local)  # small files: in turn
    assert isinstance(pool.executor_for([]), pool.Local)  # run files (memory-mapped)
    big = pool.executor_for([400 * mb] * 4, workers=2)
    assert isinstance(big, pool.Processes) and big.workers == 2
    assert big.env["TRACEDIFF_KINETO_THREADS"] == "1"
    assert int(big.env["TRACEDIFF_MEMORY_BYTES"]) > 0
