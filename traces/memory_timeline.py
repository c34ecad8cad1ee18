"""The memory timeline model (``torch.profiler.profile.export_memory_timeline``, as read by
:mod:`trainscope.collectors.memory_timeline`): bytes per category over time."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CATEGORIES = (
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
)


@dataclass
class MemoryTimeline:
    """Bytes per category over time: ``bytes[i, c]`` after the i-th time point."""

    path: str
    layout: str  # "raw" | "coalesced"
    time_us: np.ndarray  # int64; pre-existing tensors are placed at the first real time
    bytes: np.ndarray  # int64, shape (times, len(CATEGORIES))
