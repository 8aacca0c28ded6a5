"""The run file's footer, read strictly: format version, checksums, table offsets.

Stage: storage (tracediff/runs/runfile.py reads and writes run files through these). Input: the
footer's JSON and raw bytes; output: validated offsets and CRCs, or an InputError. Kept apart so
runfile.py holds the layout and the lazy tables, this module what a damaged footer looks like.
"""

from __future__ import annotations

import zlib
from typing import Any

from tracediff.base.errors import InputError, UnsupportedVersionError
from tracediff.runs import schema

MAGIC_LEN = 16  # runfile.MAGIC: no table starts before it
CHECKSUM_KEY = b',"checksums":'
"""The footer's last key: its CRC covers the footer's bytes before it (then a closing brace)."""
LEGACY_OPTIONAL = frozenset({"cuda_events"})
"""Tables added to format 1 after its first files were written: a file without checksums (the
bundled samples) may lack them and reads them as empty. Any other missing table is damage."""
ADDED_IN_2 = frozenset({"frames", "stacks"})
"""Tables format 2 added: a format-1 file has none and reads them as empty; its kernels and
memops lack `stack_id` and read it as null (schema.ADDED_IN_2, schema.upgrade)."""
CORRUPT_HINT = "copy the file again, or parse the report again"
FOOTER_KEYS = frozenset({"format_version", "tables", "metadata", "warnings", "checksums"})
"""Every key a format-1 footer has (files before checksums: all but the last)."""


class CrcWriter:
    """A file that keeps the CRC-32 of what is written through it (Arrow's IPC writer calls
    write/tell/flush/closed on a Python file)."""

    def __init__(self, f: Any) -> None:
        self._f = f
        self.crc = 0

    def write(self, data: Any) -> int:
        self.crc = zlib.crc32(data, self.crc)
        return int(self._f.write(data))

    def tell(self) -> int:
        return int(self._f.tell())

    def flush(self) -> None:
        self._f.flush()

    @property
    def closed(self) -> bool:
        return bool(self._f.closed)


def check_version(version: Any, src: str) -> int:
    """Strict: a whole number (not "1", 1.0 or true), 1 up to the version this tool writes."""
    if type(version) is not int or version < 1:
        raise InputError(
            f"{src}: run file footer is corrupt (format_version {version!r})", CORRUPT_HINT
        )
    if version > schema.FORMAT_VERSION:
        raise UnsupportedVersionError(
            f"{src}: run file format {version} is newer than this tracediff reads ({schema.FORMAT_VERSION})",
            "upgrade tracediff, or parse the report again with this version",
        )
    return version


def footer_checksums(footer: dict[str, Any], raw: bytes, src: str) -> dict[str, int] | None:
    """The tables' CRCs once the footer's own CRC matches; None for a file written without them."""
    if "checksums" not in footer:
        return None
    checks = footer.pop("checksums")
    cut = raw.rfind(CHECKSUM_KEY)
    ok = (
        isinstance(checks, dict)
        and checks.get("algorithm") == "crc32"
        and type(checks.get("footer")) is int
        and isinstance(checks.get("tables"), dict)
        and all(type(v) is int for v in checks["tables"].values())
        and cut > 0
        and zlib.crc32(raw[:cut] + b"}") == checks["footer"]
    )
    if not ok:
        raise InputError(
            f"{src}: run file footer is damaged (its checksum does not match)", CORRUPT_HINT
        )
    return {str(k): int(v) for k, v in checks["tables"].items()}


def table_offsets(
    tables: Any, fstart: int, src: str, *, legacy: bool, version: int = schema.FORMAT_VERSION
) -> dict[str, list[int]]:
    """[offset, length] per table, each inside the file; every table of the format present (a
    file without checksums may lack the LEGACY_OPTIONAL ones)."""
    if not isinstance(tables, dict):
        raise InputError(f"{src}: run file footer is corrupt (no table list)", CORRUPT_HINT)
    offsets: dict[str, list[int]] = {}
    for name, span in tables.items():
        if name not in schema.TABLES:
            raise InputError(
                f"{src}: run file footer is corrupt (unknown table {name!r})", CORRUPT_HINT
            )
        if (
            not isinstance(span, list)
            or len(span) != 2
            or not all(type(v) is int and v >= 0 for v in span)
        ):
            raise InputError(f"{src}: run file footer is corrupt", CORRUPT_HINT)
        off, length = span
        if off < MAGIC_LEN or off + length > fstart:
            raise InputError(f"{src}: table {name!r} lies outside the file", CORRUPT_HINT)
        offsets[name] = [off, length]
    missing = [t for t in schema.TABLES if t not in offsets]
    if legacy:
        missing = [t for t in missing if t not in LEGACY_OPTIONAL]
    if version < 2:
        missing = [t for t in missing if t not in ADDED_IN_2]
    if missing:
        raise InputError(
            f"{src}: run file has no {', '.join(map(repr, missing))} table"
            f"{'s' if len(missing) > 1 else ''} "
            "(the footer is damaged or the file was not written by tracediff)",
            CORRUPT_HINT,
        )
    return offsets
