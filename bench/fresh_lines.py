"""Where a command faults in fresh memory: MiB of transparent huge pages the kernel zeroed for
this process's machine, charged to the tracediff source line that ran last before each came.

    bench/fresh_lines.py [--top N] -- compare BASE HEAD --format json

Why: on the development VM (a KVM guest, like CI's) a fresh page costs more than most of the work
done in it (base/blocks.py's doc), so a command's system time follows the bytes it touches for
the first time, and those are found by line, not by function: a tracer reads /proc/vmstat's
`thp_fault_alloc` at every line of tracediff's own code (every thread) and charges the growth
to the line before. Native work on other threads (polars' pool, the page decoder's) is charged
to whatever line the traced threads ran last, so read a table of one window as a map, not a
measure; the total is the machine's, so run it on a quiet machine. Its own time is ~2x the
command's; the figures are bytes, which the tracing does not move.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
from types import FrameType
from typing import Any

_VMSTAT = os.open("/proc/vmstat", os.O_RDONLY) if os.path.exists("/proc/vmstat") else -1


def fresh_mib() -> int:
    """MiB of huge pages faulted in so far, machine-wide (2 MiB each)."""
    if _VMSTAT < 0:
        return 0
    data = os.pread(_VMSTAT, 1 << 16, 0)
    at = data.find(b"thp_fault_alloc ")
    if at < 0:
        return 0
    return 2 * int(data[at + 16 : data.index(b"\n", at)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=30, help="lines to print (most MiB first)")
    ap.add_argument("argv", nargs="+", help="the tracediff arguments, after --")
    args = ap.parse_args()
    import tracediff.cli  # the allocator variables set before numpy loads, as the CLI does

    spent: collections.Counter[tuple[str, int, str]] = collections.Counter()
    state: dict[str, Any] = {"last": None, "seen": fresh_mib()}
    lock = threading.Lock()

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event in ("line", "return"):
            now = fresh_mib()
            with lock:
                if state["last"] is not None and now != state["seen"]:
                    spent[state["last"]] += now - state["seen"]
                state["seen"] = now
                code = frame.f_code
                state["last"] = (code.co_filename, frame.f_lineno, code.co_name)
        return local

    def call(frame: FrameType, event: str, arg: object) -> Any:
        return local if "tracediff" in frame.f_code.co_filename else None

    start = fresh_mib()
    sys.settrace(call)
    threading.settrace(call)
    try:
        with open(os.devnull, "w") as null:
            out, sys.stdout = sys.stdout, null
            try:
                tracediff.cli.main(args.argv)
            finally:
                sys.stdout = out
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    root = os.path.dirname(os.path.dirname(os.path.abspath(tracediff.cli.__file__)))
    print(f"{fresh_mib() - start} MiB of huge pages faulted in, {sum(spent.values())} charged")
    print("| MiB | line | function |\n|---:|---|---|")
    for (path, line, fn), mib in spent.most_common(args.top):
        print(f"| {mib} | {os.path.relpath(path, root)}:{line} | {fn} |")


if __name__ == "__main__":
    main()
