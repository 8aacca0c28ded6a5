"""Split one run into per-process run files, as a job that profiled each rank on its own writes.

    python tools/split_run.py RUN_OR_REPORT -o DIR      # DIR/rank-0.arrow, rank-1.arrow, ...

For testing the join of many files (tracediff/parse/ranks/combine.py) against the same data as one file:
`tracediff compare DIR_A DIR_B` must say what `compare RUN_A RUN_B` says. Process i (in process-id
order) goes to `rank-i.arrow`: every table's rows of that process (the devices table: the devices
its GPU work ran on; frames and stacks, keyed by content hashes, go whole to every file). Each file
keeps the run's metadata, time origin included, so the join puts the files back on one clock.
With one process the folder holds one file (read it with `--layout ranks`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tracediff.parse import load
from tracediff.runs.runfile import Run, write_run


def processes(run: Run) -> list[int]:
    """The processes with GPU work or API calls, in id order."""
    pids: set[int] = set()
    for t in ("kernels", "memops", "api_calls"):
        pids |= {p for p in run.table(t).column("process_id").to_pylist() if p is not None}
    return sorted(pids)


def part(run: Run, pid: int) -> Run:
    """The rows of process `pid`."""
    tables: dict[str, pa.Table] = {}
    for name in run.tables:
        t = run.table(name)
        if "process_id" in t.column_names and name != "devices":
            t = t.filter(pc.equal(t.column("process_id"), pid))
        tables[name] = t
    used = pa.concat_arrays(
        [tables[t].column("device_id").combine_chunks() for t in ("kernels", "memops")]
    ).unique()
    dev = run.table("devices")
    own = pc.or_kleene(
        pc.is_null(dev.column("process_id")), pc.equal(dev.column("process_id"), pid)
    )
    tables["devices"] = dev.filter(pc.and_kleene(own, pc.is_in(dev.column("device_id"), used)))
    meta = dict(run.metadata)
    if isinstance(meta.get("gpus"), list):  # a joined run's GPU list: this process's only
        meta["gpus"] = [g for g in meta["gpus"] if g.get("process_id") == pid]
    return Run(tables=tables, metadata=meta, warnings=[])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("-o", "--out", type=Path, required=True, help="folder to create")
    args = ap.parse_args(argv)
    run = load(args.run)
    args.out.mkdir(parents=True, exist_ok=False)
    pids = processes(run)
    for i, pid in enumerate(pids):
        write_run(part(run, pid), args.out / f"rank-{i}.arrow")
    print(f"wrote {len(pids)} file(s) to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
