"""A time window of a trace, as a list: every kernel, copy, memset, framework op, range and runtime
call that overlaps [start, end), with its lane and the step it starts in, and the busy time per
kind inside the window. What a program (the MCP server, a script) reads where a person scrolls
the timeline. Times are the trace's own nanoseconds (the clock of the report's step starts)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.traces.model import Annotations
from trainscope.traces.model import Copies
from trainscope.traces.model import CpuOps
from trainscope.traces.model import Kernels
from trainscope.traces.model import Memsets
from trainscope.traces.model import RuntimeCalls
from trainscope.traces.model import Trace

KINDS = ("kernel", "copy", "memset", "cpu op", "annotation", "runtime")


@dataclass(frozen=True)
class WindowEvent:
    kind: str  # one of KINDS
    name: str
    lane: str  # "GPU 0 stream 7", "host thread 2"
    start_ns: int
    duration_ns: int
    step: str | None  # the step it starts in


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    events: list[WindowEvent]  # by start time, at most ``limit``
    matched: int  # events overlapping the window (before the limit)
    busy_ns: dict[str, int]  # per kind: the union of its intervals clipped to the window
    steps: list[str]  # steps overlapping the window


def _name(trace: Trace, idx: int) -> str:
    return trace.strings[idx] if 0 <= idx < len(trace.strings) else ""


def window(
    trace: Trace,
    seg: StepSegmentation,
    start_ns: int,
    end_ns: int,
    kinds: tuple[str, ...] = KINDS,
    name_contains: str | None = None,
    limit: int = 200,
) -> Window:
    if end_ns <= start_ns:
        raise ValueError("the window's end must be after its start")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown event kind {sorted(unknown)[0]!r} (one of: {', '.join(KINDS)})")
    needle = name_contains.lower() if name_contains else None
    starts = np.array([s.start_ns for s in seg.steps], np.int64)

    def step_of(t: int) -> str | None:
        i = int(np.searchsorted(starts, t, side="right")) - 1
        return seg.steps[i].label if i >= 0 and t < seg.steps[i].end_ns else None

    tables: dict[str, Kernels | Copies | Memsets | CpuOps | Annotations | RuntimeCalls] = {
        "kernel": trace.kernels,
        "copy": trace.copies,
        "memset": trace.memsets,
        "cpu op": trace.cpu_ops,
        "annotation": trace.annotations,
        "runtime": trace.runtime,
    }
    named = None
    if needle:  # string ids whose text contains the needle, once
        named = np.array([needle in x.lower() for x in trace.strings] + [False], bool)
    parts_ts, parts_kind, parts_row = [], [], []
    busy: dict[str, int] = {}
    for kind in kinds:
        t = tables[kind]
        if not len(t):
            busy[kind] = 0
            continue
        sel = np.flatnonzero((t.ts < end_ns) & (t.end > start_ns))
        s, e = np.clip(t.ts[sel], start_ns, end_ns), np.clip(t.end[sel], start_ns, end_ns)
        busy[kind] = iv.total(iv.union(s, e)) if len(sel) else 0
        if needle and named is not None:
            if isinstance(t, (Copies, Memsets)):  # kind is "copy" or "memset"
                label = "memcpy" if kind == "copy" else "memset"
                sel = sel if needle in label else sel[:0]
            else:
                ids = t.name[sel]
                sel = sel[named[np.where((ids >= 0) & (ids < len(trace.strings)), ids, -1)]]
        parts_ts.append(t.ts[sel])
        parts_kind.append(np.full(len(sel), KINDS.index(kind), np.int8))
        parts_row.append(sel)
    ts_all = np.concatenate(parts_ts) if parts_ts else np.empty(0, np.int64)
    kind_all = np.concatenate(parts_kind) if parts_kind else np.empty(0, np.int8)
    row_all = np.concatenate(parts_row) if parts_row else np.empty(0, np.int64)
    order = np.lexsort((row_all, kind_all, ts_all))[:limit]  # by start, then kind, then row: deterministic
    events: list[WindowEvent] = []
    for i in order:
        kind, j, ts = KINDS[int(kind_all[i])], int(row_all[i]), int(ts_all[i])
        t = tables[kind]
        if isinstance(t, (Copies, Memsets)):  # kind is "copy" or "memset"
            name = ("memcpy " if kind == "copy" else "memset ") + f"{int(t.bytes[j])} B"
            lane = f"GPU {int(t.device[j])} stream {int(t.stream[j])}"
        else:
            name = _name(trace, int(t.name[j]))
            if isinstance(t, Kernels):  # kind == "kernel"
                lane = f"GPU {int(t.device[j])} stream {int(t.stream[j])}"
            elif isinstance(t, Annotations) and int(t.device[j]) >= 0:  # kind == "annotation"
                lane = f"GPU {int(t.device[j])} annotations"
            else:
                lane = f"host thread {int(t.thread[j])}"
        events.append(WindowEvent(kind, name, lane, ts, int(t.dur[j]), step_of(ts)))
    matched = len(ts_all)
    steps = [s.label for s in seg.steps if s.start_ns < end_ns and s.end_ns > start_ns]
    return Window(start_ns, end_ns, events, matched, busy, steps)
