"""Hostile inputs through the real CLI (issue #8).

Every case ends in exactly one stderr line that names the file and says what to do (exit 1, or
2 for usage), with no output file left behind, or in a warning and a correct result where the
data is still usable: never a traceback, a hang or a silently wrong number. The corpus is
generated from the real H200 traces by make_corpus.py into a session temp folder (~1 s).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support import make_corpus
from tests.support.hostile import TIMEOUT, TRACEDIFF, Result, assert_error, cli, cli_each
from tracediff.runs.runfile import read_run

GOOD_RUN = make_corpus.RUN
GOOD_NSYS = make_corpus.NSYS  # the export the derived cases come from, read by this reader
GOOD_COUNTS = {
    "kernels": 1764,
    "memops": 144,
    "api_calls": 1985,
    "nvtx_ranges": 108,
    "collectives": 72,
    "devices": 1,
    "syncs": 82,
    "cuda_events": 144,  # 72 cudaEventRecord (CUDA_EVENT rows) + 72 ...WithFlags (API calls only)
    "frames": 0,  # launch stacks: Kineto with_stack traces only (issue 19)
    "stacks": 0,
}


def compare_json(base: Path, head: Path, *extra: str) -> dict:
    r = cli("compare", base, head, "--format", "json", "--bootstrap", "10", *extra)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def outdir(tmp_path: Path) -> Iterator[Path]:
    """An empty folder for outputs; after the test it must still be empty (no half-written file)."""
    d = tmp_path / "out"
    d.mkdir()
    yield d


def assert_nothing_written(outdir: Path) -> None:
    assert sorted(p.name for p in outdir.iterdir()) == []


# ---------------------------------------------------------------- inputs that cannot be read

PARSE_ERRORS = [
    ("empty.sqlite", "file is empty"),
    ("empty.json", "file is empty"),
    ("random.bin", "unrecognised file type"),
    ("random.json", "not valid JSON"),
    ("random.json.gz", "not valid JSON"),
    ("random_with_sqlite_magic.sqlite", "SQLite file is truncated"),
    ("random_with_run_magic.arrow", "run file is truncated"),
    ("a_directory", "is a directory"),
    ("nsys_truncated_header.sqlite", "truncated"),
    ("nsys_truncated_page1.sqlite", "SQLite file is truncated"),
    ("nsys_truncated_half.sqlite", "SQLite file is truncated"),
    ("nsys_truncated_last_page.sqlite", "SQLite file is truncated"),
    ("nsys_corrupt_kernel_page.sqlite", "SQLite file is corrupt"),
    ("nsys_wrong_type.sqlite", "holds values of the wrong type"),
    ("sqlite_not_nsys.sqlite", "not an Nsight Systems export"),
    ("nsys_strings_only.sqlite", "an nsys export without events"),
    ("nsys_wal_damaged.sqlite", "write-ahead log nsys_wal_damaged.sqlite-wal holds changes"),
    ("nsys_kernels_duplicated.sqlite", "1764 of 3528 kernel records are exact duplicates"),
    ("nsys_kernels_zero.sqlite", "all 1764 kernels last 0 ns"),
    ("nsys_kernels_all_negative.sqlite", "all 1764 kernel records end before they start"),
    ("nsys_kernel_11_days.sqlite", "1 kernel record(s) last longer than an hour (the longest 11.0"),
    ("nsys_memcpy_3_days.sqlite", "1 copy/memset record(s) last longer than an hour"),
    ("kineto_kernels_duplicated.json", "2940 of 5880 kernel records are exact duplicates"),
    ("kineto_kernels_zero.json", "all 2940 kernels last 0 ns"),
    ("kineto_kernel_2_days.json", "the longest 2.0 days"),
    ("kineto_range_profiler.json", "CUPTI range-profiler trace"),
    ("tracediff_perfetto.json.gz", "a tracediff Perfetto trace"),
    ("tracediff_perfetto.json", "a tracediff Perfetto trace"),
    ("kineto_truncated_gz_10.json.gz", "gzip data is truncated or corrupt"),
    ("kineto_truncated_gz_half.json.gz", "gzip data is truncated or corrupt"),
    ("kineto_truncated_gz_trailer.json.gz", "gzip data is truncated or corrupt"),
    ("kineto_bad_crc.json.gz", "gzip data is truncated or corrupt"),
    ("kineto_truncated_json_1.json", "not valid JSON"),
    ("kineto_truncated_json_half.json", "not valid JSON"),
    ("kineto_truncated_json_last_byte.json", "not valid JSON"),
    ("kineto_no_traceEvents.json", "no traceEvents"),
    ("kineto_top_level_array.json", "not a Kineto trace"),
    ("kineto_non_utf8.json", "not UTF-8"),
    ("kineto_bom.json", "not valid JSON"),
    ("kineto_ts_string.json", "unexpected value"),
    ("kineto_deep_nesting.json", "nested too deeply"),
    ("kineto_ts_1e300.json", "beyond any clock"),
    ("run_truncated_8.arrow", "unrecognised file type"),
    ("run_truncated_magic.arrow", "too short to be a tracediff run file"),
    ("run_truncated_100.arrow", "run file is truncated"),
    ("run_truncated_half.arrow", "run file is truncated"),
    ("run_truncated_end_marker.arrow", "run file is truncated"),
    ("run_truncated_length.arrow", "run file is truncated"),
    ("run_future_version.arrow", "run file format 99 is newer than this tracediff reads"),
    ("run_footer_garbage.arrow", "footer is corrupt"),
    ("run_metadata_not_object.arrow", "footer is corrupt"),
    ("run_warnings_not_list.arrow", "footer is corrupt"),
    ("run_table_outside.arrow", "table 'kernels' lies outside the file"),
    ("run_kernels_corrupt_ipc_footer.arrow", "table 'kernels' is corrupt"),
    ("run_kernels_corrupt_body.arrow", "table 'kernels' is corrupt"),
    # issue 17: damage a checksum catches, footers without tables, format_version strictly
    ("run_checked_kernels_bitflip.arrow", "table 'kernels' is damaged (its checksum"),
    ("run_checked_footer_bitflip.arrow", "footer is damaged (its checksum"),
    ("run_checked_no_kernels_table.arrow", "footer is damaged (its checksum"),
    ("run_checked_checksums_key_bitflip.arrow", "unknown key 'cxecksums'"),
    ("run_no_kernels_table.arrow", "run file has no 'kernels' table"),
    ("run_tables_empty.arrow", "run file has no 'kernels', 'memops'"),
    ("run_unknown_table.arrow", "unknown table 'kernelz'"),
    ("run_version_string.arrow", "format_version '1'"),
    ("run_version_float.arrow", "format_version 1.0"),
    ("run_version_true.arrow", "format_version True"),
    ("run_version_zero.arrow", "format_version 0"),
]


BAD_RUN_FILES = [
    ("run_future_version.arrow", "run file format 99 is newer than this tracediff reads"),
    ("run_truncated_half.arrow", "run file is truncated"),
    ("run_metadata_not_object.arrow", "footer is corrupt"),
    ("run_kernels_corrupt_body.arrow", "table 'kernels' is corrupt"),
    ("run_checked_kernels_bitflip.arrow", "table 'kernels' is damaged"),
    ("run_checked_footer_bitflip.arrow", "footer is damaged"),
    ("run_no_kernels_table.arrow", "run file has no 'kernels' table"),
]
COMPARED_TOO = (
    "run_future_version.arrow",
    "run_kernels_corrupt_body.arrow",
    "run_checked_kernels_bitflip.arrow",
    "run_no_kernels_table.arrow",
)
DAMAGE_AS_DATA = [
    "nsys_kernels_duplicated.sqlite",
    "nsys_kernel_11_days.sqlite",
    "kineto_kernels_zero.json",
]


@pytest.fixture(scope="session")
def parsed(
    corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, Result]]:
    """`parse CASE -o OUT` for every case of PARSE_ERRORS: case -> (its output folder, result).
    Each call is forked from the CLI server (support/cli.py: a process of its own with its
    imports done; 66 fresh process starts cost ~35 CPU-s)."""
    root = tmp_path_factory.mktemp("parsed")
    outs = {name: root / name for name, _ in PARSE_ERRORS}
    for out in outs.values():
        out.mkdir()
    calls: dict[str, list[object]] = {
        name: ["parse", corpus / name, "-o", out / "run.arrow"] for name, out in outs.items()
    }
    results = cli_each(calls)
    return {name: (outs[name], results[name]) for name in outs}


@pytest.fixture(scope="session")
def read(corpus: Path) -> dict[tuple[str, str], Result]:
    """The `info` and `compare` calls of the parametrized cases below, run once for all of them
    as `parsed`'s are: (command, case) -> result."""
    calls: dict[tuple[str, str], list[object]] = {}
    for name, _ in BAD_RUN_FILES:
        calls["info", name] = ["info", corpus / name]
        if name in COMPARED_TOO:
            calls["compare", name] = ["compare", GOOD_RUN, corpus / name, "--format", "json"]
    for name in DAMAGE_AS_DATA:
        base = make_corpus.KINETO if name.startswith("kineto") else GOOD_NSYS
        calls["info", name] = ["info", corpus / name]
        calls["compare", name] = ["compare", base, corpus / name, "--format", "json"]
    for table in MISSING:
        calls["info json", table] = ["info", corpus / f"nsys_no_{table}.sqlite", "--format", "json"]
    return cli_each(calls)


@pytest.mark.parametrize(("name", "phrase"), PARSE_ERRORS)
def test_parse_refuses_with_one_line(corpus: Path, parsed: dict, name: str, phrase: str) -> None:
    out, r = parsed[name]
    assert_error(r, corpus / name, phrase)
    assert_nothing_written(out)


@pytest.mark.parametrize(("name", "phrase"), BAD_RUN_FILES)
def test_info_and_compare_refuse_bad_run_files(
    corpus: Path, read: dict, name: str, phrase: str
) -> None:
    assert_error(read["info", name], corpus / name, phrase)
    if name in COMPARED_TOO:
        assert_error(read["compare", name], corpus / name, phrase)


def test_future_version_differs_only_in_version(corpus: Path) -> None:
    good, future = GOOD_RUN.read_bytes(), (corpus / "run_future_version.arrow").read_bytes()
    (s0, f0), (s1, f1) = make_corpus._footer(good), make_corpus._footer(future)
    assert good[:s0] == future[:s1]
    assert f1.pop("format_version") == 99
    assert f0.pop("format_version") == 1  # the stored sample is a format-1 file
    assert f0 == f1
    line = assert_error(cli("info", corpus / "run_future_version.arrow"), None)
    assert "upgrade tracediff" in line


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.sqlite"
    assert_error(cli("parse", missing, "-o", tmp_path / "x.arrow"), missing, "no such file")
    assert_error(cli("compare", GOOD_RUN, missing), missing, "no such file")


def test_path_under_a_file(corpus: Path, outdir: Path) -> None:
    bad = corpus / "a_file.txt" / "report.sqlite"  # ENOTDIR
    assert_error(cli("parse", bad, "-o", outdir / "x.arrow"), bad, "no such file")
    assert_nothing_written(outdir)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_input_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """A FIFO blocks open() until a writer comes: it must be refused, not waited on."""
    if kind == "fifo":
        path = tmp_path / "trace.json"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    r = cli("info", path, timeout=20)
    assert_error(r, path, "not a regular file")


def _as_unprivileged() -> Callable[[list[str]], list[str]] | None:
    """chmod does not stop root: run the CLI as `nobody` through setpriv (which drops every
    capability), or as ourselves when we are not root. None: neither is possible here (root
    without setpriv, or a checkout `nobody` cannot reach: `mktemp -d` makes its folder 0700)."""
    if os.geteuid() != 0:
        return lambda argv: argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*nobody, str(TRACEDIFF), "--version"], capture_output=True,
                           timeout=TIMEOUT, cwd="/")  # fmt: skip
    if probe.returncode != 0:
        return None
    return lambda argv: [*nobody, *argv]


def test_input_without_read_permission() -> None:
    wrap = _as_unprivileged()
    if wrap is None:
        pytest.skip(
            "cannot run the CLI unprivileged here (root without setpriv, or a checkout `nobody` "
            "cannot reach): read permission cannot be taken away from root"
        )
    d = Path(tempfile.mkdtemp(prefix="tracediff-perm-"))
    try:
        d.chmod(0o755)
        path = d / "run.arrow"
        shutil.copyfile(GOOD_RUN, path)
        path.chmod(0)
        r = subprocess.run(
            wrap([str(TRACEDIFF), "info", str(path)]),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=d,
        )
        assert_error(r, path, "cannot read: Permission denied")
    finally:
        shutil.rmtree(d)


# ---------------------------------------------------------------- outputs


def test_output_folder_missing(outdir: Path) -> None:
    out = outdir / "missing" / "run.arrow"
    assert_error(cli("parse", GOOD_RUN, "-o", out), out, "does not exist")
    assert_nothing_written(outdir)


def test_output_under_a_file(corpus: Path, outdir: Path) -> None:
    out = corpus / "a_file.txt" / "run.arrow"
    assert_error(cli("parse", GOOD_RUN, "-o", out), out, "does not exist")


def test_output_exists_without_force_is_untouched(outdir: Path) -> None:
    out = outdir / "run.arrow"
    out.write_bytes(b"precious")
    os.utime(out, ns=(1_000_000_000, 1_000_000_000))
    assert_error(cli("parse", GOOD_RUN, "-o", out), out, "already exists", "--force")
    assert out.read_bytes() == b"precious"
    assert out.stat().st_mtime_ns == 1_000_000_000
    assert sorted(p.name for p in outdir.iterdir()) == ["run.arrow"]


def test_output_is_a_directory(outdir: Path) -> None:
    target = outdir / "sub"
    target.mkdir()
    assert_error(cli("parse", GOOD_RUN, "-o", target, "--force"), target, "is a directory")
    assert sorted(p.name for p in outdir.iterdir()) == ["sub"]


def test_output_fifo_is_not_replaced(outdir: Path) -> None:
    """--force renames a temp file over the output: over a FIFO (or /dev/null) it must refuse."""
    fifo = outdir / "run.arrow"
    os.mkfifo(fifo)
    assert_error(cli("parse", GOOD_RUN, "-o", fifo, "--force"), fifo, "not a regular file")
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(p.name for p in outdir.iterdir()) == ["run.arrow"]


def test_output_folder_not_writable() -> None:
    out = Path("/proc/tracediff-hostile.arrow")  # no file can be created in /proc, even by root
    assert_error(cli("parse", GOOD_RUN, "-o", out), out, "cannot create a file in /proc")


def test_output_disk_full_leaves_nothing(outdir: Path) -> None:
    """RLIMIT_FSIZE makes write() fail with EFBIG part-way, as a full disk does with ENOSPC."""

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    out = outdir / "run.arrow"
    r = cli("parse", GOOD_RUN, "-o", out, preexec_fn=small_files)
    assert_error(r, out, "cannot write run file")
    assert_nothing_written(outdir)


def test_usage_errors_exit_2(outdir: Path) -> None:
    r = cli("parse", GOOD_RUN)
    assert_error(r, None, "-o", code=2)
    r = cli("compare", GOOD_RUN, GOOD_RUN, "--top", "0", "--format", "json")
    assert_error(r, None, "--top", code=2)
    for n in ("0", "-1"):  # issue 17: --whatif 0 was accepted and meant no replay
        r = cli("compare", GOOD_RUN, GOOD_RUN, "--whatif", n, "--format", "json")
        assert_error(r, None, f"argument --whatif: {n}:", "from 1", code=2)
    assert_nothing_written(outdir)


# ---------------------------------------------------------------- nsys exports missing tables

# table dropped -> (run-table row counts that change, warning phrase or None)
MISSING = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ({"kernels": 0}, "the report has no kernels"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        {"api_calls": 0, "cuda_events": 72},  # the CUDA_EVENT rows stay, without their calls
        "the report has no CUDA API calls",
    ),
    "NVTX_EVENTS": ({"nvtx_ranges": 0, "collectives": 0}, "the report has no NVTX ranges"),
    # NCCL ranges are named by id; record calls are known by name (the CUDA_EVENT rows stay)
    "StringIds": ({"collectives": 0, "cuda_events": 72}, "no StringIds table"),
    "TARGET_INFO_GPU": ({}, "GPU names and properties are unknown"),
    "META_DATA_EXPORT": ({}, None),
    # nsys writes no table for an activity that did not happen: no warning
    "CUPTI_ACTIVITY_KIND_MEMCPY": ({"memops": 132}, None),
    "CUPTI_ACTIVITY_KIND_MEMSET": ({"memops": 12}, None),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ({"syncs": 0}, None),
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": ({}, None),  # all 144 records from their calls, no stream
    "TARGET_INFO_SESSION_START_TIME": ({}, None),
    "ENUM_CUDA_MEMCPY_OPER": ({}, None),
}


@pytest.mark.parametrize("table", list(MISSING))
def test_nsys_export_missing_table(corpus: Path, read: dict, table: str) -> None:
    assert set(MISSING) == set(make_corpus.OPTIONAL_TABLES)
    path = corpus / f"nsys_no_{table}.sqlite"
    r = read["info json", table]
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    info = json.loads(r.stdout)
    changed, phrase = MISSING[table]
    assert info["tables"] == {**GOOD_COUNTS, **changed}
    warned = [w for w in info["warnings"] if phrase and phrase in w]
    if phrase:
        assert warned and all(str(path) in w for w in warned), info["warnings"]
    else:
        assert info["warnings"] == []
    if table == "TARGET_INFO_GPU":
        assert info["devices"][0]["name"] is None and info["devices"][0]["kernels"] == 1764
    if table == "META_DATA_EXPORT":
        assert info["tool_versions"]["nsys"] is None
    if table == "TARGET_INFO_SESSION_START_TIME":
        assert info["time_origin_utc_ns"] is None
    if table == "StringIds":  # kernel time is still all there, only the names are gone
        assert info["kernels"]["total_time_ns"] == 20_840_709


def test_nsys_without_enum_tables_keeps_copy_kinds(corpus: Path, outdir: Path) -> None:
    cli("parse", make_corpus.NSYS, "-o", outdir / "a.arrow").check_returncode()
    cli(
        "parse", corpus / "nsys_no_ENUM_CUDA_MEMCPY_OPER.sqlite", "-o", outdir / "b.arrow"
    ).check_returncode()
    a, b = (read_run(outdir / n).table("memops") for n in ("a.arrow", "b.arrow"))
    assert a.column("copy_kind").to_pylist() == b.column("copy_kind").to_pylist()


def test_compare_without_api_calls_is_one_line(corpus: Path) -> None:
    head = corpus / "nsys_no_CUPTI_ACTIVITY_KIND_RUNTIME.sqlite"
    assert_error(cli("compare", GOOD_NSYS, head, "--format", "json"), head, "launched no GPU work")
    d = compare_json(GOOD_NSYS, head, "--cycle", "whole")  # the way out the hint points to
    assert d["head"]["cycle_method"] == "whole-run"


@pytest.mark.parametrize("name", DAMAGE_AS_DATA)
def test_info_and_compare_refuse_damage_that_reads_as_data(
    corpus: Path, read: dict, name: str
) -> None:
    """Issue 17: info summed the damage (a doubled or 11-day total) and compare reported it as
    a change ('+1.5e9 %, not significant'); both refuse alike now."""
    line = assert_error(read["info", name], corpus / name)
    assert assert_error(read["compare", name], corpus / name) == line


def test_negative_durations_are_not_summed(corpus: Path) -> None:
    """1 kernel in 10 ends before it starts: info's total counts only the others (it summed the
    negative durations) and says so."""
    path = corpus / "nsys_kernel_end_before_start.sqlite"
    r = cli("info", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert any("176 kernel records end before they start" in w for w in info["warnings"])
    r = cli("info", GOOD_NSYS, "--format", "json")
    good = json.loads(r.stdout)["kernels"]["total_time_ns"]
    assert 0 < info["kernels"]["total_time_ns"] < good
    assert info["kernels"]["total_time_ns"] == info["devices"][0]["kernel_time_ns"]


def test_a_side_without_kernels_against_thousands_is_refused(corpus: Path) -> None:
    head = corpus / "nsys_no_CUPTI_ACTIVITY_KIND_KERNEL.sqlite"  # copies and memsets remain
    for cmd in (
        ["compare", GOOD_NSYS, head, "--format", "json"],
        ["whatif", GOOD_NSYS, head, "--take", "c0"],
    ):
        assert_error(cli(*cmd), head, "has no kernels while the other has 1764", "-t cuda")
    assert_error(
        cli("compare", head, GOOD_NSYS, "--format", "json"), head, "the base run has no kernels"
    )


def test_wal_export_is_read_with_its_log_applied(corpus: Path) -> None:
    """The last commit (every second kernel deleted) is only in the -wal file: both readers
    read it (they read the main file alone, 1764 kernels, before); the user's files stay
    byte for byte as they were and no -shm appears beside them."""
    path = corpus / "nsys_wal.sqlite"
    files = {p.name: p.read_bytes() for p in corpus.glob("nsys_wal.sqlite*")}
    assert set(files) == {"nsys_wal.sqlite", "nsys_wal.sqlite-wal"}
    assert files["nsys_wal.sqlite"][18:20] == b"\x02\x02"
    for pages in ("1", "0"):  # the page decoder, then SQLite itself
        r = cli(
            "info", path, "--format", "json", env={**os.environ, "TRACEDIFF_SQLITE_PAGES": pages}
        )
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["kernels"]["count"] == 882
    assert {p.name: p.read_bytes() for p in corpus.glob("nsys_wal.sqlite*")} == files


def test_hot_journal_export_is_read_as_last_committed(corpus: Path) -> None:
    """A writer stopped inside a transaction (every second kernel being deleted): the export's
    pages hold half that change, its -journal the way back. Read as committed, by both readers
    (882 kernels before), the user's files untouched."""
    path = corpus / "nsys_hot_journal.sqlite"
    files = {p.name: p.read_bytes() for p in corpus.glob("nsys_hot_journal.sqlite*")}
    assert set(files) == {"nsys_hot_journal.sqlite", "nsys_hot_journal.sqlite-journal"}
    good = json.loads(cli("info", GOOD_NSYS, "--format", "json").stdout)
    for pages in ("1", "0"):
        r = cli(
            "info", path, "--format", "json", env={**os.environ, "TRACEDIFF_SQLITE_PAGES": pages}
        )
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)

        def unnamed(info: dict) -> dict:  # type: ignore[type-arg]
            """The summary without the input's path (also each GPU's `file`)."""
            gpus = [{**g, "file": None} for g in info["gpus"]]
            return {**info, "source": None, "gpus": gpus}

        assert unnamed(got) == unnamed(good)
    assert {p.name: p.read_bytes() for p in corpus.glob("nsys_hot_journal.sqlite*")} == files


def test_renamed_nsys_rep_is_read_as_a_report(corpus: Path) -> None:
    r = cli("info", corpus / "nsys_rep_renamed.sqlite", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kernels"]["count"] == GOOD_COUNTS["kernels"]


# ---------------------------------------------------------------- bad records, usable data


def test_kernels_ending_before_they_start_are_reported(corpus: Path) -> None:
    d = compare_json(GOOD_NSYS, corpus / "nsys_kernel_end_before_start.sqlite")
    assert (
        "head: 176 GPU operations end before they start or have no end time; they are not compared"
        in d["warnings"]
    )
    assert d["base"]["cycles"] == d["head"]["cycles"] == 12


@pytest.mark.parametrize("case", ["dangling", "null"])
def test_kernels_without_names(corpus: Path, outdir: Path, case: str) -> None:
    path = corpus / f"nsys_kernel_{case}_name.sqlite"
    r = cli("parse", path, "-o", outdir / "run.arrow")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    names = read_run(outdir / "run.arrow").table("kernels").column("name")
    assert names.null_count == 252  # rowid % 7 == 0
    d = compare_json(GOOD_NSYS, outdir / "run.arrow")
    # same timings: the total does not move; renamed kernels show as `name → <unnamed kernel>`
    assert d["delta_ms_per_cycle"]["mean"] == 0
    assert sum(a["delta_ms_per_cycle"] for a in d["attribution"]) == pytest.approx(0, abs=1e-9)
    assert any(a["name"].endswith("→ <unnamed kernel>") for a in d["attribution"])
    warning = {
        "dangling": "504 name ids are not in StringIds",  # demangled and short name
        "null": "252 kernels have no name (NULL demangledName)",
    }[case]
    assert any(
        line.startswith(f"tracediff: warning: {path}: {warning}") for line in r.stderr.splitlines()
    )


def test_unclosed_cycle_range(corpus: Path, outdir: Path) -> None:
    path = corpus / "nsys_nvtx_unclosed.sqlite"
    cli("parse", path, "-o", outdir / "run.arrow").check_returncode()
    nvtx = read_run(outdir / "run.arrow").table("nvtx_ranges")
    assert nvtx.column("end_ns").null_count == 1
    d = compare_json(GOOD_NSYS, path)
    assert (d["base"]["cycles"], d["head"]["cycles"]) == (12, 11)
    assert any("outside any 'cycle' range" in w for w in d["warnings"]), d["warnings"]


def test_stray_nvtx_pops_do_not_change_cycles(corpus: Path) -> None:
    d = compare_json(GOOD_NSYS, corpus / "nsys_nvtx_stray_pops.sqlite")
    assert (d["base"]["cycles"], d["head"]["cycles"]) == (12, 12)
    assert d["delta_ms_per_cycle"]["mean"] == 0


def test_huge_nvtx_text_round_trips(corpus: Path, outdir: Path) -> None:
    path = corpus / "nsys_nvtx_huge_text.sqlite"
    cli("parse", path, "-o", outdir / "run.arrow").check_returncode()
    names = read_run(outdir / "run.arrow").table("nvtx_ranges").column("name").cast(pa.string())
    assert max(len(n) for n in names.to_pylist() if n) == make_corpus.HUGE_TEXT_BYTES
    d = compare_json(GOOD_NSYS, outdir / "run.arrow")
    assert d["delta_ms_per_cycle"]["mean"] == 0


def test_non_utf8_names(corpus: Path, outdir: Path) -> None:
    path = corpus / "nsys_non_utf8.sqlite"
    cli("parse", path, "-o", outdir / "run.arrow").check_returncode()
    run = read_run(outdir / "run.arrow")
    for t in ("kernels", "nvtx_ranges"):
        run.table(t).validate(full=True)
    assert "draft \ufffd" in run.table("nvtx_ranges").column("name").cast(pa.string()).to_pylist()
    assert "kernel_\ufffd" in run.table("kernels").column("name").cast(pa.string()).to_pylist()
    d = compare_json(GOOD_NSYS, outdir / "run.arrow")
    assert d["delta_ms_per_cycle"]["mean"] == 0


@pytest.mark.parametrize(
    ("name", "base", "kernels"),
    [
        ("nsys_duplicate_correlation.sqlite", GOOD_NSYS, 1764),
        ("kineto_duplicate_correlation.json", make_corpus.KINETO, 2940),
    ],
)
def test_duplicate_correlation_ids_keep_each_kernel_once(
    corpus: Path, outdir: Path, name: str, base: Path, kernels: int
) -> None:
    cli("parse", corpus / name, "-o", outdir / "run.arrow").check_returncode()
    k = read_run(outdir / "run.arrow").table("kernels")
    assert k.num_rows == kernels
    d = compare_json(base, outdir / "run.arrow")
    assert d["delta_ms_per_cycle"]["mean"] == 0


def test_kineto_events_without_dur(corpus: Path) -> None:
    path = corpus / "kineto_kernels_without_dur.json"
    r = cli("info", path)
    assert r.returncode == 0 and "10 events have no dur" in r.stderr, r.stderr
    d = compare_json(make_corpus.KINETO, path)
    assert (
        "head: 10 GPU operations end before they start or have no end time; they are not compared"
        in d["warnings"]
    )


@pytest.mark.parametrize("name", ["kineto_empty_events.json", "kineto_cpu_only.json"])
def test_kineto_without_gpu_events(corpus: Path, outdir: Path, name: str) -> None:
    r = cli("parse", corpus / name, "-o", outdir / "run.arrow")
    assert r.returncode == 0 and "no GPU kernels, copies or memsets" in r.stderr, r.stderr
    assert_error(
        cli("compare", make_corpus.KINETO, corpus / name, "--format", "json"),
        corpus / name,
        "has no kernels while the other has 2940",  # issue 17: says what to do (was: no GPU ops)
        "ProfilerActivity.CUDA",
    )


# ---------------------------------------------------------------- pairs that do not match


def test_compare_with_itself_is_zero() -> None:
    d = compare_json(GOOD_RUN, GOOD_RUN)
    assert d["delta_ms_per_cycle"]["mean"] == 0 and not d["delta_ms_per_cycle"]["significant"]
    assert all(a["delta_ms_per_cycle"] == 0 and not a["significant"] for a in d["attribution"])


def test_different_gpu_counts_warn(corpus: Path) -> None:
    d = compare_json(GOOD_RUN, corpus / "run_two_gpus.arrow")
    assert (
        "base ran on 1 GPU(s), head on 2: per-GPU contributors are not comparable one to one"
        in d["warnings"]
    )
    assert d["head"]["devices"] == [0, 1]
    assert abs(d["residual_ms_per_cycle"]) < 1e-9


def test_different_cycle_names(corpus: Path) -> None:
    head = corpus / "nsys_cycle_renamed.sqlite"
    line = assert_error(
        cli("compare", GOOD_NSYS, head, "--format", "json"), head, "no range named 'cycle'"
    )
    assert "step" in line  # names the ranges it has
    assert_error(
        cli("compare", GOOD_NSYS, head, "--cycle", "step", "--format", "json"),
        GOOD_NSYS,
        "no range named 'step'",
    )
    d = compare_json(GOOD_NSYS, head, "--cycle", "whole")
    assert d["base"]["cycle_method"] == d["head"]["cycle_method"] == "whole-run"


def test_runs_of_two_tracers_are_refused(corpus: Path, outdir: Path) -> None:
    """Issue 17: base's kernel-period rule cut a Kineto trace and an nsys export alike and the
    per-cycle verdict read "+118.9 %, significant"; the tracers name and time ops differently.
    Raw files and run files, either side, markers on one side or none."""
    kin = outdir / "k_good.arrow"
    cli("parse", make_corpus.KINETO, "-o", kin).check_returncode()
    for b, h in [
        (make_corpus.KINETO, GOOD_NSYS),
        (GOOD_RUN, kin),
        (kin, corpus / "nsys_cycle_renamed.sqlite"),
    ]:
        for gate in ((), ("--fail-above", "5")):
            line = assert_error(cli("compare", b, h, "--format", "json", *gate), b, "same tracer")
            assert str(h) in line and "--cycle" in line


# ---------------------------------------------------------------- memory


def _address_space(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


_ENV = {
    **os.environ,
    "POLARS_MAX_THREADS": "2",
}  # the address space polars reserves grows with threads


def test_address_space_too_small_is_one_line(outdir: Path) -> None:
    """Under `ulimit -v 1G` polars/Arrow abort in native code; the CLI refuses up front instead."""
    r = cli(
        "parse", make_corpus.KINETO, "-o", outdir / "run.arrow", preexec_fn=_address_space(1 << 30)
    )
    assert_error(r, None, "address space is limited to 1024 MiB")
    assert_nothing_written(outdir)


def test_file_larger_than_memory_is_one_line(tmp_path: Path, outdir: Path) -> None:
    """A 64 GiB (sparse) trace under a 4.5 GiB address-space limit: MemoryError, one line."""
    big = tmp_path / "huge.json"
    with open(big, "wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(64 << 30)
    r = cli("parse", big, "-o", outdir / "run.arrow", preexec_fn=_address_space(9 << 29), env=_ENV)
    # refused from its size before a byte is read (it used to be MemoryError after reading)
    assert_error(r, big, "this machine has memory for")
    assert_nothing_written(outdir)


def test_gzip_bomb_is_refused_without_holding_its_text(corpus: Path, outdir: Path) -> None:
    """With a 2 GB budget and no address-space limit the 8 GiB bomb (128 gzip members, no gzip
    trailer that tells) is refused while counting its inflated size, holding a few MB of it:
    the tracediff process's peak RSS stays far below the budget (it used to reach the budget).

    The peak is read by a small Python process that starts tracediff and waits for it: a child
    forked from pytest itself starts its peak RSS at pytest's (hundreds of MB late in a run)."""
    path = corpus / "kineto_gzip_bomb.json.gz"
    budget = 2_000_000_000
    env = {**os.environ, "TRACEDIFF_MEMORY_BYTES": str(3 * budget)}
    waiter = (
        "import os, subprocess, sys\n"
        "p = subprocess.Popen(sys.argv[1:])\n"
        "_, status, usage = os.wait4(p.pid, 0)\n"
        "print(usage.ru_maxrss, file=open(os.environ['PEAK_FILE'], 'w'))\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    peak_file = outdir.parent / "peak_kib.txt"
    cmd = [str(TRACEDIFF), "parse", str(path), "-o", str(outdir / "run.arrow")]
    r = subprocess.run(
        [sys.executable, "-c", waiter, *cmd],
        capture_output=True,
        text=True,
        env={**env, "PEAK_FILE": str(peak_file)},
    )
    r.args = cmd
    assert_error(r, path, "more than 2.0 GB of JSON", "this machine has memory for 2.0 GB")
    assert_nothing_written(outdir)
    peak_kib = int(peak_file.read_text())
    assert peak_kib * 1024 < budget / 4, f"peak RSS {peak_kib} KiB"


def test_gzip_bomb_is_one_line(corpus: Path, outdir: Path) -> None:
    """Refused from the gzip trailer's size, without inflating it (it took ~16 s to run out of
    memory before)."""
    path = corpus / "kineto_gzip_bomb.json.gz"
    r = cli(
        "parse",
        path,
        "-o",
        outdir / "run.arrow",
        preexec_fn=_address_space(4 << 30),
        env=_ENV,
        timeout=20,
    )
    assert_error(r, path, "this machine has memory for")
    assert_nothing_written(outdir)
