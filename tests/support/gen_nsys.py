"""Synthetic Nsight Systems SQLite exports with known, injected changes (tests and benchmarks).

    from tests.support.gen_nsys import write_report, SlowerKernel, AddedCopy, Straggler, HostGap
    truth = write_report(path, n_gpus=2, n_cycles=30, kernels_per_cycle=40,
                         changes=[SlowerKernel("flash_fwd_kernel", extra_ns=5_000)], seed=1)

    python -m tests.support.gen_nsys OUT.sqlite --gpus 8 --cycles 6250 --kernels 100 [--slower NAME:NS ...]

The tables are created with the real nsys 2024.2.3 DDL (tests/data/schemas/schema_2024.2_full.sql)
and filled the way nsys fills them: StringIds, CUPTI_ACTIVITY_KIND_KERNEL / _RUNTIME / _MEMCPY,
NVTX_EVENTS (one push/pop `cycle` range per cycle on each process's main thread, default domain),
TARGET_INFO_GPU, TARGET_INFO_SESSION_START_TIME, META_DATA_EXPORT and the two memcpy ENUM tables.

The model. One process per GPU (rank). Each cycle is the same sequence of `kernels_per_cycle`
GPU ops on stream 7; with 2+ GPUs every `allreduce_every`-th op is an NCCL all-reduce
(`ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)`, launched with cuLaunchKernelEx) that ends on
all ranks together, `transfer` after the last rank arrives, so early ranks wait. The host launches
ahead of the GPU (cudaLaunchKernel a constant lead before the kernel starts), except where a change
makes it late. Kernel durations carry multiplicative Gaussian noise, inter-op GPU gaps
uniform noise, all from `seed`, so two seeds are two runs of the same program.

Everything is computed with numpy over [ranks x cycles x ops] arrays, looping only over the
all-reduce barriers of one cycle; rows go to SQLite through executemany over array columns into
narrow temp tables, then one INSERT ... SELECT join per table adds the per-op constant columns.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DDL_PATH = Path(__file__).parents[1] / "data" / "schemas" / "schema_2024.2_full.sql"
TABLES = (
    "StringIds",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "NVTX_EVENTS",
    "TARGET_INFO_GPU",
    "META_DATA_EXPORT",
    "TARGET_INFO_SESSION_START_TIME",
    "ENUM_CUDA_MEMCPY_OPER",
    "ENUM_CUDA_MEM_KIND",
)

NCCL_NAME = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_SHORT = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
# (demangled name, short name, base duration ns, grid, block, registers)
# fmt: off
POOL: list[tuple[str, str, int, tuple[int, int, int], tuple[int, int, int], int]] = [
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
     "float, true>(int, float, const T1 *, const T1 *, const T1 *, float *, float *, T1 *)",
     "vectorized_layer_norm_kernel", 6_000, (8192, 1, 1), (128, 1, 1), 40),
    ("nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT", "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT",
     24_000, (132, 1, 1), (384, 1, 1), 168),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t>>, false, "
     "false, false, false, true, true, false>(Flash_fwd_params)",
     "flash_fwd_kernel", 40_000, (16, 32, 1), (128, 1, 1), 255),
    ("nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT", "nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT",
     18_000, (132, 1, 1), (384, 1, 1), 168),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::silu_kernel"
     "(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::[lambda() "
     "(instance 2)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)], "
     "std::array<char *, (unsigned long)2>>(int, T2, T3)",
     "vectorized_elementwise_kernel", 4_000, (1024, 1, 1), (128, 1, 1), 24),
    ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT",
     30_000, (132, 1, 1), (384, 1, 1), 168),
    ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::"
     "gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16>>(at::TensorIteratorBase "
     "&, const T1 &)::[lambda(int) (instance 1)]>(int, T3)",
     "elementwise_kernel", 3_000, (512, 1, 1), (128, 1, 1), 30),
]
# fmt: on
COPY_KIND_DTOD, MEM_KIND_DEVICE = 8, 2  # ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND (2024.2)
STREAM, CONTEXT, VM = 7, 1, 1
API_KERNEL, API_NCCL, API_COPY = (
    "cudaLaunchKernel_v7000",
    "cuLaunchKernelEx",
    "cudaMemcpyAsync_v3020",
)
API_NS, LEAD_NS, LATE_NS = 2_500, 20_000, 1_000  # launch call length; launch-ahead; late launch
GAP_NS, GAP_JITTER_NS, INTER_CYCLE_NS, TRANSFER_NS = 1_500, 500, 30_000, 12_000
T0_NS = 500_000_000  # first cycle starts 0.5 s into the session
UTC_EPOCH_NS = 1_795_944_758_163_619_579


@dataclass(frozen=True)
class SlowerKernel:
    """Every instance of the pool kernel whose short name is `name` runs `extra_ns` longer."""

    name: str
    extra_ns: int


@dataclass(frozen=True)
class AddedCopy:
    """A device-to-device cudaMemcpyAsync launched after op `after_op` of every cycle."""

    after_op: int = 3
    duration_ns: int = 8_000
    nbytes: int = 1 << 20


@dataclass(frozen=True)
class Straggler:
    """Rank `rank`'s host launches every all-reduce `late_ns` late, so the other ranks wait."""

    rank: int
    late_ns: int


@dataclass(frozen=True)
class SlowerCollective:
    """Every all-reduce's transfer (after the last rank arrives) takes `extra_ns` longer."""

    extra_ns: int


@dataclass(frozen=True)
class HostGap:
    """The host stalls `gap_ns` before launching op `before_op` of every cycle (all ranks)."""

    before_op: int
    gap_ns: int


Change = SlowerKernel | AddedCopy | Straggler | HostGap | SlowerCollective


@dataclass
class Truth:
    """What was written: enough for a test to compute the expected answer itself."""

    path: Path
    n_gpus: int
    n_cycles: int
    ops_per_cycle: int  # GPU ops per cycle per rank, including all-reduces and added copies
    kernels: int  # kernel rows (all ranks)
    memcpys: int
    op_names: list[str]  # the per-cycle op sequence
    count_per_cycle: dict[str, int]  # short name -> instances per cycle per rank
    allreduces_per_cycle: int
    changes: list[Change] = field(default_factory=list)
    cycle_span_ns: np.ndarray | None = None  # [ranks x cycles] GPU span of each cycle
    durations_ns: np.ndarray | None = None  # [ranks x cycles x ops] each op's duration


def pool_name(short: str) -> str:
    for name, s, *_ in POOL:
        if s == short:
            return name
    if short == NCCL_SHORT:
        return NCCL_NAME
    raise KeyError(f"no pool kernel with short name {short!r}")


def _ddl() -> dict[str, str]:
    text = DDL_PATH.read_text()
    out = {}
    for m in re.finditer(r"CREATE TABLE (\w+) \(.*?\n\);", text, re.S):
        out[m.group(1)] = re.sub(r"--[^\n]*", "", m.group(0))
    return out


def _sequence(n_gpus: int, k: int, every: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cycle op codes: index into POOL, or -1 for an all-reduce. Also the pool durations."""
    idx = np.arange(k)
    codes = idx % len(POOL)
    if n_gpus > 1:
        codes = np.where(idx % every == every - 1, -1, codes)
    base = np.array([POOL[c][2] if c >= 0 else 0 for c in codes], dtype=np.float64)
    return codes, base


@dataclass
class Timeline:
    """The simulated job (`simulate`): per rank x cycle x op, int64 ns on the session's clock."""

    codes: np.ndarray  # [M] index into POOL, -1 an all-reduce, -2 an added copy
    kinds: np.ndarray  # [M] 0 kernel, 1 all-reduce, 2 copy
    copies: list[AddedCopy]
    start: np.ndarray  # [R, C, M] GPU start
    end: np.ndarray  # [R, C, M] GPU end
    api_start: np.ndarray  # [R, C, M] the launch call's start
    api_end: np.ndarray
    rng_start: np.ndarray  # [R, C] the `cycle` range
    rng_end: np.ndarray
    span: np.ndarray  # [R, C] GPU span of each cycle


def simulate(
    n_gpus: int = 1,
    n_cycles: int = 20,
    kernels_per_cycle: int = 40,
    changes: Sequence[Change] = (),
    *,
    seed: int = 0,
    allreduce_every: int = 8,
    noise: float = 0.02,
) -> Timeline:
    """The model of the module docstring, every number drawn from `seed` (no file written)."""
    rng = np.random.default_rng(seed)
    R, C = n_gpus, n_cycles
    codes, base = _sequence(n_gpus, kernels_per_cycle, allreduce_every)
    kinds = np.where(codes >= 0, 0, 1)  # 0 kernel, 1 all-reduce, 2 copy
    extra = np.zeros(len(codes))
    host_gap = np.zeros(len(codes))
    straggle = np.zeros(R)
    transfer_ns = float(TRANSFER_NS)
    for ch in changes:
        if isinstance(ch, SlowerCollective):
            transfer_ns += ch.extra_ns
        if isinstance(ch, SlowerKernel):
            hit = np.array([c >= 0 and POOL[c][1] == ch.name for c in codes])
            if not hit.any():
                raise ValueError(f"SlowerKernel: no kernel {ch.name!r} in the cycle")
            extra[hit] += ch.extra_ns
        elif isinstance(ch, HostGap):
            if not 1 <= ch.before_op < len(codes):  # op 0's idle is the cycle start, not a gap
                raise ValueError(f"HostGap: before_op must be in 1..{len(codes) - 1}")
            host_gap[ch.before_op] += ch.gap_ns
        elif isinstance(ch, Straggler):
            if n_gpus < 2 or not 0 <= ch.rank < n_gpus:
                raise ValueError(f"Straggler: rank must be in 0..{n_gpus - 1} of 2+ GPUs")
            straggle[ch.rank] += ch.late_ns
    copies = [ch for ch in changes if isinstance(ch, AddedCopy)]
    for ch in sorted(copies, key=lambda c: -c.after_op):
        at = ch.after_op + 1
        codes = np.insert(codes, at, -2)
        kinds = np.insert(kinds, at, 2)
        base = np.insert(base, at, ch.duration_ns)
        extra, host_gap = np.insert(extra, at, 0), np.insert(host_gap, at, 0)
    M = len(codes)
    is_ar = kinds == 1

    # durations [R, C, M] and the GPU idle before each op
    dur = base * (1 + noise * rng.standard_normal((R, C, M))) + extra
    dur = np.maximum(dur, 1_000).round()
    gap = GAP_NS + rng.integers(0, GAP_JITTER_NS, (R, C, M)).astype(np.float64) + host_gap
    late = np.zeros((R, C, M), dtype=bool)
    late[:, :, host_gap > 0] = True
    gap[:, :, is_ar] += straggle[:, None, None]
    late[:, :, is_ar] |= (straggle > 0)[:, None, None]
    gap[:, :, 0] = rng.integers(0, 2_000, (R, C))  # ranks start a cycle a little apart

    # relative times within each cycle: cumsum between all-reduce barriers, max over ranks at each
    start = np.zeros((R, C, M))
    end = np.zeros((R, C, M))
    t = np.zeros((R, C))
    bounds = [*np.flatnonzero(is_ar), M]
    lo = 0
    for b in bounds:
        seg = slice(lo, b)
        step = np.cumsum(gap[:, :, seg] + dur[:, :, seg], axis=2)
        end[:, :, seg] = t[:, :, None] + step
        start[:, :, seg] = end[:, :, seg] - dur[:, :, seg]
        t = end[:, :, b - 1] if b > lo else t
        if b < M:  # the all-reduce: arrive, wait for the last rank, transfer, end together
            arrive = t + gap[:, :, b]
            done = arrive.max(axis=0) + transfer_ns * (1 + noise * rng.standard_normal(C))
            fin = done[None, :] + rng.integers(0, 300, (R, C))
            start[:, :, b], end[:, :, b] = arrive, fin
            dur[:, :, b] = fin - arrive
            t = fin
        lo = b + 1
    span = end.max(axis=2) - start[:, :, 0]
    period = end.max(axis=(0, 2)) + INTER_CYCLE_NS
    c0 = T0_NS + np.concatenate([[0.0], np.cumsum(period)[:-1]])
    start = (start + c0[None, :, None]).astype(np.int64)
    end = (end + c0[None, :, None]).astype(np.int64)

    # host launch calls: a constant lead ahead of the GPU, or just in time where the host is late;
    # a late launch pushes the following launches of that cycle back (one thread, in order)
    steady = (c0[None, :, None] - LEAD_NS + np.arange(M)[None, None, :] * 4_000).astype(np.int64)
    steady = np.broadcast_to(steady, (R, C, M))
    jit = np.where(late, start - API_NS - LATE_NS, steady)
    ramp = np.arange(M, dtype=np.int64)[None, None, :] * 4_000
    api_start = np.maximum.accumulate(jit - ramp, axis=2) + ramp
    api_start = np.minimum(api_start, start - API_NS)  # never after the GPU started it
    api_end = api_start + API_NS
    rng_start = api_start[:, :, 0] - 2_000
    rng_end = api_end[:, :, -1] + 2_000

    return Timeline(codes, kinds, copies, start, end, api_start, api_end, rng_start, rng_end, span)


def write_report(
    path: Path,
    n_gpus: int = 1,
    n_cycles: int = 20,
    kernels_per_cycle: int = 40,
    changes: Sequence[Change] = (),
    *,
    seed: int = 0,
    allreduce_every: int = 8,
    noise: float = 0.02,
) -> Truth:
    """Write one synthetic nsys SQLite export to `path` (overwritten). Returns what it holds."""
    path = Path(path)
    t = simulate(
        n_gpus, n_cycles, kernels_per_cycle, changes,
        seed=seed, allreduce_every=allreduce_every, noise=noise,
    )  # fmt: skip
    R, C, M = t.start.shape
    codes, kinds, start, end, copies = t.codes, t.kinds, t.start, t.end, t.copies
    is_ar = kinds == 1
    _write(
        path, R, C, M, codes, kinds, start, end, t.api_start, t.api_end, t.rng_start, t.rng_end,
        copies,
    )  # fmt: skip
    names = [NCCL_NAME if c == -1 else "Memcpy DtoD" if c == -2 else POOL[c][0] for c in codes]
    shorts = [NCCL_SHORT if c == -1 else "Memcpy DtoD" if c == -2 else POOL[c][1] for c in codes]
    counts: dict[str, int] = {}
    for s in shorts:
        counts[s] = counts.get(s, 0) + 1
    return Truth(
        path=path,
        n_gpus=R,
        n_cycles=C,
        ops_per_cycle=M,
        kernels=int(R * C * int((kinds != 2).sum())),
        memcpys=int(R * C * int((kinds == 2).sum())),
        op_names=names,
        count_per_cycle=counts,
        allreduces_per_cycle=int(is_ar.sum()),
        changes=list(changes),
        cycle_span_ns=t.span,
        durations_ns=(end - start),
    )


def _write(path, R, C, M, codes, kinds, start, end, api_start, api_end, rng_start, rng_end, copies):  # noqa: ANN001
    if path.exists():
        path.unlink()
    ddl = _ddl()
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    for t in TABLES:
        con.execute(ddl[t])
    strings = [NCCL_NAME, NCCL_SHORT, API_KERNEL, API_NCCL, API_COPY, "cycle"]
    for name, short, *_ in POOL:
        strings += [name, short]
    sid = {s: i + 1 for i, s in enumerate(dict.fromkeys(strings))}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in sid.items()])

    # per-op constants, joined in SQL
    con.execute(
        "CREATE TEMP TABLE ops (op INTEGER PRIMARY KEY, kind INTEGER, dn INTEGER, sn INTEGER, "
        "api INTEGER, cls INTEGER, regs INTEGER, gx INTEGER, gy INTEGER, gz INTEGER, "
        "bx INTEGER, by INTEGER, bz INTEGER, nbytes INTEGER)"
    )
    rows = []
    copy_bytes = [c.nbytes for c in sorted(copies, key=lambda c: c.after_op)]
    nccl = (sid[NCCL_NAME], sid[NCCL_SHORT], sid[API_NCCL], 1, 96, 2, 1, 1, 640, 1, 1, None)
    for m, c in enumerate(codes):
        if c == -1:
            rows.append((m, 1, *nccl))
        elif c == -2:
            rows.append((m, 2, None, None, sid[API_COPY], 0, *[None] * 7, copy_bytes.pop(0)))
        else:
            name, short, _, g, b, regs = POOL[c]
            rows.append((m, 0, sid[name], sid[short], sid[API_KERNEL], 0, regs, *g, *b, None))
    con.executemany("INSERT INTO ops VALUES (" + ",".join("?" * 14) + ")", rows)

    pids = 4000 + 16 * np.arange(R, dtype=np.int64)
    gpid = (VM << 48) | (pids << 24)
    gtid = gpid | pids  # main thread tid == pid
    n = R * C * M
    op = np.broadcast_to(np.arange(M, dtype=np.int64), (R, C, M)).ravel()
    dev = np.broadcast_to(np.arange(R, dtype=np.int64)[:, None, None], (R, C, M)).ravel()
    corr = np.broadcast_to(
        np.arange(C * M, dtype=np.int64).reshape(1, C, M) + 100, (R, C, M)
    ).ravel()
    order = np.argsort(start.ravel(), kind="stable")  # rows in GPU time order, as nsys writes them
    cols = [
        c[order]
        for c in (start.ravel(), end.ravel(), dev, corr, op, api_start.ravel(), api_end.ravel())
    ]
    con.execute(
        "CREATE TEMP TABLE ev (s INTEGER, e INTEGER, dev INTEGER, corr INTEGER, op INTEGER, "
        "a0 INTEGER, a1 INTEGER)"
    )
    chunk = 1 << 20
    for lo in range(0, n, chunk):
        part = [c[lo : lo + chunk].tolist() for c in cols]
        con.executemany("INSERT INTO ev VALUES (?,?,?,?,?,?,?)", zip(*part, strict=True))
    gp = ", ".join(f"({d}, {int(gpid[d])}, {int(gtid[d])})" for d in range(R))
    con.execute("CREATE TEMP TABLE pr (dev INTEGER PRIMARY KEY, gpid INTEGER, gtid INTEGER)")
    con.execute(f"INSERT INTO pr VALUES {gp}")
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, "
        "streamId, correlationId, globalPid, demangledName, shortName, mangledName, launchType, "
        "cacheConfig, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
        "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, "
        "sharedMemoryExecuted, graphNodeId, sharedMemoryLimitConfig) "
        f"SELECT ev.s, ev.e, ev.dev, {CONTEXT}, 0, {STREAM}, ev.corr, pr.gpid, o.dn, o.sn, NULL, "
        "0, 0, o.regs, o.gx, o.gy, o.gz, o.bx, o.by, o.bz, 0, 0, 0, 250871808, ev.rowid, 0, "
        "NULL, 0 "
        "FROM ev JOIN ops o ON o.op = ev.op JOIN pr ON pr.dev = ev.dev WHERE o.kind IN (0, 1)"
    )
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, greenContextId, "
        "streamId, correlationId, globalPid, bytes, copyKind, srcKind, dstKind, srcDeviceId, "
        "dstDeviceId) "
        f"SELECT ev.s, ev.e, ev.dev, {CONTEXT}, 0, {STREAM}, ev.corr, pr.gpid, o.nbytes, "
        f"{COPY_KIND_DTOD}, {MEM_KIND_DEVICE}, {MEM_KIND_DEVICE}, ev.dev, ev.dev "
        "FROM ev JOIN ops o ON o.op = ev.op JOIN pr ON pr.dev = ev.dev WHERE o.kind = 2"
    )
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, "
        "correlationId, nameId, returnValue, callchainId) "
        "SELECT ev.a0, ev.a1, o.cls, pr.gtid, ev.corr, o.api, 0, NULL "
        "FROM ev JOIN ops o ON o.op = ev.op JOIN pr ON pr.dev = ev.dev"
    )
    # one push/pop `cycle` range per cycle and rank (eventType 59, default domain 0)
    rs, re_ = rng_start.ravel().tolist(), rng_end.ravel().tolist()
    tids = np.repeat(gtid, C).tolist()
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
        "VALUES (?, ?, 59, 'cycle', ?, 0)",
        zip(rs, re_, tids, strict=True),
    )
    con.executemany(
        "INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, totalMemory, clockRate, "
        "smCount, uuid, chipName, cuDevice, computeMajor, computeMinor) "
        "VALUES (?, ?, 'NVIDIA H200', ?, 150109880320, 1980000000, 132, ?, 'GH100', ?, 9, 0)",
        [
            (VM << 48, d, f"0000:{0x18 + d:02x}:00.0", f"00000000-0000-4000-8000-{d:012x}", d)
            for d in range(R)
        ],
    )
    meta = {
        "EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems",
        "EXPORT_PRODUCT_VERSION": "2024.2.3.38",
        "EXPORT_SCHEMA_VERSION": "3.11.1",
        "EXPORT_SCHEMA_VERSION_MAJOR": "3",
        "EXPORT_SCHEMA_VERSION_MINOR": "11",
        "EXPORT_SCHEMA_VERSION_MICRO": "1",
        "EXPORT_PARAM_INPUT_FILE": "tests/support/gen_nsys.py",
        "EXPORT_PARAM_OUTUPT_FILE": path.name,
    }
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", list(meta.items()))
    con.execute(
        "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '2026-11-29T09:32:38', "
        "'2026-11-29T09:32:38')",
        (UTC_EPOCH_NS,),
    )
    # the two ENUM tables the reader joins, with nsys 2024.2.3's rows
    opers = "UNKNOWN HTOD DTOH HTOA ATOH ATOA ATOD DTOA DTOD HTOH PTOP".split()
    labels = (
        "Unknown,Host-to-Device,Device-to-Host,Host-to-Array,Array-to-Host,Array-to-Array,"
        "Array-to-Device,Device-to-Array,Device-to-Device,Host-to-Host,Peer-to-Peer"
    ).split(",")
    con.executemany(
        "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)",
        [
            (i, f"CUDA_MEMCPY_KIND_{k}", v)
            for i, (k, v) in enumerate(zip(opers, labels, strict=True))
        ],
    )
    mem = "Pageable,Pinned,Device,Array,Managed,Device Static,Managed Static,Unknown".split(",")
    con.executemany(
        "INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)",
        [
            (i, "CUDA_MEMOPR_MEMORY_KIND_" + m.upper().replace(" ", "_"), m)
            for i, m in enumerate(mem)
        ],
    )
    con.commit()
    con.close()


def _change(spec: str, kind: str) -> Change:
    a, _, b = spec.partition(":")
    if kind == "slower":
        return SlowerKernel(a, int(b))
    if kind == "straggler":
        return Straggler(int(a), int(b))
    if kind == "host-gap":
        return HostGap(int(a), int(b))
    return AddedCopy(after_op=int(a), duration_ns=int(b or 8_000))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("output", type=Path)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--kernels", type=int, default=40, help="GPU ops per cycle per rank")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slower", action="append", default=[], metavar="SHORTNAME:NS")
    ap.add_argument("--straggler", action="append", default=[], metavar="RANK:NS")
    ap.add_argument("--host-gap", action="append", default=[], metavar="OP:NS")
    ap.add_argument("--added-copy", action="append", default=[], metavar="AFTER_OP[:NS]")
    args = ap.parse_args(argv)
    changes = [_change(s, "slower") for s in args.slower] + [
        _change(s, "straggler") for s in args.straggler
    ]
    changes += [_change(s, "host-gap") for s in args.host_gap] + [
        _change(s, "copy") for s in args.added_copy
    ]
    t0 = time.perf_counter()
    truth = write_report(args.output, args.gpus, args.cycles, args.kernels, changes, seed=args.seed)
    dt = time.perf_counter() - t0
    print(
        f"{args.output}: {truth.kernels:,} kernels, {truth.memcpys:,} copies, {args.gpus} GPU(s), "
        f"{args.cycles} cycles in {dt:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
