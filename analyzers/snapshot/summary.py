"""Peak memory, fragmentation and the largest live allocations from a CUDA memory snapshot.

The snapshot's ``segments`` are the allocator's state when it was dumped; its trace is a ring
buffer of the most recent events, which may not reach back to the start of the program. So the
timeline is rebuilt *backwards* from the final state: allocated bytes (what tensors requested:
the trace records requested sizes, so the final blocks' ``requested_size`` is the starting
point) before an ``alloc`` are the bytes after it minus its size, before a ``free_requested`` plus its size (allocated bytes drop
when the user frees a tensor, as ``torch.cuda.memory_allocated`` does); reserved bytes move with
``segment_alloc`` / ``segment_free`` (and ``segment_map`` / ``segment_unmap`` for expandable
segments). That needs nothing from before the trace began.

Fragmentation is memory the allocator holds (reserved) but no tensor uses (allocated): at the
moment reserved memory peaks, ``(reserved − allocated) / reserved``.

Every snapshot era reads the same way: PyTorch 2.0 (blocks without addresses, stacks under
``history``), 2.1+ (``frames``, ``device_traces``) and snapshots without any allocator events (the
state at the dump comes from the segments' block states alone).

Out of memory: an ``oom`` event records the request that failed and the device's free bytes. The
OOM is **fragmentation** when the memory the allocator held free in its cache plus the device's
free memory would have held the request but no free block was large enough; it is **capacity**
when even all of that would not. Without an ``oom`` event (the trace ring buffer may keep only the
last few events), a snapshot whose allocator holds (almost) no cached free memory ends at its
limit: any OOM there is a capacity OOM, since there is nothing to defragment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field

import numpy as np

# The findings a snapshot supports are declared, with their snapshot rule, beside their specs.
from trainscope.analyzers.findings.memory import snapshot_findings as snapshot_findings  # re-exported
from trainscope.traces.memory_snapshot import ACTIONS
from trainscope.traces.memory_snapshot import Block
from trainscope.traces.memory_snapshot import DeviceTrace
from trainscope.traces.memory_snapshot import Frame
from trainscope.traces.memory_snapshot import Snapshot
from trainscope.traces.model import Column

A = {a: i for i, a in enumerate(ACTIONS)}
_PY_SKIP = ("torch/nn/modules/module.py", "torch/utils/", "torch/autograd/", "torch/_", "torch/optim/optimizer.py")


@dataclass(frozen=True)
class LiveAllocation:
    size: int
    address: int
    time_us: int | None  # None: allocated before the trace begins
    site: str  # the innermost Python frame of the allocating stack: "file.py:123 (function)"


@dataclass(frozen=True)
class Site:
    site: str
    bytes: int
    count: int


@dataclass
class DeviceSnapshotMemory:
    device: int
    events: int
    end_allocated: int
    end_reserved: int
    peak_allocated: int
    peak_reserved: int
    peak_allocated_time_us: int | None
    reserved_at_peak_allocated: int
    allocated_at_peak_reserved: int
    peak_phase: str | None  # profiler annotation open at the peak, e.g. "Optimizer.step#AdamW.step"
    inactive_end_bytes: int  # cached but free at the dump
    largest_inactive_block: int
    oom_events: int
    top_allocations: list[LiveAllocation]
    sites: list[Site]
    series_time_us: Column = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    series_allocated: Column = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    series_reserved: Column = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    notes: list[str] = field(default_factory=list)
    oom: OomAssessment | None = None

    @property
    def fragmentation_pct(self) -> float:
        """Reserved but unallocated, as a share of reserved, when reserved memory peaks."""
        if not self.peak_reserved:
            return 0.0
        return 100.0 * (self.peak_reserved - self.allocated_at_peak_reserved) / self.peak_reserved


@dataclass(frozen=True)
class OomAssessment:
    status: str  # "oom" (an oom event was recorded) | "at_limit" (no cached free memory left) | "none"
    kind: str | None  # "capacity" | "fragmentation" for oom / at_limit; None otherwise
    requested: int | None  # bytes of the failed request (oom events)
    device_free: int | None  # the device's free bytes at the failure (oom events)
    cached_free: int  # inactive bytes the allocator held when judged (at the oom event where one is recorded)
    largest_free_block: int
    reserved: int
    evidence: list[str]
    judged_at: str = "dump"  # "oom event" (the allocator replayed to the failed request) | "dump"

    @property
    def ended_in_oom(self) -> bool | None:
        """True with an oom event; None where the state fits an OOM but none is recorded; False otherwise."""
        return True if self.status == "oom" else None if self.status == "at_limit" else False


def assess_oom(m: DeviceSnapshotMemory, tr: DeviceTrace | None, slack_pct: float = 1.0) -> OomAssessment:
    """Whether the snapshot ends in (or at the edge of) an out-of-memory error, and which kind.

    With an ``oom`` event the allocator is judged **at that event**, replayed to it: a snapshot dumped
    in the exception handler follows the unwinding, which has already freed the step's tensors, so
    the cached free memory at the dump is not what the failed request could have used. The replayed
    series give the allocated and reserved bytes just before the request failed; the allocator's
    cached free memory then is reserved − allocated (PyTorch's caching allocator releases its unused
    cached segments and retries before it raises, so what it still holds sits in segments that
    also hold tensors)."""
    free, largest, res = m.inactive_end_bytes, m.largest_inactive_block, m.end_reserved

    def gib(b: float) -> str:
        return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"

    if tr is not None and len(tr) and (tr.action == A["oom"]).any():
        i = int(np.flatnonzero(tr.action == A["oom"])[-1])
        req, dev_free = int(tr.size[i]), int(tr.addr[i])
        replayed = len(m.series_allocated) == len(tr) and len(tr) > 0
        if replayed:
            alloc_i, res_i = int(m.series_allocated[i]), int(m.series_reserved[i])
            cached = max(0, res_i - alloc_i)
            state = (
                f"at the oom event (replayed from the dump over {len(tr) - 1 - i:,} later events): "
                f"{gib(alloc_i)} allocated of {gib(res_i)} reserved, so {gib(cached)} cached free"
            )
        else:
            alloc_i, res_i, cached = m.end_allocated, res, free
            state = f"at the dump: {gib(cached)} cached free (largest block {gib(largest)})"
        usable = cached + dev_free
        kind = "fragmentation" if req <= usable else "capacity"
        ev = [
            f"the last oom event asked for {gib(req)} at {site_of(tr.frames[i])}; the device had {gib(dev_free)} free; "
            f"allocator {state}",
            (
                "enough memory was free in total (device and cache) but in no block large enough: fragmentation"
                if kind == "fragmentation"
                else "more than all free memory (device and cache) together: capacity"
            ),
        ]
        if replayed and m.end_allocated < alloc_i:
            ev.append(
                f"the dump follows the unwinding: {gib(alloc_i - m.end_allocated)} were freed after the oom "
                f"({gib(free)} cached free at the dump, which the failed request could not have used)"
            )
        return OomAssessment(
            "oom", kind, req, dev_free, cached, largest, res_i, ev, "oom event" if replayed else "dump"
        )
    if res and 100.0 * free / res < slack_pct:
        ev = [
            f"no oom event recorded ({m.events:,} allocator events kept); at the dump the allocator holds "
            f"{gib(free)} cached free, {100.0 * free / res:.2f} % of {gib(res)} reserved (largest block {gib(largest)})",
            "nothing is left to reuse or defragment: the next allocation needs new device memory, so an "
            "out-of-memory error here is a capacity OOM",
        ]
        return OomAssessment("at_limit", "capacity", None, None, free, largest, res, ev)
    return OomAssessment("none", None, None, None, free, largest, res, [])


_BACKWARD_NODE = re.compile(r"autograd::generated::(\w+)::apply")
_ATEN_OP = re.compile(r"at::_ops::(\w+)::call")


def posix_path(path: str) -> str:
    """A frame's file path with Windows separators as ``/`` (snapshots recorded on Windows write
    ``D:\\env\\Lib\\site-packages\\torch\\...``): the torch-internal filter and the file's name
    then read the same on every platform."""
    return path.replace("\\", "/")


def site_of(frames: list[Frame]) -> str:
    """The innermost frame in user Python code (skipping C++ frames and torch internals); for
    stacks with no Python frame (the autograd engine's backward threads), the backward node or
    ATen operator that allocated."""
    if not frames:
        return "no stack recorded (allocated before recording began)"
    py = [
        (posix_path(f["filename"]), f)
        for f in frames
        if isinstance(f, dict) and isinstance(f.get("filename"), str) and f["filename"].endswith(".py")
    ]
    for fn, f in py:
        if not any(s in fn for s in _PY_SKIP):
            return f"{fn.rsplit('/', 1)[-1]}:{f.get('line', '?')} ({f.get('name', '?')})"
    for fn, f in py:
        return f"{fn.rsplit('/', 1)[-1]}:{f.get('line', '?')} ({f.get('name', '?')})"
    names: list[str] = [f["name"] for f in frames if isinstance(f, dict) and isinstance(f.get("name"), str)]
    for pattern, fmt in ((_BACKWARD_NODE, "{} (backward, no Python frame)"), (_ATEN_OP, "aten::{} (no Python frame)")):
        for nm in names:
            m = pattern.search(nm)
            if m:
                return fmt.format(m.group(1))
    return "unknown (no Python frame recorded)"


def snapshot_memory(snap: Snapshot, top: int = 10, oom_slack_pct: float = 1.0) -> list[DeviceSnapshotMemory]:
    out = []
    for dev in snap.devices:
        trace = next((t for t in snap.traces if t.device == dev), None)
        m = _device(snap, dev, trace, top)
        m.oom = assess_oom(m, trace, oom_slack_pct)
        out.append(m)
    return out


def _device(snap: Snapshot, dev: int, tr: DeviceTrace | None, top: int) -> DeviceSnapshotMemory:
    segs = [s for s in snap.segments if s.device == dev]
    live_end = {b.address: b for s in segs for b in s.blocks if b.state == "active_allocated"}
    # The trace records the bytes each tensor requested (not the allocator's rounded block), so
    # the final state is counted the same way for the replay to add up.
    end_alloc = sum(b.requested_size for b in live_end.values())
    end_res = sum(s.total_size for s in segs)
    inactive = [b.size for s in segs for b in s.blocks if b.state == "inactive"]
    notes: list[str] = []
    real = (tr.action != A["snapshot"]) & (tr.action != A["other"]) if tr is not None else np.zeros(0, bool)
    n = int(real.sum())
    if n == 0:
        notes.append(
            "no allocator events recorded: peaks are the state at the dump (record them with "
            "torch.cuda.memory._record_memory_history() before the step)"
        )
        tops = sorted(live_end.values(), key=lambda b: -b.requested_size)[:top]
        allocs = [LiveAllocation(b.requested_size, b.address, None, site_of(b.frames)) for b in tops]
        return DeviceSnapshotMemory(
            dev,
            0,
            end_alloc,
            end_res,
            end_alloc,
            end_res,
            None,
            end_res,
            end_alloc,
            None,
            sum(inactive),
            max(inactive, default=0),
            0,
            allocs,
            _sites([LiveAllocation(b.requested_size, b.address, None, site_of(b.frames)) for b in live_end.values()]),
            notes=notes,
        )

    assert tr is not None  # n > 0: the device has a trace of allocator events
    act, size = tr.action, tr.size
    free_code = free_code_of(act)
    d_alloc = np.where(act == A["alloc"], size, 0) - np.where(act == free_code, size, 0)
    d_res = np.where((act == A["segment_alloc"]) | (act == A["segment_map"]), size, 0) - np.where(
        (act == A["segment_free"]) | (act == A["segment_unmap"]), size, 0
    )
    # After event i: end − (sum of deltas after i).
    after_alloc = end_alloc - (np.cumsum(d_alloc[::-1])[::-1] - d_alloc)
    after_res = end_res - (np.cumsum(d_res[::-1])[::-1] - d_res)
    start_alloc = int(after_alloc[0] - d_alloc[0])
    start_res = int(after_res[0] - d_res[0])
    if start_alloc < 0 or start_res < 0 or after_alloc.min() < 0:
        notes.append(
            "the recorded events do not add up to the final allocator state (the trace may have been "
            "cut mid-way); peaks are approximate"
        )
    i_peak = int(np.argmax(after_alloc))
    peak_alloc = max(int(after_alloc[i_peak]), start_alloc)
    if start_alloc > int(after_alloc[i_peak]):
        i_peak = -1  # the peak was before the trace began
    j = int(np.argmax(after_res))
    peak_res = max(int(after_res[j]), start_res)
    alloc_at_res_peak = int(after_alloc[j]) if peak_res == int(after_res[j]) else start_alloc
    # The reserved peak can span many events (reserved only moves with segments): take the
    # largest allocation inside it, so fragmentation is the best case for that plateau.
    plateau = after_res == after_res[j]
    if peak_res == int(after_res[j]) and plateau.any():
        alloc_at_res_peak = int(after_alloc[plateau].max())
    res_at_alloc_peak = int(after_res[i_peak]) if i_peak >= 0 else start_res

    live = _live_at(tr, live_end, i_peak, free_code)
    live.sort(key=lambda x: -x.size)
    peak_t = int(tr.time_us[i_peak]) if i_peak >= 0 else None
    if peak_t is not None:
        notes.append(f"the trace covers {n:,} events over {(tr.time_us[-1] - tr.time_us[0]) / 1e3:,.1f} ms")
    return DeviceSnapshotMemory(
        device=dev,
        events=n,
        end_allocated=end_alloc,
        end_reserved=end_res,
        peak_allocated=peak_alloc,
        peak_reserved=peak_res,
        peak_allocated_time_us=peak_t,
        reserved_at_peak_allocated=res_at_alloc_peak,
        allocated_at_peak_reserved=alloc_at_res_peak,
        peak_phase=_phase(snap, dev, peak_t),
        inactive_end_bytes=sum(inactive),
        largest_inactive_block=max(inactive, default=0),
        oom_events=int((act == A["oom"]).sum()),
        top_allocations=live[:top],
        sites=_sites(live),
        series_time_us=tr.time_us,
        series_allocated=after_alloc,
        series_reserved=after_res,
        notes=notes,
    )


def free_code_of(act: Column) -> int:
    """The action code that frees memory in this trace: requested frees, or completed frees for
    traces that record only those."""
    code = A["free_requested"]
    if not (act == code).any() and (act == A["free_completed"]).any():
        return A["free_completed"]
    return code


@dataclass(frozen=True)
class LiveSet:
    """Allocations live just after a peak event, by where the trace knows them from: the alloc
    event (address → its index), the free event after the peak of an allocation made before the
    trace began (its size and the free's stack are all the trace has), and the blocks live at the
    dump that the trace never allocated (live throughout)."""

    allocated: dict[int, int]
    freed_later: list[int]
    at_dump: list[Block]


def live_set(tr: DeviceTrace, live_end: dict[int, Block], i_peak: int, free_code: int) -> LiveSet:
    """The allocations live just after event ``i_peak`` (-1: before the first event); ``live_end``
    maps address → block live at the dump."""
    act, addr = tr.action, tr.addr
    alloc_code = A["alloc"]
    live: dict[int, int] = {}  # address → index of its alloc event
    at_peak: dict[int, int] | None = {} if i_peak < 0 else None
    freed_later: list[int] = []
    allocated_in_trace: set[int] = set()
    for i in np.flatnonzero((act == alloc_code) | (act == free_code)).tolist():
        if at_peak is None and i > i_peak:
            at_peak = dict(live)
        k = int(addr[i])
        if act[i] == alloc_code:
            live[k] = i
            allocated_in_trace.add(k)
        elif k in live:
            del live[k]
        elif i > i_peak:  # allocated before the trace began and freed after the peak
            freed_later.append(i)
    return LiveSet(
        live if at_peak is None else at_peak,
        freed_later,
        [b for a_, b in live_end.items() if a_ not in allocated_in_trace],
    )


def _live_at(tr: DeviceTrace, live_end: dict[int, Block], i_peak: int, free_code: int) -> list[LiveAllocation]:
    """Allocations live just after event ``i_peak`` (:func:`live_set`), with their sites."""
    ls = live_set(tr, live_end, i_peak, free_code)
    size, t = tr.size, tr.time_us
    out = [LiveAllocation(int(size[i]), k, int(t[i]), site_of(tr.frames[i])) for k, i in ls.allocated.items()]
    out += [
        LiveAllocation(int(size[i]), int(tr.addr[i]), None, site_of(tr.frames[i]) + " [where freed]")
        for i in ls.freed_later
    ]
    out += [LiveAllocation(b.requested_size, b.address, None, site_of(b.frames)) for b in ls.at_dump]
    return out


def _sites(live: list[LiveAllocation]) -> list[Site]:
    agg: dict[str, list[int]] = {}
    for la in live:
        s = agg.setdefault(la.site, [0, 0])
        s[0] += la.size
        s[1] += 1
    return sorted((Site(k, v[0], v[1]) for k, v in agg.items()), key=lambda s: -s.bytes)


def _phase(snap: Snapshot, dev: int, t_us: int | None) -> str | None:
    if t_us is None:
        return None
    open_at: dict[str, int] = {}
    found = None
    for a in sorted((a for a in snap.annotations if a.device == dev), key=lambda a: a.time_us):
        if a.time_us > t_us:
            break
        if a.stage == "START":
            open_at[a.name] = a.time_us
        elif a.stage == "END":
            open_at.pop(a.name, None)
    if open_at:
        found = max(open_at, key=lambda name: open_at[name])  # the innermost (latest opened) range
    return found
