"""Locating nsys/QdstrmImporter and reading report headers (no nsys run needed here)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tracediff.base import nsys_tool
from tracediff.base.errors import ToolError

pytestmark = [pytest.mark.nsys]

H200 = Path(__file__).resolve().parent.parent.parent / "data" / "h200"


def _fake_exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2099.1.2.3-0'\n")
    path.chmod(0o755)
    return path


def test_env_var_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_exe(tmp_path / "bin" / "nsys")
    monkeypatch.setenv(nsys_tool.ENV, str(exe))
    assert nsys_tool.find_nsys() == exe
    monkeypatch.setenv(nsys_tool.ENV, str(exe.parent))  # a folder holding nsys works too
    assert nsys_tool.find_nsys() == exe
    assert nsys_tool.tool_version(exe) == (2099, 1, 2, 3)


def test_env_var_pointing_nowhere_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(nsys_tool.ENV, str(tmp_path / "missing" / "nsys"))
    with pytest.raises(ToolError) as e:
        nsys_tool.find_nsys()
    assert nsys_tool.ENV in e.value.message and "make nsys" in str(e.value.hint)


def test_not_installed_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(nsys_tool.ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsys_tool, "DEFAULT_PREFIX", tmp_path / "nowhere")
    with pytest.raises(ToolError) as e:
        nsys_tool.find_nsys()
    assert "not installed" in e.value.message
    assert "tools/install-nsys.sh" in str(e.value.hint)
    with pytest.raises(ToolError, match="QdstrmImporter"):
        nsys_tool.find_qdstrm_importer()


def test_importer_found_in_nvidia_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsys = _fake_exe(tmp_path / "target-linux-x64" / "nsys")
    imp = _fake_exe(tmp_path / "host-linux-x64" / "QdstrmImporter")
    monkeypatch.setenv(nsys_tool.ENV, str(nsys))
    monkeypatch.setenv("PATH", "")
    assert nsys_tool.find_qdstrm_importer() == imp


def test_report_versions_from_real_headers() -> None:
    for stem in ("g_good", "g_bad", "e_good", "e_bad"):
        assert nsys_tool.report_version(H200 / f"{stem}.nsys-rep") == (2024, 2, 3, 38)
    assert nsys_tool.report_version(H200 / "e_good.qdstrm") == (2024, 2, 3, 38)
    assert nsys_tool.report_version(H200 / "g_good.sqlite") is None


def test_newer_report_refused_before_running(tmp_path: Path) -> None:
    data = (H200 / "g_good.nsys-rep").read_bytes().replace(b"2024@2@3@38", b"2026@2@1@21", 1)
    rep = tmp_path / "new.nsys-rep"
    rep.write_bytes(data)
    exe = _fake_exe(tmp_path / "bin" / "nsys")
    exe.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2024.2.3.38-242334140272v0'\n")
    nsys_tool.tool_version.cache_clear()
    nsys_tool.version_output.cache_clear()
    with pytest.raises(nsys_tool.UnsupportedVersionError) as e:
        nsys_tool.check_can_open(rep, exe)
    assert "2026.2.1.21" in e.value.message and "2024.2.3.38" in e.value.message
    assert "nsys 2026.2.1.21 or newer" in str(e.value.hint)


def test_run_timeout_kills_the_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    script = tmp_path / "slow.sh"
    script.write_text(f"#!/bin/sh\nsleep 30 &\necho $! > {marker}\nwait\n")
    script.chmod(0o755)
    with pytest.raises(ToolError, match="did not finish within 0.5 s") as e:
        nsys_tool.run([str(script)], timeout=0.5, what="slow tool", src=tmp_path / "x")
    # the hint names what exists: the variable settings.py reads, no flag of the CLI
    assert "TRACEDIFF_NSYS_TIMEOUT" in str(e.value.hint)
    assert re.findall(r"--[a-z][a-z-]*", str(e.value.hint)) == []
    status = Path(f"/proc/{int(marker.read_text())}/status")
    for _ in range(50):  # the grandchild was killed too: gone, or a zombie awaiting its reaper
        if not status.exists() or "State:\tZ" in status.read_text():
            break
        time.sleep(0.05)
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_last_error_line_skips_progress() -> None:
    err = "Exportation error: Section Table Reference magic number mismatch."
    out = f"Processing [1%   ]\rProcessing [100%]\n{err}\n"
    assert nsys_tool.last_error_line(out) == err


def test_explicit_path_wins_and_may_be_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _fake_exe(tmp_path / "mine" / "nsys")
    monkeypatch.setenv(nsys_tool.ENV, str(_fake_exe(tmp_path / "env" / "nsys")))
    assert nsys_tool.find_nsys(str(mine)) == mine
    assert nsys_tool.find_nsys(str(mine.parent)) == mine  # as $TRACEDIFF_NSYS allows
    with pytest.raises(ToolError) as e:
        nsys_tool.find_nsys(str(tmp_path / "missing"))
    assert e.value.message == f"--nsys {tmp_path / 'missing'}: no nsys executable there"


@pytest.mark.parametrize("where", ["bin", "host-linux-x64", "bin/host-linux-x64"])
def test_importer_beside_the_given_nsys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """NVIDIA's layouts: the same folder, host-linux-x64/ beside it, or below it."""
    nsys = _fake_exe(tmp_path / "bin" / "nsys")
    imp = _fake_exe(tmp_path / where / "QdstrmImporter")
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(nsys_tool, "DEFAULT_PREFIX", tmp_path / "nowhere")
    assert nsys_tool.find_qdstrm_importer(nsys, installed=False) == imp


def test_capture_uses_only_its_own_install_s_importer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another install's importer (the one under DEFAULT_PREFIX) is found for `parse`, never for
    a capture; a QdstrmImporter that cannot be run is no importer (capture used to run it)."""
    from capture import runner

    nsys = _fake_exe(tmp_path / "target" / "nsys")
    (tmp_path / "target" / "QdstrmImporter").write_text("#!/bin/sh\n")  # not executable
    installed = _fake_exe(tmp_path / "opt" / "bin" / "QdstrmImporter")
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(nsys_tool, "DEFAULT_PREFIX", tmp_path / "opt")
    assert nsys_tool.find_qdstrm_importer(nsys) == installed
    with pytest.raises(ToolError, match="QdstrmImporter"):
        nsys_tool.find_qdstrm_importer(nsys, installed=False)
    qdstrm = tmp_path / "report.qdstrm"
    qdstrm.write_bytes(b"x")
    assert runner.import_qdstrm(qdstrm, str(nsys)) is None
    assert qdstrm.exists()
