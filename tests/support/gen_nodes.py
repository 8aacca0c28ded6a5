"""One generated nsys report (tests/support/gen_nsys.py) split into one report per node, each on its node's
clock, as `nsys profile -o report_%h` on every node of a multi-node job writes them.

    from tests.support.gen_nodes import split_nodes
    paths = split_nodes(one.sqlite, out_dir, gpus_per_node=8, clock_error_ns=[0, 5_300_000])

Node n holds GPUs n*g .. n*g+g-1 of the one report (their processes, kernels, copies, API calls,
NVTX ranges), numbered 0..g-1 again as each node's CUDA does, and a TARGET_INFO_SYSTEM_ENV with
its `Hostname`. Its session starts `start_lag_ns[n]` after node 0's (its relative timestamps are
that much smaller, its session start that much later) and its clock is `clock_error_ns[n]` ahead
of the truth: the session start time it records is that much late, so the tracer's origins place
node n's events `clock_error_ns[n]` too late. Joining the reports must find that error.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from tests.support.gen_nsys import DDL_PATH

TIMED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end"),
    "NVTX_EVENTS": ("start", "end"),
}


def _ddl(table: str) -> str:
    text = DDL_PATH.read_text()
    start = text.index(f"CREATE TABLE {table} (")
    return text[start : text.index(");", start) + 2]


def split_nodes(
    src: Path,
    out: Path,
    gpus_per_node: int,
    clock_error_ns: Sequence[int],
    start_lag_ns: Sequence[int] | None = None,
    hosts: Sequence[str] | None = None,
) -> list[Path]:
    """Write out/report_<host>.sqlite per node (the module docstring); returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    nodes = len(clock_error_ns)
    lag = list(start_lag_ns or [0] * nodes)
    names = list(hosts or [f"node-{n}" for n in range(nodes)])
    con = sqlite3.connect(src)
    gpus = [r[0] for r in con.execute("SELECT id FROM TARGET_INFO_GPU ORDER BY id")]
    con.close()
    if len(gpus) != nodes * gpus_per_node:
        raise ValueError(f"{src}: {len(gpus)} GPUs, not {nodes} x {gpus_per_node}")
    paths = []
    for n in range(nodes):
        dst = out / f"report_{names[n]}.sqlite"
        shutil.copyfile(src, dst)
        lo, hi = n * gpus_per_node, (n + 1) * gpus_per_node
        con = sqlite3.connect(dst)
        # the node's processes: those whose kernels ran on its GPUs
        pids = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL "
                "WHERE deviceId >= ? AND deviceId < ?",
                (lo, hi),
            )
        ]
        keep = ",".join(str(p) for p in pids)
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
            con.execute(f"DELETE FROM {t} WHERE deviceId < ? OR deviceId >= ?", (lo, hi))
            con.execute(f"UPDATE {t} SET deviceId = deviceId - ?", (lo,))
        # thread ids carry their process id in bits 24..47, as globalPid does
        for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
            con.execute(f"DELETE FROM {t} WHERE ((globalTid >> 24) << 24) NOT IN ({keep})")
        con.execute("DELETE FROM TARGET_INFO_GPU WHERE id < ? OR id >= ?", (lo, hi))
        con.execute("UPDATE TARGET_INFO_GPU SET id = id - ?, cuDevice = cuDevice - ?", (lo, lo))
        for t, cols in TIMED.items():
            sets = ", ".join(f"{c} = {c} - {lag[n]}" for c in cols)
            con.execute(f"UPDATE {t} SET {sets}")
        con.execute(
            "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?",
            (lag[n] + clock_error_ns[n],),
        )
        con.execute(_ddl("TARGET_INFO_SYSTEM_ENV"))
        con.executemany(
            "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (281474976710656, 'Local (CLI)', ?, ?, ?)",
            [("Hostname", 619, names[n]), ("CpuCores", 1, "64")],
        )
        con.commit()
        con.close()
        paths.append(dst)
    return paths
