"""A per-cycle verdict only from cuts that can be checked to correspond (issue 17, "cycles cut
differently on the two sides": the tracer and composition half).

One kernel-period rule applied to both sides is not enough: base's "an anchor op every P ops"
fits runs of other workloads and of other tracers. Before this check the Kineto k_good against
the nsys e_bad (markers on one side) read "+118.9 %, significant", and k_good against the B200
eager trace of another model gave a per-cycle verdict from 1 % common ops. Now runs of two
tracers are refused unless --cycle names the cut, and a kernel-period cut whose cycles hold
different ops falls back to whole runs, with the reason first in the report and in the JSON
(`cycle_fallback`), and the gate cannot pass or trip on it. Real pairs of one workload keep their
per-cycle verdicts. All inputs are real traces (tests/data, from ../shared/traces).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from tracediff.cli import main

ROOT = Path(__file__).resolve().parents[2]
H200 = "tests/data/h200"
KIN = "tests/data/kineto"
NSYS_AI = "tests/data/nsys/nsys-ai"
K_GOOD, K_BAD = f"{H200}/k_good.json.gz", f"{H200}/k_bad.json.gz"
MFU_B, MFU_H = f"{NSYS_AI}/mfu_2gpu_before.sqlite", f"{NSYS_AI}/mfu_2gpu_after.sqlite"
H100 = f"{NSYS_AI}/h100_2gpu_1s.sqlite"
DECODE = f"{KIN}/sglang_Qwen3-8B_decode.json.gz"
PREFILL = f"{KIN}/sglang_Qwen3-8B_prefilldecode.json.gz"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv))
    finally:
        os.chdir(cwd)
    return rc, out.getvalue(), err.getvalue()


def _id(pair: tuple[str, str]) -> str:
    return "-".join(Path(p).name.split(".")[0] for p in pair)


# Kineto against nsys, each way, with and without markers on the nsys side
MIXED = [
    (K_GOOD, f"{H200}/e_bad.sqlite"),  # the case: +118.9 %, significant
    (K_BAD, "samples/g_good.arrow"),  # a run file of an nsys report: cut 19 vs 11 cycles
    (MFU_B, K_GOOD),
    (H100, K_BAD),
    (f"{H200}/e_good.sqlite", K_BAD),  # NVTX cycles on base only
]


@pytest.mark.parametrize("pair", MIXED, ids=_id)
def test_runs_of_two_tracers_are_refused_saying_what_to_do(pair: tuple[str, str]) -> None:
    for extra in ((), ("--fail-above", "5")):
        rc, out, err = cli("compare", *pair, "--format", "json", *extra)
        assert rc == 1 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert "Kineto" in lines[0] and "nsys" in lines[0]
        assert all(p in lines[0] for p in pair)  # names both files
        assert "same tracer" in lines[0] and "--cycle" in lines[0]


def test_two_tracers_with_cycle_whole_compare_totals_and_say_the_tracers_differ() -> None:
    rc, out, _ = cli(
        "compare", K_GOOD, f"{H200}/e_bad.sqlite", "--format", "json", "--cycle", "whole"
    )
    assert rc == 0
    d = json.loads(out)
    assert d["base"]["cycle_method"] == d["head"]["cycle_method"] == "whole-run"
    assert d["cycle_fallback"] is None  # asked for, not a fallback
    assert not d["delta_ms_per_cycle"]["significant"]
    assert "recorded by Kineto" in d["warnings"][0] and "by nsys" in d["warnings"][0]


# one tracer, base's kernel-period rule fits head, but head's "cycles" are another loop
UNCHECKABLE = [
    (K_GOOD, f"{KIN}/eager_trace.json.gz"),  # H200 spec-decode vs a B200 eager model
    (K_BAD, f"{KIN}/nccl_data.json.gz"),
    (K_GOOD, f"{KIN}/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
    (DECODE, PREFILL),  # SGLang decode vs prefill-decode: 60 % of a layer's ops in common
    (MFU_B, H100),  # two nsys-ai workloads on 2 GPUs: 31 %
]


@pytest.mark.parametrize("pair", UNCHECKABLE, ids=_id)
def test_a_cut_whose_cycles_hold_other_ops_falls_back_to_whole_runs_loudly(
    pair: tuple[str, str],
) -> None:
    rc, out, _ = cli("compare", *pair, "--format", "json", "--bootstrap", "50")
    assert rc == 0
    d = json.loads(out)
    assert d["base"]["cycle_method"] == d["head"]["cycle_method"] == "whole-run"
    assert "hold other ops than base's" in d["cycle_fallback"]
    assert not d["delta_ms_per_cycle"]["significant"] and d["delta_ms_per_cycle"]["ci95"] == [
        None,
        None,
    ]
    rc, out, _ = cli("compare", *pair, "--format", "table", "--bootstrap", "50")
    first = next(line for line in out.splitlines() if line.startswith(("NOT", "GPU work")))
    assert first.startswith("NOT COMPARED CYCLE BY CYCLE: ") and "hold other ops" in first
    rc, _, err = cli("compare", *pair, "--format", "json", "--bootstrap", "50", "--fail-above", "5")
    assert rc == 4 and "undecided" in err  # the gate neither passes nor trips


# real pairs of one workload, one tracer: per-cycle verdicts as before
SAME_LOOP = [
    (K_GOOD, K_BAD),
    (K_BAD, K_GOOD),
    (MFU_B, MFU_H),
    (MFU_H, MFU_B),
    (DECODE, DECODE),
    (f"{KIN}/step_based_trace_2543932.json.gz",) * 2,
    ("tests/data/nsys/pipit/perlmutter-cloverleaf-cuda.sqlite",) * 2,
]


@pytest.mark.parametrize("pair", SAME_LOOP, ids=_id)
def test_pairs_of_one_loop_keep_their_per_cycle_verdict(pair: tuple[str, str]) -> None:
    rc, out, _ = cli("compare", *pair, "--format", "json", "--bootstrap", "50")
    assert rc == 0
    d = json.loads(out)
    assert d["cycle_fallback"] is None
    assert d["base"]["cycle_method"] == d["head"]["cycle_method"]
    assert d["base"]["cycle_method"].startswith("kernel-period:")
    assert d["base"]["cycles"] >= 2 and d["head"]["cycles"] >= 2


def test_run_sets_compared_whole_judge_nothing(tmp_path: Path) -> None:
    """Run sets whose cut does not carry over (H200 k_good/k_bad runs against B200 eager and
    vLLM graph traces): each run is compared whole, and the across-run test would call the
    totals' difference significant (48 rows were, and the gate passed with exit 0). Totals of
    runs not checked to do the same work are not judged: no row significant, gate exit 4."""
    import shutil

    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    for i, src in enumerate([K_GOOD, K_BAD, K_GOOD, K_BAD]):
        shutil.copyfile(ROOT / src, base / f"k{i}.json.gz")
    for i, src in enumerate(["eager_trace", "graph_execution"] * 2):
        shutil.copyfile(ROOT / KIN / f"{src}.json.gz", head / f"e{i}.json.gz")
    # B200 eager and vLLM graph runs are two workloads: not one run set (issue 30)
    rc, _, err = cli("compare", str(base), str(head), "--format", "json")
    assert rc == 1 and "runs of different workloads: e0.json.gz and e1.json.gz" in err
    for i in (1, 3):  # the head set: the B200 eager trace's copies (said in a warning)
        shutil.copyfile(ROOT / KIN / "eager_trace.json.gz", head / f"e{i}.json.gz")
    rc, out, _ = cli("compare", str(base), str(head), "--format", "json", "--bootstrap", "50")
    assert rc == 0
    d = json.loads(out)
    assert d["runs"] == {"base": 4, "head": 4}
    assert d["base"]["cycle_method"] == d["head"]["cycle_method"] == "whole-run"
    assert d["cycle_fallback"]
    assert not d["delta_ms_per_cycle"]["significant"]
    assert not [r for r in d["attribution"] if r["significant"]]
    rc, out, _ = cli("compare", str(base), str(head), "--format", "table", "--bootstrap", "50")
    assert "undecided: whole runs' totals" in out and "significant change" not in out
    rc, _, err = cli("compare", str(base), str(head), "--format", "json", "--fail-above", "5")
    assert rc == 4 and "compared whole" in err


TS = "tests/data/h200/twostream"
RESNET0 = f"{KIN}/resnet50_num_workers_0.worker0.pt.trace.json.gz"


@pytest.mark.parametrize(
    ("pair", "few"),
    [
        ((RESNET0, f"{KIN}/nccl_data.json.gz"), True),  # both cut at ProfilerStep: 3 % common
        ((f"{TS}/torch_good.sqlite", f"{TS}/cupy_good.sqlite"), True),  # one loop, two libraries
        ((f"{H200}/e_good.sqlite", f"{H200}/e_bad.sqlite"), False),
        ((f"{H200}/g_good.sqlite", f"{H200}/e_good.sqlite"), False),  # graph vs eager: 99 %
        ((RESNET0, f"{KIN}/resnet50_num_workers_4.worker0.pt.trace.json.gz"), False),
    ],
    ids=lambda v: _id(v) if isinstance(v, tuple) else str(v),
)
def test_range_cuts_keep_their_cycles_and_say_when_few_ops_are_shared(
    pair: tuple[str, str], few: bool
) -> None:
    """Cycles cut at one host range correspond by the user's markers: the cut holds, and where
    the two sides' cycles share under half their ops a warning asks whether the workloads are
    the same (ResNet50 against an NCCL benchmark read '+83.7 %, significant, 218 significant
    changes' without a word)."""
    rc, out, _ = cli("compare", *pair, "--format", "json", "--bootstrap", "50")
    assert rc == 0
    d = json.loads(out)
    assert d["cycle_fallback"] is None and d["base"]["cycle_method"].startswith("nvtx:")
    said = [w for w in d["warnings"] if "of their ops in common" in w]
    assert bool(said) == few, d["warnings"]
