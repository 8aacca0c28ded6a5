"""A kernel renamed in place (issue 17, "Renamed ops are shown under the old name").

Head is the demo pair's g_bad with its split-K GEMM renamed to a longer, re-tuned name in every
instance (same time, same place in the cycle). The aligner files it as `old → new`; the report
must say `renamed`, show the new name first (both names shortened only as far as needed) and give
scripts the two names apart.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tracediff.cli import main
from tracediff.parse import load
from tracediff.report.text import renamed
from tracediff.runs import schema
from tracediff.runs.runfile import Run, write_run

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "samples" / "g_good.arrow"
OLD = "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_splitK_TNT"
NEW = "nvjet_sm90_tst_256x16_64x12_2x1_v_bz_splitK_TNT_retuned_for_the_new_cublas_heuristics_v2"


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = load(ROOT / "samples" / "g_bad.arrow")
    tables = {n: run.table(n) for n in schema.TABLES}
    k = tables["kernels"]
    names = k["name"].cast(pa.string())
    assert pc.sum(pc.equal(names, OLD)).as_py() > 0
    k = k.set_column(
        k.schema.get_field_index("name"), "name", pc.if_else(pc.equal(names, OLD), NEW, names)
    )
    tables["kernels"] = schema.conform("kernels", k)
    path = tmp_path_factory.mktemp("renamed") / "g_bad_renamed.arrow"
    write_run(Run(tables=tables, metadata=dict(run.metadata)), path)
    return path


def _out(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main([*argv, "--bootstrap", "100"]) == 0
    return out.getvalue()


def test_json_says_renamed_with_both_names(head: Path) -> None:
    d = json.loads(_out("compare", str(BASE), str(head), "--format", "json"))
    rows = [r for r in d["attribution"] if r["head_name"] == NEW]
    assert len(rows) == 2  # the draft and the verify phase
    for r in rows:
        assert r["status"] == "renamed" and r["base_name"] == OLD
        assert r["kind"] == "kernel" and r["head_ms_per_cycle"] > 0.09
    assert not [r for r in d["attribution"] if r["status"] == "added"]
    others = [r for r in d["attribution"] if r["status"] != "renamed"]
    assert all(r["base_name"] is None and r["head_name"] is None for r in others)


def test_table_and_markdown_show_the_new_name_first(head: Path) -> None:
    table = _out("compare", str(BASE), str(head), "--format", "table", "--top", "40")
    rows = [line for line in table.splitlines() if "(renamed from " in line]
    assert len(rows) == 2
    for row in rows:
        name = row.split("%  ", 1)[1]
        assert name.startswith("nvjet_sm90_tst_256x16") and len(name) <= 70
        assert name.split("(renamed from ")[1].startswith("nvjet_sm90_tst_12")
    md = _out("compare", str(BASE), str(head), "--format", "markdown", "--top", "40")
    md_rows = [line for line in md.splitlines() if "| renamed |" in line]
    assert len(md_rows) == 2 and all("`nvjet_sm90_tst_256x16" in r for r in md_rows)
    csv = _out("compare", str(BASE), str(head), "--format", "csv")
    assert csv.splitlines()[0].endswith(",base_name,head_name")


def test_two_names_in_a_column() -> None:
    assert renamed("old_k", "new_k", 70) == "new_k (renamed from old_k)"  # room: both whole
    got = renamed(OLD, NEW, 70)
    assert len(got) == 70 and got.startswith("nvjet_sm90_tst_256x16") and "…" in got
    head, base = got.removesuffix(")").split(" (renamed from ")
    assert len(head) >= len(base)  # the name that runs now keeps the larger part
    assert renamed("a" * 10, NEW, 70).endswith("(renamed from aaaaaaaaaa)")  # short base whole


def test_a_run_with_itself_renames_nothing() -> None:
    """Cycles of one run may put different kernels in one template slot (the SGLang decode trace
    has such `a → b` labels); with itself on both sides that is no change: no row is renamed."""
    one = str(ROOT / "tests" / "data" / "kineto" / "sglang_Qwen3-8B_decode.json.gz")
    d = json.loads(_out("compare", one, one, "--format", "json"))
    labels = [r for r in d["attribution"] if " → " in r["name"]]
    assert labels and all(r["status"] == "matched" for r in labels)
    assert all(r["base_name"] is None for r in d["attribution"])


def _rows(base: str, head: str) -> dict:  # type: ignore[type-arg]
    return json.loads(_out("compare", base, head, "--format", "json"))


def _adds_up(d: dict) -> None:  # type: ignore[type-arg]
    """The additive attribution: the rows' changes sum to the measured change (the residual,
    printed, is rounding)."""
    total = sum(r["delta_ms_per_cycle"] for r in d["attribution"])
    assert abs(d["residual_ms_per_cycle"]) < 1e-9
    assert total + d["residual_ms_per_cycle"] == pytest.approx(d["delta_ms_per_cycle"]["mean"])


def test_the_old_name_has_no_removed_row_of_its_own(head: Path) -> None:
    """The renamed kernel's base time is on its `renamed` row (base 0.099/0.266 ms per cycle in
    draft/verify, head the same), not on a `removed` row of the old name beside a `renamed` row
    without base time (which read as -0.27 and +0.27 ms/cycle for one unchanged kernel)."""
    d = _rows(str(BASE), str(head))
    assert not [r for r in d["attribution"] if r["name"] == OLD]
    rows = [r for r in d["attribution"] if r["status"] == "renamed"]
    assert len(rows) == 2
    for r in rows:
        assert r["base_count_per_cycle"] == r["head_count_per_cycle"] > 0
        assert r["base_ms_per_cycle"] == pytest.approx(r["head_ms_per_cycle"], rel=0.01)
        assert abs(r["delta_ms_per_cycle"]) < 0.001  # the same kernel time under a new name
    _adds_up(d)


KINETO = ROOT / "tests" / "data" / "kineto"
REAL = [  # cuDNN picks other kernels with 4 data-loader workers; another rank's embedding kernels
    (
        KINETO / "resnet50_num_workers_0.worker0.pt.trace.json.gz",
        KINETO / "resnet50_num_workers_4.worker0.pt.trace.json.gz",
    ),
    (KINETO / "sampled_rank-0.json.gz", KINETO / "sampled_rank-1.json.gz"),
]


@pytest.mark.parametrize("pair", REAL, ids=["resnet50-workers-0-4", "hta-rank-0-1"])
def test_real_renames_carry_the_old_ops_time(pair: tuple[Path, Path]) -> None:
    d = _rows(*map(str, pair))
    # another op in the old one's place (cuDNN's other algorithm) is `replaced`, the same op
    # under a new name `renamed`: either row carries the old op's time
    renamed_rows = [r for r in d["attribution"] if r["status"] in ("renamed", "replaced")]
    assert renamed_rows
    old = {(r["base_name"], r["phase"], r["device"]) for r in renamed_rows}
    # a renamed op appears once: its old name has no `removed` row in the same place
    assert not [
        r
        for r in d["attribution"]
        if r["status"] == "removed" and (r["name"], r["phase"], r["device"]) in old
    ]
    assert all(r["base_ms_per_cycle"] > 0 and r["head_ms_per_cycle"] > 0 for r in renamed_rows)
    assert all(r["base_name"] and r["head_name"] for r in renamed_rows)
    _adds_up(d)
