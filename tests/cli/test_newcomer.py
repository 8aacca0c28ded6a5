"""The rough edges a new user hit (issue 33), each on real inputs: ids in the text reports,
renamed vs replaced, stack bookkeeping out of the environment diff, a several-commit capture
folder for info/export, --perfetto on host-only runs, and the wording items."""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import re
from pathlib import Path

import polars as pl
import pytest

from tracediff.cli import main
from tracediff.engine.env import env_diffs
from tracediff.engine.tables import same_op
from tracediff.parse import load
from tracediff.suspects.nostacks import NO_STACKS, why_no_stacks

ROOT = Path(__file__).resolve().parents[2]
S = ROOT / "samples"
HOST = [str(ROOT / "tests/data/capture-hostonly" / s / "report.sqlite") for s in ("base", "slow")]
KIN = ROOT / "tests/data/h200-suspects/kineto"
MINISPEC = [str(KIN / "c1_base_eager.json.gz"), str(KIN / "c5_unused_eager.json.gz")]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse's usage errors
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_the_table_shows_the_ids_whatif_takes() -> None:
    code, table, _ = cli("compare", f"{S}/g_good.arrow", f"{S}/g_bad.arrow", "--format", "table")
    assert code == 0
    rows = [ln.split() for ln in table.splitlines() if re.match(r"\s+c\d+ ", ln)]
    assert [r[0] for r in rows] == [f"c{i}" for i in range(len(rows))] and len(rows) == 15
    memcpy = next(r[0] for r in rows if r[1] == "memcpy")
    code, out, err = cli("whatif", f"{S}/g_good.arrow", f"{S}/g_bad.arrow", "--take", memcpy)
    assert code == 0, err
    assert "Memcpy DtoD" in out


def test_another_op_in_the_place_is_replaced_and_told_as_one_story() -> None:
    """minispec's culprit (bf16 GEMM -> fp32 casts + a GEMV): the nvjet GEMM's place now holds an
    elementwise cast; that is another op, not the GEMM renamed."""
    code, out, _ = cli("compare", *MINISPEC, "--format", "json")
    att = json.loads(out)["attribution"]
    swapped = [a for a in att if a["base_name"]]
    assert swapped and all(a["status"] == "replaced" for a in swapped)
    gemm = next(a for a in swapped if a["base_name"].startswith("nvjet_"))
    assert "elementwise" in gemm["head_name"]
    code, table, _ = cli("compare", *MINISPEC, "--format", "table")
    story = next(ln for ln in table.splitlines() if ln.startswith("replaced in the cycle: "))
    gone, came = story.split(" (removed) → ")
    assert "nvjet_sm90_tst" in gone and "gemmSN_NN_kernel" in came and "(added)" in came
    assert "(in place of nvjet_sm90" in table and "renamed from" not in table


def test_same_op_tells_a_retune_from_another_op() -> None:
    pairs = {  # (base, head): renamed?
        ("nvjet_sm90_tst_128x8_64x12_2x1_v_bz_splitK_TNT",
         "nvjet_sm90_tst_256x16_64x12_2x1_v_bz_splitK_TNT_retuned_v2"): True,
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_16x6_tn_align4>(P)",
         "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1>(P)"): True,
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1",
         "void at::native::vectorized_elementwise_kernel<4, at::native::softmax>(int)"): False,
        ("void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda>(x)",
         "void at::native::vectorized_elementwise_kernel<4, at::native::exp_kernel_cuda>(x)"): False,
    }  # fmt: skip
    df = pl.DataFrame({"base_name": [b for b, _ in pairs], "head_name": [h for _, h in pairs]})
    assert df.select(same_op())["base_name"].to_list() == list(pairs.values())


def test_stack_bookkeeping_is_not_environment() -> None:
    base, head = load(S / "runs/good/run-01/run.arrow"), load(S / "runs/bad/run-01/run.arrow")
    for run, functions in ((base, 5), (head, 7)):
        m = copy.deepcopy(run.metadata.get("manifest") or {})
        m["stacks"] = {"recorded": "nsys function trace", "functions": functions, "stacks": 3}
        run.metadata["manifest"] = m
    head.metadata["manifest"]["driver_version"] = "999.1"
    keys = [d.key for d in env_diffs(base, head)]
    assert not [k for k in keys if k.startswith("manifest.stacks.")]
    assert "manifest.driver_version" in keys  # a real difference is still said


def test_info_and_export_read_a_several_commit_capture_folder(tmp_path: Path) -> None:
    code, out, err = cli("info", str(S / "runs"), "--format", "json")
    assert code == 0, err
    sets = json.loads(out)["run_sets"]
    assert [s["name"] for s in sets] == ["good", "bad", "slow-verify"]
    assert [len(s["runs"]) for s in sets] == [4, 4, 4] and all(s["commit"] for s in sets)
    code, out, _ = cli("info", str(S / "runs"))
    assert code == 0 and "[slow-verify] commit" in out and "3 run sets" in out
    code, _, err = cli("export", str(S / "runs"), "--parquet", str(tmp_path / "x"))
    assert code == 0, err
    parts = sorted(p.name for p in (tmp_path / "x" / "kernels").iterdir())
    assert parts == [
        f"run={s}-run-0{i}" for s in ("bad", "good", "slow-verify") for i in (1, 2, 3, 4)
    ]
    code, _, err = cli("compare", str(S / "runs"), str(S / "runs/bad"), "--format", "json")
    assert code == 1 and "holds several run sets (good, bad, slow-verify)" in err
    assert "not a Kineto trace" not in err


def test_perfetto_of_host_only_runs_draws_their_cycles(tmp_path: Path) -> None:
    out = tmp_path / "h.json.gz"
    code, doc, err = cli("compare", *HOST, "--perfetto", str(out), "--format", "json")
    assert code == 0, err
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    names = [e["args"]["name"] for e in events if e.get("name") == "thread_name"]
    assert names == ["host · cycles", "host · cycles"]
    d = json.loads(doc)
    cycles = [e for e in events if e.get("cat") == "cycle"]
    assert len(cycles) == d["base"]["cycles"] + d["head"]["cycles"] == 24
    assert all(e["dur"] > 1000 for e in cycles)  # each a range of several ms


def test_perfetto_cycles_of_a_run_set_carry_their_run(tmp_path: Path) -> None:
    out = tmp_path / "rs.json"
    code, _, err = cli(
        "compare", f"{S}/runs/good", f"{S}/runs/bad", "--perfetto", str(out), "--format", "json"
    )
    assert code == 0, err
    cycles = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "cycle"]
    per_run: dict[tuple[int, int], int] = {}
    for e in cycles:
        assert e["name"] == f"cycle {e['args']['cycle']} · run {e['args']['run']}"
        key = (e["pid"], e["args"]["run"])
        per_run[key] = per_run.get(key, 0) + 1
    assert per_run == {(pid, run): 20 for pid in (1, 2) for run in (1, 2, 3, 4)}  # 20 a run


def test_host_only_words() -> None:
    code, table, _ = cli("compare", *HOST, "--format", "table")
    assert code == 0 and "GPU change by phase" not in table
    assert "host wall time by phase: verify +5.799 ms*" in table
    code, _, err = cli("whatif", *HOST, "--take", "c0")
    assert code == 2 and "no contributor c0 (ids run h0..h2" in err


def test_run_sets_define_their_noise_floor_between_runs() -> None:
    code, table, _ = cli("compare", f"{S}/runs/good", f"{S}/runs/bad", "--format", "table")
    assert code == 0
    assert "noise floor: how much the mean cycle time varies from run to run" in table
    assert "within one run" not in table
    code, md, _ = cli("compare", f"{S}/runs/good", f"{S}/runs/bad", "--format", "markdown")
    assert "varies from run to run" in md


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["compare", "a", "b", "--formt", "json"], "(did you mean --format? see tracediff compare --help)"),
        (["info", "a", "--layot", "runs"], "(did you mean --layout? see tracediff info --help)"),
        (["comprae", "a", "b"], "(did you mean compare? see tracediff --help)"),
    ],
)  # fmt: skip
def test_a_misspelt_flag_or_command_gets_a_suggestion(argv: list[str], said: str) -> None:
    code, _, err = cli(*argv)
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1


def test_no_stacks_says_why() -> None:
    run = load(S / "g_good.arrow")
    assert why_no_stacks([run]) == NO_STACKS and "nsys" in NO_STACKS and "not yet" not in NO_STACKS
    m = copy.deepcopy(run.metadata.get("manifest") or {})
    m["stacks"] = {"recorded": "nsys function trace", "recorded_ranges": 24, "stacks": 0,
                   "kernels_with_stack": 0}  # fmt: skip
    run.metadata["manifest"] = m
    why = why_no_stacks([run])
    assert "recorded 24 ranges but no kernel was launched inside one" in why
    assert "cudaProfilerStart" in why
    m["stacks"] = {"recorded": "none", "why": "no Python package at the top of the PYTHONPATH"}
    assert why_no_stacks([run]).endswith("no Python package at the top of the PYTHONPATH")
