"""`tracediff whatif` end to end: real reports in, JSON/table out, clear errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracediff.cli import main

H200 = Path(__file__).resolve().parent.parent / "data" / "h200"
KEYS = {
    "predicted_ms_per_cycle",
    "recovered_ms_per_cycle",
    "base_ms_per_cycle",
    "head_ms_per_cycle",
    "selected",
    "critical_path",
    "replayed_head_ms_per_cycle",
    "cycles",
}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse's own usage errors (a value out of range)
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def test_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(
        capsys,
        "whatif",
        str(H200 / "e_good.sqlite"),
        str(H200 / "e_bad.sqlite"),
        "--take",
        "gap",
        "--format",
        "json",
    )
    assert rc == 0, err
    d = json.loads(out)
    assert KEYS <= set(d)
    assert d["base_ms_per_cycle"] > d["head_ms_per_cycle"]  # e_good happens to be the slower run
    # taking every idle gap from base moves the prediction most of the way to base
    assert abs(d["predicted_ms_per_cycle"] - d["base_ms_per_cycle"]) < 0.1 * d["base_ms_per_cycle"]
    assert d["recovered_ms_per_cycle"] == pytest.approx(
        d["replayed_head_ms_per_cycle"] - d["predicted_ms_per_cycle"]
    )
    assert {s["kind"] for s in d["selected"]} == {"gap"}
    assert all(0 <= r["share"] <= 1 for r in d["critical_path"])
    assert len(d["cycles"]) == 30


def test_table_and_several_selectors(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(
        capsys,
        "whatif",
        str(H200 / "g_good.sqlite"),
        str(H200 / "g_bad.sqlite"),
        "--take",
        "c0",
        "--take",
        "name:^nvjet_",
    )
    assert rc == 0, err
    assert "what-if" in out and "critical path" in out
    assert " c0 " in out


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--take", "name:("], 2, "regular expression"),
        (["--take", "c9999"], 2, "no contributor c9999"),
        (["--take", "zzz_no_such"], 2, "matches no contributor"),
        (["--take", "all", "--top", "0"], 2, "--top"),
    ],
)
def test_usage_errors(
    capsys: pytest.CaptureFixture[str], args: list[str], code: int, says: str
) -> None:
    rc, out, err = _run(
        capsys, "whatif", str(H200 / "g_good.sqlite"), str(H200 / "g_bad.sqlite"), *args
    )
    assert rc == code and out == ""
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 3\x00" + b"\x00" * 50)
    rc, out, err = _run(capsys, "whatif", str(junk), str(H200 / "g_bad.sqlite"), "--take", "all")
    assert rc == 1 and out == "" and err.startswith("tracediff: error:")
    rc, _, err = _run(
        capsys,
        "whatif",
        str(tmp_path / "missing.arrow"),
        str(H200 / "g_bad.sqlite"),
        "--take",
        "all",
    )
    assert rc == 1 and "no such file" in err


def test_compare_whatif_column(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(
        capsys,
        "compare",
        str(H200 / "g_good.sqlite"),
        str(H200 / "g_bad.sqlite"),
        "--whatif",
        "3",
        "--format",
        "json",
        "--bootstrap",
        "50",
    )
    assert rc == 0, err
    d = json.loads(out)
    assert [w["contributor_id"] for w in d["whatif"]] == [a["id"] for a in d["attribution"][:3]]
    top = d["attribution"][0]
    assert top["kind"] == "gap"  # host-bound idle in the draft phase dominates this pair
    assert d["whatif"][0]["recovered_ms_per_cycle"] == pytest.approx(
        top["delta_ms_per_cycle"], rel=0.02
    )
    rc, out, _ = _run(
        capsys,
        "compare",
        str(H200 / "g_good.sqlite"),
        str(H200 / "g_bad.sqlite"),
        "--whatif",
        "--format",
        "table",
        "--bootstrap",
        "50",
    )
    assert rc == 0 and "what-if:" in out
    rc, out, _ = _run(
        capsys,
        "compare",
        str(H200 / "g_good.sqlite"),
        str(H200 / "g_bad.sqlite"),
        "--format",
        "json",
        "--bootstrap",
        "50",
    )
    assert "whatif" not in json.loads(out)  # only when asked: it costs a replay per contributor
