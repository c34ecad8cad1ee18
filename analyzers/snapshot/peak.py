"""What the ``memory`` app shows for one device of a CUDA memory snapshot: allocated bytes over the
recorded events, the peak, and every allocation live at the peak with its full allocating stack.

The series and the peak come from :func:`trainscope.analyzers.snapshot.summary.snapshot_memory`
(the trace replayed backwards from the allocator state at the dump); this module adds the live
set *with stacks*, which the report's top-N list does not keep. The live set just after the peak
event is: the allocations made in the trace up to the peak and not freed by then; those made
before the trace began and freed after the peak (their size and the stack of their free are all
the trace knows); and the blocks live at the dump that the trace never allocated (live
throughout, with the block's own stack). Their sizes add up to the peak exactly when the trace is
complete (:attr:`MemoryPeak.accounted`).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

import numpy as np

from trainscope.analyzers.snapshot.summary import DeviceSnapshotMemory
from trainscope.analyzers.snapshot.summary import free_code_of
from trainscope.analyzers.snapshot.summary import live_set
from trainscope.analyzers.snapshot.summary import posix_path
from trainscope.analyzers.snapshot.summary import site_of
from trainscope.traces.memory_snapshot import ACTIONS
from trainscope.traces.memory_snapshot import Block
from trainscope.traces.memory_snapshot import DeviceTrace
from trainscope.traces.memory_snapshot import Frame as SnapshotFrame
from trainscope.traces.memory_snapshot import Snapshot
from trainscope.traces.model import Column

# Where a live allocation's stack comes from.
ORIGIN_TRACE = "allocated in the trace"
ORIGIN_FREED_LATER = "allocated before the trace; stack of its free"
ORIGIN_DUMP = "live at the dump; block stack"


@dataclass(frozen=True)
class PeakAllocation:
    size: int  # bytes the tensor requested
    address: int
    time_us: int | None  # when it was allocated; None: before the trace began
    site: str  # the stack's top in user code: "file.py:123 (function)"
    stack: tuple[Frame, ...]  # every frame, innermost first
    origin: str  # ORIGIN_*

    def share_of(self, peak: int) -> float:
        return 100.0 * self.size / peak if peak else 0.0


@dataclass
class MemoryPeak:
    device: int
    peak_bytes: int  # allocated bytes at the peak (the replay's maximum)
    peak_index: int | None  # the event after which the peak holds; None: before the trace, or no events
    peak_time_us: int | None
    reserved_at_peak: int
    end_reserved: int
    events: int
    allocations: list[PeakAllocation]  # live at the peak, largest first
    time_us: Column = field(repr=False)  # per recorded event
    allocated: Column = field(repr=False)  # allocated bytes just after each event
    reserved: Column = field(repr=False)
    phase: str | None = None  # profiler range open at the peak
    notes: list[str] = field(default_factory=list)
    # Where the trace records an out-of-memory event: the last one's index, and every allocation live
    # when its request failed (replayed to it, not the state at the dump, which follows the unwinding).
    oom_index: int | None = None
    oom_allocations: list[PeakAllocation] = field(default_factory=list)

    @property
    def oom_live_bytes(self) -> int:
        return sum(a.size for a in self.oom_allocations)

    @property
    def live_bytes(self) -> int:
        return sum(a.size for a in self.allocations)

    @property
    def accounted(self) -> bool:
        """The live allocations add up to the peak (they do unless the trace was cut mid-way)."""
        return self.live_bytes == self.peak_bytes

    @property
    def span_us(self) -> tuple[int, int] | None:
        return (int(self.time_us[0]), int(self.time_us[-1])) if len(self.time_us) else None

    def binned_peak(self, columns: int) -> Column:
        """Peak allocated bytes in each of ``columns`` equal time windows over the trace: the level
        entering the window (the last event before it) or any event inside it."""
        out = np.zeros(columns, np.int64)
        if not len(self.time_us) or columns <= 0:
            return out
        cols = self._columns(columns)
        first = np.searchsorted(cols, np.arange(columns), side="left")  # first event in each column
        last = np.searchsorted(cols, np.arange(columns), side="right")  # one past its last
        for c in range(columns):
            entering = int(self.allocated[first[c] - 1]) if first[c] > 0 else 0
            inside = self.allocated[first[c] : last[c]]
            out[c] = max(entering, int(inside.max())) if len(inside) else entering
        return out

    def _columns(self, columns: int) -> Column:
        t0, t1 = int(self.time_us[0]), int(self.time_us[-1])
        if t1 <= t0:
            return np.zeros(len(self.time_us), np.int64)
        cols: Column = np.minimum((self.time_us - t0) * columns // (t1 - t0 + 1), columns - 1).astype(np.int64)
        return cols

    def column_of(self, time_us: int, columns: int) -> int:
        """The chart column (of ``columns``) that holds ``time_us``."""
        if not len(self.time_us) or columns <= 0:
            return 0
        t0, t1 = int(self.time_us[0]), int(self.time_us[-1])
        if t1 <= t0:
            return 0
        return int(min(columns - 1, max(0, (time_us - t0) * columns // (t1 - t0 + 1))))


@dataclass(frozen=True)
class Frame:
    name: str
    filename: str  # "" where the unwinder found none ("??")
    line: int

    @property
    def python(self) -> bool:
        return self.filename.endswith(".py")

    @property
    def text(self) -> str:
        """``function  /full/path.py:123`` (C++ frames without a file: the function alone)."""
        if not self.filename:
            return self.name
        return f"{self.name}  {self.filename}:{self.line}" if self.line else f"{self.name}  {self.filename}"

    @property
    def short(self) -> str:
        """``path.py:123 (function)``: the file's name only, as the site is written."""
        base = posix_path(self.filename).rsplit("/", 1)[-1]
        return f"{base}:{self.line} ({self.name})" if self.filename else self.name


def _frame(f: object) -> Frame:
    if not isinstance(f, dict):
        return Frame(str(f), "", 0)
    fn = f.get("filename")
    line = f.get("line")
    return Frame(
        str(f.get("name", "?")), fn if isinstance(fn, str) and fn != "??" else "", line if isinstance(line, int) else 0
    )


def _stack(frames: list[SnapshotFrame]) -> tuple[Frame, ...]:
    return tuple(_frame(f) for f in frames or [])


def memory_peak(snap: Snapshot, mem: DeviceSnapshotMemory) -> MemoryPeak:
    """The peak view of device ``mem.device`` (``mem`` from ``snapshot_memory(snap)``)."""
    dev = mem.device
    segs = [s for s in snap.segments if s.device == dev]
    live_end = {b.address: b for s in segs for b in s.blocks if b.state == "active_allocated"}
    tr = next((t for t in snap.traces if t.device == dev), None)
    series = len(mem.series_allocated) > 0
    i_peak: int | None = None
    if series:
        i = int(np.argmax(mem.series_allocated))
        i_peak = i if int(mem.series_allocated[i]) == mem.peak_allocated else None
    if tr is None or not series:
        allocs = [
            PeakAllocation(b.requested_size, b.address, None, site_of(b.frames), _stack(b.frames), ORIGIN_DUMP)
            for b in live_end.values()
        ]
    else:
        allocs = _live_after(tr, live_end, -1 if i_peak is None else i_peak)
    allocs.sort(key=lambda a: (-a.size, a.address))
    oom_index, at_oom = None, []
    if tr is not None and series and len(tr) == len(mem.series_allocated):
        ooms = np.flatnonzero(tr.action == ACTIONS.index("oom"))
        if len(ooms):
            oom_index = int(ooms[-1])
            at_oom = sorted(_live_after(tr, live_end, oom_index), key=lambda a: (-a.size, a.address))
    return MemoryPeak(
        device=dev,
        peak_bytes=mem.peak_allocated,
        peak_index=i_peak,
        peak_time_us=mem.peak_allocated_time_us,
        reserved_at_peak=mem.reserved_at_peak_allocated,
        end_reserved=mem.end_reserved,
        events=mem.events,
        allocations=allocs,
        time_us=mem.series_time_us,
        allocated=mem.series_allocated,
        reserved=mem.series_reserved,
        phase=mem.peak_phase,
        notes=list(mem.notes),
        oom_index=oom_index,
        oom_allocations=at_oom,
    )


def _live_after(tr: DeviceTrace, live_end: dict[int, Block], i_peak: int) -> list[PeakAllocation]:
    """Allocations live just after event ``i_peak`` (-1: before the first event), with their stacks."""
    ls = live_set(tr, live_end, i_peak, free_code_of(tr.action))
    size, t = tr.size, tr.time_us
    out = [
        PeakAllocation(int(size[i]), k, int(t[i]), site_of(tr.frames[i]), _stack(tr.frames[i]), ORIGIN_TRACE)
        for k, i in ls.allocated.items()
    ]
    out += [
        PeakAllocation(
            int(size[i]),
            int(tr.addr[i]),
            None,
            site_of(tr.frames[i]) + " [where freed]",
            _stack(tr.frames[i]),
            ORIGIN_FREED_LATER,
        )
        for i in ls.freed_later
    ]
    out += [
        PeakAllocation(b.requested_size, b.address, None, site_of(b.frames), _stack(b.frames), ORIGIN_DUMP)
        for b in ls.at_dump
    ]
    return out
