"""The clock estimate's keying of collectives (parse/ranks/clocks.py), this checkout against a git
revision, on the NCCL kernels of a generated many-rank job.

    bench/clocks.py [--work /tmp/bench-clocks] [--nodes 8] [--gpus-per-node 8] [--cycles 1000]
                    [--kernels 128] [--before c9ed6f7] [--rounds 5]

Built once into --work (not timed): tests/support/gen_kineto_ranks.py writes nodes x gpus-per-node rank
traces (cycles x kernels GPU ops a rank, every 8th an all-reduce: the defaults give 64 ranks x
16,000 = 1.02 M collective kernel rows), each is parsed (tracediff.parse.load) and its
`collectives` table kept as Arrow IPC, with its clock shift (parse/ranks/combine.py clock_shifts) and
host.

Timed, each step in its own child process (this checkout, or the package at `--before` REV
extracted by bench/revision.py, first on PYTHONPATH), the two interleaved in every round:

- `file_ends`: clocks.file_ends of every file's collectives table (a worker's part, summed);
- `instances`: clocks.instances of clocks.collective_ends of those ends (the in-process join);
- `instances, sent`: the same with name and comm_id categorical, as a Dask worker sends them
  (REV's rankunit cast them; this checkout's file_ends already gives them so);
- `estimate`: clocks.estimate of the ends (instances, host medians, offsets, skew).

The child loads its input and builds what the step takes first, then runs the step 1 + WARM
times, each after resetting its peak-RSS mark (`/proc/self/clear_refs` 5): CPU s is the
process's (every polars thread), peak MiB the VmHWM growth over the RSS before the call. The
first call ("cold") also pays polars' thread pool and allocator growing (most of its peak stays
resident after it); "warm" is the median of the later calls, as in a driver that has already
worked. Each child prints a digest of the step's answer (instances: the rows sorted by file,
gpu, end, the instance ids renumbered in first-seen order; file_ends: the rows with names as
strings; estimate: its metadata record), so a change that alters an answer shows.
Prints a markdown table of min and median per step and revision, the load average before and
after, and whether the digests agree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARM = 3
"""Calls of the step after the first, in the same child: their median is the warm figure."""
STEPS = ("file_ends", "instances", "instances, sent", "estimate")


def build(work: Path, nodes: int, gpn: int, cycles: int, kernels: int) -> None:
    """The job's collectives tables, shifts and hosts in `work` (skipped where already there)."""
    import pyarrow as pa

    sys.path.insert(0, str(ROOT))
    from tests.support.gen_kineto_ranks import write_job
    from tracediff.parse import load
    from tracediff.parse.ranks import combine as jn

    done = work / "inputs.json"
    if done.exists():
        return
    job = work / "job"
    t0 = time.time()
    truth = write_job(job, nodes, gpn, cycles, kernels, seed=1)
    print(f"wrote {truth.ranks} rank traces in {time.time() - t0:.0f} s", file=sys.stderr)
    facts, names = [], []
    for i, path in enumerate(truth.paths):
        run = load(path)
        t = run.read("collectives")
        with (
            pa.OSFile(str(work / f"coll{i:04d}.arrow"), "wb") as f,
            pa.ipc.new_file(f, t.schema) as w,
        ):
            w.write_table(t)
        facts.append(jn.facts_of(run))
        names.append(f"coll{i:04d}.arrow")
    shifts, note = jn.clock_shifts(facts)
    if note:
        raise SystemExit(f"clock_shifts: {note}")
    hosts = [truth.hosts[r // gpn] for r in range(truth.ranks)]
    done.write_text(json.dumps({"files": names, "shifts": shifts, "hosts": hosts}))
    for p in truth.paths:
        p.unlink()
    print(f"parsed in {time.time() - t0:.0f} s", file=sys.stderr)


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def _digest(obj: object) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:12]


def child(work: Path, step: str) -> None:
    """Run one step (the package on sys.path: this checkout's or REV's); print a JSON line."""
    import polars as pl
    import pyarrow as pa

    from tracediff.parse.ranks import clocks

    inp = json.loads((work / "inputs.json").read_text())
    tables = [pa.ipc.open_file(str(work / n)).read_all() for n in inp["files"]]
    shifts, hosts = inp["shifts"], inp["hosts"]
    ends = [] if step == "file_ends" else [clocks.file_ends(t) for t in tables]
    if step == "instances, sent":
        ends = [e.with_columns(pl.col("name", "comm_id").cast(pl.Categorical)) for e in ends]
    colls = clocks.collective_ends(ends, shifts) if step.startswith("instances") else None
    calls = []
    for _ in range(1 + WARM):  # the first call pays the pool's and allocator's start; then warm
        out = None
        Path("/proc/self/clear_refs").write_text("5")
        rss0, c0, t0 = _status("VmRSS"), time.process_time(), time.perf_counter()
        if step == "file_ends":
            out = [clocks.file_ends(t) for t in tables]
        elif step == "estimate":
            out = clocks.estimate(ends, hosts, shifts)
        else:
            out = clocks.instances(colls)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        calls.append({"wall": wall, "cpu": cpu, "peak": _status("VmHWM") - rss0})
    if step == "estimate":
        digest = _digest(json.dumps(out.metadata("x"), sort_keys=True))  # type: ignore[attr-defined]
    elif step == "file_ends":
        parts = [e.with_columns(pl.col("name", "comm_id").cast(pl.String)) for e in out]  # type: ignore[attr-defined]
        digest = _digest([pickle.dumps(p.to_dict(as_series=False)) for p in parts])
    else:
        inst = out.sort("file", "gpu", "end")  # type: ignore[attr-defined]
        order = inst["inst"].unique(maintain_order=True)
        renum = inst["inst"].replace_strict(order, range(len(order)), return_dtype=pl.Int64)
        digest = _digest((inst.height, renum.to_list(), inst.select("file", "gpu", "end").rows()))
    rows = sum(e.height for e in ends) if ends else sum(t.num_rows for t in tables)
    warm = {k: statistics.median(c[k] for c in calls[1:]) for k in ("wall", "cpu", "peak")}
    print(json.dumps({"cold": calls[0], "warm": warm, "digest": digest, "rows": rows,
                      "package": clocks.__file__}))  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-clocks"))
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--kernels", type=int, default=128)
    ap.add_argument("--before", default="c9ed6f7")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.work, a.child)
        return 0
    a.work.mkdir(parents=True, exist_ok=True)
    build(a.work, a.nodes, a.gpus_per_node, a.cycles, a.kernels)
    sys.path.insert(0, str(ROOT / "bench"))
    from revision import extract

    with tempfile.TemporaryDirectory() as old:
        extract(a.before, Path(old))
        pkgs = {a.before: old, "this checkout": str(ROOT)}
        res: dict[tuple[str, str], list[dict[str, Any]]] = {}
        load0 = os.getloadavg()[0]
        for _ in range(a.rounds):
            for step in STEPS:
                for label, path in pkgs.items():
                    env = dict(os.environ, PYTHONPATH=path)
                    cmd = [sys.executable, __file__, "--work", str(a.work), "--child", step]
                    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=path)
                    if done.returncode:
                        raise SystemExit(f"{label} {step}: {done.stderr.strip()[-800:]}")
                    res.setdefault((step, label), []).append(json.loads(done.stdout))
        load1 = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs; load average (1 min) {load0:.2f} before, {load1:.2f} after; "
          f"{a.rounds} rounds, each step's two revisions one after the other\n")  # fmt: skip
    print("| step | rows in | package | state | CPU s min | CPU s median | wall s median "
          "| peak MiB min | peak MiB median |")  # fmt: skip
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    same = True
    for step in STEPS:
        digests = set()
        for state in ("cold", "warm"):
            for label in pkgs:
                r = [x[state] for x in res[(step, label)]]
                cpu, peak = [x["cpu"] for x in r], [x["peak"] for x in r]
                print(f"| {step} | {int(res[(step, label)][0]['rows']):,} | {label} | {state} "
                      f"| {min(cpu):.3f} | {statistics.median(cpu):.3f} "
                      f"| {statistics.median(x['wall'] for x in r):.3f} "
                      f"| {min(peak):.0f} | {statistics.median(peak):.0f} |")  # fmt: skip
                digests |= {x["digest"] for x in res[(step, label)]}
        same &= len(digests) == 1
    print(f"\nsame answers (digests of every step, both packages): {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
