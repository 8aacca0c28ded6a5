"""QdstrmImporter is run a second time when its first run fails: by `tracediff parse X.qdstrm`,
and by `tracediff capture` when its nsys left a .qdstrm (a target-only install) with an importer
beside that nsys.

Under load QdstrmImporter has failed on a .qdstrm that it imported when run again (a bisect --pool
of a fresh-clone suite, session 14: "InvalidArgumentException"). Such a failure cannot be produced
on demand, so the real importer is wrapped by a script that fails its first N calls the way it did
and otherwise execs the real one; the import itself is always the real QdstrmImporter's, of the
bundled H200 .qdstrm.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.capture import capture
from tests.support.cli import cli_run
from tests.support.gitrepo import target_only_nsys

pytestmark = [pytest.mark.nsys]

QDSTRM = Path(__file__).resolve().parents[1] / "data" / "h200" / "e_good.qdstrm"

WRAPPER = """\
#!/bin/sh
[ "$1" = -i ] || exec "{real}" "$@"  # --version: not an import
n=$(($(cat "{calls}" 2>/dev/null || echo 0) + 1))
echo "$n" > "{calls}"
if [ "$n" -le {fail} ]; then
    echo 'Value: "InvalidArgumentException"' >&2
    exit 1
fi
exec "{real}" "$@"
"""


def _flaky_importer(nsys: str, where: Path, fail: int) -> Path:
    """A QdstrmImporter in `where` that fails its first `fail` imports and otherwise execs the one
    beside the real `nsys`; its counter of imports."""
    importer = Path(nsys).resolve().parent / "QdstrmImporter"
    if not importer.exists():
        pytest.fail(f"no QdstrmImporter beside {Path(nsys).resolve()}")
    calls = where / "calls"
    (where / "QdstrmImporter").write_text(WRAPPER.format(calls=calls, fail=fail, real=importer))
    (where / "QdstrmImporter").chmod(0o755)
    return calls


def _tools(nsys: str, where: Path, fail: int) -> tuple[Path, Path]:
    """An nsys (execs the real one) with a flaky QdstrmImporter beside it (`_flaky_importer`);
    (that nsys, the importer's counter of imports)."""
    where.mkdir()
    (where / "nsys").write_text(f'#!/bin/sh\nexec "{Path(nsys).resolve()}" "$@"\n')
    (where / "nsys").chmod(0o755)
    return where / "nsys", _flaky_importer(nsys, where, fail)


def test_an_importer_failure_is_retried_once(nsys: str, tmp_path: Path) -> None:
    wrapped, calls = _tools(nsys, tmp_path / "tools", fail=1)
    out = tmp_path / "run.arrow"
    r = cli_run(["parse", QDSTRM, "-o", out], env={"TRACEDIFF_NSYS": str(wrapped)}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert calls.read_text().strip() == "2" and out.is_file()


def test_an_importer_that_fails_twice_is_one_line_naming_the_file(
    nsys: str, tmp_path: Path
) -> None:
    wrapped, calls = _tools(nsys, tmp_path / "tools", fail=2)
    out = tmp_path / "run.arrow"
    r = cli_run(["parse", QDSTRM, "-o", out], env={"TRACEDIFF_NSYS": str(wrapped)}, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(QDSTRM) in lines[0], r.stderr
    assert "QdstrmImporter cannot import it" in lines[0] and "InvalidArgumentException" in lines[0]
    assert calls.read_text().strip() == "2" and not out.exists()


def test_capture_retries_the_import_of_the_qdstrm_its_nsys_left(
    repo: Path, nsys: str, tmp_path: Path
) -> None:
    target = target_only_nsys(nsys, tmp_path)  # its captures leave a .qdstrm
    calls = _flaky_importer(nsys, target.parent, fail=1)  # capture looks beside its nsys
    out = tmp_path / "cap"
    r = capture(repo, "base", out, nsys=str(target))
    assert r.returncode == 0, r.stderr
    assert calls.read_text().strip() == "2", r.stderr
    assert (out / "report.nsys-rep").is_file() and (out / "run.arrow").is_file()
    assert not (out / "report.qdstrm").exists() and "QdstrmImporter" not in r.stderr
