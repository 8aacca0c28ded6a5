"""The charting library the HTML page inlines: plotly.js, read from the pinned `plotly` package.

Stage: output. Input: the installed `plotly` distribution's own `package_data/plotly.min.js`
(never a copy in this repository, never a download); output: the script, raw-deflated and
base64-encoded, that the page inflates with the browser's DecompressionStream. Deflated, the
4.8 MB script is 1.7 MB (2.3 MB as base64), so a page stays a few MB.
"""

from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from tracediff.base.errors import ToolError

LEVEL = 1
"""zlib level: 1 packs the script in ~0.2 s to 1.7 MB; 6 gains 0.23 MB for 0.3 s more."""


@dataclass(frozen=True)
class Bundle:
    version: str  # plotly.js's version (the Python package's own)
    packed: str  # base64 of the raw-deflated plotly.min.js
    raw_bytes: int  # its size unpacked


def _missing() -> ToolError:
    return ToolError(
        "--html needs the plotly package (its plotly.min.js is inlined in the page)",
        "pip install 'plotly==7.1.0' (a dependency of tracediff: reinstall tracediff)",
    )


@lru_cache(maxsize=1)
def bundle() -> Bundle:
    """plotly.min.js of the installed plotly package, packed (once a process)."""
    try:
        dist = metadata.distribution("plotly")  # found without importing plotly
        path = dist.locate_file("plotly/package_data/plotly.min.js")
        script = Path(str(path)).read_bytes()
    except (metadata.PackageNotFoundError, OSError):
        raise _missing() from None
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)  # raw deflate: 'deflate-raw' in JS
    packed = packer.compress(script) + packer.flush()
    return Bundle(dist.version, base64.b64encode(packed).decode("ascii"), len(script))
