"""What tracediff decides its inputs are, from their data (issue 30): runs or ranks, one workload,
no run counted twice, no rank missing unsaid. Every case on real traces, in folders built here.

Data: the H200 bisect pool (tests/data/h200-bisect/pool.tar.xz: 4 processes a commit, captured
one after another on one GPU), HTA's `trace_filter` ranks 0 and 1 of a 128-rank job and its
`trace_compare` base trace (another job, 2022), the H200 specloop and twostream captures.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import orjson
import pytest

from tests.support.cli import cli_run
from tracediff.base.errors import InputError
from tracediff.parse import load
from tracediff.parse.load import load_files
from tracediff.runs.runfile import read_run

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = DATA.parents[1]
KINETO = DATA / "kineto"
GOOD, BAD = "87d20f3db43d", "a66c25ee9522"  # the pool's good commit and its culprit


def td(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    return cli_run(args, timeout=600, text=False)


@pytest.fixture(scope="module")
def rk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """good/ and bad/, each 4 reports r1..r4.nsys-rep of 4 separate processes (names that read
    as rank tokens)."""
    root = tmp_path_factory.mktemp("rk")
    with tarfile.open(DATA / "h200-bisect" / "pool.tar.xz") as t:
        t.extractall(root / "x", filter="data")
    for side, commit in (("good", GOOD), ("bad", BAD)):
        (root / side).mkdir()
        for k in range(1, 5):
            src = root / "x" / "pool" / commit / f"run-0{k}" / "report.nsys-rep"
            shutil.copy(src, root / side / f"r{k}.nsys-rep")
    return root


def test_four_separate_processes_named_rk_compare_as_four_runs(rk: Path) -> None:
    r = td("compare", rk / "good", rk / "bad", "--format", "json")
    assert r.returncode == 0, r.stderr
    d = orjson.loads(r.stdout)
    assert d["runs"] == {"base": 4, "head": 4} and d["noise_unit"] == "run"
    line = d["inputs"]["base"]["line"]
    assert line.startswith("base: 4 runs of one workload (4 processes on GPU-d5cb3869…, ")
    ids = d["inputs"]["base"]["identities"]
    assert len({i["process_ids"][0] for i in ids}) == 4  # four processes
    (uuid,) = {i["gpus"][0]["uuid"] for i in ids}  # one GPU: the same H200 each time
    assert uuid.startswith("GPU-d5cb3869-")
    assert any("the names say 4 ranks of one run, the data says 4 separate runs" in w
               for w in d["warnings"])  # fmt: skip
    # one run of four GPUs before: the critical GPU was 4 of them
    assert d["base"]["devices"] == [0]
    t = td("compare", rk / "good", rk / "bad", "--format", "table")
    assert t.stdout.decode().splitlines()[0] == line


def test_the_dask_path_decides_the_same(rk: Path) -> None:
    """`--scheduler`: the folder's files are scanned on the workers as rank files, and the
    driver, from their identities, reads them as the run set they are (same JSON)."""
    pytest.importorskip("distributed")
    here = td("compare", rk / "good", rk / "bad", "--format", "json")
    there = td("compare", rk / "good", rk / "bad", "--format", "json", "--scheduler", "local:2")
    assert there.returncode == 0, there.stderr
    assert orjson.loads(there.stdout) == orjson.loads(here.stdout)
    assert orjson.loads(there.stdout)["runs"] == {"base": 4, "head": 4}


def test_parse_and_info_of_the_folder_say_what_it_is(rk: Path, tmp_path: Path) -> None:
    r = td("parse", rk / "good", "-o", tmp_path / "one.arrow")
    assert r.returncode == 1 and not (tmp_path / "one.arrow").exists()
    assert b"the data says 4 separate runs" in r.stderr and b"parse each file" in r.stderr
    i = td("info", rk / "good", "--format", "json")
    assert i.returncode == 0, i.stderr
    info = orjson.loads(i.stdout)
    assert len(info["runs"]) == 4 and info["decided"].startswith("input: 4 runs of one workload")
    # the user says ranks: the data says otherwise, refused (no silent join)
    f = td("info", rk / "good", "--layout", "ranks")
    assert f.returncode == 1 and b"are separate runs, not one job's ranks" in f.stderr


def test_identity_is_read_with_the_tables_and_kept_in_the_run_file(tmp_path: Path) -> None:
    out = tmp_path / "g.arrow"
    assert td("parse", DATA / "h200" / "g_good.sqlite", "-o", out).returncode == 0
    ident = read_run(out).metadata["identity"]
    assert ident["read_from"] == "trace" and ident["tracer"] == "nsys"
    assert ident["tracer_version"] == "2024.2.3.38" and ident["host"] == "vm"
    assert ident["process_ids"] == [2168]
    assert ident["gpus"] == [
        {"device_id": 0, "uuid": "GPU-e50c424c-f25f-c470-c8c7-30e4e8152706",
         "bus_id": "0000:00:06.0", "name": "NVIDIA H200"}
    ]  # fmt: skip
    w = ident["window"]
    assert (
        w["clock"] == "utc" and w["end_utc_ns"] - w["start_utc_ns"] == w["end_ns"] - w["start_ns"]
    )
    assert ident["fingerprint"]["gpu_count"] == 1 and ident["fingerprint"]["kernel_names"] > 5
    assert ":cycle" not in ident["fingerprint"]["nvtx"] and "cycle" in ident["fingerprint"]["nvtx"]


def test_an_older_run_file_gets_a_derived_identity() -> None:
    run = load(ROOT / "samples" / "runs" / "good" / "run-01" / "run.arrow")
    ident = run.metadata["identity"]
    assert ident["read_from"] == "derived"
    assert ident["host"] == "vm"  # from the capture manifest it carries
    assert ident["commit"] == "f2617d438c46d7f673465a26c55d4fb63e2c2860"
    assert ident["world_size"] is None and ident["rank"] is None  # unknown, not guessed


def test_two_jobs_named_as_ranks_are_refused(tmp_path: Path) -> None:
    shutil.copy(KINETO / "sampled_rank-0.json.gz", tmp_path / "rank-0.json.gz")  # 2023, rank 0
    shutil.copy(KINETO / "base.json.gz", tmp_path / "rank-1.json.gz")  # 2022, rank 1
    r = td("compare", tmp_path, tmp_path, "--format", "json")
    assert r.returncode == 1 and b"cannot be one run" in r.stderr
    assert b"two jobs, or clocks that cannot be aligned" in r.stderr and b"--layout" in r.stderr


def test_two_tracers_are_not_one_run(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"two tracers \(kineto and nsys\)"):
        load_files([DATA / "h200" / "g_good.sqlite", KINETO / "sampled_rank-1.json.gz"])


def test_missing_ranks_are_refused_unless_allowed(tmp_path: Path) -> None:
    for r in (0, 1):
        shutil.copy(KINETO / f"sampled_rank-{r}.json.gz", tmp_path)
    with pytest.raises(InputError, match="ranks 2-127 of world size 128 have no file"):
        load(tmp_path)
    run = load(tmp_path, allow_missing_ranks=True)
    assert run.metadata["identity"]["missing_ranks"] == list(range(2, 128))
    assert any("missing (--allow-missing-ranks)" in w for w in run.warnings)


def _capture_folder(d: Path, run: Path) -> None:
    d.mkdir(parents=True)
    shutil.copy(run, d / "run.arrow")
    (d / "manifest.json").write_text('{"manifest_version": 1}')


def _index(folder: Path, paths: list[str]) -> None:
    runs = [{"name": p, "path": p, "status": "ok"} for p in paths]
    doc = {"format_version": 1, "kind": "tracediff.runset", "runs": runs}
    (folder / "runset.json").write_bytes(orjson.dumps(doc))


SETS = ROOT / "samples" / "runs"


@pytest.mark.parametrize(
    "entries,says",
    [
        (["run-01", "../outside"], "outside the run set's folder"),
        (["run-01", "/tmp"], "outside the run set's folder"),
        (["run-01", "run-02", "run-01"], "twice"),
        (["run-01", "run-02", "copy"], "which are the same file (same content)"),
    ],
    ids=["dotdot", "absolute", "same-path", "same-content"],
)
def test_a_run_set_index_is_checked(tmp_path: Path, entries: list[str], says: str) -> None:
    folder = tmp_path / "set"
    for k in (1, 2):
        _capture_folder(folder / f"run-0{k}", SETS / "good" / f"run-0{k}" / "run.arrow")
    _capture_folder(folder / "copy", SETS / "good" / "run-01" / "run.arrow")
    _capture_folder(tmp_path / "outside", SETS / "good" / "run-03" / "run.arrow")
    _index(folder, [str(tmp_path / "outside") if e == "/tmp" else e for e in entries])
    for cmd in (("compare", folder, SETS / "bad"), ("info", folder)):
        r = td(*cmd)
        assert r.returncode == 1 and says.encode() in r.stderr, r.stderr
        assert b"runset.json" in r.stderr


def test_runs_of_different_workloads_in_one_set_are_refused(tmp_path: Path) -> None:
    mixed = tmp_path / "mixed"
    _capture_folder(mixed / "a", SETS / "good" / "run-01" / "run.arrow")
    _capture_folder(mixed / "b", SETS / "good" / "run-02" / "run.arrow")
    twostream = tmp_path / "twostream.arrow"
    src = DATA / "h200" / "twostream" / "torch_good.sqlite"
    assert td("parse", src, "-o", twostream).returncode == 0
    _capture_folder(mixed / "c", twostream)
    for cmd in (
        ("compare", mixed, SETS / "bad"),
        ("info", mixed),
        ("export", mixed, "--parquet", tmp_path / "pq"),
    ):
        r = td(*cmd)
        assert r.returncode == 1, r.stderr
        assert b"runs of different workloads: a and c share" in r.stderr
        assert b"of their kernel names" in r.stderr
    assert not (tmp_path / "pq").exists()
    # the same runs without the stranger: one workload
    shutil.rmtree(mixed / "c")
    assert td("info", mixed).returncode == 0
