"""The invariant pass between reading and analysis: physical rules every trace must obey, checked on
the normalized model (:mod:`trainscope.traces.model`) whatever format it came from, and each breach
repaired and counted by reason — as Perfetto's trace processor keeps a ``stats`` table of every input
it dropped or fixed.

A trace can be valid by format and absurd by meaning: a kernel lasting ten days, every event
present twice, thousands of empty step markers, steps overlapping. Each rule below names what it
checks, what it does to the events that break it, its threshold and where that comes from; the
reasons are declared once in :data:`REASONS` (``docs/repairs.md`` lists them, a test keeps the two
equal). The pass is pure: :func:`repair` returns the repaired tables and a :class:`RepairLog`; the
pipeline applies it once per trace (:func:`ensure_checked`, called by ``analyze_trace``).

Order matters and is fixed: duplicates are merged first (a copy is not a second event), clocks are
aligned next (a lane shifted by days is moved back, not dropped), then events beyond the recording
window are dropped, overlaps on one stream clipped, and step markers that are stubs or overlap an
earlier step set aside. Repairs touching more than :data:`CONFIDENCE_SHARE` of GPU time lower the
verdict's confidence (:func:`with_repairs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import TypedDict

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.intervals import searchsorted
from trainscope.analyzers.trace.steps import PROFILER_STEP
from trainscope.analyzers.trace.steps import name_mask
from trainscope.traces.model import Column
from trainscope.traces.model import Copies
from trainscope.traces.model import Kernels
from trainscope.traces.model import Memsets
from trainscope.traces.model import Trace

if TYPE_CHECKING:
    from trainscope.analyzers.trace.analysis import Analysis

US = 1_000
MS = 1_000_000
S = 1_000_000_000

# The GPU tables (kernels, copies, memsets): each has device, stream and correlation columns.
GpuTable = Kernels | Copies | Memsets


class RepairDict(TypedDict):
    """One repair as the JSON document's ``repairs[]`` entry holds it (:meth:`Repair.as_dict`)."""

    reason: str
    action: str
    count: int
    gpu_ms: float
    example: str


@dataclass(frozen=True)
class Reason:
    """One repair reason: its code (in JSON ``repairs[].reason`` and the warning line), what it does
    to the events that break the rule, its threshold (value and unit) and where the rule comes from."""

    code: str
    action: str  # merged | shifted | dropped | clipped | set aside | reported
    rule: str
    does: str
    threshold: float
    unit: str
    source: str


REASONS: dict[str, Reason] = {
    r.code: r
    for r in (
        Reason(
            "duplicate-event",
            "merged",
            "identical events (same table, name, lane or stream, start, duration, correlation) are one event",
            "keeps the first copy of each GPU kernel, copy, memset, runtime call, annotation and counter "
            "sample, drops the others",
            0,
            "ns difference",
            "a trace merged or written twice; CPU operators are exempt (nested operators of one name and "
            "identical µs-rounded times occur in real Kineto traces)",
        ),
        Reason(
            "clock-skew",
            "shifted",
            "a kernel does not start before the runtime call that launched it, nor after the whole "
            "recording window has passed since",
            "measures, per GPU stream, the least launch-to-start gap over the kernels linked to their launch "
            "(correlation id); a stream whose least gap is below minus the threshold (host and device clocks "
            "disagree) or beyond the recording window (a clock offset by hours or days) is shifted so its "
            "least gap equals the least gap of the healthy streams",
            1 * US,
            "ns",
            "CUDA runtime semantics: a launch call enqueues the kernel, which cannot run before it; 1 µs is the "
            "resolution of Kineto's integer-microsecond timestamps",
        ),
        Reason(
            "beyond-trace",
            "dropped",
            "no event lasts longer than the trace or starts outside it",
            "drops events ending later than the trace's end (the last end two lanes reach, or the last host "
            "start) by more than the host window's length (at least the threshold), and GPU events starting "
            "that far before the first host event: their durations or clocks are corrupt and cannot be "
            "recovered (a real stall holds several lanes: the kernel, the call waiting on it, the step)",
            1 * S,
            "ns (least allowance)",
            "a profiler records the events that start in its window; GPU work trails the host by its queue "
            "(up to 0.73 s measured in the bundled traces), never by more than the window itself",
        ),
        Reason(
            "stream-overlap",
            "clipped",
            "on one GPU stream, kernels, copies and memsets do not overlap",
            "cuts an event still running when the next event of its stream starts at that start",
            2 * US,
            "ns of overlap tolerated",
            "CUDA stream semantics: work on one stream runs in issue order, one operation after the other "
            "(CUDA C++ Programming Guide, Streams); 2 µs: a start and a duration each rounded to Kineto's "
            "integer microseconds",
        ),
        Reason(
            "stub-step",
            "set aside",
            "a step is not a stub: far shorter than the median step, or shorter than a floor",
            "sets aside ProfilerStep markers shorter than the floor (the threshold) or than step.stub_fraction "
            "× the median of the other markers of their lane",
            5 * US,
            "ns (floor)",
            "a training step runs at least one operator: one CUDA kernel launch or one eager PyTorch operator's "
            "dispatch alone costs ≈ 5 µs of host time",
        ),
        Reason(
            "overlapping-step",
            "set aside",
            "steps of one lane do not overlap",
            "keeps the earliest step marker and sets aside every later marker of another name that starts "
            "before the kept one ends (beyond the tolerance)",
            1 * US,
            "ns of overlap tolerated",
            "iterations of a training loop follow each other; 1 µs is Kineto's timestamp resolution",
        ),
        Reason(
            "inconsistent-analysis",
            "reported",
            "GPU busy is at most 100 % of the window, and the sinks sum to the step time",
            "checked after the analysis; a breach is reported with both figures (it is a defect of "
            "trainscope, not of the trace)",
            0.5,
            "% of step time tolerated",
            "time is conserved: the step's sinks partition its wall time",
        ),
    )
}

# Repairs touching more than this share of the GPU time lower the verdict's confidence: a smaller
# change cannot move a sink across the smallest moderate grade of the rule table (GPU idle waiting
# for data ≥ 5 % of step time).
CONFIDENCE_SHARE = 5.0  # % of GPU time


@dataclass
class Repair:
    """What one reason did to one trace: how many events, how much GPU time, and one example."""

    reason: str
    count: int = 0
    gpu_ns: int = 0  # GPU time the repair removed or moved
    example: str = ""

    @property
    def spec(self) -> Reason:
        return REASONS[self.reason]

    def line(self) -> str:
        r = self.spec
        what = {
            "duplicate-event": "duplicate events merged",
            "clock-skew": "GPU streams shifted to their launches' clock",
            "beyond-trace": "events dropped: longer than the trace or starting outside it",
            "stream-overlap": "GPU events clipped: overlapping the next event of their stream",
            "stub-step": "stub step markers set aside",
            "overlapping-step": "overlapping step markers set aside",
            "inconsistent-analysis": "analysis figures inconsistent",
        }[self.reason]
        gpu = f", {self.gpu_ns / MS:,.3f} ms of GPU time" if self.gpu_ns else ""
        return f"repair {r.code}: {self.count:,} {what}{gpu} (rule: {r.rule}); e.g. {self.example}"

    def as_dict(self) -> RepairDict:
        return {
            "reason": self.reason,
            "action": self.spec.action,
            "count": self.count,
            "gpu_ms": round(self.gpu_ns / MS, 3),
            "example": self.example,
        }


@dataclass
class RepairLog:
    """Every repair of one trace, by reason, and the GPU time the trace held before them."""

    repairs: dict[str, Repair] = field(default_factory=dict)
    gpu_ns: int = 0  # GPU time (kernels + copies + memsets, summed) after the repairs
    stub_fraction: float = 0.02  # the step.stub_fraction the pass ran with (a re-read trace is repaired alike)

    def add(self, reason: str, count: int, gpu_ns: int, example: str) -> None:
        if count <= 0:
            return
        r = self.repairs.setdefault(reason, Repair(reason, example=example))
        r.count += int(count)
        r.gpu_ns += int(gpu_ns)

    @property
    def touched_ns(self) -> int:
        return sum(r.gpu_ns for r in self.repairs.values())

    @property
    def touched_pct(self) -> float:
        base = self.gpu_ns + sum(
            r.gpu_ns for r in self.repairs.values() if r.spec.action in ("merged", "dropped", "clipped")
        )
        return 100.0 * self.touched_ns / base if base else 0.0

    def lines(self) -> list[str]:
        return [r.line() for r in self.repairs.values()]

    def as_list(self) -> list[RepairDict]:
        return [r.as_dict() for r in self.repairs.values()]


# --- the pass --------------------------------------------------------------------------------------

_GPU = ("kernels", "copies", "memsets")
# Tables whose identical rows (every column equal) are one event. CPU operators are exempt: nested
# operators of one name with identical µs-rounded times occur in real Kineto traces.
_DEDUP = ("kernels", "copies", "memsets", "runtime", "annotations", "counters")
_CHECKED = "invariants_checked"


def ensure_checked(trace: Trace, stub_fraction: float = 0.02) -> RepairLog:
    """Apply :func:`repair` to ``trace`` in place, once (a second call returns the first log): every
    consumer of the trace object — the analysis, the rank reduce, the timeline — sees the repaired
    events, and the warnings are added to ``trace.warnings``."""
    log = trace.metadata.get(_CHECKED)
    if isinstance(log, RepairLog):
        return log
    repaired, log = repair(trace, stub_fraction)
    for name in ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "counters"):
        setattr(trace, name, getattr(repaired, name))
    trace.op_inputs = repaired.op_inputs
    trace.warnings = list(trace.warnings) + log.lines()
    trace.metadata[_CHECKED] = log
    return log


def repair(trace: Trace, stub_fraction: float = 0.02) -> tuple[Trace, RepairLog]:
    """The repaired copy of ``trace`` (tables replaced, ``trace`` untouched) and what was done."""
    t = replace(trace, metadata=dict(trace.metadata), warnings=list(trace.warnings), op_inputs=replace(trace.op_inputs))
    log = RepairLog(stub_fraction=stub_fraction)
    _merge_duplicates(t, log)
    _align_clocks(t, log)
    _drop_beyond_window(t, log)
    _clip_stream_overlaps(t, log)
    _set_aside_steps(t, log, stub_fraction)
    log.gpu_ns = int(sum(int(getattr(t, n).dur.sum()) for n in _GPU))
    return t, log


def _name(t: Trace, table: str, i: int) -> str:
    tab = getattr(t, table)
    if hasattr(tab, "name"):
        s = t.strings[int(tab.name[i])] if 0 <= int(tab.name[i]) < len(t.strings) else "?"
        return (s[:60] + "…") if len(s) > 60 else s
    return table[:-1]


def _where(t: Trace, table: str, i: int) -> str:
    tab = getattr(t, table)
    return f"{_name(t, table, i)} at {int(tab.ts[i]) / MS:,.3f} ms"


def _keep(t: Trace, table: str, keep: np.ndarray) -> None:
    """Keep rows ``keep`` (a bool mask) of ``table``, with the side arrays aligned to its rows."""
    tab = getattr(t, table)
    setattr(t, table, tab.select(keep))
    oi = t.op_inputs
    if table == "kernels" and len(oi.kernel_external) == len(keep):
        t.op_inputs = replace(oi, kernel_external=oi.kernel_external[keep])
    if table == "cpu_ops":
        if len(oi.cpu_external) == len(keep):
            oi = t.op_inputs = replace(oi, cpu_external=oi.cpu_external[keep])
        if len(oi.cpu_signature) == len(keep):
            oi = t.op_inputs = replace(oi, cpu_signature=oi.cpu_signature[keep])
        if len(oi.cpu_sequence) == len(keep) and len(oi.cpu_fwd_thread) == len(keep):
            t.op_inputs = replace(oi, cpu_sequence=oi.cpu_sequence[keep], cpu_fwd_thread=oi.cpu_fwd_thread[keep])


def _merge_duplicates(t: Trace, log: RepairLog) -> None:
    for table in _DEDUP:
        tab = getattr(t, table)
        if len(tab) < 2:
            continue
        # Copies share their start: only rows whose start repeats are compared whole (one sort of
        # one column instead of a sort of every column, on a trace of millions of events).
        ts = np.sort(tab.ts)
        repeated = np.unique(ts[1:][ts[1:] == ts[:-1]])
        if not len(repeated):
            continue
        cand = np.flatnonzero(np.isin(tab.ts, repeated))
        cols = [getattr(tab, c)[cand] for c in tab.FIELDS]
        rows = np.stack([c.view(np.int64) if c.dtype == np.float64 else c.astype(np.int64) for c in cols], axis=1)
        _, first = np.unique(rows, axis=0, return_index=True)
        if len(first) == len(cand):
            continue
        keep = np.ones(len(tab), bool)
        keep[cand] = False
        keep[cand[first]] = True
        dropped = np.flatnonzero(~keep)
        gpu = int(tab.dur[dropped].sum()) if table in _GPU else 0
        d0 = int(np.searchsorted(cand, dropped[0]))
        log.add(
            "duplicate-event",
            len(dropped),
            gpu,
            f"{table}: {_where(t, table, int(dropped[0]))} present {int((rows == rows[d0]).all(axis=1).sum())} times",
        )
        _keep(t, table, keep)


def _lanes(tab: GpuTable) -> Column:
    lanes: Column = tab.device.astype(np.int64) * (1 << 32) + (tab.stream.astype(np.int64) & 0xFFFFFFFF)
    return lanes


def _launch_gaps(t: Trace, tab: GpuTable) -> Column:
    """Per row of a GPU table: start − the start of its launch call (NaN where none is linked)."""
    rt = t.runtime
    out = np.full(len(tab), np.nan)
    if not len(rt) or not len(tab):
        return out
    order = np.argsort(rt.correlation, kind="stable")
    corr = rt.correlation[order]
    pos = searchsorted(corr, tab.correlation)
    pos = np.minimum(pos, len(corr) - 1)
    hit = (corr[pos] == tab.correlation) & (tab.correlation > 0)
    out[hit] = (tab.ts[hit] - rt.ts[order][pos[hit]]).astype(np.float64)
    return out


def _host_window(t: Trace) -> tuple[int, int] | None:
    """First and last start of a host event (runtime calls, CPU operators, host annotations)."""
    starts = [t.runtime.ts, t.cpu_ops.ts, t.annotations.ts[t.annotations.device < 0]]
    starts = [s for s in starts if len(s)]
    if not starts:
        return None
    return int(min(s.min() for s in starts)), int(max(s.max() for s in starts))


def _align_clocks(t: Trace, log: RepairLog) -> None:
    win = _host_window(t)
    if win is None:
        return
    allowance = max(win[1] - win[0], int(REASONS["beyond-trace"].threshold))
    tol = REASONS["clock-skew"].threshold
    least: dict[int, float] = {}
    for table in _GPU:
        tab = getattr(t, table)
        gaps = _launch_gaps(t, tab)
        lanes = _lanes(tab)
        ok = ~np.isnan(gaps)
        for lane in np.unique(lanes[ok]):
            g = float(gaps[ok & (lanes == lane)].min())
            least[int(lane)] = min(least.get(int(lane), g), g)
    if not least:
        return
    bad = {lane: g for lane, g in least.items() if g < -tol or g > allowance}
    if not bad:
        return
    healthy = [g for lane, g in least.items() if lane not in bad]
    ref = min(healthy) if healthy else 0.0
    for lane, g in sorted(bad.items()):
        shift = int(round(ref - g))
        moved, example = 0, ""
        for table in _GPU:
            tab = getattr(t, table)
            on = _lanes(tab) == lane
            if on.any():
                ts = tab.ts.copy()
                ts[on] += shift
                if not example:
                    example = (
                        f"device {lane >> 32} stream {lane & 0xFFFFFFFF}: least launch-to-start gap "
                        f"{g / US:,.1f} µs, shifted by {shift / MS:+,.3f} ms"
                    )
                moved += int(tab.dur[on].sum())
                setattr(t, table, type(tab)(**{**{c: getattr(tab, c) for c in tab.FIELDS}, "ts": ts}))
        log.add("clock-skew", 1, moved, example)


_LANE_KEYS = {
    "kernels": ("device", "stream"),
    "copies": ("device", "stream"),
    "memsets": ("device", "stream"),
    "runtime": ("thread",),
    "cpu_ops": ("thread",),
    "annotations": ("thread", "device"),
}


_PIECE = 1 << 20  # rows per piece in _corroborated_end


def _corroborated_end(t: Trace) -> int | None:
    """The trace's last end that two lanes reach: the second-largest of the lanes' last ends (a lane is
    one table's thread, stream or annotation track). A stall that really lasts holds several lanes
    (the kernel, the host call waiting on it, the step around them); a corrupt duration holds one."""
    ends = []
    for table, keys in _LANE_KEYS.items():
        tab = getattr(t, table)
        if not len(tab):
            continue
        last: dict[int, int] = {}
        for i in range(0, len(tab), _PIECE):  # a piece at a time: no column of millions of rows built
            key = np.zeros(min(_PIECE, len(tab) - i), np.int64)
            for k in keys:
                key *= 1 << 32
                key += getattr(tab, k)[i : i + _PIECE].astype(np.int64) & 0xFFFFFFFF
            lanes, order, first = codes.grouped(key)
            end = tab.ts[i : i + _PIECE] + tab.dur[i : i + _PIECE]
            for lane, e in zip(lanes.tolist(), np.maximum.reduceat(end[order], first).tolist()):
                last[lane] = max(last.get(lane, e), e)
        ends += list(last.values())
    if not ends:
        return None
    ends.sort()
    return int(ends[-2] if len(ends) > 1 else ends[-1])


def _drop_beyond_window(t: Trace, log: RepairLog) -> None:
    win = _host_window(t)
    if win is None:
        starts = [getattr(t, n).ts for n in _GPU if len(getattr(t, n))]
        if not starts:
            return
        win = (int(min(g.min() for g in starts)), int(max(g.max() for g in starts)))
    allowance = max(win[1] - win[0], int(REASONS["beyond-trace"].threshold))
    lo = win[0] - allowance
    hi = max(win[1], _corroborated_end(t) or win[1]) + allowance
    for table in (*_GPU, "runtime", "cpu_ops", "annotations"):
        tab = getattr(t, table)
        if not len(tab):
            continue
        bad = (tab.end > hi) | (tab.ts < lo) | (tab.dur < 0)
        if not bad.any():
            continue
        idx = np.flatnonzero(bad)
        i = int(idx[np.argmax(tab.dur[idx])])
        gpu = int(_bounded(t, table, idx, hi).sum()) if table in _GPU else 0
        log.add(
            "beyond-trace",
            len(idx),
            gpu,
            f"{table}: {_where(t, table, i)} lasting {int(tab.dur[i]) / S:,.3f} s "
            f"in a {(win[1] - win[0]) / S:,.3f} s window",
        )
        _keep(t, table, ~bad)


def _bounded(t: Trace, table: str, idx: np.ndarray, end: int) -> np.ndarray:
    """Upper bounds of the true durations of GPU events ``idx`` of ``table`` whose recorded ones are
    corrupt: work on one stream runs one operation at a time, so an event ends before the next event
    of its stream starts (or at the window's end ``end``)."""
    tab = getattr(t, table)
    parts = [getattr(t, n) for n in _GPU if len(getattr(t, n))]
    lane = np.concatenate([_lanes(p) for p in parts])
    ts = np.concatenate([p.ts for p in parts])
    order = np.lexsort((ts, lane))
    lane, ts = lane[order], ts[order]
    mine_lane, mine_ts = _lanes(tab)[idx], tab.ts[idx]
    out = np.empty(len(idx), np.int64)
    for k, (ln, s0) in enumerate(zip(mine_lane, mine_ts)):
        a, b = np.searchsorted(lane, ln, "left"), np.searchsorted(lane, ln, "right")
        j = a + np.searchsorted(ts[a:b], s0, "right")
        nxt = int(ts[j]) if j < b else end
        out[k] = max(0, min(int(tab.dur[idx[k]]), nxt - int(s0)))
    return out


def _clip_stream_overlaps(t: Trace, log: RepairLog) -> None:
    tol = REASONS["stream-overlap"].threshold
    parts = [(n, getattr(t, n)) for n in _GPU if len(getattr(t, n))]
    if not parts:
        return
    ts = np.concatenate([p.ts for _, p in parts])
    end = np.concatenate([p.end for _, p in parts])
    lane = np.concatenate([_lanes(p) for _, p in parts])
    which = np.concatenate([np.full(len(p), k) for k, (_, p) in enumerate(parts)])
    row = np.concatenate([np.arange(len(p)) for _, p in parts])
    order = np.lexsort((end, ts, lane))
    ts, end, lane, which, row = ts[order], end[order], lane[order], which[order], row[order]
    over = (lane[:-1] == lane[1:]) & (end[:-1] > ts[1:] + tol)
    if not over.any():
        return
    idx = np.flatnonzero(over)
    cut = end[idx] - ts[idx + 1]
    worst = int(idx[np.argmax(cut)])
    n, _ = parts[int(which[worst])]
    example = (
        f"{_where(t, n, int(row[worst]))} overlapping the next event of its stream by "
        f"{int(end[worst] - ts[worst + 1]) / US:,.1f} µs"
    )
    new_dur = {k: p.dur.copy() for k, (_, p) in enumerate(parts)}
    for i in idx:
        new_dur[int(which[i])][int(row[i])] = int(ts[i + 1] - ts[i])
    for k, (name, p) in enumerate(parts):
        setattr(t, name, type(p)(**{**{c: getattr(p, c) for c in p.FIELDS}, "dur": new_dur[k]}))
    log.add("stream-overlap", len(idx), int(cut.sum()), example)


def _set_aside_steps(t: Trace, log: RepairLog, stub_fraction: float) -> None:
    a = t.annotations
    if not len(a):
        return
    steps = name_mask(t, PROFILER_STEP)[a.name]
    if not steps.any():
        return
    keep = np.ones(len(a), bool)
    floor = REASONS["stub-step"].threshold
    tol = REASONS["overlapping-step"].threshold
    lanes = np.where(a.device < 0, -1, a.device.astype(np.int64))
    for lane in np.unique(lanes[steps]):
        idx = np.flatnonzero(steps & (lanes == lane))
        idx = idx[np.lexsort((-a.dur[idx], a.ts[idx]))]
        dur = a.dur[idx]
        real = dur[dur >= floor]
        med = float(np.median(real)) if len(real) else 0.0
        stub = (dur < floor) | (dur < stub_fraction * med)
        if stub.any() and len(idx) - int(stub.sum()) >= 1:
            s = idx[stub]
            keep[s] = False
            log.add(
                "stub-step",
                len(s),
                0,
                f"{_where(t, 'annotations', int(s[0]))} lasting "
                f"{int(a.dur[s[0]]) / US:,.2f} µs against a median step of {med / MS:,.3f} ms",
            )
        kept_end, kept_name, aside = None, None, []
        for i in idx[~stub]:
            if kept_end is not None and a.ts[i] < kept_end - tol and a.name[i] != kept_name:
                aside.append(int(i))
                continue
            if kept_end is None or a.name[i] != kept_name or a.ts[i] >= kept_end - tol:
                kept_end, kept_name = int(a.end[i]), a.name[i]
        if aside:
            keep[aside] = False
            log.add(
                "overlapping-step",
                len(aside),
                0,
                f"{_where(t, 'annotations', aside[0])} starting inside the step before it",
            )
    if not keep.all():
        _keep(t, "annotations", keep)


# --- after the analysis ----------------------------------------------------------------------------


def inconsistencies(analysis: Analysis) -> list[str]:
    """Breaches of the invariants an analysis must keep whatever its trace: GPU busy ≤ 100 % of the
    steps, and the sinks summing to the step time (within :data:`REASONS` ``inconsistent-analysis``)."""
    out = []
    tol = REASONS["inconsistent-analysis"].threshold
    busy = analysis.breakdown.gpu_busy_pct
    if busy > 100.0 + tol:
        out.append(f"GPU busy {busy:.2f} % of step time")
    s = analysis.sinks
    if s is not None and s.total_ns:
        total = sum(k.ns for k in s.by_key.values())
        if abs(total - s.total_ns) > tol / 100 * s.total_ns:
            out.append(f"sinks sum to {total / MS:,.3f} ms against {s.total_ns / MS:,.3f} ms of steps")
    return out


def _lead(analysis: Analysis, log: RepairLog | None) -> tuple[float | None, float]:
    """The verdict's lead (points of step time between the largest sink that can be primary and the
    next) and the GPU time the repairs touched, as % of step time."""
    s = analysis.sinks
    if log is None or s is None or not s.total_ns or not log.touched_ns:
        return None, 0.0
    ranked = s.ranked()
    if not ranked:
        return None, 0.0
    lead = ranked[0].pct - (ranked[1].pct if len(ranked) > 1 else 0.0)
    return lead, 100.0 * log.touched_ns / s.total_ns


def with_repairs(analysis: Analysis, log: RepairLog | None) -> Analysis:
    """``analysis`` with its inconsistencies reported and, where repairs touched more than
    :data:`CONFIDENCE_SHARE` of GPU time — or as much step time as the verdict's lead over its
    runner-up, so that they could have decided it — its confidence lowered by that share (at most
    halved), with the reason in the evidence and the warnings."""
    warnings = list(analysis.warnings)
    bad = inconsistencies(analysis)
    if bad:
        line = f"repair inconsistent-analysis: {len(bad)} analysis figures inconsistent; e.g. {bad[0]}"
        if line not in warnings:
            warnings.append(line)
    verdict = analysis.verdict
    lead, step_pct = _lead(analysis, log)
    close = lead is not None and step_pct > 0 and step_pct >= lead
    if log is not None and (log.touched_pct > CONFIDENCE_SHARE or close) and verdict.axis != "insufficient_evidence":
        share = log.touched_pct
        lowered = round(verdict.confidence * max(0.5, 1.0 - max(share, step_pct) / 100.0), 2)
        lowered = min(lowered, round(verdict.confidence - 0.01, 2))
        reasons = ", ".join(sorted(r.reason for r in log.repairs.values() if r.gpu_ns))
        why = f"confidence lowered from {verdict.confidence:.2f} to {lowered:.2f}: repairs ({reasons}) touched " + (
            f"{share:.1f} % of GPU time (more than {CONFIDENCE_SHARE:g} %)"
            if share > CONFIDENCE_SHARE
            else f"{step_pct:.2f} % of step time, as much as the verdict's lead of {lead:.2f} points over the runner-up"
        )
        if not any(e.metric.startswith("GPU time touched by repairs") for e in verdict.evidence):
            ev = Evidence(
                "GPU time touched by repairs",
                round(share, 2),
                "% of GPU time",
                f"> {CONFIDENCE_SHARE:g}",
                "invariant pass (docs/repairs.md)",
                True,
            )
            verdict = replace(verdict, confidence=lowered, evidence=[*verdict.evidence, ev])
            if why not in warnings:
                warnings.append(why)
    return replace(analysis, verdict=verdict, warnings=warnings)


def reasons_markdown() -> str:
    """The reason table as Markdown (``docs/repairs.md`` holds it between its markers; a test keeps
    the two equal)."""

    def fmt(r: Reason) -> str:
        if r.unit.startswith("ns"):
            v = r.threshold
            value = f"{v / S:g} s" if v >= S else f"{v / US:g} µs" if v >= US else f"{v:g} ns"
            return value + r.unit[2:]
        return f"{r.threshold:g} {r.unit}"

    rows = ["| code | action | rule | what it does | threshold | source |", "|---|---|---|---|---|---|"]
    rows += [f"| `{r.code}` | {r.action} | {r.rule} | {r.does} | {fmt(r)} | {r.source} |" for r in REASONS.values()]
    return "\n".join(rows) + "\n"
