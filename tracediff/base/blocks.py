"""Big numpy buffers whose pages are used again: a freed block goes back to a small pool for the
next one of its size, instead of back to the kernel.

Stage: none (a leaf: numpy and the standard library). Used where a run's biggest arrays are made
once a side: the SQLite page decoder's column blocks (parse/nsys/pages.py) and the bootstrap's
resampling weights (engine/statistics/resample.py).

Why: on the development VM (and CI's, KVM guests alike) a page the process touches for the first
time costs more than the work done in it (its zeroing, and the host's backing of it): perf puts
~40 % of a x500 `.sqlite` compare's samples in the kernel's clear_page, 0.4-1.8 s of system time
for ~1 GB of fresh pages, where the user time is ~2 s. glibc gives numpy's arrays over 32 MiB
their own mapping and unmaps it when the array dies, so the second side's decode (the same
sizes as the first's) and the weights (made after both) fault in fresh pages again. Here a
block's mapping outlives its array: `take` hands out a uint8 array over a mapping from the pool
(the smallest that fits) or a new one; when the last view of that array dies, the mapping goes
back to the pool (at most `KEEP` bytes of them; past that, unmapped as before). Where no freed
block is big enough, the largest of at least half the size is grown (mremap keeps its pages).
A block from the pool holds what its last user wrote: callers write every byte they read
(`zeroed` clears).
"""

from __future__ import annotations

import mmap
import threading
import weakref

import numpy as np

__all__ = ["KEEP", "MIN_BYTES", "take", "zeroed"]

MIN_BYTES = 1 << 25
"""Smaller requests are plain numpy arrays (glibc reuses its heap for them already)."""

KEEP = 1 << 29
"""The most bytes of freed blocks the pool holds."""

_free: list[mmap.mmap] = []
_lock = threading.Lock()


def _give_back(block: mmap.mmap) -> None:
    """Called as the array over `block` dies (its buffer still exported for a moment): kept for
    the next `take`, or left to be unmapped when the last reference to it goes."""
    with _lock:
        if sum(len(b) for b in _free) + len(block) <= KEEP:
            _free.append(block)


def _advise(block: mmap.mmap) -> None:
    if hasattr(mmap, "MADV_HUGEPAGE"):  # huge pages, as numpy advises its own big arrays
        try:
            block.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass


def take(nbytes: int) -> np.ndarray:
    """A uint8 array of `nbytes` (contents left as the last user wrote them), over a pooled
    mapping where the request is big (module doc), else a plain numpy array."""
    if nbytes < MIN_BYTES:
        return np.empty(nbytes, np.uint8)
    with _lock:
        fits = [b for b in _free if len(b) >= nbytes]
        # none fits: the largest of at least half the size, grown (its pages kept, mremap)
        near = [b for b in _free if len(b) >= nbytes // 2]
        block = min(fits, key=len) if fits else max(near, key=len) if near else None
        if block is not None:
            _free.remove(block)
    if block is not None and len(block) < nbytes:
        try:
            block.resize(nbytes)
            _advise(block)
        except (BufferError, OSError, SystemError, ValueError):  # still exported, or refused
            block = None
    if block is None:
        # private: a shared anonymous mapping is shmem, which gets no huge pages
        block = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        _advise(block)
    arr = np.frombuffer(block, np.uint8, count=nbytes)
    # every view of `arr` keeps `arr` alive (numpy views point at it): when it dies, none is left
    weakref.finalize(arr, _give_back, block)
    return arr


def zeroed(shape: tuple[int, ...], dtype: type | np.dtype) -> np.ndarray:
    """`np.zeros(shape, dtype)` over a block from `take`."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    arr = take(n * dt.itemsize)
    arr.fill(0)
    return arr.view(dt).reshape(shape)
