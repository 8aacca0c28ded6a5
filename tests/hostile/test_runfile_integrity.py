"""Run-file integrity (issue #17): a flipped bit gives the same tables or a one-line error.

The sweep flips bits of a run file written by this tracediff (CRC-32 per table and over the
footer) in worker subprocesses (tests/support/bitflip.py), so a segfault is caught and charged to
its bit. A file from an older tracediff (no checksums, like the bundled samples) must still read
and never crash; a change inside one of its values cannot be detected, and `info` says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import bitflip, make_corpus
from tests.support.hostile import assert_error, cli
from tracediff.runs import schema
from tracediff.runs.runfile import read_run

# (other bits, the stride over structure bits): the default sample; the full sweep, every
# structure bit and 2000 others (~40 s), is opt-in: `pytest -m slow`
SWEEPS = [(400, 8), pytest.param((2000, 1), marks=pytest.mark.slow, id="full")]
OLDER = [(300, 8), pytest.param((2000, 1), marks=pytest.mark.slow, id="full")]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tracediff.runs.runfile import write_run

    path = tmp_path_factory.mktemp("checked") / "g_good.arrow"
    write_run(read_run(make_corpus.RUN), path)
    return path


def _kinds(outcomes: dict[int, str]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for line in outcomes.values():
        kinds.setdefault(line.split(" ", 1)[0], []).append(line)
    return kinds


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_flipped_bit_is_caught(checked: Path, sweep: tuple[int, int]) -> None:
    bits = bitflip.positions(checked.read_bytes(), *sweep)
    outcomes = bitflip.sweep(checked, bits)
    assert set(outcomes) == set(bits)
    kinds = _kinds(outcomes)
    # today every bit of a checked file matters: a flip is always an error naming the file
    assert set(kinds) == {"error"}, {k: v[:5] for k, v in kinds.items() if k != "error"}
    assert len(kinds["error"]) == len(bits)


@pytest.mark.parametrize("sweep", OLDER)
def test_flipped_bits_in_an_older_run_file_never_crash(sweep: tuple[int, int]) -> None:
    """Without checksums: every table is fully validated, so no flip crashes or raises anything
    but a TracediffError (it segfaulted or panicked in polars before); values may change."""
    bits = bitflip.positions(make_corpus.RUN.read_bytes(), *sweep)
    kinds = _kinds(bitflip.sweep(make_corpus.RUN, bits))
    assert set(kinds) <= {"ok", "error", "diff"}, {k: v[:5] for k, v in kinds.items()}
    assert kinds["error"] and kinds["ok"]


def test_the_caught_kernel_flip_is_silent_without_checksums(corpus: Path, tmp_path: Path) -> None:
    """The corpus's flipped kernel bit changes kernel times when nothing checks it: the checksum
    is what turns it into an error."""
    damaged = (corpus / "run_checked_kernels_bitflip.arrow").read_bytes()
    unchecked = tmp_path / "unchecked.arrow"
    unchecked.write_bytes(make_corpus.strip_checksums(damaged))
    got = read_run(unchecked).table("kernels")
    assert got.num_rows == read_run(make_corpus.RUN).table("kernels").num_rows
    assert not got.equals(read_run(make_corpus.RUN).table("kernels"))


def test_parse_of_a_damaged_run_file_copies_nothing(corpus: Path, tmp_path: Path) -> None:
    for name in ("run_checked_kernels_bitflip.arrow", "run_checked_footer_bitflip.arrow"):
        out = tmp_path / f"{name}.copy.arrow"
        assert_error(cli("parse", corpus / name, "-o", out), corpus / name, "damaged")
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_older_run_files_still_read_and_say_unverified(corpus: Path) -> None:
    for path in (make_corpus.RUN, corpus / "run_legacy.arrow"):
        run = read_run(path)
        assert run.checksums is False
        assert run.table("kernels").num_rows == 1764
        assert run.table("cuda_events").num_rows == 0  # the samples predate this table
        r = cli("info", path, "--format", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["run_file_checksums"] is False
        assert "an older run file without checksums" in cli("info", path).stderr


def test_parse_of_an_older_run_file_says_it_was_unchecked(tmp_path: Path) -> None:
    out = tmp_path / "copy.arrow"
    r = cli("parse", make_corpus.RUN, "-o", out)
    assert r.returncode == 0, r.stderr
    assert (
        f"an older run file without checksums: damage to it cannot be detected, and {out}"
        in r.stderr
    )
    assert read_run(out).checksums is True


def test_checked_run_file_round_trips_and_says_verified(checked: Path) -> None:
    run, ref = read_run(checked), read_run(make_corpus.RUN)
    assert run.checksums is True
    for name in schema.TABLES:
        assert run.table(name).equals(ref.table(name)), name
    assert json.loads(cli("info", checked, "--format", "json").stdout)["run_file_checksums"]
    assert cli("info", checked).stderr == ""
