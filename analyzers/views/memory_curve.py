"""Device memory in use over time, from the profiler's ``[memory]`` allocator events."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.traces.model import Trace


@dataclass(frozen=True)
class MemoryCurve:
    device: int
    ts: np.ndarray  # ns, sorted
    allocated: np.ndarray  # bytes in use after each event
    basis: str  # "absolute" (allocator totals) or "relative" (running sum of deltas since profiling began)
    capacity: int | None

    def binned_peak(self, start_ns: int, end_ns: int, columns: int) -> np.ndarray:
        """Peak bytes in use in each of ``columns`` equal windows (carried forward where no event falls)."""
        edges = np.linspace(start_ns, end_ns, columns + 1)
        out = np.zeros(columns, np.int64)
        if not len(self.ts):
            return out
        # Peak in a window: the level at its start (the last event before it) or any event inside.
        first = np.searchsorted(self.ts, edges[:-1], side="right") - 1
        last = np.searchsorted(self.ts, edges[1:], side="left")
        for c in range(columns):
            at_start = int(self.allocated[first[c]]) if first[c] >= 0 else 0
            inside = self.allocated[first[c] + 1 : last[c]]
            out[c] = max(at_start, int(inside.max())) if len(inside) else at_start
        return out


def memory_curves(trace: Trace) -> list[MemoryCurve]:
    """One curve per GPU that has allocator events."""
    m = trace.memory
    gpu = m.device_type == 1
    curves: list[MemoryCurve] = []
    for d in np.unique(m.device[gpu]):
        sel = gpu & (m.device == d)
        order = np.argsort(m.ts[sel], kind="stable")
        ts, alloc, delta = m.ts[sel][order], m.allocated[sel][order], m.bytes[sel][order]
        if (alloc >= 0).any():
            keep = alloc >= 0
            ts, level, basis = ts[keep], alloc[keep], "absolute"
        else:
            level, basis = np.maximum(np.cumsum(delta), 0), "relative"
        dev = trace.device(int(d))
        curves.append(
            MemoryCurve(int(d), ts.astype(np.int64), level.astype(np.int64), basis, dev.total_memory if dev else None)
        )
    return curves
