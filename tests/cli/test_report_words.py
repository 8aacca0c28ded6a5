"""What the text reports print around the numbers: names made inert, words defined, sides told
apart (issue 17, "Names and labels printed raw", "Words").

The runs are the bundled demo pair with one kernel's name (every instance, both sides), the label
and a warning replaced by hostile text: an ESC[2J (clears a terminal), a newline (splits a row),
a bidi override (reverses what follows on screen).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tracediff.cli import main
from tracediff.engine.inputs import distinct_labels
from tracediff.parse import load
from tracediff.report.compare_text import STATUSES
from tracediff.runs import schema
from tracediff.runs.runfile import Run, write_run

ROOT = Path(__file__).resolve().parents[2]
G = (ROOT / "samples" / "g_good.arrow", ROOT / "samples" / "g_bad.arrow")
EVIL = "evil\x1b[2J\nrow\u202ekernel"
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")  # what must never reach a terminal


def _run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _hostile(src: Path, dst: Path, victim: str) -> Path:
    run = load(src)
    tables = {n: run.table(n) for n in schema.TABLES}
    k = tables["kernels"]
    names = k["name"].cast(pa.string())
    renamed = pc.if_else(pc.equal(names, victim), EVIL, names)
    k = k.set_column(k.schema.get_field_index("name"), "name", renamed)
    tables["kernels"] = schema.conform("kernels", k)
    meta = dict(run.metadata, label=f"lab\x1b[31m{src.stem}")
    write_run(Run(tables=tables, metadata=meta, warnings=[f"seen {EVIL}"]), dst)
    return dst


@pytest.fixture(scope="module")
def hostile_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("hostile")
    counts = pc.value_counts(load(G[0]).table("kernels")["name"].cast(pa.string()))
    top = max(counts.to_pylist(), key=lambda v: (v["counts"], v["values"]))
    victim = str(top["values"])  # the most frequent kernel: a row of every report
    return _hostile(G[0], tmp / "b.arrow", victim), _hostile(G[1], tmp / "h.arrow", victim)


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_compare_text_formats_print_names_inert(hostile_pair: tuple[Path, Path], fmt: str) -> None:
    b, h = hostile_pair
    rc, out, err = _run_cli("compare", str(b), str(h), "--format", fmt, "--top", "1000")
    assert rc == 0, err
    assert not RAW.search(out) and not RAW.search(err), (RAW.findall(out), RAW.findall(err))
    assert "evil\\x1b[2J\\nrow\\u202ekernel" in out  # shown, escaped, on its row
    if fmt != "csv":
        row = next(line for line in out.splitlines() if "evil" in line)
        assert "kernel" in row.split("evil")[0]  # the kind column: one row, not split in two
        assert "lab\\x1b[31mg_good" in out
    if fmt != "table":  # machine formats send the warnings to stderr
        assert "seen evil\\x1b[2J" in err


def test_json_keeps_the_names_as_data(hostile_pair: tuple[Path, Path]) -> None:
    """JSON is for scripts: the name is the real name (JSON escapes it by its own rules)."""
    import json

    b, h = hostile_pair
    rc, out, _ = _run_cli("compare", str(b), str(h), "--format", "json")
    assert rc == 0
    names = {r["name"] for r in json.loads(out)["attribution"]}
    assert EVIL in names and "\x1b" not in out


def test_info_and_its_warnings_print_inert(hostile_pair: tuple[Path, Path]) -> None:
    rc, out, err = _run_cli("info", str(hostile_pair[0]))
    assert rc == 0
    assert "seen evil\\x1b[2J\\nrow" in err
    assert not RAW.search(out) and not RAW.search(err)


def test_one_cycle_is_one_cycle() -> None:
    rc, out, _ = _run_cli("compare", *map(str, G), "--format", "table", "--cycle", "whole")
    assert rc == 0
    assert "g_good: 1 cycle (whole-run)" in out and "1 cycles" not in out


def test_legend_defines_every_status_the_reports_use() -> None:
    """Every status the bundled pairs' reports hold is defined in the table's legend and in the
    README; so are "mixed" and "noise floor"."""
    import json

    seen = set()
    for f in (ROOT / "tests" / "golden" / "expected").glob("compare_*.json"):
        doc = json.loads(f.read_text().split("\n--- stderr ---\n")[0])
        seen |= {r["status"] for r in doc["attribution"]}
    assert {"matched", "mixed", "host-side", "-"} <= seen
    assert seen <= set(STATUSES), seen - set(STATUSES)
    rc, out, _ = _run_cli("compare", *map(str, G), "--format", "table")
    legend = " ".join(out.split("status: ", 1)[1].split())
    for status in STATUSES:
        assert f"{status} = " in legend, status
    assert "noise floor: " in out
    readme = " ".join((ROOT / "README.md").read_text().split())
    for status in STATUSES:
        assert f"`{status}`" in readme, status
    assert "noise floor" in readme


def test_same_file_name_in_two_folders_gets_two_labels(tmp_path: Path) -> None:
    """Both runs parsed from a `report.sqlite` (the label is the source's stem), kept in two
    folders: the labels are the folders' names, not "report" twice."""
    for side, src in zip(("good", "bad"), G, strict=True):
        (tmp_path / side).mkdir()
        run = load(src)
        meta = dict(run.metadata, source=f"/captures/{side}/report.sqlite")
        tables = {n: run.table(n) for n in schema.TABLES}
        write_run(Run(tables=tables, metadata=meta), tmp_path / side / "run.arrow")
        assert load(tmp_path / side / "run.arrow").label == "report"
    b, h = tmp_path / "good" / "run.arrow", tmp_path / "bad" / "run.arrow"
    rc, out, _ = _run_cli("compare", str(b), str(h), "--format", "table")
    assert rc == 0
    assert "base  good/report: 12 cycles" in out and "head  bad/report: 12 cycles" in out
    # the folders differ only further up: the shortest tails that differ
    assert distinct_labels(Path("/x/a/t/run.arrow"), Path("/x/b/t/run.arrow"), "run", "run") == (
        "a/t/run",
        "b/t/run",
    )
    # different labels, or one file compared with itself, stay as they are
    assert distinct_labels(b, h, "g", "h") == ("g", "h")
    assert distinct_labels(b, b, "run", "run") == ("run", "run")
