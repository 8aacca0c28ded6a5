"""The diff tables' schemas (tracediff.runs.schema.DIFF_TABLES) against the two other places that
describe those tables: the prose of engine/result.py's `Comparison` and the engine's frames.

- every column of a schema is named in the docstring of the Comparison field of that name, in
  the schema's order (the prose may say more; it may not leave a column out or reorder them);
- the frames compare() returns, on a single-GPU nsys pair, a synthetic 4-GPU pair (across_gpus,
  collectives) and a host-only pair (host), hold exactly the schema's columns, each of a type the
  export converts without loss (strings in any encoding; integers no wider than declared).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.gen_nsys import Straggler, write_report
from tracediff.engine.compare import compare
from tracediff.engine.result import Comparison
from tracediff.parse import load
from tracediff.runs import schema
from tracediff.runs.runfile import Run

ROOT = Path(__file__).resolve().parent.parents[2]
RESULT = ROOT / "tracediff" / "engine" / "result.py"


def _field_docs() -> dict[str, str]:
    """Comparison's attribute docstrings (the string literal after each annotated field, or
    the docstring of a property: `events`, built on first read)."""
    cls = next(
        n
        for n in ast.parse(RESULT.read_text()).body
        if isinstance(n, ast.ClassDef) and n.name == "Comparison"
    )
    docs = {}
    for a, b in zip(cls.body, cls.body[1:], strict=False):
        if (
            isinstance(a, ast.AnnAssign)
            and isinstance(a.target, ast.Name)
            and isinstance(b, ast.Expr)
            and isinstance(b.value, ast.Constant)
            and isinstance(b.value.value, str)
        ):
            docs[a.target.id] = b.value.value
    for n in cls.body:
        if isinstance(n, ast.FunctionDef) and ast.get_docstring(n):
            docs[n.name] = ast.get_docstring(n) or ""
    return docs


@pytest.mark.parametrize("table", list(schema.DIFF_TABLES))
def test_the_prose_names_every_column_in_order(table: str) -> None:
    doc = _field_docs()[table]
    pos = 0
    for name in schema.DIFF_TABLES[table].names:
        m = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])").search(doc, pos)
        assert m, f"Comparison.{table}'s docstring does not name column {name!r} (after {pos})"
        pos = m.end()


def _lossless(got: pa.DataType, want: pa.DataType) -> bool:
    if pa.types.is_dictionary(got):
        got = got.value_type
    if pa.types.is_string(want):
        return bool(pa.types.is_string(got) or pa.types.is_large_string(got))
    if pa.types.is_integer(want) and pa.types.is_integer(got):
        return bool(got.bit_width < want.bit_width or got == want)
    return bool(got == want)


def _host_only(run: Run) -> Run:
    tables = {name: run.table(name) for name in schema.TABLES}
    tables["kernels"], tables["memops"] = schema.empty("kernels"), schema.empty("memops")
    return Run(tables=tables, metadata=dict(run.metadata))


@pytest.fixture(scope="module")
def comparisons(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Comparison]:
    h200 = ROOT / "tests" / "data" / "h200"
    tmp = tmp_path_factory.mktemp("gpus4")
    b = write_report(tmp / "b.sqlite", 4, 8, 16, seed=11)
    h = write_report(tmp / "h.sqlite", 4, 8, 16, [Straggler(2, 20_000)], seed=12)
    spec = _host_only(load(ROOT / "samples" / "specloop_good.arrow"))
    return {
        "g": compare(load(h200 / "g_good.sqlite"), load(h200 / "g_bad.sqlite"), n_boot=10),
        "4 GPUs": compare(load(b.path), load(h.path), n_boot=10),
        "host-only": compare(spec, spec, n_boot=10),
    }


def test_the_engine_frames_hold_the_schema_columns(comparisons: dict[str, Comparison]) -> None:
    seen = set()
    for label, c in comparisons.items():
        for table, want in schema.DIFF_TABLES.items():
            frame = getattr(c, table)
            if frame.height == 0 and frame.width == 0:
                continue  # a table this comparison has no rows for may come without columns
            seen.add(table)
            got = frame.to_arrow().schema
            assert sorted(got.names) == sorted(want.names), (label, table)
            for f in want:
                assert _lossless(got.field(f.name).type, f.type), (label, table, f.name)
    assert seen == set(schema.DIFF_TABLES)  # every table checked on some comparison
