"""Reports read through the real nsys CLI: .nsys-rep, .qdstrm, parquetdir; failures and cleanup."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import polars as pl
import pytest

from tracediff.base import nsys_tool
from tracediff.base.errors import InputError, ToolError, UnsupportedVersionError
from tracediff.parse import load
from tracediff.runs import schema
from tracediff.runs.runfile import Run

pytestmark = [pytest.mark.nsys]

H200 = Path(__file__).resolve().parent.parent / "data" / "h200"
STEMS = ["g_good", "g_bad", "e_good", "e_bad"]


def _frames(run: Run) -> dict[str, pl.DataFrame]:
    """Tables with dictionary columns decoded (string ids differ between export routes)."""
    out = {}
    for t in schema.TABLES:
        df = pl.from_arrow(run.table(t))
        assert isinstance(df, pl.DataFrame)
        out[t] = df.with_columns(pl.col(pl.Categorical).cast(pl.String))
    return out


def _assert_same(a: Run, b: Run) -> None:
    fa, fb = _frames(a), _frames(b)
    for t in schema.TABLES:
        assert fa[t].equals(fb[t]), t
    assert a.metadata["nsys_schema_version"] == b.metadata["nsys_schema_version"]


@pytest.fixture
def tmpdir_watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point tempfile at an empty folder so tests can see that nothing is left behind."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.mark.parametrize("stem", STEMS)
def test_report_reads_same_as_its_sqlite_export(nsys: str, stem: str, tmpdir_watch: Path) -> None:
    rep = load(H200 / f"{stem}.nsys-rep")
    _assert_same(rep, load(H200 / f"{stem}.sqlite"))
    assert rep.metadata["source_format"] == "nsys-rep"
    assert rep.metadata["nsys_export_format"] == "parquetdir"
    assert rep.metadata["nsys_report_version"] == "2024.2.3.38"
    assert list(tmpdir_watch.iterdir()) == []


def test_qdstrm_is_imported_then_read(nsys: str, tmpdir_watch: Path) -> None:
    run = load(H200 / "e_good.qdstrm")
    _assert_same(run, load(H200 / "e_good.sqlite"))
    assert run.metadata["source_format"] == "qdstrm"
    assert list(tmpdir_watch.iterdir()) == []


def test_parquetdir_folder_reads_same_as_sqlite(nsys: str, tmp_path: Path) -> None:
    out = tmp_path / "g_bad_pqtdir"
    subprocess.run(
        [
            nsys,
            "export",
            "--type",
            "parquetdir",
            "--quiet=true",
            "-o",
            str(out),
            str(H200 / "g_bad.nsys-rep"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    run = load(out)
    assert run.metadata["source_format"] == "nsys-parquetdir"
    _assert_same(run, load(H200 / "g_bad.sqlite"))


def test_newer_report_names_the_version_needed(nsys: str, tmp_path: Path) -> None:
    rep = tmp_path / "new.nsys-rep"
    rep.write_bytes(
        (H200 / "g_good.nsys-rep").read_bytes().replace(b"2024@2@3@38", b"2026@2@1@21", 1)
    )
    with pytest.raises(UnsupportedVersionError) as e:
        load(rep)
    assert "2026.2.1.21" in e.value.message and str(rep) in e.value.message
    # and if the header check is bypassed, nsys's own refusal is recognised the same way
    with pytest.raises(UnsupportedVersionError, match="2026.2.1.21"):
        nsys_tool.run(
            [nsys, "export", "--type", "sqlite", "-o", str(tmp_path / "x.sqlite"), str(rep)],
            timeout=120,
            what="nsys export",
            src=rep,
        )


@pytest.mark.parametrize("cut", [0.02, 0.5, 0.98])
def test_truncated_report_is_one_clear_error(
    nsys: str, tmp_path: Path, cut: float, tmpdir_watch: Path
) -> None:
    data = (H200 / "g_good.nsys-rep").read_bytes()
    rep = tmp_path / "cut.nsys-rep"
    rep.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(InputError) as e:
        load(rep)
    assert e.value.message.startswith(f"{rep}: nsys cannot read this report (")
    assert "\n" not in str(e.value)
    assert list(tmpdir_watch.iterdir()) == []


def test_export_timeout_is_a_tool_error(
    nsys: str, monkeypatch: pytest.MonkeyPatch, tmpdir_watch: Path
) -> None:
    monkeypatch.setenv("TRACEDIFF_NSYS_TIMEOUT", "0.001")
    with pytest.raises(ToolError, match="did not finish within"):
        load(H200 / "g_good.nsys-rep")
    assert list(tmpdir_watch.iterdir()) == []
