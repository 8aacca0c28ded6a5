"""parse/nccl.py `decode`: each NCCL kernel name's op, reduce op, type, algorithm and protocol,
found once per distinct name, in the rows' order, nulls and other names null."""

from __future__ import annotations

import polars as pl

from tracediff.parse.nccl import decode

OLD = "ncclKernel_AllReduce_RING_LL_Sum_float"
NEW = "ncclDevKernel_AllGather_RING_LL"
OTHER = "void gemm_kernel<128>(float*)"


def test_each_row_gets_its_names_fields_in_order() -> None:
    names = [NEW, OLD, None, OTHER, OLD, NEW, None, OLD]
    got = decode(pl.Series(names, dtype=pl.String))
    assert got.columns == ["op", "reduce_op", "dtype", "algorithm", "protocol"]
    assert got.height == len(names)
    rows = got.rows()
    by_name = {n: rows[i] for i, n in enumerate(names)}
    assert by_name[OLD] == ("AllReduce", "Sum", "float", "RING", "LL")
    assert by_name[NEW][0] == "AllGather" and by_name[NEW][3] == "RING"
    assert by_name[None] == (None,) * 5 and by_name[OTHER] == (None,) * 5
    for i, n in enumerate(names):  # every row of a name alike, wherever it stands
        assert rows[i] == by_name[n]


def test_categorical_names_decode_as_their_text() -> None:
    names = [OLD, NEW, OLD, None]
    text = decode(pl.Series(names, dtype=pl.String))
    assert decode(pl.Series(names, dtype=pl.Categorical)).equals(text)
