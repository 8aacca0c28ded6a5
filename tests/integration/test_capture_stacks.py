"""`tracediff capture` records launch stacks by default (issue 19), with the real nsys and git.

The workload repo has a package `minipkg` (functions and a method, a test folder that is not
traced) and a script that calls into it. capture writes the function-trace config for the
package's own functions (capture/stacks.py), passes it to nsys, and says in the manifest what
was recorded; the ranges are in the run file. --no-stacks leaves it out and says so.
No GPU here: there are no launches, so no kernel gets a stack (test_nsys_function_trace.py
covers the resolution).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.support.cli import cli_run
from tracediff.runs.runfile import read_run

pytestmark = [pytest.mark.nsys, pytest.mark.git]

pytest.importorskip("nvtx")

WORK = """
def leaf(n):
    return sum(range(n))

def middle(k):
    return [leaf(1000) for _ in range(k)]

class Helper:
    def run(self):
        return middle(2)
"""
MAIN = """
import nvtx
from minipkg.work import Helper, middle
nvtx.mark("start")  # an event even without the function trace (--no-stacks)
for _ in range(3):
    Helper().run()
middle(1)
"""


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("stackrepo")
    (r / "minipkg" / "tests").mkdir(parents=True)
    (r / "minipkg" / "__init__.py").write_text("")
    (r / "minipkg" / "work.py").write_text(WORK)
    (r / "minipkg" / "tests" / "__init__.py").write_text("")
    (r / "minipkg" / "tests" / "test_work.py").write_text("def test_x():\n    pass\n")
    (r / "main.py").write_text(MAIN)
    _git(r, "init", "-q", "-b", "main")
    _git(r, "add", ".")
    _git(r, "commit", "-qm", "base")
    return r


def _capture(repo: Path, out: Path, nsys: str, *extra: str) -> dict:
    cmd = ["capture", "--commit", "main", "--repo", str(repo),
           "-o", str(out), "--nsys", nsys, *extra, "--", sys.executable, "main.py"]  # fmt: skip
    r = cli_run(cmd, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "manifest.json").read_text())


def test_capture_traces_the_package_s_functions_by_default(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    out = tmp_path / "cap"
    m = _capture(repo, out, nsys)
    st = m["stacks"]
    assert st["recorded"] == "nsys function trace" and st["functions"] == 3
    cfg = json.loads((out / st["config"]).read_text())
    assert cfg == [{"domain": "python:minipkg.work", "module": "minipkg.work",
                    "functions": ["leaf", "middle", "Helper.run"]}]  # fmt: skip
    assert f"--python-functions-trace={out.resolve() / 'function-trace.json'}" in m["nsys_command"]
    # Helper.run 3 times, middle 3 + 1, leaf 3 * 2 + 1
    assert st["recorded_ranges"] == 3 + 4 + 7
    nv = pl.from_arrow(read_run(out / "run.arrow").table("nvtx_ranges"))
    names = nv.filter(pl.col("domain").cast(pl.String) == "python:minipkg.work")["name"]
    assert names.cast(pl.String).value_counts().sort("name").rows() == [
        ("minipkg.work.Helper.run", 3), ("minipkg.work.leaf", 7), ("minipkg.work.middle", 4)
    ]  # fmt: skip
    assert st["kernels_with_stack"] == 0  # no GPU here


def test_no_stacks_turns_it_off_and_says_so(repo: Path, nsys: str, tmp_path: Path) -> None:
    m = _capture(repo, tmp_path / "cap", nsys, "--no-stacks")
    assert m["stacks"] == {"recorded": "none", "why": "turned off (--no-stacks)"}
    assert not any("--python-functions-trace" in a for a in m["nsys_command"])
    assert not (tmp_path / "cap" / "function-trace.json").exists()


# The GPU host's Python (the lent H200's: torch, no polars or pyarrow) running capture, with
# nsys's target package only (no QdstrmImporter): the stacks plan must not import the reader.
_NO_DATA_LIBS = r"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("polars", "pyarrow", "numpy", "textual", "msgspec", "orjson"):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
from tracediff.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_stacks_on_a_gpu_host_without_polars(repo: Path, nsys: str, tmp_path: Path) -> None:
    """The default function trace on a host whose Python has no data libraries (before: the
    plan imported tracediff.parse, so every capture with stacks on died there with an
    ImportError traceback); the .qdstrm left there, imported later, has the ranges."""
    from tests.support.gitrepo import target_only_nsys

    out = tmp_path / "cap"
    cmd = [sys.executable, "-c", _NO_DATA_LIBS, "capture", "--commit", "main", "--repo",
           str(repo), "-o", str(out), "--nsys", str(target_only_nsys(nsys, tmp_path)), "--",
           sys.executable, "main.py"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["stacks"]["recorded"] == "nsys function trace" and m["report"] == "report.qdstrm"
    p = cli_run(
        ["parse", str(out / "report.qdstrm"), "-o", str(out / "run.arrow")],
        timeout=300, env={"TRACEDIFF_NSYS": nsys},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    nv = pl.from_arrow(read_run(out / "run.arrow").table("nvtx_ranges"))
    assert nv.filter(pl.col("domain").cast(pl.String) == "python:minipkg.work").height == 14
