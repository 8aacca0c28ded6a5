"""What a run *is*, read from its trace: its identity, kept in the run file.

Stage: parse (in `load`, right after a reader: the same pass, from the tables just read). Input:
a `Run` (its tables, the reader's metadata and the capture manifest where one is beside it);
output: a plain JSON dict, `run.metadata["identity"]`, which the run file's footer keeps.

What it holds (None / [] where the trace does not say; the text then says "unknown"):

- `tracer`, `tracer_version`: "nsys" and the report's product version, or "kineto" and its
  schema version (and CUPTI / HIP runtime version).
- `host`: nsys `Hostname` (TARGET_INFO_SYSTEM_ENV), a Kineto trace's default file name's host,
  else the capture manifest's.
- `process_ids`: the processes that ran GPU work (kernels, copies), else that recorded ranges.
- `gpus`: each used device: its id in the run's tables, UUID and PCI bus id (nsys
  TARGET_INFO_GPU, Kineto deviceProperties: Kineto has neither, so "GPU 0 NVIDIA H200"), name.
- `window`: first and last event, on the UTC clock where the tracer states its origin (nsys
  session start, Kineto `baseTimeNanoseconds` or Unix-µs timestamps), else on the trace's own
  clock (`clock: "local"`: such windows cannot be set beside another file's).
- `world_size`, `rank`, `rank_from`: Kineto `distributedInfo`, the RANK / WORLD_SIZE (or MPI
  launcher's) environment nsys ran in; `communicators`: the NCCL communicator ids its
  collectives carry (Kineto's are process-group names, not unique across jobs).
- `commit`: where `tracediff capture` captured it (the manifest's git commit).
- `fingerprint`: the workload: GPU count, and bottom-k sketches (the K smallest 64-bit BLAKE2b
  hashes) of its distinct kernel names and of its NVTX range names (digits folded, so
  `ProfilerStep#551` and `#552` are one name). Two sketches estimate the Jaccard similarity of
  the two full sets (`similarity`) without keeping every name of a large trace in the footer.

A run file written before identities existed has none: `of` derives one from its tables and
metadata (`read_from: "derived"`; a host or rank the old reader did not keep is unknown).
A joined run (several rank files) gets `combine` of its files' identities.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

import polars as pl

from tracediff.runs.runfile import Run

VERSION = 1
SKETCH = 256
"""Names kept a sketch: the estimate's error is about 1/sqrt(K) (~6 %) for large sets, exact
below K names."""
_NSYS_FORMATS = ("nsys-sqlite", "nsys-rep", "qdstrm", "parquetdir", "nsys")
_DIGITS = re.compile(r"\d+")


def _hash(name: str) -> str:
    return hashlib.blake2b(name.encode(), digest_size=8).hexdigest()


def sketch(names: list[str], k: int = SKETCH) -> list[str]:
    """The bottom-k sketch of a set of names: the k smallest of their hashes, sorted."""
    return sorted({_hash(n) for n in names})[:k]


def similarity(a: list[str], b: list[str], k: int = SKETCH) -> float:
    """Jaccard similarity of two sets estimated from their bottom-k sketches (exact when both
    sets have fewer than k names); 1.0 for two empty sets."""
    if not a and not b:
        return 1.0
    sa, sb = set(a), set(b)
    union = sorted(sa | sb)[:k]
    return sum(1 for h in union if h in sa and h in sb) / len(union)


def _distinct(run: Run, table: str, column: str) -> list[str]:
    col = pl.from_arrow(run.read(table, [column]))
    assert isinstance(col, pl.DataFrame)
    # distinct first: a name column is a dictionary (categorical), so `unique` works on its
    # codes and only the few distinct names become strings (0.9 M kernels: one string per row)
    values = col[column].drop_nulls().unique().cast(pl.String).unique()
    return [str(v) for v in values.to_list()]


def _ints(values: list[Any]) -> set[int]:
    return {int(v) for v in values}


class _Facts:
    """What the identity reads of one table of GPU operations (or of the ranges), in one query:
    its devices, processes, first start and last end."""

    def __init__(self, run: Run, table: str, devices: bool = True) -> None:
        cols = ["device_id"] if devices else []  # ranges: on the host (their GPU-side ones aside)
        tab = pl.from_arrow(run.read(table, [*cols, "process_id", "start_ns", "end_ns"]))
        assert isinstance(tab, pl.DataFrame)
        self.rows = tab.height
        ints = [c for c in ("device_id", "process_id") if c in tab.columns]
        got = tab.select(
            *(pl.col(c).drop_nulls().unique().implode() for c in ints),
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
        ).row(0, named=True)
        self.devices = _ints(got.get("device_id") or [])
        self.pids = _ints(got["process_id"] or [])
        self.lo: int | None = None if got["start_ns"] is None else int(got["start_ns"])
        self.hi: int | None = None if got["end_ns"] is None else int(got["end_ns"])


def _window(facts: list[_Facts]) -> tuple[int | None, int | None]:
    lo: int | None = None
    hi: int | None = None
    for f in facts:
        if not f.rows:
            continue
        if f.lo is not None:
            lo = f.lo if lo is None else min(lo, f.lo)
        if f.hi is not None:
            hi = f.hi if hi is None else max(hi, f.hi)
    return lo, hi


def _pids(run: Run, gpu: list[_Facts], nvtx: _Facts) -> list[int]:
    got: set[int] = set().union(*(f.pids for f in gpu))
    if got:
        return sorted(got)
    api = pl.from_arrow(run.read("api_calls", ["process_id"]))
    assert isinstance(api, pl.DataFrame)
    got = nvtx.pids | _ints(api["process_id"].drop_nulls().unique().to_list())
    return sorted(got)


def _gpus(run: Run, used: list[int]) -> list[dict[str, Any]]:
    dev = run.read("devices").to_pylist()  # a row per GPU: no polars frame for a few rows
    rows = {int(r["device_id"]): r for r in dev if r["device_id"] is not None}
    out = []
    for d in used:
        r = rows.get(d, {})
        uuid = r.get("uuid")
        out.append(
            {
                "device_id": d,
                "uuid": (uuid if str(uuid).startswith("GPU-") else f"GPU-{uuid}") if uuid else None,
                "bus_id": r.get("bus_location"),
                "name": r.get("name"),
            }
        )
    return out


def _tracer(md: dict[str, Any]) -> tuple[str, str | None]:
    fmt = str(md.get("source_format") or "")
    if fmt in _NSYS_FORMATS or md.get("nsys_version"):
        return "nsys", md.get("nsys_version")
    if fmt == "kineto":
        parts = [f"schema {md['kineto_schema_version']}"] if md.get("kineto_schema_version") else []
        for k, name in (("cupti_version", "CUPTI"), ("hip_runtime_version", "HIP")):
            if md.get(k) is not None:
                parts.append(f"{name} {md[k]}")
        return "kineto", ", ".join(parts) or None
    return (fmt or "unknown"), None


def identify(run: Run, *, derived: bool = False) -> dict[str, Any]:
    """The run's identity (the module docstring), from its tables and metadata."""
    md = run.metadata
    manifest = md.get("manifest") if isinstance(md.get("manifest"), dict) else {}
    assert isinstance(manifest, dict)
    tracer, version = _tracer(md)
    gpu = [_Facts(run, "kernels"), _Facts(run, "memops")]
    nvtx_facts = _Facts(run, "nvtx_ranges", devices=False)
    used = sorted(set().union(*(f.devices for f in gpu)))
    lo, hi = _window([*gpu, nvtx_facts])
    origin = md.get("time_origin_utc_ns")
    utc = isinstance(origin, int)
    base = int(origin) if isinstance(origin, int) else 0
    comms = sorted(set(_distinct(run, "collectives", "comm_id")))
    ranges = pl.from_arrow(run.read("nvtx_ranges", ["domain", "name"]))
    assert isinstance(ranges, pl.DataFrame)
    nvtx = (
        ranges.unique()
        .select(
            pl.when(pl.col("domain").is_null())
            .then(pl.col("name").cast(pl.String))
            .otherwise(pl.col("domain").cast(pl.String) + ":" + pl.col("name").cast(pl.String))
        )
        .to_series()
        .drop_nulls()
        .to_list()
    )
    nvtx_names = sorted({_DIGITS.sub("#", n) for n in nvtx})
    kernel_names = _distinct(run, "kernels", "short_name") or _distinct(run, "kernels", "name")
    host = md.get("host") or (manifest.get("host") or {}).get("hostname")
    git = manifest.get("git") or {}
    return {
        "version": VERSION,
        "read_from": "derived" if derived else "trace",
        "tracer": tracer,
        "tracer_version": version,
        "host": host,
        "hosts": [host] if host else [],
        "process_ids": _pids(run, gpu, nvtx_facts),
        "gpus": _gpus(run, used),
        "window": {
            "start_ns": lo,
            "end_ns": hi,
            "start_utc_ns": base + lo if utc and lo is not None else None,
            "end_utc_ns": base + hi if utc and hi is not None else None,
            "clock": "utc" if utc else "local",
        },
        "world_size": md.get("world_size"),
        "rank": md.get("rank"),
        "rank_from": md.get("rank_from")
        or ("distributedInfo" if md.get("rank") is not None else None),
        "communicators": comms,
        "commit": git.get("commit") if isinstance(git, dict) else None,
        "files": 1,
        "fingerprint": {
            "gpu_count": len(used),
            "kernel_names": len(kernel_names),
            "kernels": sketch(kernel_names),
            "nvtx_names": len(nvtx_names),
            "nvtx": sorted(nvtx_names, key=_hash)[:SKETCH],
        },
    }


def of(run: Run) -> dict[str, Any]:
    """The run's identity: as stored, else derived now (and kept in its metadata)."""
    got = of_metadata(run.metadata)
    if got is not None:
        return got
    run.metadata["identity"] = identify(run, derived=True)
    return run.metadata["identity"]  # type: ignore[no-any-return]


def of_metadata(md: dict[str, Any]) -> dict[str, Any] | None:
    """The identity a run's metadata holds (None: none, or of another version)."""
    got = md.get("identity")
    return got if isinstance(got, dict) and got.get("version") == VERSION else None


def nvtx_sketch(ident: dict[str, Any]) -> list[str]:
    """The hashes of an identity's NVTX names (its sketch keeps the names, for messages)."""
    return sorted(_hash(n) for n in ident["fingerprint"]["nvtx"])


def combine(files: list[dict[str, Any]], shifts: list[int] | None = None) -> dict[str, Any]:
    """A joined run's identity from its files' (in file order); `shifts`: each file's clock
    shift onto the joined run's clock (parse/ranks/combine.py), for its local window."""
    tracers = sorted({f["tracer"] for f in files})
    versions = sorted({str(f["tracer_version"]) for f in files if f["tracer_version"]})
    hosts = sorted({h for f in files for h in f.get("hosts") or []})
    starts = [f["window"]["start_utc_ns"] for f in files]
    ends = [f["window"]["end_utc_ns"] for f in files]
    utc = all(s is not None for s in starts) and all(e is not None for e in ends)
    sh = shifts or [0] * len(files)
    local = [
        (f["window"]["start_ns"] + s, f["window"]["end_ns"] + s)
        for f, s in zip(files, sh, strict=True)
        if f["window"]["start_ns"] is not None and f["window"]["end_ns"] is not None
    ]
    ranks = [f.get("rank") for f in files]
    worlds = sorted({f["world_size"] for f in files if f.get("world_size") is not None})
    kernels = sorted({h for f in files for h in f["fingerprint"]["kernels"]})[:SKETCH]
    nvtx = sorted({n for f in files for n in f["fingerprint"]["nvtx"]}, key=_hash)[:SKETCH]
    commits = sorted({f["commit"] for f in files if f.get("commit")})
    return {
        "version": VERSION,
        "read_from": "derived" if any(f["read_from"] == "derived" for f in files) else "trace",
        "tracer": "+".join(tracers),
        "tracer_version": ", ".join(versions) or None,
        "host": hosts[0] if len(hosts) == 1 else None,
        "hosts": hosts,
        "process_ids": sorted({p for f in files for p in f["process_ids"]}),
        "gpus": [g | {"rank": f.get("rank")} for f in files for g in f["gpus"]],
        "window": {
            "start_ns": min(s for s, _ in local) if local else None,
            "end_ns": max(e for _, e in local) if local else None,
            "start_utc_ns": min(starts) if utc else None,
            "end_utc_ns": max(ends) if utc else None,
            "clock": "utc" if utc else "local",
        },
        "world_size": worlds[0] if len(worlds) == 1 else None,
        "rank": None,
        "ranks": ranks,
        "rank_from": None,
        "communicators": sorted({c for f in files for c in f["communicators"]}),
        "commit": commits[0] if len(commits) == 1 else None,
        "files": sum(int(f.get("files", 1)) for f in files),
        "fingerprint": {
            "gpu_count": sum(int(f["fingerprint"]["gpu_count"]) for f in files),
            "kernel_names": max(int(f["fingerprint"]["kernel_names"]) for f in files),
            "kernels": kernels,
            "nvtx_names": max(int(f["fingerprint"]["nvtx_names"]) for f in files),
            "nvtx": nvtx,
        },
    }


# ---- how an identity reads in one line -------------------------------------------------------


def short_gpu(g: dict[str, Any]) -> str:
    """`GPU-83132acf…`, else `bus 0000:00:06.0`, else `GPU 0 (NVIDIA H200)`."""
    if g.get("uuid"):
        return str(g["uuid"])[:12] + "…"
    if g.get("bus_id"):
        return f"bus {g['bus_id']}"
    return f"GPU {g['device_id']}" + (f" ({g['name']})" if g.get("name") else "")


def utc_text(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S")


def window_text(ids: list[dict[str, Any]]) -> str:
    """`2026-12-01 10:50:49–10:53:12 UTC` over the identities' windows (`… UTC, 69 ms` within
    a minute), or that their times are on the trace's own clock."""
    starts = [i["window"]["start_utc_ns"] for i in ids]
    ends = [i["window"]["end_utc_ns"] for i in ids]
    if any(s is None for s in starts) or any(e is None for e in ends):
        return "times on the trace's own clock"
    span = max(ends) - min(starts)
    lo, hi = utc_text(min(starts)), utc_text(max(ends))
    if span < 60 * 10**9:  # within a minute: its start and length
        return (
            f"{lo} UTC, {span / 1e6:.0f} ms" if span < 10**10 else f"{lo} UTC, {span / 1e9:.1f} s"
        )
    tail = hi[11:] if hi[:10] == lo[:10] else hi
    return f"{lo}–{tail} UTC"


def gpus_text(ids: list[dict[str, Any]]) -> str:
    """The distinct GPUs of the identities, by UUID where known: `GPU-83132acf…`."""
    seen: dict[str, None] = {}
    for i in ids:
        for g in i["gpus"]:
            seen.setdefault(short_gpu(g))
    names = list(seen)
    if not names:
        return "no GPU"
    if len(names) > 3:
        return f"{len(names)} GPUs ({names[0]}, …)"
    return ", ".join(names)


def processes_text(ids: list[dict[str, Any]]) -> str:
    n = len({(i.get("host"), p) for i in ids for p in i["process_ids"]})
    return "process unknown" if n == 0 else f"{n} process{'es' if n != 1 else ''}"
