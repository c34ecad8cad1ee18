"""Colours and glyphs, chosen to read on dark and light themes alike. Each category also has its
own glyph, so the timeline stays legible without colour (NO_COLOR, monochrome terminals)."""

from __future__ import annotations

# Every category has a glyph no other category uses (GPU and host alike), so the timeline reads
# with NO_COLOR: busy GPU work is heavy, GPU idle light, host work in half blocks.
GPU_STYLE: dict[str, tuple[str, str]] = {
    "compute": ("█", "#2e9e44"),
    "communication": ("▞", "#b04ac9"),
    "copy": ("▄", "#c9a227"),
    "memset": ("▂", "#a08a3a"),
    "idle_data_wait": ("░", "#e0443e"),
    "idle_sync": ("┊", "#e08a1e"),
    "idle_host_overhead": ("╌", "#3d7fd9"),
    "idle_other": ("·", "#8a8a8a"),
}
HOST_STYLE: dict[str, tuple[str, str]] = {
    "data_wait": ("▒", "#e0443e"),
    "sync": ("▌", "#e08a1e"),
    "launch": ("▓", "#3d7fd9"),
    "optimizer": ("▙", "#1fa6a6"),
    "backward": ("▛", "#8a63d2"),
    "cpu_op": ("=", "#5b8fb9"),
    "idle": (" ", "#8a8a8a"),
}
# A stream lane: the GPU's busy glyphs; idle is blank.
STREAM_STYLE: dict[str, tuple[str, str]] = {
    **{k: GPU_STYLE[k] for k in ("compute", "communication", "copy", "memset")},
    "idle": (" ", "#8a8a8a"),
}
AXIS_CLASS = {
    "data": "axis-data",
    "algorithm": "axis-algorithm",
    "machine": "axis-machine",
    "balanced": "axis-balanced",
    "insufficient_evidence": "axis-none",
    "not_representative": "axis-none",
}
