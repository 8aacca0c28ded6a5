"""Issue 21's measurement: two generated N-node jobs of one Kineto trace per rank, compared on 2
Dask workers with a per-worker memory limit, and in-process for contrast.

    bench/dask_ranks.py [--work /tmp/bench21] [--nodes 64] [--gpus-per-node 8] [--cycles 500]
                        [--kernels 100] [--memory-limit 2GiB] [--inproc-cap 12] [--no-inproc]
    bench/dask_ranks.py --before REV --nodes 8,16 --cycles 200 --rounds 2 [--memory-limit 1GiB]

Inputs (built once into --work by tests/support/gen_kineto_ranks.py, not timed): base and head, each
nodes x gpus-per-node rank traces (`{host}_{pid}.{ms}.pt.trace.json.gz`, cycles x kernels GPU ops
a rank, every 8th an all-reduce), every host's clock off by up to 5 ms; head injects a straggler
(rank `--straggler` launches every all-reduce LATE_NS late) and a slower collective (every
all-reduce's transfer SLOWER_NS longer). The defaults are the issue's size: 512 files a side of
50,000 kernels (25.6 M kernels a side). `--nodes 8` is the scaled run (about a minute).

Measured, each a child process (`tracediff compare BASE HEAD --layout ranks --format json`):
with `--scheduler local:2 --memory-limit M` (a LocalCluster: the driver and two worker
processes, each under a nanny that restarts it past M), and without (in-process, its read pool
included). Every 0.1 s the child's process tree is read from /proc: each process's VmHWM (the
kernel's own peak-RSS mark, so a peak between two samples is not missed; a process's last
growth before it exits can be) and the tree's summed RSS. The child's `os.wait4` gives its CPU
time (user + system, with its waited-for children) and ru_maxrss (the largest single process).
The in-process compare is stopped when its tree's RSS passes `--inproc-cap` GB (this machine is
shared): its peak is then reported as "> cap". Prints a markdown table, whether both JSON reports
are equal, and the injected changes against what the compare found.

`--before REV` (the driver's memory against an older commit): only the `--scheduler` compare, of
this checkout (or of `--after REV2`) and of the package at git revision REV (each extracted to a
temporary folder, this checkout's built C modules copied in, run with that folder first on the
path), in `--rounds`
interleaved rounds at each size of `--nodes` (a comma list); a table per size and round, whether
every JSON report is the same, and per commit the driver's and the workers' peak growth per rank
file between the smallest and the largest size (medians of the rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from revision import extract  # noqa: E402

from tests.support.gen_kineto_ranks import write_job  # noqa: E402
from tests.support.gen_nsys import SlowerCollective, Straggler  # noqa: E402

LATE_NS, SLOWER_NS = 30_000, 20_000
MIB = 1 << 20


@dataclass
class Measured:
    wall_s: float
    cpu_s: float
    rc: int
    out: str
    err: str
    maxrss_mib: float  # wait4: the largest single process
    driver_mib: float = 0.0  # the child's own VmHWM
    others: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid: (cmd, VmHWM MiB)
    tree_mib: float = 0.0  # the tree's summed RSS, peak
    capped: bool = False


def _hwm_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _role(p: psutil.Process) -> str:
    try:
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        return "?"
    if "resource_tracker" in cmd:
        return "resource tracker"
    if "forkserver" in cmd:
        return "forkserver"
    return "worker" if "spawn_main" in cmd or "multiprocessing" in cmd else cmd[:60]


def measure(
    cmd: list[str], cap_gb: float | None = None, timeout_s: float = 7200, tree: Path | None = None
) -> Measured:
    """Run `cmd`, sampling its process tree (module doc); stop it past `cap_gb` of tree RSS.
    `tree`: a folder holding another commit's package, run instead of this checkout's."""
    t0 = time.perf_counter()
    env = None if tree is None else os.environ | {"PYTHONPATH": str(tree)}
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        cwd=tree, env=env,
    )  # fmt: skip
    m = Measured(0.0, 0.0, 0, "", "", 0.0)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                root = psutil.Process(p.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                procs = []
            tree = 0
            for k in procs:
                try:
                    tree += k.memory_info().rss
                except psutil.Error:  # one that just exited
                    continue
                hwm = _hwm_mib(k.pid)
                if k.pid == p.pid:
                    m.driver_mib = max(m.driver_mib, hwm)
                elif hwm:
                    role = m.others[k.pid][0] if k.pid in m.others else _role(k)
                    m.others[k.pid] = (role, max(hwm, m.others.get(k.pid, ("", 0.0))[1]))
            m.tree_mib = max(m.tree_mib, tree / MIB)
            if (cap_gb and tree > cap_gb * 1e9) or time.perf_counter() - t0 > timeout_s:
                m.capped = True
                os.killpg(p.pid, signal.SIGKILL)
                return
            done.wait(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    outs: dict[str, bytes] = {}

    def drain(name: str, stream: object) -> None:
        outs[name] = stream.read()  # type: ignore[attr-defined]

    readers = [
        threading.Thread(target=drain, args=(n, s)) for n, s in (("o", p.stdout), ("e", p.stderr))
    ]
    for r in readers:
        r.start()
    _, status, ru = os.wait4(p.pid, 0)
    done.set()
    th.join()
    for r in readers:
        r.join()
    try:  # a worker left behind by a killed driver
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    m.wall_s = time.perf_counter() - t0
    m.cpu_s = ru.ru_utime + ru.ru_stime
    m.rc = os.waitstatus_to_exitcode(status)
    m.maxrss_mib = ru.ru_maxrss / 1024
    m.out, m.err = outs.get("o", b"").decode(), outs.get("e", b"").decode(errors="replace")
    return m


def workers_of(m: Measured) -> list[float]:
    return sorted((v for r, v in m.others.values() if r == "worker"), reverse=True)


def before(a: argparse.Namespace, sizes: list[int]) -> int:
    """`--before REV` (module doc)."""
    got: dict[tuple[str, int], list[Measured]] = {}
    files: dict[int, int] = {}
    outs: dict[int, set[str]] = {}  # per size: the JSON reports
    with tempfile.TemporaryDirectory(prefix="dask_ranks_before_") as tmp:
        extract(a.before, Path(tmp) / "before")
        trees: dict[str, Path | None] = {"this checkout": None, a.before: Path(tmp) / "before"}
        if a.after:
            extract(a.after, Path(tmp) / "after")
            trees = {a.after: Path(tmp) / "after", a.before: Path(tmp) / "before"}
        print(f"start: load {os.getloadavg()}", flush=True)
        given = a.straggler
        for n in sizes:
            a.nodes, a.straggler = n, given
            straggler(a)
            base, head, truth = build(a)
            files[n] = int(truth["files"])
            cmd = [
                sys.executable, "-m", "tracediff", "compare", str(base), str(head), "--layout",
                "ranks", "--format", "json", "--bootstrap", str(a.bootstrap), "--scheduler",
                "local:2", "--memory-limit", a.memory_limit,
            ]  # fmt: skip
            for r in range(a.rounds):
                order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
                for name, tree in order:
                    m = measure(cmd, tree=tree)
                    got.setdefault((name, n), []).append(m)
                    if m.rc == 0:
                        outs.setdefault(n, set()).add(m.out)
                    wk = ", ".join(f"{v:.0f}" for v in workers_of(m))
                    print(f"| {files[n]} files a side | round {r + 1} | {name} | {m.wall_s:.1f} | "
                          f"{m.cpu_s:.1f} | {m.driver_mib:.0f} | {wk} | {m.rc} | "
                          f"{os.getloadavg()[0]:.1f} |", flush=True)  # fmt: skip
                    if m.rc != 0:
                        print(m.err[-1500:])
    same = all(len(v) == 1 for v in outs.values()) and len(outs) == len(sizes)
    print(f"\nend: load {os.getloadavg()}; each size's JSON reports all the same: {same}")
    lo, hi = min(sizes), max(sizes)
    for name in trees if hi > lo else ():
        drv = {n: statistics.median(m.driver_mib for m in got[name, n]) for n in (lo, hi)}
        wk = {n: statistics.median(max(workers_of(m), default=0) for m in got[name, n])
              for n in (lo, hi)}  # fmt: skip
        per = (files[hi] - files[lo]) * 2  # both sides' files
        print(f"{name}: driver {drv[lo]:.0f} -> {drv[hi]:.0f} MiB "
              f"({(drv[hi] - drv[lo]) / per * 1024:.0f} KiB per rank file), largest worker "
              f"{wk[lo]:.0f} -> {wk[hi]:.0f} MiB ({(wk[hi] - wk[lo]) / per * 1024:.0f} KiB per "
              "rank file)")  # fmt: skip
    return 0 if same else 1


def straggler(a: argparse.Namespace) -> None:
    """`--straggler`, or a rank of a middle node of `a.nodes`."""
    ranks = a.nodes * a.gpus_per_node
    if a.straggler is None:
        a.straggler = (a.nodes // 2 + 1) * a.gpus_per_node + 5 if a.nodes > 1 else 1
    if not 0 <= a.straggler < ranks:
        raise SystemExit(f"--straggler {a.straggler}: give a rank in 0..{ranks - 1}")


def build(a: argparse.Namespace) -> tuple[Path, Path, dict[str, object]]:
    w = a.work / f"n{a.nodes}g{a.gpus_per_node}c{a.cycles}k{a.kernels}"
    info = w / "truth.json"
    if info.exists():
        return w / "base", w / "head", json.loads(info.read_text())
    t0 = time.perf_counter()
    tb = write_job(w / "base", a.nodes, a.gpus_per_node, a.cycles, a.kernels, seed=1, jobs=a.jobs)
    changes = [Straggler(a.straggler, LATE_NS), SlowerCollective(SLOWER_NS)]
    th = write_job(
        w / "head", a.nodes, a.gpus_per_node, a.cycles, a.kernels, changes, seed=2, jobs=a.jobs
    )
    truth = {
        "build_s": time.perf_counter() - t0,
        "files": tb.ranks,
        "kernels_per_file": tb.kernels_per_rank,
        "allreduces_per_cycle": tb.allreduces_per_cycle,
        "bytes": tb.bytes + th.bytes,
        "period_delta_ms": (th.cycle_period_ns - tb.cycle_period_ns) / 1e6,
        "straggler": a.straggler,
        "hosts": len(tb.hosts),
    }
    info.write_text(json.dumps(truth))
    return w / "base", w / "head", truth


def found(j: dict, truth: dict) -> list[str]:  # type: ignore[type-arg]
    """The injected changes against the compare's rows (summed over GPUs) and its collectives."""
    n_ar = int(truth["allreduces_per_cycle"])
    rows = {r["name"]: r for r in j.get("across_gpus") or []}

    def row(part: str) -> float:
        return sum(r["delta_ms_per_cycle"] for n, r in rows.items() if part in n)

    wait, idle = row("[wait for last rank]"), row("idle: host-bound")
    transfer = row("[transfer]")
    d = j["delta_ms_per_cycle"]
    coll = j.get("collectives") or []
    least = min(coll, key=lambda c: c["head_wait_ms_per_cycle"]) if coll else None
    rank_of = {
        int(r["head"]["device_id"]): r["head"].get("rank")
        for r in j.get("device_map") or []
        if isinstance(r, dict) and r.get("head")
    }
    lines = [
        f"cycle time: {d['mean']:+.3f} ms/cycle (CI {d['ci95'][0]:+.3f}..{d['ci95'][1]:+.3f}, "
        f"significant {d['significant']}); the generated timelines' period changed "
        f"{truth['period_delta_ms']:+.3f} ms",
        f"slower collective: [transfer] {transfer:+.3f} ms/cycle; injected {n_ar} x "
        f"{SLOWER_NS / 1e6:.3f} = {n_ar * SLOWER_NS / 1e6:+.3f}",
        f"straggler: [wait for last rank] {wait:+.3f} + host-bound idle {idle:+.3f} = "
        f"{wait + idle:+.3f} ms/cycle; injected {n_ar} x {LATE_NS / 1e6:.3f} = "
        f"{n_ar * LATE_NS / 1e6:+.3f} late, of which the period grew "
        f"{truth['period_delta_ms'] - n_ar * SLOWER_NS / 1e6:+.3f} (base's own last rank already "
        "arrived later than the rest)",
    ]
    if least is not None:
        dev = int(least["device"])
        lines.append(
            f"least head wait: GPU {dev} (rank {rank_of.get(dev, '?')}), "
            f"{least['head_wait_ms_per_cycle']:.4f} ms/cycle; injected rank {truth['straggler']}"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench21"))
    ap.add_argument("--nodes", default="64", help="nodes a side; with --before, a comma list")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=500)
    ap.add_argument("--kernels", type=int, default=100, help="GPU ops per cycle per rank")
    ap.add_argument("--straggler", type=int, help="default: a rank of a middle node")
    ap.add_argument("--memory-limit", default="2GiB")
    ap.add_argument("--inproc-cap", type=float, default=12.0, help="GB of tree RSS")
    ap.add_argument("--no-inproc", action="store_true")
    ap.add_argument("--no-dask", action="store_true", help="the in-process compare only")
    ap.add_argument("--build-only", action="store_true", help="write the traces, measure nothing")
    ap.add_argument("--jobs", type=int, default=2, help="processes writing the traces")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--before", help="git revision: the driver's memory against it (module doc)")
    ap.add_argument("--rounds", type=int, default=2, help="with --before: interleaved rounds")
    ap.add_argument("--after", help="with --before: this revision instead of this checkout")
    a = ap.parse_args()
    sizes = [int(x) for x in str(a.nodes).split(",")]
    a.nodes = sizes[-1]
    if a.before:
        return before(a, sizes)
    straggler(a)
    base, head, truth = build(a)
    if a.build_only:
        print(f"built {base.parent} in {float(truth['build_s']):.0f} s")
        return 0
    cmd = [
        sys.executable, "-m", "tracediff", "compare", str(base), str(head), "--layout", "ranks",
        "--format", "json", "--bootstrap", str(a.bootstrap),
    ]  # fmt: skip
    print(
        f"{truth['files']} files a side ({truth['hosts']} hosts x {a.gpus_per_node} GPUs), "
        f"{truth['kernels_per_file']} kernels a file ({a.cycles} cycles x {a.kernels} ops), "
        f"{int(truth['files']) * int(truth['kernels_per_file']) / 1e6:.1f} M kernels a side; "
        f"{int(truth['bytes']) / 1e9:.2f} GB of .json.gz both sides (built in "
        f"{float(truth['build_s']):.0f} s)"
    )
    print(
        f"start: load {os.getloadavg()}, {psutil.virtual_memory().available / 2**30:.1f} GiB free"
    )
    dist = None
    if not a.no_dask:
        dist = measure([*cmd, "--scheduler", "local:2", "--memory-limit", a.memory_limit])
        print(f"after --scheduler: load {os.getloadavg()}", flush=True)
    inproc = None if a.no_inproc else measure(cmd, cap_gb=a.inproc_cap)
    print(f"end: {os.cpu_count()} CPUs, load {os.getloadavg()}\n")
    print("| compare | wall s | CPU s | driver peak MiB | worker peaks MiB | tree peak MiB | rc |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for label, m in ((f"--scheduler local:2 --memory-limit {a.memory_limit}", dist),
                     ("in-process", inproc)):  # fmt: skip
        if m is None:
            continue
        wk = ", ".join(f"{v:.0f}" for v in workers_of(m)) or "-"
        tree = f"> {a.inproc_cap * 1e9 / MIB:.0f} (stopped)" if m.capped else f"{m.tree_mib:.0f}"
        print(f"| {label} | {m.wall_s:.1f} | {m.cpu_s:.1f} | {m.driver_mib:.0f} | {wk} | {tree} "
              f"| {m.rc} |")  # fmt: skip
    print()
    for label, m in (("--scheduler", dist), ("in-process", inproc)):
        if m is None:
            continue
        print(f"{label}: wait4 ru_maxrss (largest process) {m.maxrss_mib:.0f} MiB")
        if m.rc != 0 and not m.capped:
            print(f"{label} failed: {m.err[-1500:]}")
    if dist is not None:
        n_workers = sum(r == "worker" for r, _ in dist.others.values())
        print(f"--scheduler: {n_workers} worker processes seen (2 started; more: a nanny "
              "restarted one past its limit)")  # fmt: skip
        others = {r for r, _ in dist.others.values() if r != "worker"}
        if others:
            print(f"other processes of the --scheduler tree: {sorted(others)}")
    if dist is not None and inproc is not None and dist.rc == inproc.rc == 0:
        print(f"same JSON: {inproc.out == dist.out}")
    done = [m for m in (dist, inproc) if m is not None and m.rc == 0]
    if not done:
        return 1
    print()
    for line in found(json.loads(done[0].out), truth):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
