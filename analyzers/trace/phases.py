"""Training phases (forward, backward, optimizer) from the trace's own ranges.

Phases come from host annotation ranges named like them (NVTX ``forward pass``, a
``record_function("## backward ##")``, ``Optimizer.step#AdamW.step`` …). Host time is the
exclusive union of a phase's ranges inside the steps (optimizer over backward over forward where
ranges nest). GPU time is attributed by launch: a kernel belongs to the phase whose range was open
when the runtime call that launched it ran (matched by correlation id), because the GPU runs
behind the host and a phase's kernels often finish after its range closes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers import intervals as iv
from trainscope.analyzers.intervals import searchsorted
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.analyzers.trace.steps import name_mask
from trainscope.traces.model import Trace

# Priority order: where ranges nest, the first pattern wins.
PHASE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("optimizer", re.compile(r"optimi[sz]er|(^|[^a-z])optim([^a-z]|$)", re.I)),
    ("backward", re.compile(r"(^|[^a-z])(backward|bwd)([^a-z]|$)", re.I)),
    ("forward", re.compile(r"(^|[^a-z])(forward|fwd)([^a-z]|$)", re.I)),
)


@dataclass(frozen=True)
class PhaseStat:
    name: str
    ranges: int  # matching ranges inside the steps
    host_ns: int  # exclusive host time inside the steps
    kernels: int  # kernels launched while the phase was open
    kernel_ns: int  # their summed duration
    gpu_busy_ns: int  # union of their intervals (streams may overlap)
    class_ns: dict[str, int]  # kernel time by class

    def share_pct(self, total_ns: int) -> float:
        return 100.0 * self.host_ns / total_ns if total_ns else 0.0


@dataclass(frozen=True)
class PhaseBreakdown:
    phases: list[PhaseStat]  # in forward, backward, optimizer order; only phases present
    step_ns: int  # summed step time, the denominator of host shares
    unassigned_ns: int  # step time in no phase range

    def get(self, name: str) -> PhaseStat | None:
        return next((p for p in self.phases if p.name == name), None)


def phase_breakdown(
    trace: Trace, segmentation: StepSegmentation, device: int | None, classes: np.ndarray | None = None
) -> PhaseBreakdown | None:
    """Forward/backward/optimizer time, or None when the trace has no phase ranges."""
    a = trace.annotations
    host = a.device < 0
    ws, we = segmentation.starts, segmentation.ends
    layers, counts = [], []
    for _, rx in PHASE_PATTERNS:
        sel = host & name_mask(trace, rx)[a.name]
        layers.append(iv.union(a.ts[sel], a.end[sel]))
        # ranges overlapping a step (a phase may open just before the first step starts)
        counts.append(
            int(((a.end[sel][:, None] > ws) & (a.ts[sel][:, None] < we)).any(axis=1).sum()) if sel.any() else 0
        )
    if not any(counts):
        return None
    table = iv.exclusive_layers(layers, ws, we)  # windows × (phases…, rest)
    step_ns = int((we - ws).sum())

    # Exclusive host intervals per phase, to attribute launches: later layers minus earlier ones.
    r, k = trace.runtime, trace.kernels
    on = (k.device == device) if device is not None else np.ones(len(k), bool)
    cls_of = classes if classes is not None else None
    taken: iv.IntervalSet = iv.EMPTY
    out: list[PhaseStat] = []
    stats: dict[str, PhaseStat] = {}
    owns = []
    for j in range(len(PHASE_PATTERNS)):
        own = _minus(layers[j], taken)
        taken = iv.union(np.concatenate([taken[0], layers[j][0]]), np.concatenate([taken[1], layers[j][1]]))
        owns.append(_clip_to_windows(own, ws, we))
    k_phases = _launch_phases(owns, r.ts, r.correlation, k.correlation)
    for j, (name, _) in enumerate(PHASE_PATTERNS):
        mine = on & ((k_phases >> j) & 1).astype(bool)
        by_class: dict[str, int] = {}
        if cls_of is not None and mine.any():
            per = np.bincount(cls_of[k.name[mine]], weights=k.dur[mine], minlength=len(ALL_CLASSES))
            by_class = {c: int(per[i]) for i, c in enumerate(ALL_CLASSES) if per[i] > 0}
        stats[name] = PhaseStat(
            name=name,
            ranges=counts[j],
            host_ns=int(table[:, j].sum()),
            kernels=int(mine.sum()),
            kernel_ns=int(k.dur[mine].sum()),
            gpu_busy_ns=iv.total(iv.union(k.ts[mine], k.end[mine])),
            class_ns=by_class,
        )
    for name in ("forward", "backward", "optimizer"):
        if stats[name].ranges:
            out.append(stats[name])
    return PhaseBreakdown(out, step_ns, int(table[:, -1].sum()))


def _minus(a: iv.IntervalSet, b: iv.IntervalSet) -> iv.IntervalSet:
    """Intervals of ``a`` not covered by ``b`` (both sorted and disjoint)."""
    if not len(a[0]) or not len(b[0]):
        return a
    pts_s, pts_e = [], []
    j = 0
    bs, be = b[0].tolist(), b[1].tolist()
    for s, e in zip(a[0].tolist(), a[1].tolist()):
        cur = s
        while j < len(bs) and be[j] <= cur:
            j += 1
        k = j
        while k < len(bs) and bs[k] < e:
            if bs[k] > cur:
                pts_s.append(cur)
                pts_e.append(bs[k])
            cur = max(cur, be[k])
            k += 1
        if cur < e:
            pts_s.append(cur)
            pts_e.append(e)
    return np.array(pts_s, np.int64), np.array(pts_e, np.int64)


def _launch_phases(owns: list[iv.IntervalSet], r_ts: np.ndarray, r_corr: np.ndarray, k_corr: np.ndarray) -> np.ndarray:
    """Per kernel, a bit per phase (bit j: ``owns[j]``) whose set holds the start of a runtime call
    with the kernel's correlation id (ids ≥ 0 only). The sets are disjoint (each phase's own time):
    one binary search places every call in its phase, and one sort of the placed calls' ids answers
    every kernel — where a search and a sort per phase took 0.19 CPU-s at 1 GB."""
    width = np.uint8 if len(owns) <= 8 else np.uint64  # a bit per phase (three today)
    out = np.zeros(len(k_corr), width)
    parts = [(o[0], o[1], j) for j, o in enumerate(owns) if len(o[0])]
    if not parts or not len(r_ts) or not len(k_corr):
        return out
    s = np.concatenate([p[0] for p in parts])
    e = np.concatenate([p[1] for p in parts])
    lab = np.concatenate([np.full(len(p[0]), p[2], width) for p in parts])
    ne = e > s  # an empty interval holds no start (and would hide the one it lies in)
    s, e, lab = s[ne], e[ne], lab[ne]
    o = np.argsort(s, kind="stable")
    s, e, lab = s[o], e[o], lab[o]
    ids_p, bits_p = [], []
    for a in range(0, len(r_ts), _PIECE):  # a piece of the calls at a time: no columns of every call
        t, rc = r_ts[a : a + _PIECE], r_corr[a : a + _PIECE]
        i = searchsorted(s, t, side="right") - 1
        hit = (i >= 0) & (rc >= 0)
        hit[hit] = t[hit] < e[i[hit]]
        ids_p.append(rc[hit])
        bits_p.append(np.left_shift(width(1), lab[i[hit]]).astype(width))
        del t, rc, i, hit
    rc = ids_p[0] if len(ids_p) == 1 else np.concatenate(ids_p)
    bits = bits_p[0] if len(bits_p) == 1 else np.concatenate(bits_p)
    del ids_p, bits_p
    if not len(rc):
        return out
    rc, by_id = codes.ascending(rc)  # a table's ids ascend already: no sort
    if by_id is not None:
        bits = bits[by_id]
    first = np.flatnonzero(np.concatenate([[True], rc[1:] != rc[:-1]]))
    ids, bits = rc[first], np.bitwise_or.reduceat(bits, first)  # a call id seen in several phases: each
    pos = searchsorted(ids, k_corr)
    np.minimum(pos, len(ids) - 1, out=pos)
    found = ids[pos] == k_corr
    out[found] = bits[pos[found]]
    return out


_PIECE = 1 << 20  # runtime calls per piece


def _clip_to_windows(a: iv.IntervalSet, ws: np.ndarray, we: np.ndarray) -> iv.IntervalSet:
    if not len(ws):
        return iv.EMPTY
    starts = np.concatenate([np.maximum(a[0], s) for s in ws]) if len(a[0]) else np.empty(0, np.int64)
    ends = np.concatenate([np.minimum(a[1], e) for e in we]) if len(a[0]) else np.empty(0, np.int64)
    return iv.union(starts, ends)
