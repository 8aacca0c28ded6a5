"""A GPU host with only the nsys *target* package: nsys leaves a .qdstrm and nothing imports it.

Reproduced with the real nsys by hard-linking its target-linux-x64 folder somewhere without the
host folder beside it (what `dpkg -x nsight-systems-target` gives on the H200). Capture must keep
the .qdstrm and print the `tracediff parse` command that imports it later, and that command works.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.support.capture import capture
from tests.support.gitrepo import git, target_only_nsys, tracediff
from tracediff.runs.runfile import read_run

pytestmark = [pytest.mark.nsys, pytest.mark.git]


def test_qdstrm_left_for_later_import(repo: Path, nsys: str, tmp_path: Path) -> None:  # noqa: F811
    target_nsys = target_only_nsys(nsys, tmp_path)
    out = tmp_path / "cap"
    r = capture(repo, "base", out, nsys=str(target_nsys))
    assert r.returncode == 0, r.stderr
    assert (out / "report.qdstrm").is_file() and not (out / "run.arrow").exists()
    later = f"tracediff parse {out / 'report.qdstrm'} -o {out / 'run.arrow'}"
    assert r.stderr.strip().splitlines()[-1] == (
        f"tracediff: warning: no QdstrmImporter here: import later with `{later}`"
    )
    m = json.loads((out / "manifest.json").read_text())
    assert m["report"] == "report.qdstrm" and "QdstrmImporter" in m["reasons"]["run_file"]
    # the advice works, on a machine that has the importer (this one, through the nsys fixture)
    p = tracediff(*later.split()[1:], env={"TRACEDIFF_NSYS": nsys}, timeout=120)
    assert p.returncode == 0, p.stderr
    cycles = pl.from_arrow(read_run(out / "run.arrow").table("nvtx_ranges")).filter(
        pl.col("name") == "cycle"
    )
    assert cycles.height == 10
    assert git(repo, "worktree", "list").count("\n") == 0
