"""Peak memory by category from a profiler memory timeline (parameters, optimizer state,
activations, gradients, …): the measured counterpart of the training-memory ledger."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.traces.memory_timeline import CATEGORIES
from trainscope.traces.memory_timeline import MemoryTimeline


@dataclass(frozen=True)
class TimelinePeak:
    peak_bytes: int
    peak_time_us: int
    duration_us: int
    at_peak: dict[str, int]  # bytes per category at the moment the total peaks
    category_peaks: dict[str, int]  # each category's own maximum


def timeline_peak(tl: MemoryTimeline) -> TimelinePeak:
    total = tl.bytes.sum(axis=1)
    i = int(np.argmax(total))
    return TimelinePeak(
        int(total[i]),
        int(tl.time_us[i]),
        int(tl.time_us[-1] - tl.time_us[0]),
        {c: int(tl.bytes[i, k]) for k, c in enumerate(CATEGORIES)},
        {c: int(tl.bytes[:, k].max()) for k, c in enumerate(CATEGORIES)},
    )
