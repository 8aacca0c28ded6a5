"""Golden files: every output of the CLI on bundled real pairs, byte for byte.

A change of output is a reviewed diff of `tests/golden/expected/`, not a surprise. To accept a
deliberate change, run

    TRACEDIFF_UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/golden/test_golden_outputs.py

and read `git diff tests/golden/expected` before committing it. Each case runs the real CLI
(`tracediff.cli.main`) in this process on paths relative to the repository root; the repository
path is replaced by `<repo>` and a temporary folder by `<tmp>`, so the files hold nothing of the
machine that made them. The set was first written from the code at 60fc3ca, before the reshape
of the core (issue 16), so the reshape is proven to change no output.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tracediff.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).parent / "expected"
UPDATE = os.environ.get("TRACEDIFF_UPDATE_GOLDEN") == "1"

G = ("samples/g_good.arrow", "samples/g_bad.arrow")  # the demo pair (CUDA graph, NVTX cycles)
K = ("tests/data/h200/k_good.json.gz", "tests/data/h200/k_bad.json.gz")  # Kineto, no markers

# name -> argv. Two pairs in every compare format, what-if both ways, info, export.
CASES: dict[str, list[str]] = {}
for tag, (b, h) in {"g": G, "k": K}.items():
    for fmt in ("table", "markdown", "json", "csv"):
        CASES[f"compare_{tag}.{fmt}"] = ["compare", b, h, "--format", fmt, "--bootstrap", "200"]
    CASES[f"compare_{tag}_whatif.table"] = [
        "compare",
        b,
        h,
        "--format",
        "table",
        "--whatif",
        "3",
        "--bootstrap",
        "200",
    ]
    CASES[f"compare_{tag}_whatif.json"] = [
        "compare",
        b,
        h,
        "--format",
        "json",
        "--whatif",
        "3",
        "--bootstrap",
        "200",
    ]
    for fmt in ("table", "json"):
        CASES[f"whatif_{tag}_kernel.{fmt}"] = ["whatif", b, h, "--take", "kernel", "--format", fmt]
        CASES[f"whatif_{tag}_c0.{fmt}"] = ["whatif", b, h, "--take", "c0", "c1", "--format", fmt]
CASES["compare_g_whole.table"] = ["compare", *G, "--format", "table", "--cycle", "whole"]
CASES["compare_g_top3.markdown"] = ["compare", *G, "--format", "markdown", "--top", "3"]
# launch stacks (Kineto with_stack, H200): the `launched from` column (issue 19)
MINISPEC = (
    "tests/data/h200-suspects/kineto/c1_base_eager.json.gz",
    "tests/data/h200-suspects/kineto/c5_unused_eager.json.gz",
)
for fmt in ("table", "markdown"):
    CASES[f"compare_minispec.{fmt}"] = ["compare", *MINISPEC, "--format", fmt, "--bootstrap", "200"]
for name, path in {
    "g_good": G[0],
    "k_good": K[0],
    "mfu_before": "tests/data/nsys/nsys-ai/mfu_2gpu_before.sqlite",
    "nccl": "tests/data/kineto/nccl_data.json.gz",
}.items():
    for fmt in ("table", "json"):
        CASES[f"info_{name}.{fmt}"] = ["info", path, "--format", fmt]
for fmt in ("table", "json"):  # a run set: each run's cycles and mean cycle time
    CASES[f"info_runs_good.{fmt}"] = ["info", "samples/runs/good", "--format", fmt]

# The JSON of `compare` on every bundled real pair (and the single reports with themselves).
PAIRS: dict[str, tuple[str, str]] = {
    "g": G,
    "k": K,
    "e": ("tests/data/h200/e_good.sqlite", "tests/data/h200/e_bad.sqlite"),
    "specloop_bad": ("samples/specloop_good.arrow", "samples/specloop_bad.arrow"),
    "specloop_slow": ("samples/specloop_good.arrow", "samples/specloop_slow_verify.arrow"),
    "torch_twostream": (
        "tests/data/h200/twostream/torch_good.sqlite",
        "tests/data/h200/twostream/torch_slow-a.sqlite",
    ),
    "cupy_twostream": (
        "tests/data/h200/twostream/cupy_good.sqlite",
        "tests/data/h200/twostream/cupy_slow-a.sqlite",
    ),
    "mfu": (
        "tests/data/nsys/nsys-ai/mfu_2gpu_before.sqlite",
        "tests/data/nsys/nsys-ai/mfu_2gpu_after.sqlite",
    ),
}
for one in (
    "tests/data/nsys/Fuser/report1.sqlite",
    "tests/data/nsys/pipit/perlmutter-cloverleaf-cuda.sqlite",
    "tests/data/nsys/pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    "tests/data/kineto/nccl_data.json.gz",
    "tests/data/kineto/sampled_rank-0.json.gz",
    "tests/data/kineto/sglang_Qwen3-8B_decode.json.gz",
    "tests/data/kineto/resnet50_num_workers_0.worker0.pt.trace.json.gz",
    "tests/data/kineto/step_based_trace_2543932.json.gz",
):
    PAIRS[Path(one).name.split(".")[0] + "_self"] = (one, one)
for tag, (b, h) in PAIRS.items():
    CASES.setdefault(
        f"compare_{tag}.json", ["compare", b, h, "--format", "json", "--bootstrap", "200"]
    )


def run_cli(argv: list[str], tmp: Path) -> str:
    """stdout, then stderr and the exit code, of one CLI call, with machine paths replaced."""
    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    finally:
        os.chdir(cwd)
    text = f"{out.getvalue()}\n--- stderr ---\n{err.getvalue()}--- exit {rc} ---\n"
    return text.replace(str(tmp), "<tmp>").replace(str(ROOT), "<repo>")


def check(name: str, text: str) -> None:
    path = EXPECTED / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path.name}: run with TRACEDIFF_UPDATE_GOLDEN=1"
    expected = path.read_text()
    assert text == expected, f"{name} differs from its golden file (TRACEDIFF_UPDATE_GOLDEN=1)"


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_output_matches_golden(name: str, tmp_path: Path) -> None:
    check(name, run_cli(CASES[name], tmp_path))


def _schemas(folder: Path) -> str:
    """Every Parquet file's relative path and Arrow schema (metadata left out), sorted."""
    lines = []
    for f in sorted(folder.rglob("*.parquet")):
        rel = f.relative_to(folder)
        schema = pq.read_schema(f).remove_metadata()
        lines.append(f"== {rel}\n{schema.to_string(show_schema_metadata=False)}\n")
    return "\n".join(lines)


def test_export_schema_matches_golden(tmp_path: Path) -> None:
    """`export` of one run and `compare --export` of a pair: files and their schemas."""
    runs = tmp_path / "runs"
    text = run_cli(["export", *G, "--parquet", str(runs)], tmp_path)
    text += _schemas(runs)
    diff = tmp_path / "diff"
    run_cli(
        ["compare", *G, "--format", "json", "--bootstrap", "50", "--export", str(diff)], tmp_path
    )
    text += "\n##### compare --export\n" + _schemas(diff)
    check("export_schema.txt", text)


def test_golden_json_is_json() -> None:
    """The JSON goldens are what a script reads: each parses as one JSON document."""
    if UPDATE:
        pytest.skip("updating")
    for f in sorted(EXPECTED.glob("*.json")):
        body = f.read_text().split("\n--- stderr ---\n")[0]
        json.loads(body)
