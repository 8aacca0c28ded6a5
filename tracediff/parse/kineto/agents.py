"""ROCm agent ids → device ids: puts GPU events on the device `deviceProperties` names.

Stage: parse (Kineto), between the role frames and the tables. roctracer numbers HSA agents with
the CPU agents first, so on a host with 8 CPU agents a trace's kernels carry `device` 9 while its
`deviceProperties` lists the GPU as id 0 (the TraceLens SGLang MI300X traces): read as recorded,
`info` shows an empty "GPU 0 AMD Instinct MI300X" beside "GPU 9 ?" holding every kernel.

The rule, on the columns (no per-event Python):
- every GPU event's device id is one `deviceProperties` lists, or there is no deviceProperties:
  nothing to map (CUDA traces, and ROCm traces whose ids already agree);
- none of the GPU events' ids is listed and there are as many distinct ids as listed devices:
  the agents, in order, are the devices in order (GPU agents follow the CPU agents in the same
  order as the HIP device ids), so the i-th smallest id maps to the i-th listed device;
- anything else (fewer ids than devices, or some listed and some not) cannot be decided from the
  trace: ids are kept as recorded and a warning says so.
"""

from __future__ import annotations

from typing import Any

import polars as pl

# the frames whose events are on a GPU (device in args, else the event's pid: Kineto puts it there)
GPU_ROLES = ("kernel", "memcpy", "memset", "gpu_annotation")


def listed_ids(props: Any) -> list[int]:
    """The device ids `deviceProperties` lists (ints only), sorted, without repeats."""
    ids = {p.get("id") for p in props or [] if isinstance(p, dict)}
    return sorted(i for i in ids if isinstance(i, int) and not isinstance(i, bool))


def _device(frame: pl.DataFrame) -> pl.Expr:
    return pl.coalesce("device", "pid") if "device" in frame.columns else pl.col("pid")


def recorded_ids(frames: dict[str, pl.DataFrame]) -> list[int]:
    """The distinct device ids the GPU events carry, sorted."""
    parts = [
        f.select(_device(f).alias("d"))["d"].drop_nulls().unique()
        for r in GPU_ROLES
        if (f := frames.get(r)) is not None and f.height
    ]
    if not parts:
        return []
    return sorted(int(x) for x in pl.concat(parts).unique().to_list())


def agent_map(recorded: list[int], listed: list[int]) -> tuple[dict[int, int], str | None]:
    """(agent id → device id, warning or None) for the ids recorded and those listed."""
    if not listed or set(recorded) <= set(listed):
        return {}, None
    if len(recorded) == len(listed) and not set(recorded) & set(listed):
        return dict(zip(recorded, listed, strict=True)), None
    unlisted = [d for d in recorded if d not in listed]
    return {}, (
        f"GPU events on device ids {_ids(unlisted)} that deviceProperties does not list "
        f"(it lists {_ids(listed)}); roctracer numbers GPU agents after the CPU agents, but "
        f"{len(recorded)} recorded id(s) for {len(listed)} listed device(s) cannot be matched "
        "one to one, so the ids are kept as recorded (per-GPU names may be missing)"
    )


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids[:8]) + (", …" if len(ids) > 8 else "")


def remap(frames: dict[str, pl.DataFrame], mapping: dict[int, int]) -> dict[str, pl.DataFrame]:
    """The frames with each GPU event's device (args, else pid) replaced through `mapping`;
    the event's pid is left as recorded (the tables read `device` first)."""
    if not mapping:
        return frames
    old = pl.Series(list(mapping), dtype=pl.Int64)
    new = pl.Series(list(mapping.values()), dtype=pl.Int64)
    out = dict(frames)
    for r in GPU_ROLES:
        f = frames.get(r)
        if f is None or not f.height:
            continue
        mapped = _device(f).replace_strict(old, new, default=_device(f), return_dtype=pl.Int64)
        out[r] = f.with_columns(mapped.alias("device"))  # read before pid (tables._gpu_base)
    return out
