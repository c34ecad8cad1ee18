"""Peak device memory from the profiler's ``[memory]`` allocator events, against device capacity."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.traces.model import Trace


@dataclass(frozen=True)
class DeviceMemory:
    device: int
    peak_allocated: int  # bytes
    peak_reserved: int | None  # bytes; None when the trace has no reserved totals
    capacity: int | None  # bytes, from the trace's device properties
    # "absolute" when the trace carries allocator totals; "relative" when only per-event deltas
    # exist (2021 traces), so the peak counts only what was allocated after profiling started.
    basis: str
    events: int

    @property
    def peak_pct(self) -> float | None:
        used = max(self.peak_allocated, self.peak_reserved or 0)
        return 100.0 * used / self.capacity if self.capacity else None


def device_memory(trace: Trace) -> list[DeviceMemory]:
    m = trace.memory
    out: list[DeviceMemory] = []
    gpu = m.device_type == 1
    for d in np.unique(m.device[gpu]):
        sel = gpu & (m.device == d)
        order = np.argsort(m.ts[sel], kind="stable")
        alloc, reserved, delta = m.allocated[sel][order], m.reserved[sel][order], m.bytes[sel][order]
        if (alloc >= 0).any():
            peak, basis = int(alloc[alloc >= 0].max()), "absolute"
        else:
            peak, basis = int(max(0, np.cumsum(delta).max())), "relative"
        res = int(reserved[reserved >= 0].max()) if (reserved >= 0).any() else None
        dev = trace.device(int(d))
        out.append(DeviceMemory(int(d), peak, res, dev.total_memory if dev else None, basis, int(sel.sum())))
    return out
