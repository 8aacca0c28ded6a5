"""`tracediff parse X.qdstrm`: QdstrmImporter is run a second time when its first run fails.

Under load QdstrmImporter has failed on a .qdstrm that it imported when run again (a bisect --pool
of a fresh-clone suite, session 14: "InvalidArgumentException"). Such a failure cannot be produced
on demand, so the real importer is wrapped by a script that fails its first N calls the way it did
and otherwise execs the real one; the import itself is always the real QdstrmImporter's, of the
bundled H200 .qdstrm.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli_run

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


def _tools(nsys: str, where: Path, fail: int) -> tuple[Path, Path]:
    """An nsys (execs the real one) with a QdstrmImporter beside it that fails its first `fail`
    imports; (that nsys, the importer's counter of imports)."""
    real = Path(nsys).resolve()
    importer = real.parent / "QdstrmImporter"
    if not importer.exists():
        pytest.fail(f"no QdstrmImporter beside {real}")
    where.mkdir()
    calls = where / "calls"
    (where / "nsys").write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
    (where / "QdstrmImporter").write_text(WRAPPER.format(calls=calls, fail=fail, real=importer))
    for name in ("nsys", "QdstrmImporter"):
        (where / name).chmod(0o755)
    return where / "nsys", calls


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
