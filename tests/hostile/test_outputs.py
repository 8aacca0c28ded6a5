"""Output safety (issue #17): inputs are never outputs, a failed command leaves nothing it
created, and creating an output is exclusive (two commands writing one new path: one fails).

Through the real CLI, on copies of the bundled run files in a temp folder.
"""

from __future__ import annotations

import hashlib
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import make_corpus
from tests.support.hostile import TRACEDIFF, assert_error, cli
from tracediff.base.errors import OutputError
from tracediff.base.outputs import Transaction


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    base, head = tmp_path / "B.arrow", tmp_path / "H.arrow"
    shutil.copyfile(make_corpus.RUN, base)
    shutil.copyfile(make_corpus.RUN_BAD, head)
    return base, head


def _digest(*paths: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink", "hardlink"])
def test_compare_never_writes_over_an_input(pair: tuple[Path, Path], spelling: str) -> None:
    base, head = pair
    before = _digest(base, head)
    target = {
        "same": lambda: base,
        "dotted": lambda: base.parent / "x" / ".." / base.name,
        "symlink": lambda: (base.parent / "l.arrow").symlink_to(base) or base.parent / "l.arrow",
        "hardlink": lambda: (base.parent / "h.arrow").hardlink_to(base) or base.parent / "h.arrow",
    }[spelling]()
    for flag in ("--perfetto", "--export"):
        r = cli("compare", base, head, flag, target, "--force", "--format", "json")
        assert_error(r, target, "would overwrite the input")
    assert _digest(base, head) == before


def test_export_folder_holding_an_input_is_refused(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    base, head = pair
    r = cli("compare", base, head, "--export", tmp_path, "--force", "--format", "json")
    assert_error(r, tmp_path, "would overwrite the input")
    assert base.exists() and head.exists()


def test_export_never_replaces_a_folder_holding_its_input(pair: tuple[Path, Path]) -> None:
    """An earlier export folder that now also holds a run file: `export RUN --parquet DIR
    --force` replaced the folder, deleting the run it was reading."""
    base, _ = pair
    d = base.parent / "D"
    cli("export", base, "--parquet", d).check_returncode()
    inside = d / "B.arrow"
    shutil.copyfile(base, inside)
    r = cli("export", inside, "--parquet", d, "--force")
    assert_error(r, d, "would overwrite the input")
    assert _digest(inside) == _digest(base)


def test_parse_never_writes_over_its_input(pair: tuple[Path, Path]) -> None:
    base, _ = pair
    before = _digest(base)
    link = base.parent / "l.arrow"
    link.symlink_to(base)
    for out, inp in [(base, base), (base, link), (link, base)]:
        assert_error(cli("parse", inp, "-o", out, "--force"), out, "would overwrite the input")
    assert _digest(base) == before


@pytest.mark.parametrize("second", ["P", "P/trace.json"])
def test_export_and_perfetto_on_one_path_is_a_usage_error(
    pair: tuple[Path, Path], second: str
) -> None:
    base, head = pair
    p = base.parent / "P"
    r = cli(
        "compare", base, head, "--export", p, "--perfetto", base.parent / second, "--format", "json"
    )
    assert_error(r, None, "overlap", code=2)
    assert sorted(x.name for x in base.parent.iterdir()) == ["B.arrow", "H.arrow"]


def test_a_failed_output_removes_the_outputs_written_before_it(pair: tuple[Path, Path]) -> None:
    """--export is written first; the Perfetto trace then fails (a 512 KiB file-size limit, as a
    full disk): the export folder must not stay behind."""
    base, head = pair

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 10, 512 << 10))

    d, t = base.parent / "D", base.parent / "t.json"
    r = cli(
        "compare",
        base,
        head,
        "--export",
        d,
        "--perfetto",
        t,
        "--format",
        "json",
        preexec_fn=small_files,
    )
    assert_error(r, t, "cannot write")
    assert sorted(x.name for x in base.parent.iterdir()) == ["B.arrow", "H.arrow"]


def test_a_failed_forced_output_puts_the_earlier_one_back(pair: tuple[Path, Path]) -> None:
    base, head = pair
    d, t = base.parent / "D", base.parent / "t.json"
    cli("compare", base, head, "--export", d, "--format", "json").check_returncode()

    def content() -> dict[str, str]:
        return {str(p.relative_to(d)): _digest(p)[0] for p in d.rglob("*") if p.is_file()}

    before = content()

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 10, 512 << 10))

    r = cli(
        "compare",
        head,
        base,
        "--export",
        d,
        "--perfetto",
        t,
        "--force",
        "--format",
        "json",
        preexec_fn=small_files,
    )
    assert_error(r, t, "cannot write")
    assert content() == before  # the earlier export, not the new one (base and head swapped)
    assert not t.exists()
    assert sorted(x.name for x in base.parent.iterdir()) == ["B.arrow", "D", "H.arrow"]


def test_concurrent_parses_to_one_new_path_one_wins(pair: tuple[Path, Path]) -> None:
    """Four `parse -o X` started together all pass the exists() check (the parse takes ~1 s);
    exactly one may publish X, the others fail with one line (all four succeeded before)."""
    out = pair[0].parent / "X.arrow"
    procs = [
        subprocess.Popen(
            [str(TRACEDIFF), "parse", str(make_corpus.NSYS), "-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [(p.wait(120), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    assert sorted(rc for rc, _ in results) == [0, 1, 1, 1], results
    for rc, err in results:
        if rc:
            assert err.count("\n") == 1 and "already exists" in err, err
    assert sorted(x.name for x in out.parent.iterdir()) == ["B.arrow", "H.arrow", "X.arrow"]


def test_publish_without_force_never_replaces(tmp_path: Path) -> None:
    for kind in ("file", "folder"):
        out, tmp = tmp_path / f"out-{kind}", tmp_path / f".tmp-{kind}"
        if kind == "file":
            out.write_bytes(b"theirs")
            tmp.write_bytes(b"ours")
        else:
            (out / "sub").mkdir(parents=True)
            tmp.mkdir()
            (tmp / "f").write_bytes(b"ours")
        with pytest.raises(OutputError, match="already exists"), Transaction() as txn:
            txn.publish(tmp, out, force=False)
        assert (out.read_bytes() == b"theirs") if kind == "file" else (out / "sub").is_dir()


def test_write_run_does_not_replace_a_file_created_while_it_wrote(tmp_path: Path) -> None:
    """Deterministic form of the race above: another command creates the output after
    write_run's exists() check, while the tables are being written."""
    from tracediff.runs.runfile import Run, read_run, write_run

    out = tmp_path / "X.arrow"
    src = read_run(make_corpus.RUN)

    class Racing(dict):  # type: ignore[type-arg]
        def get(self, name: str, default: object = None) -> object:
            if name == "kernels" and not out.exists():
                out.write_bytes(b"the other command's run file")
            return src.table(name)

    with pytest.raises(OutputError, match="already exists"):
        write_run(Run(tables=Racing(), metadata=dict(src.metadata)), out)
    assert out.read_bytes() == b"the other command's run file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["X.arrow"]
