"""Runs without cycle markers are cut by one rule on both sides, from the repeating body, under
a readable label, and a cut that leaves ops out says so (issue 17, "cycles cut differently").

All on real traces: the nsys-ai 2-GPU MFU pair (base and head used to be cut at different anchor
ops, 16 vs 14 cycles), the SGLang decode and prefill-decode traces (a 15- or 14-op layer repeated
36 times after a prologue: the anchor came from the prologue and nothing repeated), the pipit and
HTA traces whose anchors are C++ template names (the label was cut at the first "(").
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from tracediff.engine.compare import compare
from tracediff.engine.cycle.period import display_name
from tracediff.engine.ops import gpu_ops
from tracediff.parse import load
from tracediff.runs.runfile import Run

DATA = Path(__file__).resolve().parent.parent.parent / "data"
K_GOOD, K_BAD = DATA / "h200/k_good.json.gz", DATA / "h200/k_bad.json.gz"
MFU_B, MFU_H = (DATA / f"nsys/nsys-ai/mfu_2gpu_{s}.sqlite" for s in ("before", "after"))
DECODE = DATA / "kineto/sglang_Qwen3-8B_decode.json.gz"
PREFILL = DATA / "kineto/sglang_Qwen3-8B_prefilldecode.json.gz"
CLOVER = DATA / "nsys/pipit/perlmutter-cloverleaf-cuda.sqlite"
SAXPY = DATA / "nsys/pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
GEMV = DATA / "kineto/step_based_trace_2543932.json.gz"

_runs: dict[Path, Run] = {}


def _load(p: Path) -> Run:
    if p not in _runs:
        _runs[p] = load(p)
    return _runs[p]


def _cmp(b: Path, h: Path):  # noqa: ANN202
    return compare(_load(b), _load(h), n_boot=50)


def test_the_mfu_pair_is_cut_by_one_rule() -> None:
    c = _cmp(MFU_B, MFU_H)
    assert c.base.cycle_method == c.head.cycle_method == "kernel-period:Memcpy HtoD"
    # the head's cycles are whole periods of the same anchor: each starts with one Memcpy HtoD
    ev = c.events.filter(pl.col("side") == "head")
    first = (
        ev.sort("cycle", "device_id", "rel_start_ns")
        .group_by("cycle", "device_id", maintain_order=True)
        .first()
    )
    assert (first["name"].cast(pl.String) == "Memcpy HtoD").all()


@pytest.mark.parametrize(
    ("base", "head"),
    [
        (K_GOOD, K_BAD),
        (K_BAD, K_GOOD),
        (MFU_H, MFU_B),
        (DECODE, PREFILL),
        (PREFILL, DECODE),
        (K_GOOD, DECODE),
    ],
    ids=lambda p: p.name.split(".")[0],
)
def test_both_sides_are_cut_alike_or_compared_whole(base: Path, head: Path) -> None:
    c = _cmp(base, head)
    assert c.base.cycle_method == c.head.cycle_method
    if c.base.cycle_method == "whole-run":  # base's cut did not fit head, or its cycles there
        # hold other ops (engine/cycle/correspond.py; runs of two tracers are refused: see
        # tests/golden/test_cut_correspond.py): said so
        assert c.cycle_fallback
        assert any(
            "not cut as base is (kernel-period:" in w or "hold other ops than base's" in w
            for w in c.warnings
        )


def test_a_rule_that_does_not_fit_head_falls_back_to_whole_runs_with_the_reason() -> None:
    c = _cmp(K_GOOD, DECODE)  # head has no 'Memcpy DtoD' once per ~159 ops
    assert c.base.cycle_method == c.head.cycle_method == "whole-run"
    assert c.base.cycles == c.head.cycles == 1 and not c.significant
    (w,) = [w for w in c.warnings if "not cut as base is" in w]
    assert "kernel-period:Memcpy DtoD" in w and "Memcpy DtoD" in w.split("):", 1)[1]
    assert "compared the whole runs" in w


@pytest.mark.parametrize(
    ("path", "layer"), [(DECODE, 15), (PREFILL, 14)], ids=["decode", "prefill"]
)
def test_a_layer_repeated_after_a_prologue_is_the_cycle(path: Path, layer: int) -> None:
    c = _cmp(path, path)
    assert c.base.cycle_method.startswith("kernel-period:")
    assert c.base.cycles == 36  # Qwen3-8B's 36 decoder layers
    ev = c.events.filter(pl.col("side") == "base")
    lengths = ev.group_by("cycle").len()["len"]
    assert lengths.median() == layer and lengths.is_between(layer, layer + 1).all()
    anchor = c.base.cycle_method.removeprefix("kernel-period:")
    names = ev["name"].cast(pl.String).map_elements(display_name, return_dtype=pl.String)
    per_cycle = ev.with_columns(names.alias("_n")).filter(pl.col("_n") == anchor)
    assert per_cycle.group_by("cycle").len()["len"].to_list() == [1] * 36  # once per layer


_IDENT = re.compile(
    r"^(?:[A-Za-z_][\w ]*|\(anonymous namespace\))(?:::(?:[A-Za-z_~][\w]*|\(anonymous namespace\)))*$"
)


@pytest.mark.parametrize("path", [MFU_H, CLOVER, GEMV, PREFILL], ids=lambda p: p.name.split(".")[0])
def test_the_cut_label_names_the_anchor_kernel_whole(path: Path) -> None:
    c = _cmp(path, path)
    label = c.base.cycle_method.removeprefix("kernel-period:")
    assert _IDENT.match(label.removesuffix("…")), label
    # the label is that kernel's qualified name, not a prefix of it cut at "(" or "<"
    names = gpu_ops(_load(path))["name"].cast(pl.String).unique().to_list()
    assert any(display_name(n) == label for n in names)
    assert any(label.removesuffix("…") in n for n in names)


def test_display_names_of_real_kernels_keep_namespaces_and_drop_signatures() -> None:
    names = set()
    for p in (DECODE, PREFILL, MFU_B, CLOVER, GEMV):
        names |= set(gpu_ops(_load(p))["name"].cast(pl.String).unique().to_list())
    anon = [n for n in names if "(anonymous namespace)::" in n]
    assert anon
    for n in names:
        d = display_name(n)
        assert "<" not in d and not d.endswith(("::", "(", ",")), (n, d)
        assert _IDENT.match(d.removesuffix("…")) or " " in n.split("(")[0], (n, d)
    for n in anon:
        assert "(anonymous namespace)::" in display_name(n), n


def _left_out(c, run: Run, side: str) -> dict[int, tuple[int, int]]:  # noqa: ANN001
    n = gpu_ops(run).group_by("device_id").len()
    kept = c.events.filter(pl.col("side") == side).group_by("device_id").len()
    j = n.join(kept, on="device_id", how="left", suffix="_in").fill_null(0)
    return {r["device_id"]: (r["len"] - r["len_in"], r["len"]) for r in j.iter_rows(named=True)}


@pytest.mark.parametrize(
    "path", [CLOVER, SAXPY, GEMV, DECODE, K_GOOD], ids=lambda p: p.name.split(".")[0]
)
def test_a_cut_that_leaves_out_a_cycle_or_5_percent_of_ops_says_so(path: Path) -> None:
    c = _cmp(path, path)
    per_cycle = c.events.filter(pl.col("side") == "base").group_by("device_id", "cycle").len()
    said = 0
    for dev, (left, n) in _left_out(c, _load(path), "base").items():
        length = int(per_cycle.filter(pl.col("device_id") == dev)["len"].median() or 0)
        if left >= 0.05 * n or left >= length > 0:
            assert any(f"GPU {dev}: {left} of {n} ops" in w for w in c.warnings), c.warnings
            said += 1
    assert said  # each of these traces leaves out at least a cycle's worth
