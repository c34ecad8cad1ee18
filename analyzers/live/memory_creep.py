"""Memory creep in a live job: host RSS per process and GPU memory per device, tracked over the
window; a finding when one grows steadily, with the figure and the time left until capacity.

A leak is a steady climb, not a one-off allocation or a sawtooth: the rule fits a least-squares line
to the memory samples of the window and raises ``machine/memory-creep`` when the line explains the
samples (R² ≥ ``live.creep_min_r2``), each half of the window climbs too (≥
``live.creep_steady_fraction`` of the overall rate: a single allocation is flat on both sides of
its step), the growth over the window is material (≥ ``live.creep_min_growth`` MiB and ≥
``live.creep_min_growth_pct`` of the capacity), and the window holds ``live.creep_min_points``
samples over ``live.creep_min_span`` seconds (thresholds: :mod:`trainscope.analyzers.rules`). The
projection is the headroom left (device free memory for a GPU, the host's available memory for a
process) divided by the slope: when the job runs out if nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers.rules import Rules
from trainscope.traces.samples import Snapshot

SOURCE = "least-squares slope over the window; thresholds live.creep_* (trainscope defaults)"


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


def memory_creeps(snaps: Sequence[Snapshot], rules: Rules | None = None) -> list[Creep]:
    r = rules or Rules()
    min_points, min_span = r.value("live.creep_min_points"), r.value("live.creep_min_span")
    min_r2, steady = r.value("live.creep_min_r2"), r.value("live.creep_steady_fraction")
    min_growth, min_growth_pct = r.value("live.creep_min_growth") * 2**20, r.value("live.creep_min_growth_pct")
    out = []
    for name, (ts, ys, cap, room) in _series(snaps).items():
        span = ts[-1] - ts[0] if ts else 0.0
        # the iterations between the first and the last memory reading (a sample's steps precede it)
        steps = sum(s.step.steps for s in snaps if s.step is not None and ts and ts[0] < s.t <= ts[-1])
        if len(ts) < min_points or span < min_span:
            continue
        slope, r2 = _fit(ts, ys)
        growth = slope * span
        floor = max(min_growth, (min_growth_pct / 100 * cap) if cap else 0.0)
        if slope <= 0 or r2 < min_r2 or growth < floor:
            continue
        half = len(ts) // 2  # steady: each half of the window climbs too (one allocation is flat on both sides)
        if min(_fit(ts[:half], ys[:half])[0], _fit(ts[half:], ys[half:])[0]) < steady * slope:
            continue
        out.append(Creep(name, slope, r2, growth, span, ys[-1], cap, room, growth / steps if steps else None))
    return out
