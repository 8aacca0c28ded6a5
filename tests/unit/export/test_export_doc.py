"""docs/parquet-schema.md lists exactly the columns the export writes (generated, never drifts)."""

from __future__ import annotations

from tracediff.export import schema_doc
from tracediff.runs import schema


def test_doc_matches_the_schemas() -> None:
    text = schema_doc.DOC.read_text()
    assert schema_doc.current(text) == schema_doc.render(), (
        "docs/parquet-schema.md is out of date: run `python -m tracediff.export.schema_doc`"
    )


def test_doc_names_every_column_of_every_run_table() -> None:
    text = schema_doc.DOC.read_text()
    for name, sch in schema.TABLES.items():
        section = text.split(f"### `{name}`", 1)[1].split("###", 1)[0]
        assert [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")] == (
            ["run", "device_id"] + [n for n in sch.names if n != "device_id"]
            if name in ("kernels", "memops", "collectives")
            else ["run", *sch.names]
        ), name
