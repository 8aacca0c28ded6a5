"""Kineto ingest benchmark: events/s and peak RSS of `read_kineto` on real traces and a ×N copy.

    bench/kineto_ingest.py [--trace PATH.json.gz] [--times 50] [--repeat 3] [--keep DIR]
                           [--reader OLD_KINETO.py] [--workers 0] [--replica PATH]
                           [--no-load-gate] [--inputs gz,json,xjson,xgz]
                           [--configs scan,scan1,msgspec]

Inputs (--inputs picks rows): the largest real Kineto trace (default: the 2021-schema ResNet50
sample from pytorch/kineto, 75.7 k events, 35 MB of JSON) as shipped (.json.gz) and uncompressed,
and a replica with its traceEvents repeated N times, plain and gzipped (ISA-L level 1) (copy k shifted by k × (span + 1 ms), correlation
ids offset so each launch still joins its own kernel), written to a temp folder. The replica is a
benchmark input, never a test fixture.

Each measurement runs in a fresh child process that first reads a tiny bundled trace (polars'
thread pools and arenas are a fixed ~35 MB, not a per-byte cost), resets its peak RSS
(/proc/self/clear_refs), then reads the input: wall time of read_kineto, and peak RSS (VmHWM)
above the RSS before the read, as a multiple of the uncompressed JSON size. When the reader starts
a worker process (large plain-JSON files), its CPU seconds are added to the CPU column and its
whole peak RSS (interpreter and imports included) to the peak column; `--workers 0` reads
every segment in the one process, for the single-core figure.
Each input is read --repeat times: the table shows the fastest run (wall and CPU seconds, all
threads; events per wall second and per CPU second), the largest peak, and the load average (a
shared machine slows every run). --reader runs another version of the reader instead (a module
file defining read_kineto, e.g. `git show REV:tracediff/parse/kineto.py > /tmp/old.py`), for
before/after tables on the same inputs.
--configs runs each input under several reader settings, interleaved run by run (this VM's
speed drifts within minutes, so only interleaved rows compare): `scan` (the native scanner, two
threads per piece), `scan1` (one thread), `msgspec` (the scanner off: TRACEDIFF_KINETO_SCAN=0).
--replica keeps the ×N replica at PATH (made once; its gzip beside it) instead of a temp folder.
Goal (issue #3): >= 1 M events/s and peak RSS < 3x the uncompressed size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
_NAME = "resnet50_num_workers_0.worker0.1623143566756.pt.trace.json.gz"
DEFAULT = next(
    (
        p
        for p in (
            ROOT / "tests" / "data" / "kineto" / _NAME,
            Path("/work/shared/traces/public/kineto/tb_plugin/samples/resnet50_num_workers_0")
            / _NAME.split(".", 1)[1],
        )
        if p.exists()
    ),
    ROOT / "tests" / "data" / "kineto" / _NAME,
)

CHILD = r"""
import importlib.util, json, os, resource, sys, time
if os.environ.get("KINETO_READER"):  # another version of the reader, from a file
    spec = importlib.util.spec_from_file_location("kineto_reader", os.environ["KINETO_READER"])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kineto_reader"] = mod
    spec.loader.exec_module(mod)
    read_kineto = mod.read_kineto
else:
    from tracediff.parse.kineto import read_kineto, segments
    if os.environ.get("KINETO_WORKERS"):  # --workers: 0 reads every segment in this process
        segments.WORKERS = int(os.environ["KINETO_WORKERS"])
    if os.environ.get("KINETO_NO_LOAD_GATE"):  # --no-load-gate: a worker even on a busy machine
        segments.LOAD_GATE = False
def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise SystemExit("no " + key)
read_kineto(sys.argv[2])  # warm-up: polars thread pools and arenas are a fixed cost, not per-byte
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM (peak RSS) to the current RSS
base = status_kb("VmRSS")
def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
t, c, cc = time.perf_counter(), time.process_time(), children_cpu()
run = read_kineto(sys.argv[1])
dt, cpu = time.perf_counter() - t, time.process_time() - c
worker_cpu = children_cpu() - cc  # the reader's worker process, if it started one
worker_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if worker_cpu else 0
print(json.dumps({"s": dt, "cpu_s": cpu + worker_cpu, "worker_cpu_s": worker_cpu,
                  "peak_kb": status_kb("VmHWM") + worker_kb, "base_kb": base,
                  "events": run.metadata["event_count"],
                  "kernels": run.tables["kernels"].num_rows}))
"""
WARMUP = ROOT / "tests" / "data" / "kineto" / "base.json.gz"


def replicate(src: Path, out: Path, times: int) -> None:
    """Write src's document with traceEvents repeated `times` times (shifted ts, offset ids)."""
    doc = orjson.loads(
        gzip.decompress(src.read_bytes()) if src.suffix == ".gz" else src.read_bytes()
    )
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000  # an int when every ts is: integer µs stay integers
    corr = [
        e["args"]["correlation"]
        for e in events
        if isinstance(e.get("args"), dict) and isinstance(e["args"].get("correlation"), int)
    ]
    step = max(corr, default=0) + 1
    with open(out, "wb") as f:
        f.write(orjson.dumps(doc)[:-1] + b', "traceEvents": [\n')
        for k in range(times):
            chunk = []
            for e in events:
                e = dict(e)
                t = e.get("ts")
                if isinstance(t, int):
                    e["ts"] = t + k * span
                elif isinstance(t, float):
                    e["ts"] = round(t + k * span, 3)
                a = e.get("args")
                if isinstance(a, dict) and isinstance(a.get("correlation"), int):
                    e["args"] = {**a, "correlation": a["correlation"] + k * step}
                chunk.append(orjson.dumps(e))
            f.write((b",\n" if k else b"") + b",\n".join(chunk))
        f.write(b"\n]}\n")


def gzip_file(src: Path, out: Path) -> None:
    """`src` gzipped (ISA-L's fastest level: as fast to inflate as zlib's, far faster to make)."""
    from isal import isal_zlib

    c = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
    with open(src, "rb") as f, open(out, "wb") as g:
        while block := f.read(16 << 20):
            g.write(c.compress(block))
        g.write(c.flush())


def measure(
    path: Path,
    reader: Path | None,
    workers: int | None = None,
    no_load_gate: bool = False,
    config: dict[str, str] | None = None,
) -> dict[str, float]:
    from tracediff.cli import ALLOCATOR_ENV  # what `tracediff parse` runs with

    env = {**ALLOCATOR_ENV, **os.environ, "PYTHONPATH": str(ROOT), **(config or {})}
    if workers is not None:
        env["KINETO_WORKERS"] = str(workers)
    if no_load_gate:
        env["KINETO_NO_LOAD_GATE"] = "1"
    if reader is not None:
        env["KINETO_READER"] = str(reader.resolve())
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(WARMUP)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT)
    ap.add_argument("--times", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3, help="runs per input; the best is shown")
    ap.add_argument("--keep", type=Path, help="folder for generated inputs (default: temp dir)")
    ap.add_argument("--reader", type=Path, help="a reader module file to measure instead")
    ap.add_argument(
        "--workers", type=int, help="worker processes of the segmented read (0: one process)"
    )
    ap.add_argument(
        "--no-load-gate",
        action="store_true",
        help="start the worker even when the load average says the CPUs are busy",
    )
    ap.add_argument("--replica", type=Path, help="keep the xN replica here (made if missing)")
    ap.add_argument(
        "--configs", default="scan", help="scan (2 threads), scan1 (1 thread), msgspec: interleaved"
    )
    ap.add_argument(
        "--inputs",
        default="gz,json,xjson,xgz",
        help="rows to run: gz, json (the trace), xjson, xgz (the replica, plain and gzipped)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.keep) as tmp:
        raw = Path(tmp) / "trace.json"
        raw.write_bytes(gzip.decompress(args.trace.read_bytes()))
        rep = args.replica or Path(tmp) / f"trace_x{args.times}.json"
        if not rep.exists():
            replicate(args.trace, rep, args.times)
        rows = {
            "gz": (f"{args.trace.name} (gz)", args.trace, raw.stat().st_size),
            "json": (f"{args.trace.name} (json)", raw, raw.stat().st_size),
            "xjson": (f"x{args.times} replica (json)", rep, rep.stat().st_size),
            "xgz": (f"x{args.times} replica (json.gz)", rep.with_suffix(".json.gz"), 0),
        }
        if "xgz" in args.inputs:
            rows["xgz"] = (*rows["xgz"][:2], rep.stat().st_size)
            if not rows["xgz"][1].exists():
                gzip_file(rep, rows["xgz"][1])
        print(
            f"{'input':40s} {'config':>7s} {'events':>10s} {'kernels':>9s} {'MB json':>8s} {'s':>7s} "
            f"{'Mev/s':>6s} {'cpu s':>6s} {'Mev/cpu-s':>9s} {'peak MB':>8s} {'peak/json':>9s} "
            f"{'load':>5s} {'worker cpu s':>12s}"
        )
        configs = args.configs.split(",")
        for label, path, size in (rows[k] for k in args.inputs.split(",")):
            runs_of: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
            for _ in range(args.repeat):  # interleaved: config A, B, A, B, ...
                for c in configs:
                    runs_of[c].append(
                        measure(path, args.reader, args.workers, args.no_load_gate, CONFIGS[c])
                    )
            for c in configs:
                report(label, c, size, runs_of[c])


CONFIGS = {
    "scan": {},
    "scan1": {"TRACEDIFF_KINETO_THREADS": "1"},
    "msgspec": {"TRACEDIFF_KINETO_SCAN": "0"},
}


def report(label: str, config: str, size: int, runs: list[dict[str, float]]) -> None:
    """One row: the fastest run's wall time, the least CPU, the largest peak."""
    r = min(runs, key=lambda x: x["s"])
    cpu = min(x["cpu_s"] for x in runs)
    peak_mb = max(x["peak_kb"] - x["base_kb"] for x in runs) / 1024
    worker = "/".join(f"{x['worker_cpu_s']:.1f}" for x in runs)
    print(
        f"{label[:40]:40s} {config:>7s} {r['events']:>10,d} {r['kernels']:>9,d} "
        f"{size / 2**20:>8.1f} {r['s']:>7.3f} {r['events'] / r['s'] / 1e6:>6.2f} "
        f"{cpu:>6.2f} {r['events'] / cpu / 1e6:>9.2f} {peak_mb:>8.0f} "
        f"{peak_mb * 2**20 / size:>9.2f} {os.getloadavg()[0]:>5.1f} {worker:>12s}",
        flush=True,
    )


if __name__ == "__main__":
    main()
