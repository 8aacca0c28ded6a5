"""Device-major order: GPU ops by device, then start, then end, ties in the order they came.

Stage: none (a numeric leaf, numpy only). The engine orders a run's ops this way for its
alignment (engine/cycle/ranges.py `_tagged`), and a run file stores its kernels and copies this
way (runs/runfile.py), so that an op table read from a run file is already in that order and
the engine's reorder of millions of ops (a gather of every column) is not needed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["by_device", "device_major"]


def by_device(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """The device-major order of these rows by a stable sort by device alone (a radix sort over
    a few device codes), where each device's rows already come in (start, end) order (a file's
    kernels, read in start order): ~0.06 CPU-s at 5 M rows against a three-key lexsort's ~0.5.
    None where they do not. Rows already device-major: `np.arange`, with no sort."""
    n = len(device)
    if n < 2:
        return np.arange(n)
    ds, de = np.diff(start), np.diff(end)
    out_of_order = (ds < 0) | ((ds == 0) & (de < 0))  # a row before the one above it
    step = np.diff(device)
    if (step >= 0).all():  # devices in turn: only each device's own rows need be in order
        return None if (out_of_order & (step == 0)).any() else np.arange(n)
    lo, hi = int(device.min()), int(device.max())
    codes = device - lo
    order = np.argsort(codes.astype(np.int16) if hi - lo < 1 << 15 else codes, kind="stable")
    d, s, e = device[order], start[order], end[order]
    ds, de = np.diff(s), np.diff(e)
    apart = d[1:] != d[:-1]  # a device's first row follows another device's last
    return None if (~apart & ((ds < 0) | ((ds == 0) & (de < 0)))).any() else order


def device_major(device: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The stable (device, start, end) order of these rows: `by_device` where it applies, else a
    lexsort."""
    order = by_device(device, start, end)
    return np.lexsort([end, start, device]) if order is None else order
