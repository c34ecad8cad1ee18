"""What the host was doing while the GPU sat idle, read from the host events the breakdown ignores.

The breakdown explains GPU idle time by DataLoader ranges, sync calls and framework operators. A
trace recorded with Python stacks (``with_stack=True``), with OS runtime calls (Nsight) or with
a long first launch holds more: this module attributes every nanosecond of GPU idle inside the
analyzed windows, on the thread that issues the GPU work, to one class, by the first rule that
applies:

1. **sync** — a blocking runtime call is in progress (``cudaDeviceSynchronize``,
   ``cudaStreamSynchronize``, a synchronous ``cudaMemcpy`` / ``hipMemcpyWithStream``): the host
   waits for the device, and the device then waits for the host.
2. **launch** — a launch call is in progress (``cudaLaunchKernel``, ``hipLaunchKernel``,
   ``hipExtModuleLaunchKernel``, ``cudaGraphLaunch``, module loading). One that lasts far longer
   than a launch does (``launch.cold_start_ms``) is a cold start: the first call of a kernel loads
   its code object / JIT-compiles it inside the launch.
3. **alloc** — an allocator or host-runtime object call is in progress (``cudaMalloc``/``cudaFree``,
   ``hipMalloc``/``hipFree``, ``cudaHostAlloc``/``cudaFreeHost``, ``cuMemCreate``/``cuMemMap``,
   event and stream creation): allocator churn. Freeing device memory synchronizes the device, and
   with PyTorch's caching allocator on a steady step makes none of these calls. The trace's first
   runtime call, when it is one of them and long (``launch.cold_start_ms``), creates the context:
   start-up, **other**; so are allocator calls whose time a few long calls hold (first use: library
   handles, workspaces, lazy loading), not churn.
4. other runtime calls (attribute queries, ...) — **other**.
5. Python frames (else framework operators and host ranges) give the stage structure. The frames
   that contain every GPU launch of the window form one chain (the loop or pipeline driving the
   work); their children that do not are the *stages* (``preprocess``, ``forward``,
   ``DataLoader.__next__``). Idle time

   - inside a stage that launches no GPU work, when the first GPU operation issued after the
     stage is a host-to-device copy — the host prepared data the GPU then receives — is
     **input** (input preprocessing);
   - between the window's first and last launch, outside such stages but inside a recorded frame,
     is **launch** (the host issuing work: Python and framework overhead between kernels);
   - anywhere else a frame records (a stage whose output is not shipped to the GPU, work after
     the last launch) is **other** host work.
6. an OS runtime call in progress (Nsight ``OSRT_API``: ``poll``, ``read``, ``pthread_cond_wait``)
   where no frame explains the idle — **other**, the calls named.
7. nothing recorded on the thread — **unattributed**.

The classes follow from the event structure (nesting, launch counts, copy direction), never from
a file or function name. The heaviest frames during GPU idle are reported with ``file:line`` as
evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import TypeVar

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers import intervals as iv
from trainscope.analyzers import membership
from trainscope.analyzers.nesting import is_outer_first
from trainscope.analyzers.nesting import nest_parents
from trainscope.analyzers.nesting import outer_first
from trainscope.analyzers.trace import heap
from trainscope.analyzers.trace.breakdown import SYNC_CALL
from trainscope.analyzers.trace.frame_names import user_name
from trainscope.analyzers.trace.steps import PROFILER_STEP
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.analyzers.trace.steps import name_mask
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import Column
from trainscope.traces.model import Copies
from trainscope.traces.model import RuntimeCalls
from trainscope.traces.model import Trace

if TYPE_CHECKING:
    from trainscope.analyzers.findings.base import Evidence

CLASSES = ("input", "launch", "sync", "alloc", "other", "unattributed")
# classes whose idle time recorded host events explain: the GPU-gap pass leaves it out
EXPLAINED = ("input", "sync")
LAUNCH_CALL = re.compile(
    r"^(cuda|hip|cu)(LaunchKernel\w*|LaunchCooperativeKernel\w*|ExtModuleLaunchKernel|ModuleLaunchKernel|"
    r"GraphLaunch|ModuleLoad\w*|LibraryLoad\w*|ModuleGetFunction|LaunchKernelExC\w*)(_v\d+)?$|^hipExtLaunch\w*$"
)
# Allocator and host-runtime object calls (runtime and driver API): device, pinned-host and managed
# memory, virtual-memory mapping (expandable segments), events and streams.
ALLOC_CALL = re.compile(
    r"^(cuda|hip)(Malloc|MallocAsync|MallocManaged|MallocPitch|Malloc3D|MallocArray|MallocHost|HostAlloc|"
    r"HostMalloc|ExtMallocWithFlags|Free|FreeAsync|FreeHost|HostFree|FreeArray|HostRegister|HostUnregister|"
    r"EventCreate\w*|EventDestroy|StreamCreate\w*|StreamDestroy)(_v\d+)?(_ptsz|_ptds)?$|"
    r"^cu(MemAlloc\w*|MemFree\w*|MemHostAlloc|MemAllocHost\w*|MemFreeHost|MemHostRegister\w*|MemHostUnregister|"
    r"MemCreate|MemRelease|MemMap|MemUnmap|MemAddressReserve|MemAddressFree|MemSetAccess|"
    r"EventCreate|EventDestroy\w*|StreamCreate\w*|StreamDestroy\w*)(_v\d+)?$"
)
_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
# A frame's idle time is "the same" as its only child's when the child holds this share of it.
_SAME = 0.97
# Report frames holding at least this share of the idle time.
_MIN_FRAME_SHARE = 0.05
_TOP_FRAMES = 8
# Allocator calls whose GPU-idle time the few longest hold (this many calls, at least this share)
# are first-use costs paid once (handles, workspaces, lazy loading), not churn: a caching-allocator
# fix removes none of it. Churn spreads its time over many calls (1,360 hipFree: the 3 longest 5 %).
_ONE_OFF_CALLS = 3
_ONE_OFF_SHARE = 0.5
_T = TypeVar("_T")
_PIECE = 1 << 18  # rows (frames, launches) per piece where whole-column temporaries are avoided


@dataclass(frozen=True)
class HostFrame:
    name: str  # as recorded: "file.py(123): function", or an operator / range name
    file: str | None
    line: int | None
    function: str
    idle_ns: int  # GPU idle time while this frame was on the stack
    share_pct: float  # of step time
    cls: str  # the class most of that time went to
    count: int = 1  # instances of the frame (one per step, say) summed in idle_ns


@dataclass(frozen=True)
class HostCall:
    name: str
    cls: str  # "sync" | "launch" | "other"
    count: int
    idle_ns: int  # GPU idle time covered by these calls
    longest_ns: int


@dataclass(frozen=True)
class HostIdle:
    step_ns: int
    idle_ns: int
    ns: dict[str, int]  # class -> GPU idle ns (exclusive, sums to idle_ns)
    frames: list[HostFrame] = field(default_factory=list)
    calls: list[HostCall] = field(default_factory=list)
    cold_start: HostCall | None = None  # launch calls lasting ≥ cold_start_ms (first-call loading), where any
    thread: str | None = None  # the host thread that issues the GPU work
    source: str = "none"  # "python" (with_stack frames) | "operators" | "none"
    evidence: list[str] = field(default_factory=list)
    # class -> the GPU-idle intervals filed under it, for the classes later passes must not count
    # again (EXPLAINED: input and sync)
    intervals: dict[str, iv.IntervalSet] = field(default_factory=dict, repr=False, compare=False)
    alloc_calls: int = 0  # allocator calls (the alloc class) starting inside the windows, on the launching threads
    alloc_one_off: HostCall | None = None  # allocator calls filed as other: a few long first-use calls, not churn

    def ms(self, cls: str) -> float:
        """GPU idle filed under class ``cls`` (:data:`CLASSES`), in ms."""
        return self.ns.get(cls, 0) / 1e6

    def share_pct(self, cls: str) -> float:
        return 100.0 * self.ns.get(cls, 0) / self.step_ns if self.step_ns else 0.0

    @property
    def primary(self) -> str | None:
        """The attributed class with the most GPU idle time (None when nothing is attributed)."""
        best = max((c for c in CLASSES if c != "unattributed"), key=lambda c: self.ns.get(c, 0))
        return best if self.ns.get(best, 0) > 0 else None


def _gpu_busy(trace: Trace, device: int | None) -> iv.IntervalSet:
    s, e = [], []
    for t in (trace.kernels, trace.copies, trace.memsets):
        on = (t.device == device) if device is not None else np.ones(len(t), bool)
        s.append(t.ts[on])
        e.append(t.end[on])
    return iv.union(np.concatenate(s), np.concatenate(e))


def _within(ivs: iv.IntervalSet, lo: int, hi: int) -> iv.IntervalSet:
    """``ivs`` (sorted, disjoint) clipped to [lo, hi): two binary searches and a slice, not a pass
    over the whole set."""
    s, e = ivs
    a = int(iv.searchsorted(e, lo, side="right"))
    b = int(iv.searchsorted(s, hi, side="left"))
    if b <= a:
        return iv.EMPTY
    s2, e2 = np.maximum(s[a:b], lo), np.minimum(e[a:b], hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


def _complement(busy: iv.IntervalSet, lo: int, hi: int) -> iv.IntervalSet:
    bs, be = _within(busy, lo, hi)
    starts = np.concatenate([[lo], be])
    ends = np.concatenate([bs, [hi]])
    keep = ends > starts
    return starts[keep], ends[keep]


def _subtract(a: iv.IntervalSet, b: iv.IntervalSet) -> iv.IntervalSet:
    """a minus b (both sorted disjoint sets)."""
    if not len(a[0]) or not len(b[0]):
        return a
    lo, hi = int(min(a[0][0], b[0][0])), int(max(a[1][-1], b[1][-1]))
    not_b = _complement(b, lo, hi)
    return _intersect(a, not_b)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(start, start + count)`` for each pair (vectorized)."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.int64)
    offs = np.cumsum(counts) - counts
    idx: Column = np.arange(total, dtype=np.int64) - np.repeat(offs - starts, counts)
    return idx


def _overlaps(a: iv.IntervalSet, b: iv.IntervalSet) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every overlapping pair of an interval of ``a`` with one of ``b`` (``b`` sorted and
    disjoint; ``a`` any): (start, end, index in a, index in b) of each overlap."""
    if not len(a[0]) or not len(b[0]):
        z = np.zeros(0, np.int64)
        return z, z, z, z
    i = iv.searchsorted(b[1], a[0], side="right")  # first b ending after a starts
    j = iv.searchsorted(b[0], a[1], side="left")  # b starting before a ends
    counts = np.maximum(j - i, 0)
    ai = np.repeat(np.arange(len(a[0])), counts)
    bi = _ranges(i, counts)
    s = np.maximum(a[0][ai], b[0][bi])
    e = np.minimum(a[1][ai], b[1][bi])
    keep = e > s
    return s[keep], e[keep], ai[keep], bi[keep]


def _intersect(a: iv.IntervalSet, b: iv.IntervalSet) -> iv.IntervalSet:
    """a ∩ b (``b`` sorted and disjoint)."""
    return iv.intersect(a, b)


def _launch_threads(trace: Trace, device: int | None, ws: np.ndarray, we: np.ndarray) -> tuple[list[int], np.ndarray]:
    """The host threads that issue the device's GPU operations (most first; those issuing inside
    the windows, else anywhere), and the mask of runtime calls that issue one."""
    r = trace.runtime
    if not len(r):
        return [], np.zeros(0, bool)
    corr = []
    for t in (trace.kernels, trace.copies, trace.memsets):
        on = (t.device == device) if device is not None else np.ones(len(t), bool)
        corr.append(t.correlation[on & (t.correlation >= 0)])
    issues = membership.isin(r.correlation, np.concatenate(corr)) & (r.correlation >= 0)
    inside = issues & iv.contains((ws, we), r.ts)
    pick = inside if inside.any() else issues
    if not pick.any():
        return [], issues
    threads, counts = np.unique(r.thread[pick], return_counts=True)
    return [int(x) for x in threads[np.argsort(-counts, kind="stable")]], issues


def _frames(trace: Trace, thread: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(ts, end, name) of the host frames on ``thread``, as recorded, and their source."""
    p = trace.python_frames
    sel = p.thread == thread if len(p) else np.zeros(0, bool)
    if sel.any():
        ts = p.ts[sel]
        return ts, ts + p.dur[sel], p.name[sel], "python"
    o, a = trace.cpu_ops, trace.annotations
    o_sel = o.thread == thread
    umbrella = name_mask(trace, PROFILER_STEP)
    a_sel = (a.thread == thread) & (a.device < 0) & ~umbrella[a.name] if len(a) else np.zeros(0, bool)
    # written straight into their columns (no whole end column of every operator, no copies)
    n_o, n_a = int(o_sel.sum()), int(a_sel.sum())
    ts, end = np.empty(n_o + n_a, np.int64), np.empty(n_o + n_a, np.int64)
    name = np.empty(n_o + n_a, o.name.dtype)
    at = 0
    for i in range(0, len(o_sel), _PIECE):  # a piece at a time: no index column of every operator
        m = o_sel[i : i + _PIECE]
        k = int(np.count_nonzero(m))
        for col, c_o in ((ts, o.ts), (end, o.dur), (name, o.name)):
            col[at : at + k] = c_o[i : i + _PIECE][m]
        at += k
    for col, c_a in ((ts, a.ts), (end, a.dur), (name, a.name)):
        col[n_o:] = c_a[a_sel]
    end += ts  # the durations turned into the ends, in place
    return ts, end, name, "operators" if len(ts) else "none"


def _renumbered(d: dict[int, _T], order: np.ndarray) -> dict[int, _T]:
    """``d``, keyed by rows' positions, keyed by their positions (ascending) once the rows are
    taken in ``order``."""
    pos = np.flatnonzero(np.isin(order, np.fromiter(d, np.int64, len(d))))
    return {int(k): d[int(order[k])] for k in pos}


def _parents(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Parent index of each frame (−1 at top level); frames sorted outer-first. Vectorized
    (:func:`~trainscope.analyzers.nesting.nest_parents`; the stack loop it replaces took 2.9 of the
    5.4 s host-idle pass on a 303 MB Nsight export): a frame ending exactly where the next starts
    is closed, as the loop had it."""
    return nest_parents(ts, end, closed_at_end=True)


def _parse(name: str) -> tuple[str | None, int | None, str]:
    m = _FRAME.match(name)
    if m:
        return m["file"], int(m["line"]), m["func"]
    return None, None, user_name(name)


def host_idle(trace: Trace, segmentation: StepSegmentation, device: int | None, cold_start_ms: float = 1.0) -> HostIdle:
    """GPU idle time in ``segmentation``'s windows on ``device``, split into classes (module doc)."""
    ws, we = segmentation.starts, segmentation.ends
    step_ns = int((we - ws).sum())
    ns = dict.fromkeys(CLASSES, 0)
    if not trace.has_gpu_activity or not step_ns:
        return HostIdle(step_ns, 0, ns)
    busy = _gpu_busy(trace, device)
    parts = [_complement(busy, int(s), int(e)) for s, e in zip(ws, we)]
    idle = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    del parts, busy
    idle_ns = iv.total(idle)
    threads, issues = _launch_threads(trace, device, ws, we)
    if not threads:
        ns["unattributed"] = idle_ns
        return HostIdle(step_ns, idle_ns, ns, evidence=["no runtime call in the trace issues this GPU's work"])
    # The main launching thread gives the stage structure: the one with Python frames, else the busiest.
    p = trace.python_frames
    with_py = [t for t in threads if len(p) and (p.thread == t).any()]
    thread = with_py[0] if with_py else threads[0]
    th = trace.threads[thread] if thread < len(trace.threads) else None
    thread_name = (th.name or f"tid {th.tid}") if th else str(thread)
    if len(threads) > 1:
        thread_name += f" (+{len(threads) - 1} more launching thread{'s' * (len(threads) > 2)})"

    # 1–4: runtime calls on the launching threads, in priority order.
    r = trace.runtime
    mine = codes.isin(r.thread, threads)
    sync_m = mine & name_mask(trace, SYNC_CALL)[r.name]
    launch_m = mine & name_mask(trace, LAUNCH_CALL)[r.name] & ~sync_m
    alloc_m = mine & name_mask(trace, ALLOC_CALL)[r.name] & ~sync_m & ~launch_m
    first = int(np.argmin(r.ts))
    if alloc_m[first] and r.dur[first] >= cold_start_ms * 1e6:  # context creation (cudaFree(0)): start-up
        alloc_m[first] = False
    cum_idle = iv.RunningMeasure(idle)
    one_off = _one_off_alloc(trace, r, alloc_m, cum_idle)
    if one_off is not None:  # a few long first-use calls, not churn: other (start-up) work
        alloc_m[:] = False
    other_m = mine & ~sync_m & ~launch_m & ~alloc_m
    windows = iv.union(ws, we)
    n_alloc = int(iv.contains(windows, r.ts[alloc_m]).sum()) if alloc_m.any() else 0
    pieces: dict[str, list[iv.IntervalSet]] = {c: [] for c in CLASSES}
    left = idle
    calls: list[HostCall] = []
    for cls, m in (("sync", sync_m), ("launch", launch_m), ("alloc", alloc_m), ("other", other_m)):
        cover = _intersect(left, iv.union_rows(r.ts, r.dur, m))  # a piece at a time: no end column
        pieces[cls].append(cover)
        left = iv.minus_part(left, cover)  # cover is a part of left
        if m.any():
            calls += _calls_by_name(trace, r, m, cum_idle, cls)
    calls.sort(key=lambda c: -c.idle_ns)
    # the masks and the idle measure are dead: not held through the frames' pass (2 M runtime calls at 1 GB)
    del cum_idle, m, sync_m, alloc_m, other_m
    cold = None
    long_launch = launch_m & (r.dur >= cold_start_ms * 1e6)
    if long_launch.any():
        cold = HostCall(
            f"launch calls ≥ {cold_start_ms:g} ms",
            "launch",
            int(long_launch.sum()),
            int(iv.total(_intersect(idle, iv.union_rows(r.ts, r.dur, long_launch)))),
            int(r.dur[long_launch].max()),
        )
    del launch_m, long_launch

    # 5: the stage structure of the host frames on the main launching thread.
    launch_ts = np.sort(r.ts[issues & mine])  # launches from every launching thread
    del issues, mine
    heap.release()  # the runtime-call pass's freed columns handed back before the frames' pass
    fts, fend, fname, source = _frames(trace, thread)
    # the frames that may be reported, their idle time and names, taken before the frames are
    # sorted: the idle set and the name column are not held through the sort and the stages
    got = _idle_by_frame(fts, fend, idle, launch_ts, ws, we, idle_ns)
    names = {i: int(fname[i]) for i in got}
    del idle, fname
    if len(fts) and not is_outer_first(fts, fend):  # an export's rows already are: no gathers
        # outer frames first at equal start (the later end is the longer frame: the ends order
        # them as the durations do)
        order = outer_first(fts, fend)
        fts = fts[order]  # one column gathered at a time
        fend = fend[order]
        got, names = _renumbered(got, order), _renumbered(names, order)
        del order
    parent = _parents(fts, fend) if len(fts) else None  # once: the stages and the heaviest frames read it
    if parent is not None and len(fts) < 1 << 31:
        parent = parent.astype(np.int32)  # held through the stages: four bytes a frame
    heap.release()  # the nesting's freed columns, before the stage classification
    shown = _shown(trace, names, parent, got) if parent is not None else []
    if parent is not None and len(left[0]):
        classify = _classify_all if _disjoint(ws, we) else _classify_by_stage
        for c, sets in classify(trace, fts, fend, parent, launch_ts, left, ws, we, device).items():
            pieces[c] += sets
    # the frames to report, taken out: the frame columns are not held through the merge
    heavy = [(names[i], int(fts[i]), int(fend[i]), got[i]) for i in shown]
    del fts, fend, parent, got
    # 6: OS runtime calls (Nsight: poll, read, pthread waits) where nothing above explains the idle.
    osr = trace.os_runtime
    if len(osr):
        om = codes.isin(osr.thread, threads)
        if om.any() and len(left[0]):
            # the idle left under an OS call, less what the frames explained there: each class's
            # pieces taken off in turn (their part under the OS calls), never united whole
            cover = _intersect(left, iv.union_rows(osr.ts, osr.dur, om))
            for x in (x for c in ("input", "launch", "other") for x in pieces[c]):
                if len(x[0]) and len(cover[0]):
                    cover = iv.minus_part(cover, _intersect(cover, x))
            pieces["other"].append(cover)
            calls += _calls_by_name(trace, osr, om, iv.RunningMeasure(cover), "other", " (OS)")
            calls.sort(key=lambda c: -c.idle_ns)
    left = iv.EMPTY  # what is left unexplained is not read again
    merged = {c: iv.union_sets(v, spent=True) for c, v in pieces.items()}  # each class's pieces freed once merged
    pieces.clear()  # the merged sets replace the pieces
    for c in ("input", "launch", "sync", "alloc", "other"):
        ns[c] = iv.total(merged[c])
    ns["unattributed"] = idle_ns - sum(ns.values())
    frames = _heaviest(trace, heavy, step_ns, merged)
    out = HostIdle(step_ns, idle_ns, ns, frames, calls[:8], cold, thread_name, source)
    # kept: the classes later passes must not count again (the launch and other sets, millions of
    # pieces at 1 GB, are not held through the GPU-gap stage)
    kept = {c: merged[c] for c in EXPLAINED}
    return HostIdle(
        step_ns,
        idle_ns,
        ns,
        frames,
        calls[:8],
        cold,
        thread_name,
        source,
        _evidence(out),
        kept,
        alloc_calls=n_alloc,
        alloc_one_off=one_off,
    )


def _one_off_alloc(trace: Trace, r: RuntimeCalls, m: Column, idle: iv.RunningMeasure) -> HostCall | None:
    """The ``m`` allocator calls as one summary call when a few of them hold most of their GPU-idle
    time (the :data:`_ONE_OFF_CALLS` longest at least :data:`_ONE_OFF_SHARE` of it): first-use costs
    — library handles, workspaces, lazy loading inside a ``cudaFree`` —, paid once, not churn. None
    when the time is spread over the calls (churn) or none covers GPU idle."""
    if not m.any():
        return None
    s = r.ts[m]
    per = idle.overlap(s, s + r.dur[m])
    total = int(per.sum())
    if total <= 0:
        return None
    top = np.sort(per)[-_ONE_OFF_CALLS:]
    if top.sum() < _ONE_OFF_SHARE * total:
        return None
    longest = int(np.argmax(r.dur[m]))
    name = trace.strings[int(r.name[m][longest])]
    return HostCall(f"allocator calls, first use (longest: {name})", "other", int(m.sum()), total, int(r.dur[m].max()))


def _calls_by_name(
    trace: Trace, calls: RuntimeCalls, m: Column, idle: iv.RunningMeasure, cls: str, suffix: str = ""
) -> list[HostCall]:
    """The GPU idle time under the ``m`` calls, per call name (the per-call columns die on return)."""
    s, e = calls.ts[m], calls.dur[m]
    e += s  # the calls' ends, not an end column of every call
    per = idle.overlap(s, e)
    del s, e
    names, order, first = codes.grouped(calls.name[m])  # per name: one grouping, not a mask per name
    got = np.add.reduceat(per[order], first) if len(first) else per[:0]
    del per
    longest = np.maximum.reduceat(calls.dur[m][order], first) if len(first) else got
    count = np.diff(np.append(first, len(order)))
    out = []
    for k, nm in enumerate(names.tolist()):
        if got[k] > 0:
            out.append(HostCall(trace.strings[nm] + suffix, cls, int(count[k]), int(got[k]), int(longest[k])))
    return out


def _merge(sets: list[iv.IntervalSet]) -> iv.IntervalSet:
    return iv.union_sets(sets)


def _span(lo: int, hi: int) -> iv.IntervalSet:
    return (np.array([lo], np.int64), np.array([hi], np.int64)) if hi > lo else iv.EMPTY


def _frames_by_window(fts: np.ndarray, fend: np.ndarray, ws: np.ndarray, we: np.ndarray) -> list[np.ndarray]:
    """For each window, the indexes (ascending) of the frames overlapping it. Windows sorted and
    disjoint are answered in one pass over (frame, window) pairs; others frame by frame."""
    if len(ws) > 1 and not (np.all(ws[1:] >= we[:-1]) and np.all(we >= ws)):
        return [np.flatnonzero((fend > s) & (fts < e)) for s, e in zip(ws, we)]
    frame, bounds = _pairs_by_window(fts, fend, ws, we)
    return [frame[bounds[k] : bounds[k + 1]] for k in range(len(ws))]


def _pairs_by_window(
    fts: np.ndarray, fend: np.ndarray, ws: np.ndarray, we: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Windows sorted and disjoint: the frames overlapping each window, window after window
    (ascending within one), and where each window's begin in that column."""
    lo = iv.searchsorted(we, fts, side="right")  # the first window ending after the frame starts
    hi = iv.searchsorted(ws, fend, side="left")  # windows starting before the frame ends
    n = np.maximum(hi - lo, 0)
    del hi
    frame = np.repeat(np.arange(len(fts)), n)
    window = _ranges(lo, n)
    del lo, n  # a column per frame each (2 M frames at 1 GB): not held through the sort's gathers
    order = np.argsort(window, kind="stable")  # frames stay ascending within a window
    frame = frame[order]
    window = window[order]
    del order
    bounds = iv.searchsorted(window, np.arange(len(ws) + 1))
    return frame, bounds


def _disjoint(ws: np.ndarray, we: np.ndarray) -> bool:
    """Windows sorted and disjoint (what the one-pass classification needs)."""
    return len(ws) < 2 or bool(np.all(ws[1:] >= we[:-1]) and np.all(we >= ws))


_GROUP = 4  # windows per pass of the one-pass classification


def _classify_all(
    trace: Trace,
    fts: Column,
    fend: Column,
    parent: Column,
    launch_ts: Column,
    left: iv.IntervalSet,
    ws: Column,
    we: Column,
    device: int | None,
) -> dict[str, list[iv.IntervalSet]]:
    """:func:`_classify_by_stage` for sorted, disjoint windows, a group of windows at a time in
    one pass over their (frame, window) pairs: the same union of pieces per class (each window's
    pieces lie in the window, so a window's stages, rest and work are the group's sets' parts in
    it; a frame's parent contains it, so the parents of a window's frames are among its frames).
    A group's launches, idle pieces and host coverage are slices of a few thousand rows: its
    binary searches stay in cache, where one pass over every window's pairs searched millions."""
    out: dict[str, list[iv.IntervalSet]] = {"input": [], "launch": [], "other": []}
    launch_at, launch_kind = _first_op_after(trace, device)
    covered = iv.union_rows(fts, fend, ends=True)
    a_w = iv.searchsorted(launch_ts, ws, side="left")  # each window's launches: [a_w, b_w)
    b_w = iv.searchsorted(launch_ts, we, side="left")
    n_w = b_w - a_w
    on = n_w > 0
    last = max(len(launch_ts) - 1, 0)
    w0 = np.where(on, launch_ts[np.minimum(a_w, last)], 0) if len(launch_ts) else a_w
    w1 = np.where(on, launch_ts[np.clip(b_w - 1, 0, last)], 0) if len(launch_ts) else a_w
    # each frame's windows [first, past) (first: the first window ending after the frame starts,
    # past: the windows starting before it ends). A frame is in the group of its first window's
    # block of frames (frames are in start order, so a block is a slice); the few crossing a
    # window's end are kept aside, found a million frames at a time (no column of every frame)
    wide_l, first_l, past_l = [], [], []
    for i in range(0, len(fts), _PIECE):
        f_first = iv.searchsorted(we, fts[i : i + _PIECE], side="right")
        f_past = iv.searchsorted(ws, fend[i : i + _PIECE], side="left")
        k = np.flatnonzero(f_past - f_first > 1)
        wide_l.append(k + i)
        first_l.append(f_first[k])
        past_l.append(f_past[k])
    wide, w_first, w_past = np.concatenate(wide_l), np.concatenate(first_l), np.concatenate(past_l)
    del wide_l, first_l, past_l
    for g in range(0, len(ws), _GROUP):
        h = min(g + _GROUP, len(ws))
        lo_t, hi_t = int(ws[g]), int(we[h - 1])
        g_left = _within(left, lo_t, hi_t)
        if not len(g_left[0]):
            continue
        # frames whose first window is in [g, h): we[g-1] <= start < we[h-1]
        a = int(iv.searchsorted(fts, we[g - 1], side="left")) if g else 0
        b = int(iv.searchsorted(fts, we[h - 1], side="left"))
        first = iv.searchsorted(we, fts[a:b], side="right")
        past = iv.searchsorted(ws, fend[a:b], side="left")
        keep = past > first
        sw = (w_first < g) & (w_past > g)  # frames from before reaching into the group
        f = np.concatenate([np.flatnonzero(keep) + a, wide[sw]])
        w_lo = np.maximum(np.concatenate([first[keep], w_first[sw]]), g)
        n = np.minimum(np.concatenate([past[keep], w_past[sw]]), h) - w_lo
        del first, past, keep, sw
        pf = np.repeat(f, n)
        pw = _ranges(w_lo.astype(np.int64), n.astype(np.int64))
        del f, w_lo, n
        group: dict[str, list[iv.IntervalSet]] = {c: [] for c in out}
        for c, got in _classify_group(
            fts,
            fend,
            parent,
            launch_ts[a_w[g] : b_w[h - 1]],
            g_left,
            _within(covered, lo_t, hi_t),
            pf,
            pw,
            (ws, we, n_w, w0, w1),
            launch_at,
            launch_kind,
        ):
            group[c].append(got)
        for c, sets in group.items():  # the group's few sets united while small (thousands of pieces)
            u = iv.union_sets(sets, spent=True)
            if len(u[0]):
                out[c].append(u)
    # each group's pieces lie in its windows, the groups in time order: a class's group sets follow
    # one another, one set once joined (not hundreds of sets for the caller's union to sort whole)
    return {c: [_in_order(sets)] if sets else [] for c, sets in out.items()}  # each class's list emptied


def _in_order(sets: list[iv.IntervalSet]) -> iv.IntervalSet:
    """The union of sets that follow one another in time (each sorted and disjoint, each after the
    one before): their concatenation is in start order, so :func:`~trainscope.analyzers.intervals.union`
    merges it in one pass, pieces touching at a seam joined (and sorts it where it is not). The list
    is emptied."""
    starts, ends = [x[0] for x in sets], [x[1] for x in sets]
    sets.clear()  # the caller's list: each column freed once copied, not held through both copies
    s = np.concatenate(starts)
    del starts
    e = np.concatenate(ends)
    del ends
    return iv.union(s, e, spent=True)


def _classify_group(
    fts: Column,
    fend: Column,
    parent: Column,
    launch_ts: Column,
    left: iv.IntervalSet,
    covered: iv.IntervalSet,
    pf: Column,
    pw: Column,
    windows: tuple[Column, Column, Column, Column, Column],
    launch_at: Column,
    launch_kind: Column,
) -> list[tuple[str, iv.IntervalSet]]:
    """One group of windows of :func:`_classify_all`: ``launch_ts``, ``left`` and ``covered`` its
    slices, (``pf``, ``pw``) its (frame, window) pairs; per window (start, end, launch count,
    first and last launch)."""
    ws, we, n_w, w0, w1 = windows
    htod = COPY_KINDS.index("HtoD")
    out: list[tuple[str, iv.IntervalSet]] = []
    # the idle pieces left, by window (idle was cut per window: each piece lies in one)
    lw = np.maximum(iv.searchsorted(ws, left[0], side="right") - 1, 0)
    has = n_w[lw] > 0
    if not has.all():  # windows that launch nothing: recorded host work is other
        out.append(("other", _intersect((left[0][~has], left[1][~has]), covered)))
        left = (left[0][has], left[1][has])
        lw = lw[has]
    keep = n_w[pw] > 0
    pf, pw = pf[keep], pw[keep]

    def launches(f: np.ndarray, w: np.ndarray) -> np.ndarray:  # the window's launches inside each frame
        hi: np.ndarray = iv.searchsorted(launch_ts, np.minimum(fend[f], we[w]), side="left")
        hi -= iv.searchsorted(launch_ts, np.maximum(fts[f], ws[w]), side="left")
        return hi

    counts = launches(pf, pw)
    # stages: frames lacking some of the window's launches whose parent has them all (or is none)
    stage = counts != n_w[pw]
    par = parent[pf]
    stage &= (par < 0) | (launches(np.maximum(par, 0), pw) == n_w[pw])
    st, sw, st_counts = pf[stage], pw[stage], counts[stage]
    st_s, st_e = np.maximum(fts[st], ws[sw]), np.minimum(fend[st], we[sw])
    staged = iv.union(st_s, st_e)
    ps, pe, pa, _ = _overlaps((st_s, st_e), left)  # each stage's idle pieces, labelled by stage
    if len(ps):
        quiet = st_counts[pa] == 0  # a stage that issues no GPU work: does its output go to the GPU?
        if quiet.any():
            inp, oth = _quiet_stages(ps[quiet], pe[quiet], fend[st[pa[quiet]]], launch_at, launch_kind, htod)
            out.append(("input", inp))
            out.append(("other", oth))
        busy = ~quiet  # a stage that issues some of the work: host time between its kernels
        if busy.any():
            bs, be, bw = ps[busy], pe[busy], sw[pa[busy]]
            b0, b1 = w0[bw], w1[bw]
            ins, ine = np.maximum(bs, b0), np.minimum(be, b1)
            inner = ine > ins
            out.append(("launch", iv.union(ins[inner], ine[inner]) if inner.any() else iv.EMPTY))
            before_e = np.minimum(be, b0)  # outside the work: before its first launch, after its last
            after_s = np.maximum(bs, b1)
            os_ = np.concatenate([bs[before_e > bs], after_s[be > after_s]])
            oe = np.concatenate([before_e[before_e > bs], be[be > after_s]])
            out.append(("other", iv.union(os_, oe) if len(os_) else iv.EMPTY))
    # outside the stages: host work the frames record counts as launch overhead between the
    # window's first and last launch, as other work outside
    rest = _intersect(_subtract(left, staged), covered)
    w = iv.unique_sorted(lw)  # the windows of the pieces left
    w = w[w1[w] > w0[w]]
    work = (w0[w], w1[w])  # in the windows: sorted, disjoint
    inner_set = _intersect(rest, work) if len(work[0]) else iv.EMPTY
    out.append(("launch", inner_set))
    out.append(("other", iv.minus_part(rest, inner_set)))
    return out


def _quiet_stages(
    qs: Column, qe: Column, ends: Column, launch_at: Column, launch_kind: Column, htod: int
) -> tuple[iv.IntervalSet, iv.IntervalSet]:
    """(input, other): idle pieces ``qs``–``qe`` under stages that issue no GPU work, split by what
    the first launch at or after their stage's end (``ends``) is: a host-to-device copy (the stage
    prepared the GPU's next input) or anything else."""
    nxt = iv.searchsorted(launch_at, ends, side="left")
    kinds = (
        np.where(nxt < len(launch_kind), launch_kind[np.minimum(nxt, max(len(launch_kind) - 1, 0))], -2)
        if len(launch_kind)
        else np.full(len(nxt), -2)
    )
    to_gpu = kinds == htod
    return (
        iv.union(qs[to_gpu], qe[to_gpu]) if to_gpu.any() else iv.EMPTY,
        iv.union(qs[~to_gpu], qe[~to_gpu]) if (~to_gpu).any() else iv.EMPTY,
    )


def _classify_by_stage(
    trace: Trace,
    fts: Column,
    fend: Column,
    parent: Column,
    launch_ts: Column,
    left: iv.IntervalSet,
    ws: Column,
    we: Column,
    device: int | None,
) -> dict[str, list[iv.IntervalSet]]:
    """Idle intervals in ``left`` (not covered by runtime calls) split into input / launch / other.
    Per window, only the frames overlapping it (and their parents) are looked at: the cost is the
    frames, not frames × windows."""
    out: dict[str, list[iv.IntervalSet]] = {"input": [], "launch": [], "other": []}
    launch_at, launch_kind = _first_op_after(trace, device)
    htod = COPY_KINDS.index("HtoD")
    covered = iv.union(fts, fend)
    per_window = _frames_by_window(fts, fend, ws, we)
    for w, (s, e) in enumerate(zip(ws.tolist(), we.tolist())):
        w_left = _within(left, s, e)
        if not len(w_left[0]):
            continue
        li = launch_ts[(launch_ts >= s) & (launch_ts < e)]
        if not len(li):
            out["other"].append(_intersect(w_left, covered))
            continue
        w0, w1 = int(li[0]), int(li[-1])  # the work: from the window's first launch to its last
        work = _span(w0, w1)
        idx = per_window[w]
        par = parent[idx]
        ext = (
            iv.unique_sorted(np.concatenate([idx, par[par >= 0]])) if len(idx) else idx
        )  # the frames and their parents
        counts = iv.searchsorted(li, fend[ext], side="left") - iv.searchsorted(li, fts[ext], side="left")
        full = counts == len(li)
        ppar = parent[ext]
        ppos = iv.searchsorted(ext, np.maximum(ppar, 0))
        ppos = np.minimum(ppos, max(len(ext) - 1, 0))
        par_known = (ppar >= 0) & (ext[ppos] == ppar) if len(ext) else np.zeros(0, bool)
        par_full = np.where(ppar < 0, True, np.where(par_known, full[ppos], False))
        if (ppar >= 0).any() and not par_known[ppar >= 0].all():  # a parent outside ext: judge it directly
            miss = (ppar >= 0) & ~par_known
            pc = iv.searchsorted(li, fend[ppar[miss]], side="left") - iv.searchsorted(li, fts[ppar[miss]], side="left")
            par_full[miss] = pc == len(li)
        # stages: frames in the window lacking some launch whose parent has them all (or is none)
        sel = (fend[ext] > s) & (fts[ext] < e) & ~full & par_full
        st = ext[sel]
        st_counts = counts[sel]
        st_s, st_e = np.maximum(fts[st], s), np.minimum(fend[st], e)
        staged = iv.union(st_s, st_e) if len(st) else iv.EMPTY
        ps, pe, pa, _ = _overlaps((st_s, st_e), w_left)  # each stage's idle pieces, labelled by stage
        if len(ps):
            quiet = st_counts[pa] == 0  # a stage that issues no GPU work: does its output go to the GPU?
            if quiet.any():
                inp, oth = _quiet_stages(ps[quiet], pe[quiet], fend[st[pa[quiet]]], launch_at, launch_kind, htod)
                out["input"].append(inp)
                out["other"].append(oth)
            busy = ~quiet  # a stage that issues some of the work: host time between its kernels
            if busy.any():
                bs, be = ps[busy], pe[busy]
                ins, ine = np.maximum(bs, w0), np.minimum(be, w1)
                inner = ine > ins
                out["launch"].append(iv.union(ins[inner], ine[inner]) if inner.any() else iv.EMPTY)
                before_e = np.minimum(be, w0)  # outside the work: before its first launch, after its last
                after_s = np.maximum(bs, w1)
                os_ = np.concatenate([bs[before_e > bs], after_s[be > after_s]])
                oe = np.concatenate([before_e[before_e > bs], be[be > after_s]])
                out["other"].append(iv.union(os_, oe) if len(os_) else iv.EMPTY)
        # outside the stages: host work the frames record (the driving loop's own code) counts as
        # launch overhead between the first and last launch, as other work outside; time no frame
        # covers is left for the OS-runtime rule or stays unattributed
        rest = _intersect(_subtract(w_left, staged), covered)
        inner = _intersect(rest, work)
        out["launch"].append(inner)
        out["other"].append(iv.minus_part(rest, inner))  # inner is a part of rest
    return out


def _first_op_after(trace: Trace, device: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The launch instants of the GPU operations on ``device`` (sorted) and each one's copy kind
    (−1 for a kernel or memset): the first operation launched at or after a time ``t`` is at
    ``searchsorted(launch_at, t)``."""
    r = trace.runtime
    rows: list[tuple[Column, Column]] = []
    for t in (trace.kernels, trace.copies, trace.memsets):
        on = (t.device == device) if device is not None else np.ones(len(t), bool)
        on &= t.correlation >= 0
        kinds = t.kind[on].astype(np.int8) if isinstance(t, Copies) else np.full(int(on.sum()), -1, np.int8)
        rows.append((t.correlation[on], kinds))
    corr = np.concatenate([c for c, _ in rows])
    kind = np.concatenate([k for _, k in rows])
    del rows  # each temporary below dies once read: a few columns of a million operations at 1 GB
    if not len(r):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rc, order = codes.ascending(r.correlation)
    pos = iv.searchsorted(rc, corr)
    np.minimum(pos, len(rc) - 1, out=pos)
    ok = rc[pos] == corr
    del corr
    row = pos[ok] if order is None else order[pos[ok]]
    del rc, order, pos
    kind = kind[ok]
    del ok
    launch_at = r.ts[row]
    del row
    o = np.argsort(launch_at, kind="stable")
    launch_at = launch_at[o]
    return launch_at, kind[o]


def _idle_by_frame(
    fts: Column, fend: Column, idle: iv.IntervalSet, launch_ts: Column, ws: Column, we: Column, idle_ns: int
) -> dict[int, int]:
    """The frames that may be reported (holding at least ``_MIN_FRAME_SHARE`` of the GPU idle
    time, below the frames that drive all the work), ascending, each with its idle time."""
    if not len(fts):
        return {}
    cum = iv.RunningMeasure(idle)
    # frames that contain every launch of the windows drive the loop: not evidence of a cause
    li = np.concatenate(  # a piece at a time: no index columns of every launch
        [x[iv.contains((ws, we), x)] for x in (launch_ts[i : i + _PIECE] for i in range(0, len(launch_ts), _PIECE))]
        or [launch_ts]
    )
    thr = _MIN_FRAME_SHARE * idle_ns
    # a frame holds at most its own length of idle time: only frames that long can qualify (a
    # few of millions), measured against the idle time
    long = np.concatenate(
        [np.flatnonzero(fend[i : i + _PIECE] - fts[i : i + _PIECE] >= thr) + i for i in range(0, len(fts), _PIECE)]
    )
    s, e = fts[long], fend[long]
    g = cum.overlap(s, e)
    driver = (
        (iv.searchsorted(li, e, side="left") - iv.searchsorted(li, s, side="left")) == len(li)
        if len(li)
        else np.zeros(len(s), bool)
    )
    heavy = (g >= thr) & ~driver & (g > 0)
    return dict(zip(long[heavy].tolist(), g[heavy]))


def _shown(trace: Trace, names: dict[int, int], parent: Column, got: dict[int, int]) -> list[int]:
    """The candidate frames ``got`` (named ``names``) to show: a chain of wrappers holding the same time shows as
    its outermost frame with a source line and its deepest frame (what the host was inside)."""
    if not got:
        return []
    cparent: dict[int, int] = {}
    kids: dict[int, list[int]] = {}
    for i in got:
        q = int(parent[i])
        while q >= 0 and q not in got:
            q = int(parent[q])
        cparent[i] = q
        kids.setdefault(q, []).append(i)

    def continues(i: int) -> bool:  # the only heavy child of its candidate parent, holding its time
        q = cparent[i]
        return (
            q >= 0 and len([k for k in kids.get(q, []) if got[k] >= _SAME * got[q]]) == 1 and got[i] >= _SAME * got[q]
        )

    shown: list[int] = []
    for head in got:
        if continues(head):
            continue
        chain = [head]
        while True:
            nxt = [k for k in kids.get(chain[-1], []) if continues(k)]
            if not nxt:
                break
            chain.append(nxt[0])
        named = next((i for i in chain if _FRAME.match(trace.strings[names[i]])), chain[0])
        shown.append(named)
        if chain[-1] != named:
            shown.append(chain[-1])
    return shown


def _heaviest(
    trace: Trace, heavy: list[tuple[int, int, int, int]], step_ns: int, classes: dict[str, iv.IntervalSet]
) -> list[HostFrame]:
    """The frames holding the most GPU idle time, from the shown frames' (name, start, end, idle
    time); one line per frame name: the same frame in every step (a loader's __next__) adds up."""
    if not heavy:
        return []
    by_name: dict[int, list[tuple[int, int, int]]] = {}
    for nm, s, e, g in heavy:
        by_name.setdefault(nm, []).append((s, e, g))
    rows = []
    for nm, fs in by_name.items():
        total = int(sum(g for _, _, g in fs))
        per = {c: sum(iv.total(_within(v, s, e)) for s, e, _ in fs) for c, v in classes.items() if len(v[0])}
        cls = max(per, key=per.__getitem__) if per and max(per.values()) > 0 else "unattributed"
        rows.append((total, min(s for s, _, _ in fs), nm, len(fs), cls))
    rows.sort(key=lambda r: (-r[0], r[1]))
    out = []
    for total, _, nm, count, cls in rows[:_TOP_FRAMES]:
        name = trace.strings[nm]
        file, line, func = _parse(name)
        out.append(HostFrame(name, file, line, func, total, round(100.0 * total / step_ns, 2), cls, count))
    return out


def _evidence(h: HostIdle) -> list[str]:
    lines = [
        f"GPU idle {h.idle_ns / 1e6:.1f} ms of {h.step_ns / 1e6:.1f} ms in the window; host thread {h.thread}: "
        + ", ".join(f"{c} {h.ms(c):.1f} ms" for c in CLASSES if h.ns.get(c))
    ]
    if h.cold_start is not None:
        c = h.cold_start
        lines.append(
            f"cold start: {c.count} launch call{'s' * (c.count > 1)} of ≥ 1 ms (the longest "
            f"{c.longest_ns / 1e6:.1f} ms; a launch takes µs) cover {c.idle_ns / 1e6:.1f} ms of GPU idle: the "
            "first call of a kernel loads or compiles its code"
        )
    if h.alloc_one_off is not None:
        c = h.alloc_one_off
        lines.append(
            f"{c.count} allocator call{'s' * (c.count > 1)} cover {c.idle_ns / 1e6:.1f} ms of GPU idle, most of it in "
            f"the three longest (the longest {c.longest_ns / 1e6:.1f} ms): first-use costs paid once, not churn"
        )
    for c in h.calls[:3]:
        lines.append(f"{c.name} ×{c.count}: {c.idle_ns / 1e6:.1f} ms of GPU idle ({c.cls})")
    for f in h.frames[:5]:
        where = f"{f.file}:{f.line} {f.function}" if f.file else f.function
        times = f" ×{f.count}" if f.count > 1 else ""
        lines.append(f"{where}{times}: {f.idle_ns / 1e6:.1f} ms of GPU idle ({f.share_pct:.1f} % of step time)")
    return lines


COLD_START_DETAIL = (
    "first calls load or compile kernel code inside the launch (cold start): a one-time cost that dominates this window"
)


def host_idle_evidence(h: HostIdle, cls: str) -> list[Evidence]:
    """Evidence lines for class ``cls``: its share, the cold start, the calls and frames behind it."""
    from trainscope.analyzers.trace.verdict import Evidence  # circle: verdict imports this module

    out = [
        Evidence(
            f"GPU idle while the host does {cls} work (host events during GPU idle)",
            round(h.share_pct(cls), 2),
            "% of step time",
            "",
            f"trace: {h.source} frames and runtime calls on {h.thread}",
            None,
        )
    ]
    if cls == "launch" and h.cold_start is not None:
        c = h.cold_start
        out.append(
            Evidence(
                f"{c.name} (first-call module loading / compilation inside the launch)",
                c.count,
                "calls",
                "",
                f"measured: longest {c.longest_ns / 1e6:.1f} ms, {c.idle_ns / 1e6:.1f} ms of GPU idle",
                None,
            )
        )
    for c in [c for c in h.calls if c.cls == cls][:2]:
        out.append(
            Evidence(
                f"{c.name} ×{c.count} during GPU idle",
                round(c.idle_ns / 1e6, 2),
                "ms",
                "",
                f"trace: runtime calls (longest {c.longest_ns / 1e6:.1f} ms)",
                None,
            )
        )
    for f in [f for f in h.frames if f.cls == cls][:4]:
        where = f"{f.function} ({f.file.rsplit('/', 1)[-1]}:{f.line})" if f.file else f.function
        times = f" ×{f.count}" if f.count > 1 else ""
        out.append(
            Evidence(
                f"{where}{times} during GPU idle",
                round(f.idle_ns / 1e6, 2),
                "ms",
                "",
                f"trace: host frame {f.file}:{f.line}, {f.share_pct:.1f} % of step time"
                if f.file
                else f"trace: host frame, {f.share_pct:.1f} % of step time",
                None,
            )
        )
    return out
