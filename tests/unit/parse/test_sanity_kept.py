"""parse/sanity.py keeps what it counted with the run (`Run.record_counts`) and a run file
carries it: reading the file back checks it without decoding its big columns again, with the
same warnings and refusals; counts that are not whole are counted again, and a run made from
other tables never inherits them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tracediff.base.errors import InputError
from tracediff.parse import load, sanity
from tracediff.runs.runfile import RECORDS, Run, read_run, write_run

SAMPLE = Path(__file__).resolve().parents[3] / "samples" / "g_good.arrow"


def _no_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(run: Run) -> None:
        raise AssertionError("counted again")

    monkeypatch.setattr(sanity, "counts_of", refuse)


def _doubled(run: Run, n: int) -> Run:
    """The run with its first n kernels recorded twice (exact duplicates: a warning)."""
    k = run.table("kernels")
    tables = {name: run.table(name) for name in run.tables}
    tables["kernels"] = pa.concat_tables([k, k.slice(0, n)])
    return Run(tables=tables, metadata=dict(run.metadata), warnings=[])


def test_a_run_file_carries_its_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _doubled(load(SAMPLE), 3)
    assert run.record_counts is None  # a run of other tables: its own count
    sanity.check_run(run, "x")
    assert any("3 kernel records are exact duplicates" in w for w in run.warnings)
    counted = sanity.counts_of(run)
    assert run.record_counts is not None and sanity._stored(run.record_counts) == counted
    write_run(run, tmp_path / "r.arrow")
    back = read_run(tmp_path / "r.arrow")
    assert RECORDS not in back.metadata and back.record_counts == run.record_counts
    _no_counting(monkeypatch)
    again = load(tmp_path / "r.arrow")
    said = [w.replace("x:", f"{tmp_path / 'r.arrow'}:") for w in run.warnings if "duplic" in w]
    assert said and set(said) <= set(again.warnings)  # (the file keeps the first check's too)


def test_kept_counts_still_refuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts that say most records repeat refuse the file as counting would (the checks read
    them, whichever way they came)."""
    run = load(SAMPLE)
    n = run.table("kernels").num_rows
    bad = _doubled(run, n)
    with pytest.raises(InputError, match="exact duplicates"):
        sanity.check_run(bad, "x")
    write_run(bad, tmp_path / "bad.arrow")  # a writer that did not stop at the refusal
    _no_counting(monkeypatch)
    with pytest.raises(InputError, match="exact duplicates"):
        load(tmp_path / "bad.arrow")


@pytest.mark.parametrize(
    "kept",
    [
        {"kernels": {"height": "7"}},
        {"kernels": {}, "memops": {}},
        {"kernels": None, "memops": None},
        [1, 2],
    ],
)
def test_counts_not_whole_are_counted_again(tmp_path: Path, kept: object) -> None:
    run = load(SAMPLE)
    want = sanity.counts_of(run)
    run.record_counts = kept  # type: ignore[assignment]
    write_run(run, tmp_path / "r.arrow")
    back = read_run(tmp_path / "r.arrow")
    assert sanity.counts(back) == want
    assert sanity._stored(back.record_counts) == want  # counted, then kept


def test_kernel_count_and_devices_in_use_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run file written by `parse` (a 4-GPU report: four processes, the plan's way) keeps
    the devices in use (parse/ranks/gpus.py `used_devices`) beside its counts; read back, both
    it and the kernel count are what the tables give, and no table is read for them; kept rows
    that are not whole are found again from the tables."""
    from tests.support.gen_nsys import write_report
    from tests.support.hostile import cli
    from tracediff.parse.ranks import gpus

    src, out = tmp_path / "r.sqlite", tmp_path / "r.arrow"
    write_report(src, 4, 6, 20, seed=3)
    assert cli("parse", src, "-o", out).returncode == 0
    fresh = read_run(out)
    want, n = gpus._used(fresh), fresh.table("kernels").num_rows
    assert want.height == 4 and want["process_id"].n_unique() == 4
    back = read_run(out)
    assert back.record_counts is not None and gpus.KEPT in back.record_counts
    reads: list[str] = []
    read = back.read
    monkeypatch.setattr(back, "read", lambda name, *a: reads.append(name) or read(name, *a))
    assert gpus.used_devices(back).equals(want)
    assert sanity.kernel_count(back) == n
    assert reads == []
    for bad in ([[0, "4000", None]], [[0, 1]], "x", [["0", 1, None]]):
        back.record_counts[gpus.KEPT] = bad
        assert gpus.used_devices(back).equals(want)
    assert reads  # (found again: from the tables)
