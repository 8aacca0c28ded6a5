"""Presets: named workloads for `tracediff capture --preset NAME`.

Each preset module provides `add_arguments(group)` and `build(args) -> Preset`.
"""

from __future__ import annotations

PRESETS: dict[str, str] = {"sglang-eagle3": "capture.presets.sglang_eagle3"}
