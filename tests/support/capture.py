"""Shared by the tests (moved from tests/integration/test_capture.py, so no test module imports another)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.support.gitrepo import commit_files, tracediff
from tracediff.runs.runfile import read_run

WORK = """\
import os, sys, time
import nvtx

VERIFY_S = {verify_s}
CYCLES = int(os.environ.get("CYCLES", "10"))
if os.environ.get("ENV_DUMP"):
    with open(os.environ["ENV_DUMP"], "w") as f:
        names = ("_RJEM_MALLOC_CONF", "JE_ARROW_MALLOC_CONF", "ARROW_DEFAULT_MEMORY_POOL",
                 "TRACEDIFF_SET_ALLOC")
        f.write(";".join(os.environ.get(n, "<unset>") for n in names))
i = 0
while CYCLES < 0 or i < CYCLES:
    nvtx.push_range("cycle")
    nvtx.push_range("draft"); time.sleep(0.005); nvtx.pop_range()
    nvtx.push_range("verify"); time.sleep(VERIFY_S); nvtx.pop_range()
    nvtx.pop_range()
    i += 1
    if i == 3:
        print("READY", flush=True)
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""


BASE_VERIFY_S, SLOW_VERIFY_S = 0.010, 0.040


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two commits: `base` (verify 10 ms) and `slow` (verify 40 ms)."""
    r = tmp_path_factory.mktemp("repo")
    commit_files(r, {"work.py": WORK.format(verify_s=BASE_VERIFY_S)}, "base", tag="base")
    commit_files(r, {"work.py": WORK.format(verify_s=SLOW_VERIFY_S)}, "slow verify", tag="slow")
    return r


def capture_args(
    repo: Path, ref: str, out: Path, *extra: str, nsys: str | None = None
) -> list[str]:
    """`tracediff capture` of work.py at `ref` into `out`: the arguments after `tracediff`."""
    return [
        "capture", "--commit", ref, "--repo", str(repo), "-o", str(out),
        *(["--nsys", nsys] if nsys else []), *extra, "--", sys.executable, "work.py",
    ]  # fmt: skip


def capture(
    repo: Path,
    ref: str,
    out: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    nsys: str | None = None,
) -> subprocess.CompletedProcess[str]:
    return tracediff(*capture_args(repo, ref, out, *extra, nsys=nsys), env=env, timeout=120)


def ranges(run_file: Path, name: str) -> pl.DataFrame:
    t = pl.from_arrow(read_run(run_file).table("nvtx_ranges"))
    return t.filter(pl.col("name") == name)


WRAPPER = """\
#!/bin/sh
if [ "$1" = profile ]; then
    n=$(($(cat "{calls}" 2>/dev/null || echo 0) + 1))
    echo "$n" > "{calls}"
    if echo " {fail_at} " | grep -q " $n "; then
        echo "nsys $*" >&2
        echo "Local Endpoint is not available" >&2
        exit 1
    fi
fi
exec "{real}" "$@"
"""


def flaky_nsys(nsys: str, where: Path, fail_at: tuple[int, ...]) -> tuple[Path, Path]:
    """A wrapper of the real nsys failing the profile calls numbered in fail_at (from 1) the way nsys
    does under load (exit 1, no report, nothing run), else exec-ing the real nsys; (wrapper, call counter).
    QdstrmImporter is linked beside it (capture looks for it beside the nsys it runs)."""
    where.mkdir()
    calls = where / "calls"
    w = where / "nsys"
    w.write_text(
        WRAPPER.format(calls=calls, fail_at=" ".join(map(str, fail_at)), real=Path(nsys).resolve())
    )
    w.chmod(0o755)
    importer = Path(nsys).resolve().parent / "QdstrmImporter"
    if importer.exists():
        (where / "QdstrmImporter").symlink_to(importer)
    return w, calls
