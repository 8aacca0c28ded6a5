"""capture.runner.nsys_lost: which failed nsys runs are nsys's own transient failure (retried once
by capture), read from capture.log when nsys wrote no report and was not interrupted."""

from __future__ import annotations

from pathlib import Path

import pytest

from capture.runner import nsys_lost


@pytest.mark.parametrize(
    ("log", "lost"),
    [
        ("Local Endpoint is not available\n", "Local Endpoint is not available"),
        ("x\nConnection to Agent lost: 3\n", "Connection to Agent lost: 3"),
        ("profiling\nEnd of file\n", "End of file"),  # the whole line (session 13, 4 nsys at once)
        # nsys said it wrote the report, and none is there (session 20, exit 0, under load)
        (
            "[1/1] [=====100%] report.nsys-repGenerated:\n",
            "[1/1] [=====100%] report.nsys-repGenerated:",
        ),
        ("[1/1] [=====100%] report.nsys-rep\nGenerated:\n", "Generated:"),
        ("Traceback ...\nEOFError: End of file reached\n", None),  # a workload's own words
        ("Generated: 128 tokens\n", None),
        ("Error: the application exited with 1\n", None),
    ],
)
def test_a_failed_run_is_nsys_s_own_only_by_its_known_lines(
    tmp_path: Path, log: str, lost: str | None
) -> None:
    (tmp_path / "capture.log").write_text(log)
    assert nsys_lost(tmp_path, 1, False) == lost
    assert nsys_lost(tmp_path, 1, True) is None  # interrupted: not retried
    assert nsys_lost(tmp_path, 0, False) == lost  # exit 0 and no report: nsys lost the run too
    (tmp_path / "report.qdstrm").write_bytes(b"")  # a report was written: the workload's failure
    assert nsys_lost(tmp_path, 1, False) is None
