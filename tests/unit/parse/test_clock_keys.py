"""How parse/ranks/clocks.py keys collective instances: a (communicator, name) pair by the two columns'
categorical codes, not by one joined string (the review of issue 21: a string per NCCL kernel
row), with the old rules kept (a communicator the trace does not name, null or "", is one; an
instance only where every member GPU has as many kernels of the name)."""

from __future__ import annotations

from functools import partial

import polars as pl
import pyarrow as pa
import pytest

from tracediff.parse.ranks import clocks
from tracediff.runs import schema

COLS = ["source", "device_id", "name", "comm_id", "group_size", "end_ns"]


def _table(rows: list[tuple[object, ...]]) -> pa.Table:
    """A collectives table of `rows` (source, device_id, name, comm_id, group_size, end_ns)."""
    fields = [schema.COLLECTIVES.field(c) for c in COLS]
    return pa.table(
        {f.name: pa.array([r[i] for r in rows], f.type) for i, f in enumerate(fields)},
        schema=pa.schema(fields),
    )


def _ends(rows: list[tuple[object, ...]]) -> pl.DataFrame:
    """collective_ends' frame of `rows` (file, gpu, name, comm_id, group_size, end), strings."""
    return pl.DataFrame(
        rows,
        schema={"file": pl.Int32, "gpu": pl.Int32, "name": pl.String, "comm_id": pl.String,
                "group_size": pl.Int32, "end": pl.Int64},
        orient="row",
    )  # fmt: skip


def _groups(inst: pl.DataFrame) -> list[tuple[list[int], list[int]]]:
    """Each instance as (its files, its end times), sorted: what does not depend on the ids."""
    per = inst.group_by("inst").agg(pl.col("file").sort(), pl.col("end").sort())
    return sorted((f.to_list(), e.to_list()) for f, e in zip(per["file"], per["end"], strict=True))


def test_unnamed_communicator_null_or_empty_is_one() -> None:
    """File 0's trace leaves comm_id null, file 1's says "": one communicator (as before). Host
    NCCL ranges (source nvtx) and kernels without an end are not instances."""
    f0 = [("kernel", 0, "ncclKernel_AllReduce", None, None, 100 * j) for j in range(3)]
    f0 += [("nvtx", 0, "ncclKernel_AllReduce", None, None, 7), ("kernel", 0, "x", None, None, None)]
    f1 = [("kernel", 0, "ncclKernel_AllReduce", "", None, 100 * j + 5) for j in range(3)]
    ends = [clocks.file_ends(_table(f0)), clocks.file_ends(_table(f1))]
    assert [e.height for e in ends] == [3, 3]
    assert ends[0]["comm_id"].to_list() == [""] * 3
    inst = clocks.instances(clocks.collective_ends(ends, [0, 1_000]))
    assert _groups(inst) == [([0, 1], [100 * j, 100 * j + 1_005]) for j in range(3)]


def test_pairs_that_one_joined_string_would_merge_stay_apart() -> None:
    """comm "a\\x00b" with kernel "c" (files 0, 1) and comm "a" with kernel "b\\x00c" (files 2,
    3), two 2-rank communicators: joined with \\x00 they were one key of 4 members, not 2, and
    both were dropped (the old key's bug); keyed by the two codes, each is its own."""
    rows = []  # (file, gpu, name, comm_id, group_size, end)
    for f in range(4):
        comm, name = ("a\x00b", "c") if f < 2 else ("a", "b\x00c")
        rows += [(f, 0, name, comm, 2, 1_000 * j + f) for j in range(3)]
    ends = _ends(rows)
    got = _groups(clocks.instances(ends))
    want = [([0, 1], [1_000 * j, 1_000 * j + 1]) for j in range(3)]
    want += [([2, 3], [1_000 * j + 2, 1_000 * j + 3]) for j in range(3)]
    assert got == sorted(want)


def test_strings_and_categoricals_key_alike() -> None:
    """The driver gets categoricals (file_ends' own, or a Dask worker's); a caller may pass
    strings: the same instances, ids included, either way."""
    per_file = [
        [("kernel", 0, "ncclAllReduce", "c0", None, 10 * j + f) for j in range(4)]
        + [("kernel", 0, "ncclAllGather", "c1", 3, 500 + 10 * j + f) for j in range(2)]
        for f in range(3)
    ]
    cat = clocks.collective_ends([clocks.file_ends(_table(r)) for r in per_file], [0] * 3)
    assert cat.schema["name"] == pl.Categorical and cat.schema["comm_id"] == pl.Categorical
    text = cat.with_columns(pl.col("name", "comm_id").cast(pl.String))
    a, b = clocks.instances(cat), clocks.instances(text)
    assert a.height == 6 * 3 and a["inst"].n_unique() == 6
    assert a.sort("inst", "file").equals(b.sort("inst", "file"))


def test_instances_only_where_every_member_has_as_many() -> None:
    rows = []  # (file, gpu, name, comm_id, group_size, end)
    for f in range(4):
        rows += [(f, 0, "A", "", None, 100 * j + f) for j in range(3)]  # every GPU, 3 each
        rows += [(f, 0, "B", "", None, 1000 + j) for j in range(2 if f < 3 else 1)]  # one short
    for f in (0, 1):  # a 2-rank communicator: both members, 2 each
        rows += [(f, 0, "C", "c1", 2, 5000 + 10 * j) for j in range(2)]
    rows += [(2, 0, "D", "", None, 7)]  # on one GPU only
    ends = _ends(rows)
    inst = clocks.instances(ends)
    assert inst.height == 3 * 4 + 2 * 2  # A and C; B (GPU 3 lacks one) and D dropped
    want = [([0, 1, 2, 3], [100 * j, 100 * j + 1, 100 * j + 2, 100 * j + 3]) for j in range(3)]
    want += [([0, 1], [5000 + 10 * j] * 2) for j in range(2)]
    assert _groups(inst) == sorted(want)  # the k-th of a name on each GPU, k in end order


def test_instances_from_chunks_of_files_are_the_whole_frames(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """clocks.estimate gives `instances` the files a chunk at a time (no keyed copy of every
    row): the same rows, ids and order as the frame of them all; an empty file included."""
    per_file = [
        [("kernel", g, "ncclAllReduce", "c0", None, 10 * j + f) for g in (0, 1) for j in range(4)]
        + [("kernel", 0, "ncclAllGather", "c1", 3, 500 + 10 * j + f) for j in range(2 + (f == 1))]
        for f in range(4)
    ]
    per_file[2] = []
    ends = [clocks.file_ends(_table(r)) for r in per_file]
    shifts = [0, 7, 0, -3]
    whole = clocks.instances(clocks.collective_ends(ends, shifts))
    assert whole.height == 4 * 2 * 3  # AllGather dropped: file 1 has one more
    for rows, chunks in ((10**6, 1), (11, 2), (1, 3)):  # whole files (10, 11, 0, 10 rows)
        monkeypatch.setattr(clocks, "CHUNK_ROWS", rows)
        assert len(list(clocks._each_placed(ends, shifts))) == chunks
        assert clocks.instances(partial(clocks._each_placed, ends, shifts)).equals(whole)
