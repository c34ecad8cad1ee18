"""Per-step exclusive time breakdown of the GPU, with idle time split by what the host was doing.

Every nanosecond of a step goes to exactly one category, by priority: GPU compute, then
communication, copies, memsets (the GPU is busy); otherwise the GPU is idle and the instant goes
to the host's reason: waiting for data (DataLoader ``__next__``), synchronizing
(device/stream/event synchronize, blocking copies), busy in framework ops or runtime calls
(launch/CPU overhead: the GPU waits for work to be issued), or nothing recorded (other).
Categories therefore sum to the step time, and shares sum to 100 %.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.analyzers.trace.steps import DATA_WAIT
from trainscope.analyzers.trace.steps import PROFILER_STEP
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.analyzers.trace.steps import name_mask
from trainscope.traces.model import Trace

CATEGORIES: tuple[str, ...] = (
    "compute",
    "communication",
    "copy",
    "memset",
    "idle_data_wait",
    "idle_sync",
    "idle_host_overhead",
    "idle_other",
)
BUSY = CATEGORIES[:4]
IDLE = CATEGORIES[4:]
CATEGORY_LABELS = {
    "compute": "GPU compute",
    "communication": "communication (not overlapped)",
    "copy": "memory copies",
    "memset": "memsets",
    "idle_data_wait": "GPU idle: waiting for data",
    "idle_sync": "GPU idle: host synchronizing",
    "idle_host_overhead": "GPU idle: launch/CPU overhead",
    "idle_other": "GPU idle: other",
}

# Host calls that block until the GPU catches up (an explicit sync, or a synchronous copy).
SYNC_CALL = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy|MemcpyWithStream|Memcpy2D|"
    r"MemcpyToSymbol|MemcpyFromSymbol|StreamQuery)$|^cu(Ctx|Stream|Event)Synchronize$|^cuMemcpy(DtoH|HtoD)(_v2)?$"
)


@dataclass(frozen=True)
class StepBreakdown:
    label: str
    start_ns: int
    duration_ns: int
    ns: dict[str, int]  # category → nanoseconds (exclusive, sums to duration_ns)
    host_data_wait_ns: int  # host-side time in DataLoader __next__ (regardless of the GPU)

    def share_pct(self, category: str) -> float:
        return 100.0 * self.ns[category] / self.duration_ns if self.duration_ns else 0.0

    @property
    def gpu_busy_ns(self) -> int:
        return sum(self.ns[c] for c in BUSY)


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p95: float
    mean: float


@dataclass(frozen=True)
class Breakdown:
    device: int | None
    steps: list[StepBreakdown]
    total_ns: int
    ns: dict[str, int]
    host_data_wait_ns: int
    step_ms: Percentiles
    category_ms: dict[str, Percentiles]

    def share_pct(self, category: str) -> float:
        return 100.0 * self.ns[category] / self.total_ns if self.total_ns else 0.0

    @property
    def gpu_busy_pct(self) -> float:
        return sum(self.share_pct(c) for c in BUSY)

    @property
    def data_wait_pct(self) -> float:
        return 100.0 * self.host_data_wait_ns / self.total_ns if self.total_ns else 0.0


def primary_device(trace: Trace) -> int | None:
    """The GPU with the most kernel, copy and memset time (a rank's trace normally uses one)."""
    tot: dict[int, int] = {}
    for t in (trace.kernels, trace.copies, trace.memsets):
        for d in np.unique(t.device):
            tot[int(d)] = tot.get(int(d), 0) + int(t.dur[t.device == d].sum())
    return max(tot, key=tot.__getitem__) if tot else None


def gpu_layers(trace: Trace, device: int | None, classes: np.ndarray | None = None) -> dict[str, iv.IntervalSet]:
    """Busy intervals of one GPU by kind: compute kernels, communication kernels, copies, memsets.
    ``classes`` is the class column of :func:`kernel_classes`, when the caller already has it."""
    k = trace.kernels
    on = (k.device == device) if device is not None else np.ones(len(k), bool)
    cls_of = classes if classes is not None else kernel_classes(trace)[0]
    comm = cls_of[k.name] == ALL_CLASSES.index("communication") if len(k) else np.zeros(0, bool)
    c, m = trace.copies, trace.memsets
    c_on = (c.device == device) if device is not None else np.ones(len(c), bool)
    m_on = (m.device == device) if device is not None else np.ones(len(m), bool)
    return {
        "compute": iv.union(k.ts[on & ~comm], k.end[on & ~comm]),
        "communication": iv.union(k.ts[on & comm], k.end[on & comm]),
        "copy": iv.union(c.ts[c_on], c.end[c_on]),
        "memset": iv.union(m.ts[m_on], m.end[m_on]),
    }


def host_layers(trace: Trace) -> dict[str, iv.IntervalSet]:
    """Host intervals that explain GPU idle time: data wait, synchronization, any host work."""
    a, o, r = trace.annotations, trace.cpu_ops, trace.runtime
    data_names = name_mask(trace, DATA_WAIT)
    a_data = (a.device < 0) & data_names[a.name]
    o_data = data_names[o.name]
    # the selected rows' ends (a.ts[m] + a.dur[m]), not an end column of millions of operators
    data = iv.union(
        np.concatenate([a.ts[a_data], o.ts[o_data]]),
        np.concatenate([a.ts[a_data] + a.dur[a_data], o.ts[o_data] + o.dur[o_data]]),
    )
    del a_data, o_data
    r_sync = name_mask(trace, SYNC_CALL)[r.name]
    sync = iv.union(r.ts[r_sync], r.ts[r_sync] + r.dur[r_sync])
    del r_sync
    # Umbrella ranges (ProfilerStep#N) cover the whole step and say nothing about host activity.
    step_names = name_mask(trace, PROFILER_STEP)
    ops = ~step_names[o.name]
    # each table merged on its own (rows in start order need no sort), then the two sets
    # the operators (they nest: their merge is far shorter) a piece at a time, then the calls
    busy = iv.union_sets([iv.union_rows(o.ts, o.dur, ops), iv.union(r.ts, r.end, spent=True)], spent=True)
    return {"idle_data_wait": data, "idle_sync": sync, "idle_host_overhead": busy}


def _pct(values: np.ndarray) -> Percentiles:
    if len(values) == 0:
        return Percentiles(0.0, 0.0, 0.0)
    return Percentiles(float(np.percentile(values, 50)), float(np.percentile(values, 95)), float(values.mean()))


def step_breakdown(
    trace: Trace,
    segmentation: StepSegmentation,
    device: int | None = None,
    classes: np.ndarray | None = None,
    host: dict[str, iv.IntervalSet] | None = None,
) -> Breakdown:
    """The exclusive breakdown of every step of ``segmentation`` on ``device`` (default: primary).
    ``host``: :func:`host_layers` of ``trace``, when the caller already has them."""
    if device is None:
        device = primary_device(trace)
    gpu = gpu_layers(trace, device, classes)
    if host is None:
        host = host_layers(trace)
    layers = [gpu[c] for c in BUSY] + [host[c] for c in IDLE[:-1]]
    ws, we = segmentation.starts, segmentation.ends
    table = iv.exclusive_layers(layers, ws, we)
    host_wait = iv.overlap_per_window(host["idle_data_wait"], ws, we)
    steps = [
        StepBreakdown(
            st.label,
            st.start_ns,
            st.duration_ns,
            {c: int(table[i, j]) for j, c in enumerate(CATEGORIES)},
            int(host_wait[i]),
        )
        for i, st in enumerate(segmentation.steps)
    ]
    totals = {c: int(table[:, j].sum()) for j, c in enumerate(CATEGORIES)}
    durations = np.array([s.duration_ns for s in steps], float) / 1e6
    return Breakdown(
        device=device,
        steps=steps,
        total_ns=int(sum(s.duration_ns for s in steps)),
        ns=totals,
        host_data_wait_ns=int(host_wait.sum()),
        step_ms=_pct(durations),
        category_ms={c: _pct(table[:, j] / 1e6) for j, c in enumerate(CATEGORIES)},
    )


def gpu_busy_over_window(trace: Trace, start_ns: int, end_ns: int, device: int | None = None) -> dict[str, float]:
    """Busy/idle of one GPU over a window, kernels + copies + memsets as one union (HTA's view)."""
    if device is None:
        device = primary_device(trace)
    layers = gpu_layers(trace, device)
    allbusy = iv.union(np.concatenate([x[0] for x in layers.values()]), np.concatenate([x[1] for x in layers.values()]))
    busy = iv.total(iv.clip(allbusy, start_ns, end_ns))
    span = end_ns - start_ns
    return {"busy_ns": busy, "idle_ns": span - busy, "busy_pct": 100.0 * busy / span if span else 0.0}


def refiled(b: Breakdown, target: dict[str, int]) -> Breakdown:
    """``b`` with its GPU-idle rows set to ``target`` (category -> ns over all steps; the rest of the
    idle stays "other"), so the breakdown shows the figures the verdict's sinks measured (one story:
    idle the host frames or the GPU timeline explain leaves "other" for the row of its cause). Each
    step gets a share of a row's total in proportion to the idle time it can take it from (its own
    value of the row plus its "other" idle); the host's data wait counts the input row where that is
    larger (time producing input, not only waiting on a loader)."""
    n = len(b.steps)
    if not n or not b.total_ns:
        return b
    rows = [c for c in IDLE if c != "idle_other" and c in target]
    if not rows:
        return b
    idle = np.array([[s.ns[c] for c in IDLE] for s in b.steps], np.float64)  # steps x IDLE
    per_step_idle = idle.sum(axis=1)
    other = idle[:, IDLE.index("idle_other")]
    new = {c: idle[:, IDLE.index(c)].copy() for c in IDLE if c != "idle_other"}
    for c in rows:
        w = idle[:, IDLE.index(c)] + other
        want = float(min(target[c], per_step_idle.sum()))
        new[c] = want * w / w.sum() if w.sum() > 0 else want * per_step_idle / max(per_step_idle.sum(), 1.0)
    used = sum(new.values())
    over = used > per_step_idle
    if over.any():  # a step asked for more than its idle: fall back to shares of each step's idle
        for c in new:
            tot = new[c].sum()
            new[c] = tot * per_step_idle / max(per_step_idle.sum(), 1.0)
        used = sum(new.values())
    new["idle_other"] = per_step_idle - used
    steps = []
    for i, s in enumerate(b.steps):
        ns = dict(s.ns)
        vals = {c: int(round(new[c][i])) for c in IDLE}
        vals["idle_other"] = int(sum(s.ns[c] for c in IDLE)) - sum(v for c, v in vals.items() if c != "idle_other")
        ns.update(vals)
        wait = max(s.host_data_wait_ns, ns["idle_data_wait"])
        steps.append(StepBreakdown(s.label, s.start_ns, s.duration_ns, ns, wait))
    totals = {c: sum(s.ns[c] for s in steps) for c in CATEGORIES}
    return Breakdown(
        device=b.device,
        steps=steps,
        total_ns=b.total_ns,
        ns=totals,
        host_data_wait_ns=sum(s.host_data_wait_ns for s in steps),
        step_ms=b.step_ms,
        category_ms={c: _pct(np.array([s.ns[c] for s in steps], np.float64) / 1e6) for c in CATEGORIES},
    )
