"""Memory creep in a live job: host RSS per process and GPU memory per device, tracked over the
window; a finding when one grows steadily, with the figure and the time left until capacity.

A leak is a steady climb, not a one-off allocation or a sawtooth: the rule fits a least-squares line
to the memory samples of the window and raises ``machine/memory-creep`` when the line explains the
samples (R² ≥ ``MIN_R2``), each half of the window climbs too (≥ ``STEADY_FRACTION`` of the
overall rate: a single allocation is flat on both sides of its step), the growth over the window is material (≥ ``MIN_GROWTH_BYTES`` and
≥ ``MIN_GROWTH_PCT`` of the capacity), and the window holds ``MIN_POINTS`` samples over
``MIN_SPAN_S`` seconds. The projection is the headroom left (device free memory for a GPU, the
host's available memory for a process) divided by the slope: when the job runs out if nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from trainscope.traces.samples import Snapshot

MIN_POINTS = 8
MIN_SPAN_S = 5.0
MIN_R2 = 0.8
MIN_GROWTH_BYTES = 64 * 2**20
MIN_GROWTH_PCT = 0.5  # of the capacity (host memory, or the GPU's)
STEADY_FRACTION = 0.25  # each half of the window grows at least at this share of the overall rate
SOON_S = 600.0  # capacity within 10 minutes: high severity
SOURCE = "least-squares slope over the window; trainscope default thresholds (analyzers/live_memory.py)"


@dataclass(frozen=True)
class Creep:
    what: str  # "host RSS of rank 0", "GPU 1 memory"
    slope_bps: float  # bytes per second
    r2: float
    growth: float  # bytes over the window
    span_s: float
    current: float
    capacity: float | None
    headroom: float | None
    per_step: float | None  # bytes per iteration, when steps were timed

    @property
    def to_capacity_s(self) -> float | None:
        return self.headroom / self.slope_bps if self.headroom is not None and self.slope_bps > 0 else None


def _fit(ts: list[float], ys: list[float]) -> tuple[float, float]:
    t, y = np.asarray(ts, float), np.asarray(ys, float)
    t = t - t.mean()
    denom = float((t * t).sum())
    if denom <= 0:
        return 0.0, 0.0
    slope = float((t * (y - y.mean())).sum() / denom)
    resid = y - y.mean() - slope * t
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return slope, (1.0 - float((resid**2).sum()) / ss_tot) if ss_tot > 0 else 0.0


def _series(snaps: Sequence[Snapshot]) -> dict[str, tuple[list[float], list[float], float | None, float | None]]:
    """name -> (times, bytes, capacity, headroom now)."""
    out: dict[str, tuple[list[float], list[float], float | None, float | None]] = {}

    def add(name: str, t: float, v: float | None, cap: float | None, room: float | None) -> None:
        if v is None or v <= 0:
            return
        ts, ys, _, _ = out.get(name, ([], [], None, None))
        ts.append(t)
        ys.append(float(v))
        out[name] = (ts, ys, cap, room)

    for s in snaps:
        h = s.host
        avail = (h.mem_total - h.mem_used) if h is not None and h.mem_total and h.mem_used is not None else None
        total = h.mem_total if h is not None else None
        if s.ranks:
            for r in s.ranks:
                add(
                    f"host RSS of rank {r.rank}" if r.rank.isdigit() else f"host RSS of {r.rank}",
                    s.t,
                    r.rss,
                    total,
                    avail,
                )
        elif h is not None and (main := h.group("main")) is not None:
            add("host RSS of the training process", s.t, main.rss, total, avail)
        for g in s.gpus:
            if not g.lost and g.mem_used is not None:
                add(
                    f"GPU {g.index} memory",
                    s.t,
                    g.mem_used,
                    g.mem_total,
                    (g.mem_total - g.mem_used) if g.mem_total else None,
                )
    return out


def memory_creeps(snaps: Sequence[Snapshot]) -> list[Creep]:
    out = []
    for name, (ts, ys, cap, room) in _series(snaps).items():
        span = ts[-1] - ts[0] if ts else 0.0
        # the iterations between the first and the last memory reading (a sample's steps precede it)
        steps = sum(s.step.steps for s in snaps if s.step is not None and ts and ts[0] < s.t <= ts[-1])
        if len(ts) < MIN_POINTS or span < MIN_SPAN_S:
            continue
        slope, r2 = _fit(ts, ys)
        growth = slope * span
        floor = max(MIN_GROWTH_BYTES, (MIN_GROWTH_PCT / 100 * cap) if cap else 0.0)
        if slope <= 0 or r2 < MIN_R2 or growth < floor:
            continue
        half = len(ts) // 2  # steady: each half of the window climbs too (one allocation is flat on both sides)
        if min(_fit(ts[:half], ys[:half])[0], _fit(ts[half:], ys[half:])[0]) < STEADY_FRACTION * slope:
            continue
        out.append(Creep(name, slope, r2, growth, span, ys[-1], cap, room, growth / steps if steps else None))
    return out
