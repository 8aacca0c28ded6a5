"""Export speed and peak memory on a big pair: the sample runs replicated N times.

    .venv/bin/python bench/export.py [--times 500] [--workdir DIR] [--no-compare]

Builds the two big run files (copy k of every table shifted by k x (run span + 1 ms), correlation
ids offset so they stay unique), then measures, each in a fresh process so peak RSS is its own:

- `tracediff export BIG_GOOD BIG_BAD --parquet DIR`
- `compare` of the pair (saved with pickle), then, in a fresh process holding only that result,
  `export_comparison` (compare --export) and `write_perfetto` (compare --perfetto, .json.gz)

and prints one table: wall time, rows/s, peak RSS, output size. Peak RSS is ru_maxrss of the child.
For reference it also prints the decoded size of the largest table and of all tables of one run:
exporting one table at a time should peak near the largest table, not near the sum.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TIME_COLS = ("start_ns", "end_ns", "launch_start_ns", "launch_end_ns")


def replicate(src: Path, dst: Path, times: int) -> dict[str, int]:
    import pyarrow as pa
    import pyarrow.compute as pc

    from tracediff.runs import schema
    from tracediff.runs.runfile import Run, read_run, write_run

    run = read_run(src)
    lo, hi, max_corr = None, None, 0
    for name in schema.TABLES:
        t = run.table(name)
        if "start_ns" in t.column_names and t.num_rows:
            a, b = (
                pc.min(t["start_ns"]).as_py(),
                pc.max(pc.coalesce(t["end_ns"], t["start_ns"])).as_py(),
            )
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        if "correlation_id" in t.column_names and t.num_rows:
            max_corr = max(max_corr, pc.max(t["correlation_id"]).as_py() or 0)
    period = hi - lo + 1_000_000
    tables, rows = {}, {}
    for name in schema.TABLES:
        t = schema.conform(name, run.table(name))
        if name == "devices" or t.num_rows == 0:
            tables[name] = t
            rows[name] = t.num_rows
            continue
        copies = []
        for k in range(times):
            c = t
            for col in TIME_COLS:
                if col in c.column_names:
                    i = c.schema.get_field_index(col)
                    c = c.set_column(i, col, pc.add(c.column(col), k * period))
            if "correlation_id" in c.column_names:
                i = c.schema.get_field_index("correlation_id")
                c = c.set_column(
                    i, "correlation_id", pc.add(c.column("correlation_id"), k * (max_corr + 1))
                )
            copies.append(c)
        tables[name] = pa.concat_tables(copies).unify_dictionaries().combine_chunks()
        rows[name] = tables[name].num_rows
    meta = {**run.metadata, "label": f"{src.stem}_x{times}"}
    write_run(Run(tables=tables, metadata=meta, warnings=run.warnings), dst, force=True)
    return rows


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # not Linux: process-wide peak


def _reset_peak() -> None:
    # Writing 5 to clear_refs resets VmHWM (peak RSS) to the current RSS (Linux >= 4.0), so each
    # step's peak is its own, not the engine's that ran before it in the same process.
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


class _Step:
    def __init__(self, name: str, steps: list[dict]) -> None:
        self.name, self.steps, self.rec = name, steps, {"step": name}

    def __enter__(self) -> dict:
        _reset_peak()
        self.rec["start_kib"] = _status_kib("VmRSS")
        self.t0 = time.perf_counter()
        return self.rec

    def __exit__(self, *exc: object) -> None:
        self.rec["wall_s"] = time.perf_counter() - self.t0
        self.rec["peak_kib"] = _status_kib("VmHWM")
        self.steps.append(self.rec)


def _child(args: argparse.Namespace) -> int:
    """Run the measured steps in this (fresh) process and print them as JSON."""
    steps: list[dict] = []
    out = Path(args.out)
    if args.child == "export":
        from tracediff.export.parquet import export_runs

        with _Step("export --parquet (2 runs)", steps) as rec:
            info = export_runs([Path(p) for p in args.inputs], out, force=True)
        rec["rows"] = sum(v for k, v in info["tables"].items() if k != "runs")
        rec["output"] = str(out)
    elif args.child == "compare":
        from tracediff.engine.compare import compare
        from tracediff.parse import load

        with _Step("compare (engine, for reference)", steps):
            result = compare(load(Path(args.inputs[0])), load(Path(args.inputs[1])), n_boot=200)
        from tracediff.engine.result import ReplayInputs

        result = replace(result, replay_inputs=ReplayInputs())  # what-if's inputs, not exported
        # The exports are measured in a fresh process that only holds the result, so their peak
        # memory is theirs and not the allocator's leftovers from the engine.
        with open(out, "wb") as f:
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
    else:
        from tracediff.export.parquet import export_comparison
        from tracediff.export.perfetto import write_perfetto

        with open(args.inputs[0], "rb") as f:
            result = pickle.load(f)
        with _Step("compare --export", steps) as rec:
            info = export_comparison(result, out, force=True)
        rec["rows"] = sum(info["tables"].values())
        rec["output"] = str(out)
        trace = out.with_name(out.name + ".json.gz")
        with _Step("compare --perfetto (.json.gz)", steps) as rec:
            rec["rows"] = write_perfetto(result, trace, force=True)["slices"]
        rec["output"] = str(trace)
    print(json.dumps(steps))
    return 0


def _measure(step: str, inputs: list[Path], out: Path) -> list[dict]:
    cmd = [sys.executable, __file__, "--child", step, "--out", str(out), *map(str, inputs)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        sys.exit(f"bench: {step} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--times", type=int, default=500)
    ap.add_argument(
        "--workdir", type=Path, help="where to build the big runs (default: a temp folder)"
    )
    ap.add_argument(
        "--no-compare", action="store_true", help="skip the compare --export/--perfetto step"
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("inputs", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args)

    from tracediff.runs import schema
    from tracediff.runs.runfile import read_run

    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        big = []
        t0 = time.perf_counter()
        for name in ("g_good", "g_bad"):
            dst = work / f"{name}_x{args.times}.arrow"
            rows = replicate(ROOT / "samples" / f"{name}.arrow", dst, args.times)
            big.append(dst)
        print(
            f"built x{args.times} pair in {time.perf_counter() - t0:.1f} s: "
            f"{rows['kernels']:,} kernels, {sum(rows.values()):,} rows per run; "
            f"run files {big[0].stat().st_size / 2**20:.0f} + "
            f"{big[1].stat().st_size / 2**20:.0f} MiB",
            file=sys.stderr,
        )
        run = read_run(big[0])
        sizes = {n: run.table(n).nbytes for n in schema.TABLES}
        largest = max(sizes, key=lambda n: sizes[n])
        del run

        steps = _measure("export", big, work / "ds")
        if not args.no_compare:
            steps += _measure("compare", big, work / "result.pickle")
            steps += _measure("diff-export", [work / "result.pickle"], work / "diff")
        for st in steps:
            st["size"] = _size(Path(st["output"])) if "output" in st else None

    print(
        f"x{args.times} of samples/g_good.arrow + g_bad.arrow; decoded size of one big run: "
        f"{sum(sizes.values()) / 2**20:.0f} MiB in all, "
        f"largest table {largest} {sizes[largest] / 2**20:.0f} MiB"
    )
    mib = 1024
    print(
        f"{'step':<32} {'rows':>10} {'wall s':>7} {'rows/s':>10} {'RSS before':>10} "
        f"{'peak RSS':>9} {'added':>7} {'output':>8}"
    )
    for st in steps:
        rows_ = st.get("rows")
        rate = f"{rows_ / st['wall_s']:,.0f}" if rows_ else "-"
        size = "-" if st["size"] is None else f"{st['size'] / 2**20:.1f}"
        print(
            f"{st['step']:<32} {rows_ or 0:>10,} {st['wall_s']:>7.2f} {rate:>10} "
            f"{st['start_kib'] / mib:>10.0f} {st['peak_kib'] / mib:>9.0f} "
            f"{(st['peak_kib'] - st['start_kib']) / mib:>7.0f} {size:>8}"
        )
    print(
        "memory in MiB: RSS before the step, its peak RSS (VmHWM reset at the step's start), added"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("POLARS_MAX_THREADS", "2")  # CI-sized machine
    sys.exit(main())
