"""`tracediff compare` on the command line: the four report formats, --fail-above, bad inputs."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.support.gen_nsys import SlowerKernel, write_report
from tracediff.cli import main

ROOT = Path(__file__).parent.parent.parent
BASE, HEAD = ROOT / "samples" / "g_good.arrow", ROOT / "samples" / "g_bad.arrow"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def reports() -> dict[str, str]:
    """The four formats of one comparison, each from its own CLI run."""
    out = {}
    for fmt in ("table", "markdown", "json", "csv"):
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            rc = main(["compare", str(BASE), str(HEAD), "--format", fmt, "--top", "10"])
        assert rc == 0, err.getvalue()
        out[fmt] = buf.getvalue()
    return out


def test_json_is_clean_stdout() -> None:
    """A real process: stdout is only the JSON document (diagnostics go to stderr)."""
    p = subprocess.run(
        [sys.executable, "-m", "tracediff", "compare", str(BASE), str(HEAD), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["format_version"] == 1


def test_json_attribution_sums_to_delta(reports: dict[str, str]) -> None:
    d = json.loads(reports["json"])
    total = sum(a["delta_ms_per_cycle"] for a in d["attribution"])
    # each printed number is rounded to 1e-9 ms (report/numbers.py): n + 1 roundings apart
    slack = 1e-9 * (len(d["attribution"]) + 1)
    assert total == pytest.approx(d["delta_ms_per_cycle"]["mean"], abs=slack)
    assert abs(d["residual_ms_per_cycle"]) < 1e-9
    lo, hi = d["delta_ms_per_cycle"]["ci95"]
    assert lo <= d["delta_ms_per_cycle"]["mean"] <= hi
    deltas = [abs(a["delta_ms_per_cycle"]) for a in d["attribution"]]
    assert deltas == sorted(deltas, reverse=True)


def test_csv_rows_are_the_attribution_rows(reports: dict[str, str]) -> None:
    d = json.loads(reports["json"])
    csv = pl.read_csv(io.StringIO(reports["csv"]))
    assert csv.height == len(d["attribution"])
    assert csv["contributor_id"].to_list() == [a["id"] for a in d["attribution"]]
    assert csv["delta_ms_per_cycle"].to_list() == pytest.approx(
        [a["delta_ms_per_cycle"] for a in d["attribution"]]
    )
    assert csv["significant"].to_list() == [a["significant"] for a in d["attribution"]]
    assert csv["delta_ms_per_cycle"].sum() == pytest.approx(
        d["delta_ms_per_cycle"]["mean"],
        abs=1e-9 * (csv.height + 1),  # printed at 1e-9 ms
    )


def test_markdown_and_table_agree_with_json(reports: dict[str, str]) -> None:
    d = json.loads(reports["json"])
    change = f"change {d['delta_ms_per_cycle']['mean']:+.3f} ms/cycle"
    assert change in reports["table"] and change in reports["markdown"]
    rows = [
        ln
        for ln in reports["markdown"].splitlines()
        if ln.startswith("| ") and not ln.startswith("| id")
    ]
    top = d["attribution"][:10]
    assert len(rows) == len(top)
    # each row leads with its id, the one `whatif --take ID` takes (JSON's "id")
    for ln, a in zip(rows, top, strict=True):
        cells = [c.strip() for c in ln.strip("|").split(" | ")]
        assert cells[:2] == [a["id"], a["kind"]]
        assert float(cells[6]) == pytest.approx(a["delta_ms_per_cycle"], abs=0.0005)
        assert cells[8] == ("yes" if a["significant"] else "no")
    lines = reports["table"].splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["id", "kind"])
    for ln, a in zip(lines[head + 1 : head + 1 + len(top)], top, strict=True):
        assert ln.split()[:2] == [a["id"], a["kind"]]
        assert f"{a['delta_ms_per_cycle']:+9.3f}{'*' if a['significant'] else ' '}" in ln


@pytest.fixture(scope="module")
def regression(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("cli")
    b = write_report(d / "b.sqlite", 1, 20, 21, seed=1).path
    slow = write_report(
        d / "slow.sqlite", 1, 20, 21, [SlowerKernel("flash_fwd_kernel", 20_000)], seed=2
    ).path
    same = write_report(d / "same.sqlite", 1, 20, 21, seed=3).path
    return b, slow, same


def _pct(capsys: pytest.CaptureFixture[str], b: Path, h: Path) -> dict:
    rc, out, _ = _run(capsys, b, h, "--format", "json")
    assert rc == 0
    return json.loads(out)["delta_ms_per_cycle"]


def test_fail_above_trips_only_on_significant_growth_above_pct(
    capsys: pytest.CaptureFixture[str], regression: tuple[Path, Path, Path]
) -> None:
    b, slow, _ = regression
    d = _pct(capsys, b, slow)
    assert d["significant"] and d["pct"] > 5
    rc, out, err = _run(capsys, b, slow, "--format", "json", "--fail-above", f"{d['pct'] - 1:.2f}")
    assert rc == 3 and json.loads(out)["delta_ms_per_cycle"]["significant"]  # report still printed
    assert "grew" in err and len(err.strip().splitlines()) == 1
    rc, _, _ = _run(capsys, b, slow, "--format", "json", "--fail-above", f"{d['pct'] + 1:.2f}")
    assert rc == 0
    # an improvement never trips it
    rc, _, _ = _run(capsys, slow, b, "--format", "json", "--fail-above", "0")
    assert rc == 0


def test_fail_above_ignores_growth_within_noise(
    capsys: pytest.CaptureFixture[str], regression: tuple[Path, Path, Path]
) -> None:
    b, _, same = regression
    d = _pct(capsys, b, same)
    lo, hi = (b, same) if d["pct"] > 0 else (same, b)  # the direction in which the run grew
    d = _pct(capsys, lo, hi)
    assert d["pct"] > 0 and not d["significant"]
    rc, _, _ = _run(capsys, lo, hi, "--format", "json", "--fail-above", "0")
    assert rc == 0


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = _run(capsys, tmp_path / "nope.arrow", HEAD, "--format", "json")
    assert rc == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "nope.arrow" in err and "no such file" in err


def test_unknown_cycle_lists_ranges(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, BASE, HEAD, "--format", "json", "--cycle", "no_such_range")
    assert rc == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "no_such_range" in lines[0]
    present = lines[0].split("ranges present:")[1]
    for name in ("cycle", "draft", "verify"):  # the push/pop ranges of the h200 specloop capture
        assert name in present


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["compare", str(BASE), str(HEAD), "--format", "yaml"])
    assert e.value.code == 2
    assert "invalid choice: 'yaml'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # a count out of range: argparse's one line
        main(["compare", str(BASE), str(HEAD), "--format", "json", "--top", "0"])
    assert e.value.code == 2
    assert "argument --top: 0: give a number from 1 to" in capsys.readouterr().err
