"""Why the GPU sat idle, read from the GPU timeline and the runtime API alone.

Host frames (Python stacks, framework operators) explain GPU idle where a trace records them
(:mod:`trainscope.analyzers.trace.host_idle`, the breakdown's host layers). Every CUDA/HIP trace records
less but enough to order host and GPU: each GPU operation's start, and the runtime call that issued
it (correlation id), plus the synchronizing, copying and code-loading calls. This module files every
GPU-idle instant that recorded host activity does not already explain, by the first rule that
applies (the semantics are those of the runtime API, never a list of kernel or file names):

1. **sync** — a call that blocks the host until the GPU catches up is in progress
   (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ``cudaEventSynchronize``, a synchronous
   ``cudaMemcpy``/``hipMemcpyWithStream``, an asynchronous device-to-host copy into *pageable* memory,
   which returns only once the copy completed — CUDA Runtime API, "API synchronization behavior"),
   and the gap right after it until work resumes, capped at the time the host was blocked (that
   gap after rules 2 and 3: work the host records there names what it did);
2. **cold-start** — code is being compiled or loaded (``nvrtc*``/``hiprtc*`` calls,
   ``cuModuleLoad*``, ``cuLibraryLoad*``, ``hipModuleLoad*``);
3. **host-range** — a host range the user named (NVTX, ``record_function``) that issues no GPU work
   is in progress: its name says what the host did (IO, checkpoint, logging, evaluation);
4. **step-boundary** — at the start of a step before its first launch call, or after the last one
   with nothing pending: the host works between steps (input, bookkeeping) with no GPU work issued;
5. **issued-late** — the launch call of the operation that ends the gap starts after the gap began:
   the queue of issued work ran empty and the GPU waited for the host to issue more, whatever the
   host was doing (launch and framework overhead; HTA's queue-length and "host wait" analyses);
6. **queued** — the operation was issued before the gap began and still started late (a
   dependency on another stream or device, GPU-side launch latency): not the host's doing;
7. **unordered** — the operation has no recorded launch call: nothing orders host and GPU here.

Classes 1–5 are explanations; 6–7 stay unexplained. The evidence says the classes were inferred
from the GPU timeline and runtime calls, and whether the trace's host events are sparse (sampled).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers import intervals as iv
from trainscope.analyzers import membership
from trainscope.analyzers.trace import heap
from trainscope.analyzers.trace.breakdown import SYNC_CALL
from trainscope.analyzers.trace.steps import DATA_WAIT
from trainscope.analyzers.trace.steps import PROFILER_STEP
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.analyzers.trace.steps import name_mask
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS
from trainscope.traces.model import Column
from trainscope.traces.model import Trace

CLASSES = ("sync", "cold-start", "host-range", "step-boundary", "issued-late", "queued", "unordered")
EXPLAINED = CLASSES[:5]
# The sink of step time each explaining class feeds (analyzers.trace.sinks).
SINK_OF = {
    "sync": "sync",
    "cold-start": "launch",
    "issued-late": "launch",
    "host-range": "host-ranges",
    "step-boundary": "host-work",
}
LABELS = {
    "sync": "host blocked on the GPU (synchronize, blocking or pageable device-to-host copy) and the gap after it",
    "cold-start": "code being compiled or loaded (NVRTC/JIT, module or library loading)",
    "host-range": "host work in named ranges that issue no GPU work",
    "step-boundary": "between steps: before a step's first launch / after its last, nothing pending",
    "issued-late": "next GPU operation issued after the gap began (queue empty: host-bound issue)",
    "queued": "next GPU operation already issued (GPU-side dependency or latency)",
    "unordered": "next GPU operation has no recorded launch call",
}
INFERRED = "inferred from the GPU timeline and runtime calls"
LAUNCH_CALL = "host time per launch call"  # the gaps' median launch call: a finding that quotes it says it first
# Runtime-API calls that compile or load device code.
_NUMBER = re.compile(r"\d+")
GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)GraphLaunch(_v\d+)?$")
COMPILE_CALL = re.compile(
    r"^(nvrtc|hiprtc)\w+$|^cu(Module|Library)(Load|GetFunction|GetKernel)\w*$|"
    r"^hipModuleLoad\w*$|^cudaLibraryLoad\w*$"
)
# Host events (operators, runtime calls) covering less than this share of the GPU's idle time between
# the first and last launch: the host side is sparse (sampled or filtered) — most gaps have no record.
SPARSE_COVERAGE = 0.5
# A runtime record of at least this many calls, every one issuing GPU work, was filtered (event-sampled).
SAMPLED_MIN_CALLS = 100


@dataclass(frozen=True)
class GpuGaps:
    step_ns: int
    idle_ns: int  # GPU idle in the windows
    considered_ns: int  # idle not already explained by recorded host activity
    ns: dict[str, int]  # class -> ns (exclusive, sums to considered_ns)
    per_step: dict[str, np.ndarray] = field(repr=False, compare=False, default_factory=dict)  # class -> ns per window
    gaps: int = 0  # idle gaps considered
    late_gaps: int = 0  # of which the next operation was issued late
    launch_call_us: float | None = None  # median host time per launch call
    issue_interval_us: float | None = None  # median interval between consecutive launch calls
    host_coverage: float | None = None  # share of the launching threads' issue span covered by host events
    ranges: dict[str, int] = field(default_factory=dict)  # named host range -> idle ns it explains
    runtime_calls: int = 0  # runtime calls recorded on the issuing threads
    non_issuing_calls: int = 0  # of which issued no GPU operation (syncs, event records, queries)
    untraced_graph_launches: int = 0  # cudaGraphLaunch/hipGraphLaunch calls with no GPU operation recorded

    @property
    def sampled(self) -> bool:
        """The runtime record was filtered to the calls that issued GPU work: a complete CUDA/HIP trace
        of more than a few calls always holds others (synchronizations, event records, attribute
        queries), so none among :data:`SAMPLED_MIN_CALLS` or more says the trace is event-sampled."""
        return self.runtime_calls >= SAMPLED_MIN_CALLS and self.non_issuing_calls == 0

    @property
    def sparse_host(self) -> bool:
        return self.host_coverage is not None and self.host_coverage < SPARSE_COVERAGE

    def sink_of(self, cls: str) -> str:
        """The sink a class feeds. On an event-sampled trace a late issue says the host was the
        bottleneck but not whether it was issuing work or blocked in a call the sampler dropped
        (synchronizations included): it is host work, not launch overhead."""
        if cls == "issued-late" and self.sampled:
            return "host-work"
        return SINK_OF[cls]

    def metric(self, cls: str) -> str:
        """A class's evidence label, the one name its share goes by in every finding and verdict:
        what the gap holds, then the sink it feeds (or "unexplained")."""
        where = f" → {self.sink_of(cls)}" if cls in SINK_OF else " (unexplained)"
        return f"GPU idle, {LABELS[cls]}{where}"

    def inferred_ns(self, sink: str) -> int:
        """Of sink ``sink``, the time inferred from positions (named host ranges are recorded work)."""
        return sum(self.ns.get(c, 0) for c in EXPLAINED if c != "host-range" and self.sink_of(c) == sink)

    def sink_ns(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in EXPLAINED:
            if self.ns.get(c, 0) > 0:
                out[self.sink_of(c)] = out.get(self.sink_of(c), 0) + self.ns[c]
        return out

    def pct(self, cls: str) -> float:
        return 100.0 * self.ns.get(cls, 0) / self.step_ns if self.step_ns else 0.0

    def evidence_lines(self) -> list[str]:
        """Plain-language lines (what a report or finding cites)."""
        out = []
        if self.gaps:
            out.append(
                f"{self.late_gaps} of {self.gaps} GPU-idle gaps end with an operation issued after the gap "
                f"began ({INFERRED})"
            )
        if self.launch_call_us is not None:
            out.append(
                f"host time per launch call: median {self.launch_call_us:.1f} µs; issue interval between "
                f"launches: median {self.issue_interval_us or 0:.1f} µs"
            )
        if self.sampled:
            out.append(
                f"every one of the {self.runtime_calls:,} recorded runtime calls issued GPU work — no "
                "synchronization, event or query call: the trace is event-sampled (filtered), so a late issue "
                "is host work of unknown kind, not launch overhead"
            )
        if self.sparse_host and self.host_coverage is not None:  # sparse_host implies a coverage
            out.append(
                f"host events (operators, runtime calls) cover only {100 * self.host_coverage:.0f} % of the GPU's "
                "idle time between the first and last launch: the trace's host events are sparse or sampled, "
                "so what the host did during most gaps is not recorded"
            )
        for name, ns in sorted(self.ranges.items(), key=lambda x: -x[1])[:3]:
            out.append(f"host range '{name}': {ns / 1e6:.1f} ms of GPU idle")
        if self.untraced_graph_launches:
            out.append(
                f"{self.untraced_graph_launches} CUDA/HIP graph launches with no GPU operation recorded: the "
                "graphs' GPU time is missing from the trace, so idle here may be graph replays"
            )
        return out


def _ops(trace: Trace, device: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, correlation) of the device's GPU operations (kernels, copies, memsets, graph
    replays recorded as kernels), sorted by start."""
    ss: list[Column] = []
    es: list[Column] = []
    cs: list[Column] = []
    for t in (trace.kernels, trace.copies, trace.memsets):
        on = (t.device == device) if device is not None else np.ones(len(t), bool)
        ss.append(t.ts[on])
        es.append(t.end[on])
        cs.append(t.correlation[on])
    s, e, c = np.concatenate(ss), np.concatenate(es), np.concatenate(cs)
    o = np.argsort(s, kind="stable")
    return s[o], e[o], c[o]


def _issue_times(trace: Trace, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per operation, the start of the runtime call that issued it (−1 where none is recorded) and
    that call's row (−1)."""
    r = trace.runtime
    out_t = np.full(len(corr), -1, np.int64)
    out_i = np.full(len(corr), -1, np.int64)
    if not len(r) or not len(corr):
        return out_t, out_i
    rc, order = codes.ascending(r.correlation)
    pos = np.minimum(iv.searchsorted(rc, corr), len(rc) - 1)
    ok = (corr >= 0) & (rc[pos] == corr)
    out_i[ok] = pos[ok] if order is None else order[pos[ok]]
    out_t[ok] = r.ts[out_i[ok]]
    return out_t, out_i


def _sub(a: iv.IntervalSet, b: iv.IntervalSet) -> iv.IntervalSet:
    """a minus b (both sorted, disjoint)."""
    if not len(a[0]) or not len(b[0]):
        return a
    lo, hi = int(min(a[0][0], b[0][0])), int(max(a[1][-1], b[1][-1]))
    gs = np.concatenate([[lo], b[1]])
    ge = np.concatenate([b[0], [hi]])
    keep = ge > gs
    return _and(a, (gs[keep], ge[keep]))


def _and(a: iv.IntervalSet, b: iv.IntervalSet) -> iv.IntervalSet:
    """a ∩ b (both sorted, disjoint): a sweep over both sets' boundaries."""
    return iv.intersect(a, b)


def _window_launches(ws: np.ndarray, we: np.ndarray, launch_ts: np.ndarray) -> np.ndarray:
    """Each window's first and last launch call instants."""
    if not len(launch_ts):
        return np.zeros(0, np.int64)
    a = iv.searchsorted(launch_ts, ws, side="left")
    b = iv.searchsorted(launch_ts, we, side="left")
    ok = b > a
    return np.concatenate([launch_ts[a[ok]], launch_ts[b[ok] - 1]])


def _cut(a: iv.IntervalSet, points: np.ndarray) -> iv.IntervalSet:
    """``a`` with every interval that strictly contains one of ``points`` split there."""
    if not len(a[0]) or not len(points):
        return a
    pts = np.unique(points)
    k = iv.searchsorted(a[0], pts, side="right") - 1
    ok = k >= 0
    inside = np.zeros(len(pts), bool)
    inside[ok] = (pts[ok] > a[0][k[ok]]) & (pts[ok] < a[1][k[ok]])
    add = pts[inside]
    return np.sort(np.concatenate([a[0], add])), np.sort(np.concatenate([a[1], add]))


def _pieces(a: iv.IntervalSet, keep: np.ndarray) -> iv.IntervalSet:
    return (a[0][keep], a[1][keep]) if keep.any() else iv.EMPTY


def gpu_gaps(
    trace: Trace,
    segmentation: StepSegmentation,
    device: int | None,
    explained: iv.IntervalSet = iv.EMPTY,
    *,
    explained_sets: list[iv.IntervalSet] | None = None,
    host_busy: iv.IntervalSet | None = None,
) -> GpuGaps:
    """The GPU-idle time of ``segmentation``'s windows on ``device`` that ``explained`` (idle time
    recorded host activity already accounts for) leaves, split into :data:`CLASSES`.
    ``explained_sets``: the explained time as sets to unite instead; the list is emptied (the
    caller gives them up, so neither they nor their union outlive their use here). ``host_busy``:
    the union of every operator (less step ranges) and runtime call on any thread (the breakdown's
    ``idle_host_overhead`` layer), where the caller has it: the host coverage reads it when the
    launching threads are every thread those rows are on."""
    if explained_sets is not None:
        explained = iv.union_sets(explained_sets)
        explained_sets.clear()
        heap.release()  # the union's temporaries (millions of host intervals), before this stage's peak
    ws, we = segmentation.starts, segmentation.ends
    step_ns = int((we - ws).sum())
    zero = dict.fromkeys(CLASSES, 0)
    ops_s, ops_e, corr = _ops(trace, device)
    if not len(ops_s) or not step_ns:
        return GpuGaps(step_ns, 0, 0, zero)
    busy = iv.union(ops_s, ops_e)
    del ops_e  # the operations' ends and their union are read once, here
    windows = iv.union(ws, we)
    idle = _sub(windows, busy)
    del busy
    idle_ns = iv.total(idle)
    left = _sub(idle, explained)
    del explained
    considered = iv.total(left)
    r = trace.runtime
    issue_t, issue_row = _issue_times(trace, corr)
    pieces: dict[str, list[iv.IntervalSet]] = {c: [] for c in CLASSES}

    def take(cls: str, cover: iv.IntervalSet) -> None:
        nonlocal left
        got = _and(left, cover)
        if len(got[0]):
            pieces[cls].append(got)
            left = _sub(left, got)

    launch_rows = issue_row[issue_row >= 0]
    threads = np.unique(r.thread[launch_rows]) if len(launch_rows) else np.zeros(0, np.int32)
    mine = codes.isin(r.thread, threads) if len(r) else np.zeros(0, bool)
    # 1. sync: blocking calls on the issuing threads, and the gap after each capped at its blocked time.
    blocking = mine & name_mask(trace, SYNC_CALL)[r.name] if len(r) else np.zeros(0, bool)
    c = trace.copies
    dtoh_pageable = (
        (c.kind == COPY_KINDS.index("DtoH")) & (c.dst == MEMORY_KINDS.index("pageable")) & (c.correlation >= 0)
    )
    if dtoh_pageable.any() and len(r):
        blocking |= mine & np.isin(r.correlation, c.correlation[dtoh_pageable]) & (r.correlation >= 0)
    bubble = iv.EMPTY
    if blocking.any():
        bs = r.ts[blocking]
        be = bs + r.dur[blocking]
        nxt = iv.searchsorted(ops_s, be, side="left")
        resume = np.where(nxt < len(ops_s), ops_s[np.minimum(nxt, len(ops_s) - 1)], be)
        after_e = np.minimum(resume, be + (be - bs))
        take("sync", iv.union(bs, be))
        bubble = iv.union(be, np.maximum(after_e, be))  # filed after the named ranges: recorded work wins
    # 2. cold start: compiling or loading device code — the calls themselves, and the host ranges that
    # issue no GPU work but load device code (a JIT's compile range ends in cuModuleLoad*/cuLibraryLoad*:
    # its compiler runs on the host, outside the CUDA API, so only the load is recorded).
    ann = trace.annotations
    launch_ts = np.sort(r.ts[launch_rows]) if len(launch_rows) else np.zeros(0, np.int64)
    if len(r):
        comp = name_mask(trace, COMPILE_CALL)[r.name]
        a_comp = name_mask(trace, COMPILE_CALL)[ann.name] & (ann.device < 0) if len(ann) else np.zeros(0, bool)
        if len(ann) and comp.any():
            loads = np.sort(r.ts[comp])
            umbrella = name_mask(trace, PROFILER_STEP)[ann.name] | name_mask(trace, DATA_WAIT)[ann.name]
            issued = iv.searchsorted(launch_ts, ann.end, side="left") - iv.searchsorted(launch_ts, ann.ts, side="left")
            loaded = iv.searchsorted(loads, ann.end, side="left") - iv.searchsorted(loads, ann.ts, side="left")
            a_comp |= (ann.device < 0) & ~umbrella & (issued == 0) & (loaded > 0) & (ann.dur > 0)
        take(
            "cold-start",
            iv.union(
                np.concatenate([r.ts[comp], ann.ts[a_comp]]),
                np.concatenate([r.ts[comp] + r.dur[comp], ann.end[a_comp]]),
            ),
        )
    # 3. named host ranges that issue no GPU work.
    ranges: dict[str, int] = {}
    if len(ann) and len(left[0]):
        umbrella = name_mask(trace, PROFILER_STEP)[ann.name] | name_mask(trace, DATA_WAIT)[ann.name]
        host = (ann.device < 0) & ~umbrella
        inside = iv.searchsorted(launch_ts, ann.end, side="left") - iv.searchsorted(launch_ts, ann.ts, side="left")
        quiet = host & (inside == 0) & (ann.dur > 0)
        if quiet.any():
            cover = iv.union(ann.ts[quiet], ann.end[quiet])
            got = _and(left, cover)
            if len(got[0]):
                pieces["host-range"].append(got)
                left = _sub(left, got)
                cum = iv.RunningMeasure(got)
                per = cum.overlap(ann.ts[quiet], ann.end[quiet])
                for nm, v in zip(ann.name[quiet].tolist(), per.tolist()):
                    if v > 0:  # numbered instances of one range ("IO 3", "IO 4") add up under "IO N"
                        key = _NUMBER.sub("N", trace.strings[nm])
                        ranges[key] = ranges.get(key, 0) + int(v)
    take("sync", bubble)
    # 4–7: each remaining piece by the operation that ends its gap.
    gaps = late = 0
    if len(left[0]):
        classed, gaps, late = _by_next_operation(left, ops_s, issue_t, ws, we, launch_ts)
        for cls, got in classed.items():
            pieces[cls].append(got)
    del left, ops_s, issue_t, issue_row  # dead here: the host coverage below is the peak
    merged = {cls: iv.union_sets(sets) for cls, sets in pieces.items()}
    pieces.clear()
    ns = {cls: iv.total(merged[cls]) for cls in CLASSES}
    per_step = {cls: iv.overlap_per_window(merged[cls], ws, we).astype(np.int64) for cls in CLASSES if ns[cls]}
    # launch evidence: host time per launch call and the interval between launches, in the windows
    lc_us = ii_us = cov = None
    issuing = launch_rows[~blocking[launch_rows]] if len(launch_rows) and len(blocking) else launch_rows
    if len(issuing):  # calls that only issue work (a blocking copy's time is its wait, not its issue cost)
        in_w = iv.contains(windows, r.ts[issuing])
        rows = issuing[in_w] if in_w.any() else issuing
        lc_us = float(np.median(r.dur[rows])) / 1e3
        t = np.sort(r.ts[rows])
        ii_us = float(np.median(np.diff(t))) / 1e3 if len(t) > 1 else None
        cov = _host_coverage(trace, threads, idle, launch_ts, host_busy)
    graph_m = (
        name_mask(trace, GRAPH_LAUNCH)[r.name] & (r.ts < int(we.max())) & (r.end > int(ws.min()))
        if len(r)
        else np.zeros(0, bool)
    )
    untraced = int((~membership.isin(r.correlation[graph_m], corr)).sum()) if graph_m.any() else 0
    n_calls = int(mine.sum()) if len(r) else 0
    issuing_rows = np.zeros(len(r), bool)
    issuing_rows[launch_rows] = True
    non_issuing = int((mine & ~issuing_rows).sum()) if len(r) else 0
    return GpuGaps(
        step_ns,
        idle_ns,
        considered,
        ns,
        per_step,
        gaps,
        late,
        lc_us,
        ii_us,
        cov,
        ranges,
        n_calls,
        non_issuing,
        untraced,
    )


def _by_next_operation(
    left: iv.IntervalSet,
    ops_s: np.ndarray,
    issue_t: np.ndarray,
    ws: np.ndarray,
    we: np.ndarray,
    launch_ts: np.ndarray,
) -> tuple[dict[str, iv.IntervalSet], int, int]:
    """Steps 4–7: each remaining idle piece by the operation that ends its gap (step boundary,
    issued late, queued, unordered); the pieces not at a step boundary; those issued late."""
    n = len(ws)
    left = _cut(left, np.concatenate([_window_launches(ws, we, launch_ts)]))
    p0, p1 = left
    j = iv.searchsorted(ops_s, p1, side="left")  # the first operation starting at or after the piece
    has = j < len(ops_s)
    jj = np.minimum(j, len(ops_s) - 1)
    nxt_issue = np.where(has, issue_t[jj], -1)
    w = iv.searchsorted(ws, p0, side="right") - 1  # the window of each piece
    w = np.clip(w, 0, n - 1)
    # a window's first and last launch call
    first_l = np.full(n, np.iinfo(np.int64).max)
    last_l = np.full(n, -1, np.int64)
    if len(launch_ts):
        a = iv.searchsorted(launch_ts, ws, side="left")
        b = iv.searchsorted(launch_ts, we, side="left")
        okw = b > a
        first_l[okw] = launch_ts[a[okw]]
        last_l[okw] = launch_ts[b[okw] - 1]
    known = last_l[w] >= 0  # the step has launch calls to place the piece against
    head = known & (p1 <= first_l[w])  # no launch issued yet in this step
    tail = known & (p0 >= last_l[w])  # the step's last launch is issued
    no_issue = ~has | (nxt_issue < 0)
    boundary = (head | tail) & ~((nxt_issue >= 0) & (nxt_issue <= p0))  # and nothing pending
    late_m = ~boundary & ~no_issue & (nxt_issue > p0)
    queued = ~boundary & ~no_issue & ~late_m
    unordered = ~boundary & no_issue
    classed = {
        "step-boundary": _pieces(left, boundary),
        "issued-late": _pieces(left, late_m),
        "queued": _pieces(left, queued),
        "unordered": _pieces(left, unordered),
    }
    return classed, int((~boundary).sum()), int(late_m.sum())


def _host_coverage(
    trace: Trace,
    threads: np.ndarray,
    idle: iv.IntervalSet,
    launch_ts: np.ndarray,
    host_busy: iv.IntervalSet | None = None,
) -> float | None:
    """Share of the GPU's idle time within the launching threads' issue span (first to last launch)
    that some recorded host operator or runtime call on those threads covers (ranges are structure,
    not activity: a range around the forward pass says nothing about what the host did inside it).
    ``host_busy``: the union of every thread's operators (less step ranges) and runtime calls —
    the same union when every such row is on a launching thread (a training loop's main and
    autograd threads both launch), measured against the span without a pass over the rows."""
    span = iv.within(idle, int(launch_ts[0]), int(launch_ts[-1])) if len(launch_ts) > 1 else iv.EMPTY
    total = iv.total(span)
    if not total:
        return None
    o, r = trace.cpu_ops, trace.runtime
    on_thread = codes.isin(o.thread, threads)
    rm = codes.isin(r.thread, threads)
    if host_busy is not None and on_thread.all() and rm.all():
        return iv.intersection_measure(span, host_busy) / total
    om = on_thread & ~name_mask(trace, PROFILER_STEP)[o.name]
    del on_thread
    # the rows' union measured against the span slab by slab, never built whole (5 M operators and
    # 2 M runtime calls at 1 GB: the union of both was this stage's peak)
    return iv.covered_by_rows(span, [(o.ts, o.dur, om), (r.ts, r.dur, rm)]) / total
