"""base/blocks.py: a big block's pages serve the next block once every view of it is gone, and
never while one is alive."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
import pytest

from tracediff.base import blocks

BIG = blocks.MIN_BYTES + 4096


@pytest.fixture(autouse=True)
def _empty_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "_free", [])


def test_a_freed_block_is_taken_again_with_what_it_held() -> None:
    a = blocks.take(BIG)
    assert a.dtype == np.uint8 and len(a) == BIG
    a[:8] = 7
    del a
    gc.collect()
    assert len(blocks._free) == 1
    b = blocks.take(BIG - 100)  # a smaller request fits it
    assert len(b) == BIG - 100 and (b[:8] == 7).all()  # the same pages, as the doc says
    assert blocks._free == []


def test_a_block_stays_out_of_the_pool_while_any_view_of_it_lives() -> None:
    """A column carved out of a block and handed to Arrow keeps the whole block: a new block
    never gets its pages while the column can still be read."""
    a = blocks.take(BIG)
    col = a[64 : 64 + 8 * 1000].view(np.int64)
    col[:] = np.arange(1000)
    arrow = pa.Array.from_buffers(pa.int64(), 1000, [None, pa.py_buffer(col)])
    del a, col
    gc.collect()
    assert blocks._free == []
    other = blocks.take(BIG)
    other[:] = 255
    assert arrow.to_pylist() == list(range(1000))
    del arrow
    gc.collect()
    assert len(blocks._free) == 1


def test_zeroed_is_zeros_over_a_used_block() -> None:
    a = blocks.take(BIG)
    a[:] = 9
    del a
    gc.collect()
    z = blocks.zeroed((BIG // 8,), np.float64)
    assert z.dtype == np.float64 and z.shape == (BIG // 8,) and not z.any()
    assert blocks._free == []  # it came from the pool


def test_small_requests_and_a_full_pool_are_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    small = blocks.take(1000)
    assert small.base is None  # a plain numpy array, not a view of a mapping
    monkeypatch.setattr(blocks, "KEEP", BIG - 1)  # no room for a freed block
    a = blocks.take(BIG)
    del a
    gc.collect()
    assert blocks._free == []


def test_a_freed_block_a_little_too_small_is_grown_with_its_pages() -> None:
    a = blocks.take(BIG)
    a[:8] = 5
    del a
    gc.collect()
    b = blocks.take(BIG + (BIG // 4))
    assert len(b) == BIG + BIG // 4 and (b[:8] == 5).all()  # grown in place: the same pages
    b[-1] = 1  # the grown tail is there to write
    del b
    gc.collect()
    assert len(blocks._free) == 1
    c = blocks.take(3 * BIG)  # more than twice the freed one: a new block
    assert not c[:8].any() and len(blocks._free) == 1
