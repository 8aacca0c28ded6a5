"""`tracediff parse` and `tracediff info` as a user runs them (subprocess), on good and bad input.

Every bad input must give exit 1 (2 for usage), exactly one stderr line that names the file,
no traceback, and leave no output or temp file behind.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
from pathlib import Path

import orjson
import pytest

from tests.support.cli import cli_run

pytestmark = [pytest.mark.nsys]

DATA = Path(__file__).resolve().parent.parent / "data"
G_GOOD = DATA / "h200" / "g_good.sqlite"


def td(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child process (about 1 s each here, mostly importing polars)."""
    return cli_run(args, env=env, timeout=120)


def assert_one_error(r: subprocess.CompletedProcess[str], code: int, *must: str) -> None:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, r.stderr
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("tracediff: error:") or code == 2
    assert "Traceback" not in r.stderr
    for m in must:
        assert m in lines[0], lines[0]


def _random_bytes(n: int) -> bytes:
    return random.Random(1234).randbytes(n)


def _not_nsys_sqlite(p: Path) -> None:
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE measurements (t INTEGER, v REAL)")
    con.execute("INSERT INTO measurements VALUES (1, 2.5)")
    con.commit()
    con.close()


BAD = {
    "missing": (lambda p: None, "no such file"),
    "directory": (lambda p: p.mkdir(), "is a directory"),
    "empty": (lambda p: p.write_bytes(b""), "file is empty"),
    "random.bin": (lambda p: p.write_bytes(_random_bytes(4096)), "unrecognised file type"),
    "random.sqlite": (lambda p: p.write_bytes(_random_bytes(4096)), "unrecognised file type"),
    "text.sqlite": (lambda p: p.write_text("id,value\n1,2\n"), "unrecognised file type"),
    "random.nsys-rep": (
        lambda p: p.write_bytes(_random_bytes(4096)),
        "nsys cannot read this report",
    ),
    "other.sqlite": (_not_nsys_sqlite, "not an Nsight Systems export"),
    "header_only.sqlite": (lambda p: p.write_bytes(G_GOOD.read_bytes()[:100]), "truncated"),
    "cut_early.sqlite": (lambda p: p.write_bytes(G_GOOD.read_bytes()[:50_000]), "truncated"),
    "cut_late.sqlite": (lambda p: p.write_bytes(G_GOOD.read_bytes()[:-4096]), "truncated"),
}


def td_inproc(
    capsys: pytest.CaptureFixture[str], *args: str | Path
) -> subprocess.CompletedProcess[str]:
    """The same CLI entry point (tracediff.cli.main) in this process, for the large matrix."""
    from tracediff.cli import main

    code = main([str(a) for a in args])
    cap = capsys.readouterr()
    return subprocess.CompletedProcess(list(map(str, args)), code, cap.out, cap.err)


def _bad_case(case: str, command: str, tmp_path: Path, run) -> None:  # noqa: ANN001
    make, words = BAD[case]
    bad = tmp_path / case
    make(bad)
    out = tmp_path / "out" / "run.arrow"
    out.parent.mkdir()
    if command == "parse":
        r = run("parse", bad, "-o", out)
    else:
        r = run("info", bad, "--format", "json")
        assert r.stdout == ""
        if case == "directory":  # info reads run-set folders: an empty one holds no run
            words = "is a folder with no run in it"
    assert_one_error(r, 1, str(bad), words)
    assert list(out.parent.iterdir()) == []  # no output, no temp file


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("command", ["parse", "info"])
def test_bad_input(
    case: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _bad_case(case, command, tmp_path, lambda *a: td_inproc(capsys, *a))


@pytest.mark.parametrize(
    ("case", "command"),
    [("missing", "info"), ("directory", "parse"), ("random.bin", "info"),
     ("random.nsys-rep", "parse"), ("other.sqlite", "info"), ("cut_late.sqlite", "parse")],
)  # fmt: skip
def test_bad_input_real_process(case: str, command: str, tmp_path: Path) -> None:
    _bad_case(case, command, tmp_path, td)


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads files whatever their mode; see test below"
)
def test_unreadable_file(tmp_path: Path) -> None:
    p = tmp_path / "locked.sqlite"
    p.write_bytes(G_GOOD.read_bytes())
    p.chmod(0)
    assert_one_error(td("info", p), 1, str(p), "cannot read")


def test_unreadable_path_component(tmp_path: Path) -> None:
    """What root can be denied: a path through a regular file, and a dangling symlink."""
    f = tmp_path / "file"
    f.write_text("x")
    assert_one_error(td("info", f / "report.sqlite"), 1, "no such file")
    link = tmp_path / "gone.sqlite"
    link.symlink_to(tmp_path / "deleted.sqlite")
    assert_one_error(td("info", link), 1, str(link), "no such file")


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    r = td("parse", G_GOOD)  # no -o
    assert (
        r.returncode == 2
        and "Traceback" not in r.stderr
        and len(r.stderr.strip().splitlines()) == 1
    )
    r = td("info", G_GOOD, "--format", "yaml")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_parse_writes_once_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "g.arrow"
    r = td("parse", G_GOOD, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and r.stdout == ""
    before = out.read_bytes()
    r = td("parse", DATA / "h200" / "g_bad.sqlite", "-o", out)
    assert_one_error(r, 1, str(out), "already exists")
    assert out.read_bytes() == before
    r = td("parse", DATA / "h200" / "g_bad.sqlite", "-o", out, "--force")
    assert r.returncode == 0 and out.read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.arrow"]


def test_parse_refuses_to_write_over_its_input(tmp_path: Path) -> None:
    rep = tmp_path / "g.sqlite"
    rep.write_bytes(G_GOOD.read_bytes())
    r = td("parse", rep, "-o", rep, "--force")
    assert_one_error(r, 1, "would overwrite the input")
    assert rep.read_bytes() == G_GOOD.read_bytes()


def test_parse_into_missing_folder(tmp_path: Path) -> None:
    out = tmp_path / "nope" / "g.arrow"
    assert_one_error(td("parse", G_GOOD, "-o", out), 1, "does not exist")


def test_bad_output_after_failed_parse_leaves_old_file(tmp_path: Path) -> None:
    out = tmp_path / "g.arrow"
    out.write_bytes(b"keep me")
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes(G_GOOD.read_bytes()[:200_000])
    r = td("parse", bad, "-o", out, "--force")
    assert_one_error(r, 1, str(bad))
    assert out.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.sqlite", "g.arrow"]


INFO_KEYS = {"decided", "identity", "source", "source_format", "tool_versions", "time_origin_utc_ns", "tables", "span_ns",
             "devices", "gpus", "files", "clock", "kernels", "run_file_checksums",
             "warnings"}  # fmt: skip


def _sql(path: Path, q: str) -> tuple:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(q).fetchone()
    finally:
        con.close()


def test_info_json_matches_its_documented_schema(tmp_path: Path) -> None:
    r = td("info", G_GOOD, "--format", "json")
    assert r.returncode == 0 and r.stderr == ""
    info = orjson.loads(r.stdout)
    assert set(info) == INFO_KEYS
    assert info["decided"].startswith("input: 1 run (process 2168 on GPU-e50c424c…, 2026-11-29 ")
    assert info["identity"]["tracer"] == "nsys" and info["identity"]["read_from"] == "trace"
    assert set(info["tool_versions"]) == {"nsys", "nsys_schema", "tracediff_format"}
    assert info["tool_versions"]["nsys"] == "2024.2.3.38"
    assert info["tool_versions"]["nsys_schema"] == "3.11.1"
    assert info["source_format"] == "nsys-sqlite"
    n, total, lo = _sql(
        G_GOOD, "SELECT count(*), sum(end - start), min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL"
    )
    assert info["kernels"] == {"count": n, "total_time_ns": total}
    (utc,) = _sql(G_GOOD, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    assert info["time_origin_utc_ns"] == utc
    assert (
        info["tables"]["api_calls"]
        == _sql(G_GOOD, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0]
    )
    assert info["span_ns"]["start"] <= lo
    (gpu,) = info["gpus"]  # one process on GPU 0; nsys says no rank
    assert (gpu["device_id"], gpu["rank"], gpu["ordinal"]) == (0, None, 0)
    assert info["files"] == [] and info["clock"] is None
    (dev,) = info["devices"]
    assert set(dev) == {
        "device_id",
        "name",
        "sm_count",
        "memory_bytes",
        "kernels",
        "kernel_time_ns",
    }
    assert dev["name"] == "NVIDIA H200" and dev["kernels"] == n and dev["kernel_time_ns"] == total
    assert info["warnings"] == []
    assert info["run_file_checksums"] is None  # a report, not a run file
    # the run file written by parse describes the same data
    out = tmp_path / "g.arrow"
    assert td("parse", G_GOOD, "-o", out).returncode == 0
    again = orjson.loads(td("info", out, "--format", "json").stdout)
    assert again["tables"] == info["tables"] and again["kernels"] == info["kernels"]


def test_info_json_carries_warnings_and_table_mode_prints_them(tmp_path: Path) -> None:
    mock = DATA / "nsys" / "nsys-ai" / "mock.sqlite"
    info = orjson.loads(td("info", mock, "--format", "json").stdout)
    assert any("NVTX_EVENTS" in w for w in info["warnings"])
    assert info["tables"]["nvtx_ranges"] == 0
    r = td("info", mock)
    assert r.returncode == 0 and "tracediff: warning:" in r.stderr and "kernels" in r.stdout


def test_info_on_a_report_runs_nsys(nsys: str) -> None:
    r = td(
        "info", DATA / "h200" / "e_good.qdstrm", "--format", "json", env={"TRACEDIFF_NSYS": nsys}
    )
    assert r.returncode == 0, r.stderr
    info = orjson.loads(r.stdout)
    assert info["source_format"] == "qdstrm"
    assert (
        info["kernels"]["count"]
        == _sql(DATA / "h200" / "e_good.sqlite", "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[
            0
        ]
    )


def test_nsys_missing_is_one_line_saying_how_to_install(tmp_path: Path) -> None:
    r = td(
        "info", DATA / "h200" / "g_good.nsys-rep", env={"TRACEDIFF_NSYS": str(tmp_path / "no-nsys")}
    )
    assert_one_error(r, 1, "TRACEDIFF_NSYS", "make nsys")


def test_nsys_timeout_error_names_the_setting_that_exists(nsys: str) -> None:
    env = {"TRACEDIFF_NSYS": nsys, "TRACEDIFF_NSYS_TIMEOUT": "0.001"}
    r = td("info", DATA / "h200" / "g_good.nsys-rep", env=env)
    assert_one_error(r, 1, "did not finish within 0.001 s", "set TRACEDIFF_NSYS_TIMEOUT")
    assert "--nsys-timeout" not in r.stderr


def test_parse_writes_tables_built_from_parts_with_their_own_dictionaries(tmp_path: Path) -> None:
    """The nsys-ai mfu report's collectives table comes from two parts, each with its own
    dictionary for a column; an Arrow IPC file holds one per column, so `parse` failed with a
    pyarrow traceback ("Dictionary replacement detected"; found by the determinism helper). The
    run file written must read back as the tables the parser made (kernels and copies in the
    run file's device-major order: `stored`)."""
    from tracediff.parse.load import load
    from tracediff.runs.runfile import read_run, stored

    src = DATA / "nsys" / "nsys-ai" / "mfu_2gpu_before.sqlite"
    out = tmp_path / "mfu.arrow"
    r = td("parse", src, "-o", out)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    want, got = load(src), read_run(out)
    assert want.table("collectives").num_rows > 0
    for name in want.tables:
        a, b = stored(name, want.table(name)), got.table(name)
        assert a.num_rows == b.num_rows, name
        for col in a.column_names:  # values, whatever dictionaries encode them
            assert a.column(col).to_pylist() == b.column(col).to_pylist(), (name, col)
