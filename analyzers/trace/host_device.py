"""Host-device traffic findings: pageable host-to-device copies and blocking synchronizations.

- A host-to-device copy from pageable memory is staged by the driver through a pinned bounce
  buffer: the host blocks and the copy cannot overlap compute. Pinned memory
  (``DataLoader(pin_memory=True)``, ``tensor.pin_memory()``) plus ``non_blocking=True`` fixes it.
- A synchronization inside a step (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  a blocking copy — what ``.item()``, ``.cpu()`` or ``print(loss)`` do) drains the GPU's queue:
  after it returns the GPU idles until the host issues the next kernel. Without the sync the host
  would have run that far ahead while it was blocked, so the cost counted per sync is the bubble
  after it (sync end to the next GPU operation) capped at the time the host was blocked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.trace.breakdown import SYNC_CALL
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.analyzers.trace.steps import name_mask
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS
from trainscope.traces.model import Trace


@dataclass(frozen=True)
class PageableCopies:
    count: int
    bytes: int
    copy_ns: int  # union of their GPU intervals inside the steps
    step_ns: int

    @property
    def share_pct(self) -> float:
        return 100.0 * self.copy_ns / self.step_ns if self.step_ns else 0.0


@dataclass(frozen=True)
class BlockingSyncs:
    count: int  # sync calls that start inside the steps
    per_step: float
    host_ns: int  # host time blocked in them
    bubble_ns: int  # per sync: GPU idle from its return to the next GPU operation, capped at its blocked time
    step_ns: int
    by_name: dict[str, int]

    @property
    def bubble_pct(self) -> float:
        return 100.0 * self.bubble_ns / self.step_ns if self.step_ns else 0.0


def pageable_copies(trace: Trace, segmentation: StepSegmentation, device: int | None) -> PageableCopies:
    c = trace.copies
    ws, we = segmentation.starts, segmentation.ends
    sel = (c.kind == COPY_KINDS.index("HtoD")) & (c.src == MEMORY_KINDS.index("pageable")) & iv.contains((ws, we), c.ts)
    if device is not None:
        sel &= c.device == device
    covered = iv.overlap_per_window(iv.union(c.ts[sel], c.end[sel]), ws, we)
    return PageableCopies(int(sel.sum()), int(c.bytes[sel].sum()), int(covered.sum()), int((we - ws).sum()))


def blocking_syncs(trace: Trace, segmentation: StepSegmentation, device: int | None) -> BlockingSyncs:
    r = trace.runtime
    ws, we = segmentation.starts, segmentation.ends
    sel = name_mask(trace, SYNC_CALL)[r.name] & iv.contains((ws, we), r.ts) if len(r) else np.zeros(0, bool)
    step_ns = int((we - ws).sum())
    if not sel.any():
        return BlockingSyncs(0, 0.0, 0, 0, step_ns, {})
    gpu_starts = []
    for t in (trace.kernels, trace.copies, trace.memsets):
        on = (t.device == device) if device is not None else np.ones(len(t), bool)
        gpu_starts.append(t.ts[on])
    starts = np.sort(np.concatenate(gpu_starts))
    if not len(starts):  # no GPU work to drain: a sync costs the GPU nothing
        names, counts = np.unique(r.name[sel], return_counts=True)
        return BlockingSyncs(
            int(sel.sum()),
            float(sel.sum()) / max(1, len(ws)),
            int(r.dur[sel].sum()),
            0,
            step_ns,
            {trace.strings[n]: int(c) for n, c in zip(names, counts)},
        )
    ends = r.end[sel]
    nxt = np.searchsorted(starts, ends, side="left")
    has_next = nxt < len(starts)
    # The bubble ends at the next GPU operation, and counts only inside the sync's step.
    step_end = we[np.searchsorted(ws, r.ts[sel], side="right") - 1]
    gap_end = np.where(has_next, starts[np.minimum(nxt, len(starts) - 1)], ends)
    bubble = np.minimum(np.clip(np.minimum(gap_end, step_end) - ends, 0, None), r.dur[sel])
    names, counts = np.unique(r.name[sel], return_counts=True)
    return BlockingSyncs(
        count=int(sel.sum()),
        per_step=float(sel.sum()) / max(1, len(ws)),
        host_ns=int(r.dur[sel].sum()),
        bubble_ns=int(bubble.sum()),
        step_ns=step_ns,
        by_name={trace.strings[n]: int(c) for n, c in zip(names, counts)},
    )
