"""The trace with trainscope's findings as their own tracks, in the JSON trace-event format that
ui.perfetto.dev and chrome://tracing open (and Kineto readers such as Holistic Trace Analysis read).

**Lossless for Kineto input.** When the analyzed trace came from a Kineto JSON file, the export
is that file's own events, copied byte for byte (kernels with every arg — grid, block, registers,
occupancy, External id —, CPU operators, the CPU-op→kernel flow arrows ``s``/``f``, ``[memory]``
instants, counters, the ``M`` process and thread names, sort indices and ``process_labels``) and
its top-level fields (``baseTimeNanoseconds``, ``deviceProperties`` …), followed by the findings.
The copy streams: the file is read in slices (collectors/kineto_stream.py), each slice is
validated by msgspec as a list of raw JSON values and written out as it is, so memory holds one
slice, never the document. Traces from other formats (Nsight exports, live captures) are written
from the model, with Kineto's categories (``kernel``, ``gpu_memcpy``, ``cuda_runtime``,
``cpu_op``, ``user_annotation`` …) and the GPUs named, encoded with msgspec in batches.

The findings live in one extra process, "trainscope findings": a track (thread) per finding
and a "verdict" track with one range over the steps named by the verdict, and the step boundaries
as global instant markers. A finding's track holds the time it cites — the time of the breakdown
category that carries it inside the steps — as **merged** ranges (category ``trainscope_finding``):
the category's intervals (one per kernel, often) closer than a gap are one slice, never across a
step boundary; each slice's args say how much of it is the finding's own time (``time_us``) and how
many intervals it joins (``intervals``), so nothing is lost and the tracks stay a small share of
the file (:func:`finding_gap_ns`: 1 % of the median step, doubled while all findings' slices pass
1 % of the trace's events).

A **rank set** (a directory of per-rank traces) is one file (:func:`write_perfetto_ranks`): every
rank is its own process, named ``rank N`` and sorted by rank, holding its verdict and findings
tracks, its collectives as the alignment matched them (a track, with flows from the first rank to
arrive to the next, ending on the last), and every event of its trace, each host thread and GPU
stream a thread of that process (the original pid and tid are in the ``trainscope`` field).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO
from typing import TYPE_CHECKING
from typing import Any

import msgspec
import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.analyzers.views.timeline import FINDING_CATEGORY
from trainscope.analyzers.views.timeline import GPU_CATEGORIES
from trainscope.analyzers.views.timeline import TimelineModel
from trainscope.collectors.errors import TraceError
from trainscope.collectors.kineto_stream import Fallback
from trainscope.collectors.kineto_stream import _array_ends
from trainscope.collectors.kineto_stream import _top
from trainscope.collectors.kineto_stream import stream_events
from trainscope.collectors.readers import GZIP_MAGIC
from trainscope.collectors.readers import TEXT_REPAIRED
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS
from trainscope.traces.model import Trace

if TYPE_CHECKING:
    from trainscope.analyzers.ranks.lanes import SideBySide

FINDINGS_PID = 999_999  # a pid no profiler uses, for the findings process
FINDING_PREFIX = "finding "  # the findings tracks' range names start with it (readers can pick them out)
_BATCH = 65_536  # events encoded per msgspec call on the model path
_ENC = msgspec.json.Encoder()
_COPY_BLOCK = 4 << 20  # bytes per read where the kernel cannot copy the input's events itself


def _us(ns: np.ndarray | int, offset_ns: int = 0) -> list[float]:
    us: list[float] = ((np.asarray(ns, np.float64) + offset_ns) / 1e3).round(3).tolist()
    return us


def _us1(ns: int, offset_ns: int = 0) -> float | int:
    """One time in µs: an int when whole (exact at any magnitude), else ns in the fraction."""
    t = int(ns) + int(offset_ns)
    return t // 1000 if t % 1000 == 0 else t / 1e3


def finding_arrays(model: TimelineModel, finding_id: str) -> tuple[np.ndarray, np.ndarray]:
    """Every interval a finding cites, as (starts, ends) arrays: its category's time inside the
    steps, in time order (ns from the trace origin). Empty when it has no category."""
    cat = FINDING_CATEGORY.get(finding_id)
    steps = model.segmentation.steps
    if cat is None or not steps:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s, e = model.gpu_sets[GPU_CATEGORIES.index(cat)]
    keep = iv.contains((np.asarray(model.step_starts), np.asarray(model.step_ends)), s)
    s, e = s[keep], np.minimum(e[keep], model.step_ends[np.searchsorted(model.step_starts, s[keep], side="right") - 1])
    return s, e


def finding_intervals(model: TimelineModel, finding_id: str) -> list[tuple[int, int]]:
    """:func:`finding_arrays` as a list of (start, end) pairs."""
    s, e = finding_arrays(model, finding_id)
    return list(zip(s.tolist(), e.tolist()))


FINDING_CATEGORY_NAME = (
    "trainscope_finding"  # the findings' and the verdict's ranges (no Kineto reader takes them for its own)
)
GAP_SHARE_OF_STEP = 0.01  # intervals closer than this share of the median step are one slice
SLICE_BUDGET = 0.01  # all findings' slices together: at most this share of the trace's events (the gap doubles)


def model_event_count(trace: Trace) -> int:
    """The trace's timed events as trainscope read them (kernels, copies, memsets, runtime calls,
    operators, annotations, memory events): what the findings' slices are a share of."""
    return sum(
        len(getattr(trace, t)) for t in ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "memory")
    )


def merge_intervals(
    starts: np.ndarray, ends: np.ndarray, step_starts: np.ndarray, gap_ns: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Intervals (in time order) joined where the gap to the next is at most ``gap_ns`` and both lie
    in one step → (starts, ends, own time inside each, intervals joined in each)."""
    if not len(starts):
        z = np.empty(0, np.int64)
        return z, z, z, z
    step = np.searchsorted(step_starts, starts, side="right") if len(step_starts) else np.zeros(len(starts), np.int64)
    cut = (starts[1:] - ends[:-1] > gap_ns) | (step[1:] != step[:-1])
    first = np.concatenate(([0], np.flatnonzero(cut) + 1))
    busy = np.add.reduceat(ends - starts, first)
    return starts[first], np.maximum.reduceat(ends, first), busy, np.diff(np.concatenate((first, [len(starts)])))


def finding_gap_ns(model: TimelineModel, finding_ids: list[str], n_events: int) -> float:
    """The gap below which a finding's intervals are one slice: :data:`GAP_SHARE_OF_STEP` of the
    median step, doubled while all findings' slices together pass :data:`SLICE_BUDGET` of
    ``n_events`` (and the gap is shorter than the longest step: past that, steps alone cut)."""
    ss, se = np.asarray(model.step_starts), np.asarray(model.step_ends)
    if not len(ss):
        return 0.0
    durs = se - ss
    gap = max(1.0, float(np.median(durs)) * GAP_SHARE_OF_STEP)
    arrays = [finding_arrays(model, f) for f in finding_ids]
    budget = max(1.0, SLICE_BUDGET * n_events)
    while True:
        n = sum(len(merge_intervals(s, e, ss, gap)[0]) for s, e in arrays)
        if n <= budget or gap >= float(durs.max()):
            return gap
        gap *= 2


def finding_slices(
    model: TimelineModel, finding_id: str, gap_ns: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A finding's track: its intervals (:func:`finding_arrays`) merged by :func:`merge_intervals`."""
    s, e = finding_arrays(model, finding_id)
    return merge_intervals(s, e, np.asarray(model.step_starts), gap_ns)


def findings_events(
    model: TimelineModel,
    doc: AnalysisDocument | dict[str, Any],
    device: int,
    offset_ns: int = 0,
    *,
    n_events: int = 0,
    pid: object = FINDINGS_PID,
    tids: list[int] | None = None,
    process: bool = True,
    step_scope: str = "g",
) -> Iterable[dict[str, Any]]:
    """The findings: metadata, the verdict track, a track per finding (merged slices), step markers.
    ``offset_ns`` moves the model's times (ns from the trace origin) onto the output's clock. By
    default the findings process of a one-trace export; a rank set puts them in the rank's process
    (``pid``, ``tids``: the verdict's track then the findings', ``process=False``: no process metadata)."""
    d = AnalysisDocument.of(doc)
    v = d.verdict
    findings = d.findings
    tids = tids if tids is not None else list(range(len(findings) + 1))
    if process:
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "trainscope findings"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}}
    yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[0], "args": {"name": "verdict"}}
    yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tids[0], "args": {"sort_index": -1000}}
    steps = model.segmentation.steps
    if steps:
        lo, hi = steps[0].start_ns, steps[-1].end_ns
        yield {
            "ph": "X",
            "cat": FINDING_CATEGORY_NAME,
            "pid": pid,
            "tid": tids[0],
            "name": f"verdict {v.axis} ({v.confidence:.2f})",
            "ts": _us1(lo, offset_ns),
            "dur": _us1(hi - lo),
            "args": {"device": device, "summary": v.summary, "bottleneck": v.bottleneck},
        }
        for st in steps:
            yield {
                "ph": "i",
                "s": step_scope,
                "cat": "trainscope_step",
                "pid": pid,
                "tid": tids[0],
                "name": f"step boundary: {st.label}",
                "ts": _us1(st.start_ns, offset_ns),
            }
    gap = finding_gap_ns(model, [f.id for f in findings], n_events)
    for n, f in enumerate(findings, 1):
        tid = tids[n]
        yield {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": tid,
            "args": {"name": f"{f.id} ({f.severity})"},
        }
        yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": -1000 + n}}
        name = f"{FINDING_PREFIX}{f.id}: {f.title}"
        starts, ends, busy, joined = finding_slices(model, f.id, gap)
        for s, e, b, k in zip(starts.tolist(), ends.tolist(), busy.tolist(), joined.tolist()):
            yield {
                "ph": "X",
                "cat": FINDING_CATEGORY_NAME,
                "pid": pid,
                "tid": tid,
                "name": name,
                "ts": _us1(s, offset_ns),
                "dur": _us1(e - s),
                "args": {
                    "device": device,
                    "finding": f.id,
                    "severity": f.severity,
                    "stake_pct": f.stake_pct,
                    "time_us": _us1(b),
                    "intervals": k,
                },
            }


# -- the output file ---------------------------------------------------------------------------
class _Sink:
    """The export written as it is produced: into a private temporary file beside the target,
    renamed over it at the end (an interrupt never leaves half a file; an existing file keeps its
    mode); a device, FIFO or socket (``/dev/stdout``) is written in place."""

    def __init__(self, path: str) -> None:
        self.target = os.path.realpath(path)
        try:
            self.st: os.stat_result | None = os.stat(self.target)
        except FileNotFoundError:
            self.st = None
        if self.st is not None and stat.S_ISDIR(self.st.st_mode):
            raise IsADirectoryError(21, "Is a directory", path)
        self.tmp: str | None = None
        if self.st is not None and not stat.S_ISREG(self.st.st_mode):
            self.f: IO[bytes] = open(self.target, "wb")
        else:
            folder, base = os.path.split(self.target)
            fd, self.tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder or ".")
            self.f = os.fdopen(fd, "wb", buffering=1 << 20)
        self.written = 0

    def write(self, b: bytes) -> None:
        self.written += len(b)
        self.f.write(b)

    def copy_from(self, path: str, start: int, length: int) -> bool:
        """Append ``length`` bytes of file ``path`` from offset ``start``; False when the file is
        shorter (it changed since it was read). Into a regular file the kernel copies the bytes
        (``copy_file_range``: no pass through this process's memory); elsewhere, or where the
        call is not supported, in bounded blocks."""
        with open(path, "rb") as src:
            if self.tmp is not None and hasattr(os, "copy_file_range"):
                self.f.flush()  # the buffered head first: the copy appends at the descriptor's offset
                fd, pos, left = self.f.fileno(), start, length
                try:
                    while left > 0:
                        n = os.copy_file_range(src.fileno(), fd, left, pos)
                        if n == 0:
                            return False
                        pos, left, self.written = pos + n, left - n, self.written + n
                    return True
                except OSError:  # not supported here (an old kernel, another file system): copy by blocks
                    start, length = pos, left
            src.seek(start)
            while length > 0:
                block = src.read(min(length, _COPY_BLOCK))
                if not block:
                    return False
                self.write(block)
                length -= len(block)
        return True

    def rewind(self) -> bool:
        """Start over (only possible while nothing was written, or into a regular file)."""
        if self.written == 0:
            return True
        if self.tmp is None:
            return False
        self.f.seek(0)
        self.f.truncate()
        self.written = 0
        return True

    def commit(self) -> None:
        self.f.close()
        if self.tmp is None:
            return
        if self.st is not None:
            os.chmod(self.tmp, stat.S_IMODE(self.st.st_mode))
            try:
                os.chown(self.tmp, self.st.st_uid, self.st.st_gid)
            except OSError:
                pass
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.tmp, 0o666 & ~umask)
        os.replace(self.tmp, self.target)
        self.tmp = None

    def abort(self) -> None:
        try:
            self.f.close()
        finally:
            if self.tmp is not None:
                try:
                    os.unlink(self.tmp)
                except OSError:
                    pass


def _write_events(out: _Sink, events: Iterable[dict[str, Any]], first: bool) -> bool:
    """Append ``events`` to an open ``traceEvents`` array in batches; returns whether the array is
    still empty."""
    batch: list[dict[str, Any]] = []
    for e in events:
        batch.append(e)
        if len(batch) >= _BATCH:
            first = _flush(out, batch, first)
            batch = []
    return _flush(out, batch, first) if batch else first


def _flush(out: _Sink, batch: list[dict[str, Any]], first: bool) -> bool:
    body = _ENC.encode(batch)[1:-1]  # "[a,b]" → "a,b"
    out.write(body if first else b"," + body)
    return False


def _trainscope_field(doc: AnalysisDocument | dict[str, Any], copied: bool) -> dict[str, Any]:
    d = AnalysisDocument.of(doc)
    return {
        "verdict": d.verdict.to_dict(),
        "findings": [f.id for f in d.findings],
        "findings_pid": FINDINGS_PID,
        "events": "copied from the input file" if copied else "written from trainscope's model",
    }


# -- Kineto input: the file's own events, copied -----------------------------------------------
class _Copier:
    """A stream_events parser that writes each whole event's bytes (no decoding into objects)."""

    raw = True

    def __init__(self, out: _Sink) -> None:
        self.out = out
        self.first = True
        self.count = 0

    def _start(self) -> None:
        if self.out.written == 0:
            self.out.write(b'{"traceEvents":[')

    def feed_raw(self, raws: list[bytes]) -> None:
        if not raws:
            return
        self._start()
        body = b",".join(raws)
        self.out.write(body if self.first else b"," + body)
        self.first = False
        self.count += len(raws)

    def feed_dicts(self, events: list[Any], progress: object = None) -> None:
        """Events off msgspec's JSON (NaN, Infinity): re-encoded as Python's json writes them."""
        if not events:
            return
        self._start()
        body = ",".join(json.dumps(e, separators=(",", ":")) for e in events).encode()
        self.out.write(body if self.first else b"," + body)
        self.first = False
        self.count += len(events)

    def feed_typed(self, events: list[Any]) -> bool:  # not reached: raw slices come to feed_raw
        return False

    def check_first(self) -> None:
        pass


_TAILS = (1 << 20, 8 << 20)  # bytes from the end of a plain file searched for the end of the event array


def _array_span(path: str) -> tuple[int, int, dict[str, Any]] | None:
    """Where a plain (not gzip) trace's event array holds its events — (first byte after "[", end of
    the last event, the top-level fields) — found from the head and the last 1 MB alone (8 MB when
    the fields after the events are longer); None when
    the file does not end in a whole event array (damage, truncation, gzip: then every event is
    validated on the way)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        for limit in (1 << 20, 64 << 20):  # the head is small unless top-level fields precede the events
            f.seek(0)
            first = f.read(min(size, limit))
            if first[:2] == GZIP_MAGIC:
                return None
            lead = first[:4096].lstrip()
            if lead[:1] == b"[":
                head = first[: len(first[:4096]) - len(lead) + 1]
                break
            if lead[:1] != b"{":
                return None
            m = re.compile(rb'"traceEvents"\s*:\s*\[').search(first)
            if m:
                head = first[: m.end()]
                break
        else:
            return None
        if first[len(head) : len(head) + 4096].lstrip()[:1] != b"{":
            return None  # an empty array: the validated path says so
        obj = head.lstrip()[:1] == b"{"
        for tail_len in _TAILS:  # a short tail first: the trailer after the events is small
            tail_at = max(len(head), size - tail_len)
            f.seek(tail_at)
            tail = f.read()
            # Start on a character: a tail cut inside a UTF-8 sequence decodes to replacement
            # characters whose encoding is longer, and every offset after them would be off.
            skip = next((i for i in range(min(4, len(tail))) if not 0x80 <= tail[i] <= 0xBF), 0)
            tail_at, tail = tail_at + skip, tail[skip:]
            for ev_end, trailer in _array_ends(head if obj else b"", tail):
                if ev_end == 0:
                    return None
                return len(head), tail_at + ev_end, _top(head, b"]" + trailer) if obj else {}
            if tail_at - skip <= len(head):
                break  # the whole file was searched
    return None


def _copy_kineto(out: _Sink, trace: Trace, model: TimelineModel, doc: dict[str, Any], device: int) -> bool:
    """The source file's events and top-level fields, then the findings; False (nothing written)
    when the stream cannot place the file.

    A plain file that ends in a whole event array (the analysis has just read it) is copied as
    bytes between the array's brackets, unparsed (by the kernel where it can: :meth:`_Sink.copy_from`); anything else (gzip, damage) goes through the
    stream reader, every event validated by msgspec as raw JSON on the way."""
    try:
        span = _array_span(trace.source)
    except (OSError, ValueError):
        span = None
    if any(w.startswith(TEXT_REPAIRED) for w in trace.warnings):
        # Text that is not Unicode (a lone surrogate, a byte that is not UTF-8): the stream reader's
        # copy carries the reader's visible repairs; the bytes as they are would make the export
        # invalid JSON for a strict reader (Perfetto's among them).
        span = None
    if span is not None:
        start, end, top = span
        out.write(b'{"traceEvents":[')
        if not out.copy_from(trace.source, start, end - start):
            return False
        return _finish_copy(out, trace, model, doc, device, top)
    copier = _Copier(out)
    try:
        top, _warnings = stream_events(trace.source, copier)
    except (Fallback, TraceError, OSError):
        return False
    if copier.count == 0:
        return False
    return _finish_copy(out, trace, model, doc, device, top)


def _finish_copy(
    out: _Sink, trace: Trace, model: TimelineModel, doc: dict[str, Any], device: int, top: dict[str, Any]
) -> bool:
    base = top.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) and np.isfinite(base) else 0
    # The model's times are ns from trace.origin_ns (= the file's clock origin + its base): move them back.
    offset = int(trace.origin_ns) - base_ns
    _write_events(out, findings_events(model, doc, device, offset, n_events=model_event_count(trace)), first=False)
    top = {k: v for k, v in top.items() if k != "trainscope"}
    top["trainscope"] = _trainscope_field(doc, copied=True)
    rest = _ENC.encode(top)  # "{...}"
    out.write(b"]," + rest[1:] if len(rest) > 2 else b"]}")
    return True


# -- other input: the model, written in Kineto's vocabulary -------------------------------------
def _lists(table: Any, *columns: str) -> list[list[Any]]:
    """The named columns of a trace table as Python lists, for the long zips below."""
    return [getattr(table, c).tolist() for c in columns]


def _slice(
    cat: str, name: str, pid: int | str, tid: int | str, ts: float, dur: float, args: dict[str, Any]
) -> dict[str, Any]:
    """A complete event ("ph": "X") of the trace's own, its keys in Kineto's order."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _model_events(trace: Trace) -> Iterable[dict[str, Any]]:
    strings = trace.strings
    host = [
        (
            int(t.pid) if str(t.pid).lstrip("-").isdigit() else t.pid,
            int(t.tid) if str(t.tid).lstrip("-").isdigit() else t.tid,
        )
        for t in trace.threads
    ]

    def host_ids(thread: int) -> tuple[int | str, int | str]:
        return host[thread] if 0 <= thread < len(host) else (0, thread)

    for d in trace.devices:  # the GPU processes named as Kineto names them
        yield {"ph": "M", "name": "process_name", "pid": d.id, "tid": 0, "args": {"name": f"GPU {d.id}"}}
        yield {"ph": "M", "name": "process_labels", "pid": d.id, "tid": 0, "args": {"labels": d.name}}
        yield {"ph": "M", "name": "process_sort_index", "pid": d.id, "tid": 0, "args": {"sort_index": 5000000 + d.id}}
    for (pid, tid), t in zip(host, trace.threads):
        if t.name:
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": t.name}}
    k = trace.kernels
    for ts, dur, name, d, stream, corr in zip(
        _us(k.ts), _us(k.dur), k.name.tolist(), k.device.tolist(), k.stream.tolist(), k.correlation.tolist()
    ):
        yield _slice("kernel", strings[name], d, stream, ts, dur, {"device": d, "stream": stream, "correlation": corr})
    c = trace.copies
    for ts, dur, d, stream, kind, src, dst, nbytes, corr in zip(
        _us(c.ts), _us(c.dur), *_lists(c, "device", "stream", "kind", "src", "dst", "bytes", "correlation")
    ):
        name = f"Memcpy {COPY_KINDS[kind]} ({MEMORY_KINDS[src].capitalize()} -> {MEMORY_KINDS[dst].capitalize()})"
        args = {"device": d, "stream": stream, "bytes": nbytes, "correlation": corr}
        yield _slice("gpu_memcpy", name, d, stream, ts, dur, args)
    m = trace.memsets
    for ts, dur, d, stream, nbytes, corr in zip(
        _us(m.ts), _us(m.dur), m.device.tolist(), m.stream.tolist(), m.bytes.tolist(), m.correlation.tolist()
    ):
        args = {"device": d, "stream": stream, "bytes": nbytes, "correlation": corr}
        yield _slice("gpu_memset", "Memset (Device)", d, stream, ts, dur, args)
    r = trace.runtime
    for ts, dur, th, name, corr in zip(
        _us(r.ts), _us(r.dur), r.thread.tolist(), r.name.tolist(), r.correlation.tolist()
    ):
        pid, tid = host_ids(th)
        yield _slice("cuda_runtime", strings[name], pid, tid, ts, dur, {"correlation": corr})
    o = trace.cpu_ops
    for ts, dur, th, name in zip(_us(o.ts), _us(o.dur), o.thread.tolist(), o.name.tolist()):
        pid, tid = host_ids(th)
        yield _slice("cpu_op", strings[name], pid, tid, ts, dur, {})
    a = trace.annotations
    for ts, dur, th, name, d in zip(_us(a.ts), _us(a.dur), a.thread.tolist(), a.name.tolist(), a.device.tolist()):
        pid, tid = host_ids(th)
        cat = "gpu_user_annotation" if d >= 0 else "user_annotation"
        yield _slice(cat, strings[name], pid, tid, ts, dur, {"device": d} if d >= 0 else {})
    mem = trace.memory
    if len(mem):
        for ts, dt, d, nbytes, alloc, res in zip(
            _us(mem.ts), *_lists(mem, "device_type", "device", "bytes", "allocated", "reserved")
        ):
            yield {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 0,
                "tid": 0,
                "ts": ts,
                "args": {
                    "Device Type": dt,
                    "Device Id": d,
                    "Bytes": nbytes,
                    "Total Allocated": alloc,
                    "Total Reserved": res,
                },
            }
    cn = trace.counters
    for ts, d, name, value in zip(_us(cn.ts), cn.device.tolist(), cn.name.tolist(), cn.value.tolist()):
        if np.isfinite(value):
            yield {"ph": "C", "name": strings[name], "pid": d, "tid": 0, "ts": ts, "args": {"value": value}}


def _write_model(out: _Sink, trace: Trace, model: TimelineModel, doc: dict[str, Any], device: int) -> None:
    out.write(b'{"traceEvents":[')
    first = _write_events(out, _model_events(trace), first=True)
    _write_events(out, findings_events(model, doc, device, n_events=model_event_count(trace)), first=first)
    top = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": int(trace.origin_ns),
        "displayTimeUnit": "ms",
        "deviceProperties": [
            {"id": d.id, "name": d.name, "totalGlobalMem": d.total_memory or 0} for d in trace.devices
        ],
        "trainscope": _trainscope_field(doc, copied=False),
    }
    out.write(b"]," + _ENC.encode(top)[1:])


def _copyable(trace: Trace) -> bool:
    return trace.format == "kineto" and isinstance(trace.source, str) and os.path.isfile(trace.source)


def write_perfetto(
    path: str, trace: Trace, analysis: Analysis, doc: dict[str, Any], model: TimelineModel | None = None
) -> None:
    """Stream the export into ``path``, atomically (OSError when the path cannot be written)."""
    if model is None:
        model = TimelineModel(trace, analysis.segmentation, analysis.device, kernel_classes(trace)[0])
    device = analysis.device if analysis.device is not None else 0
    out = _Sink(path)
    try:
        if not (_copyable(trace) and _copy_kineto(out, trace, model, doc, device)):
            if not out.rewind():
                raise OSError(f"{path}: the input changed while it was copied")
            _write_model(out, trace, model, doc, device)
        out.commit()
    except BaseException:
        out.abort()
        raise


# -- a rank set: one file, a process per rank ---------------------------------------------------
RANK_PID_BASE = 1  # rank i's process is pid RANK_PID_BASE + i (its position in the set, rank order)
ALIGNMENT_CATEGORY = "trainscope_alignment"


@dataclass
class RankPart:
    """One rank of a rank-set export: its trace, analysis, document (its own findings) and timeline."""

    trace: Trace
    analysis: Analysis
    doc: dict[str, Any]
    model: TimelineModel
    label: str  # "rank 3"
    main: bool = False  # the slowest rank (the report's summary)
    sort: int = 0  # the process's place (its rank)


def _key(v: object) -> object:
    return v if isinstance(v, (str, int, float, bool)) or v is None else _ENC.encode(v).decode()


def _base_ns(trace: Trace) -> int:
    """The absolute ns of a Kineto file's clock zero (its ``baseTimeNanoseconds``, else 0)."""
    base = trace.metadata.get("baseTimeNanoseconds") if trace.metadata else None
    return int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) and np.isfinite(base) else 0


class _Tids:
    """New thread ids, unique in the whole file (Perfetto keys a JSON thread by its tid)."""

    def __init__(self) -> None:
        self.next = 1

    def take(self) -> int:
        self.next += 1
        return self.next - 1


class _RankWriter:
    """A stream parser (raw slices from collectors/kineto_stream.py, or dicts) that writes one rank's
    events into its process: pid and tid mapped (each original (pid, tid) one thread), flow ids made
    unique across ranks, times moved onto the file's common clock, ``M`` metadata kept aside to name
    the threads at the end."""

    raw = True

    def __init__(
        self, out: _Sink, pid: int, index: int, n_ranks: int, file_base_ns: int, base_ns: int, tids: _Tids
    ) -> None:
        self.out, self.pid, self.index, self.n = out, pid, index, n_ranks
        self.base_ns = base_ns  # the output's clock zero (absolute ns)
        self.shift_ns = file_base_ns - base_ns  # a Kineto file's times onto the output's clock
        self.tids = tids
        self.threads: dict[tuple[object, object], int] = {}
        self.first_seen: list[tuple[object, object]] = []
        self.meta: dict[tuple[str, object, object], object] = {}
        self.count = 0
        self.rewritten_ids = 0

    def _flow_id(self, v: object) -> object:
        if isinstance(v, int) and not isinstance(v, bool):
            return v * self.n + self.index
        return f"r{self.index}:{v}"

    def _ts(self, v: object) -> object:
        if not self.shift_ns or isinstance(v, bool) or not isinstance(v, (int, float)):
            return v
        if self.shift_ns % 1000 == 0:
            return v + self.shift_ns // 1000
        return round(v + self.shift_ns / 1000, 3)

    def rewrite(self, e: object) -> object | None:
        if not isinstance(e, dict):
            return e
        ph = e.get("ph")
        pid, tid = _key(e.get("pid")), _key(e.get("tid"))
        if ph == "M":
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            name = e.get("name")
            value = next(iter(args.values()), None) if args else None
            scope = tid if name in ("thread_name", "thread_sort_index") else None
            self.meta[(str(name), pid, scope)] = value
            return None
        key = (pid, tid)
        new = self.threads.get(key)
        if new is None:
            new = self.threads[key] = self.tids.take()
            self.first_seen.append(key)
        e["pid"], e["tid"] = self.pid, new
        if ph in ("s", "t", "f") and "id" in e:
            e["id"] = self._flow_id(e["id"])
        if "bind_id" in e:
            e["bind_id"] = self._flow_id(e["bind_id"])
        if self.shift_ns and "ts" in e:
            e["ts"] = self._ts(e["ts"])
        return e

    def _emit(self, events: list[Any], encode: Callable[[list[Any]], bytes]) -> None:
        kept = [x for x in (self.rewrite(e) for e in events) if x is not None]
        if kept:
            self.out.write(b"," + encode(kept))
            self.count += len(kept)

    def feed_raw(self, raws: list[bytes]) -> None:
        body = b"[" + b",".join(raws) + b"]"
        try:
            events = msgspec.json.decode(body)
        except (msgspec.DecodeError, ValueError, OverflowError):
            events = json.loads(body)
        self._emit(events, _encode_batch)

    def feed_dicts(self, events: list[Any], progress: object = None) -> None:
        self._emit(events, _encode_json)

    def feed_typed(self, events: list[Any]) -> bool:  # not reached: raw slices come to feed_raw
        return False

    def check_first(self) -> None:
        pass

    def thread_names(self) -> list[tuple[int, str, int]]:
        """(new tid, name, sort position) per thread: the original thread's name, behind its process's
        label (GPU n) or name where that is not the host; host threads first, then by the original
        sort indices."""
        rows = []
        for (pid, tid), new in self.threads.items():
            tname = self.meta.get(("thread_name", pid, tid))
            pname = self.meta.get(("process_name", pid, None))
            label = self.meta.get(("process_labels", pid, None))
            if tname not in (None, ""):
                tname = str(tname).strip()
            else:
                tname = f"tid {tid}" if isinstance(tid, int) else (str(tid) if tid not in (None, "") else "no tid")
            if label == "CPU" or (label in (None, "") and pname not in (None, "") and str(pid).isdigit()):
                name = tname
            else:
                lead = next((str(x) for x in (label, pname, pid) if x not in (None, "")), "no pid")
                name = f"{lead.strip()} · {tname}"
            psort = self.meta.get(("process_sort_index", pid, None))
            tsort = self.meta.get(("thread_sort_index", pid, tid))
            order = (
                0 if label == "CPU" else 1,
                psort if isinstance(psort, (int, float)) and not isinstance(psort, bool) else float("inf"),
                tsort if isinstance(tsort, (int, float)) and not isinstance(tsort, bool) else float("inf"),
                new,
            )
            rows.append((order, new, name))
        rows.sort(key=lambda r: r[0])
        return [(new, name, i) for i, (_o, new, name) in enumerate(rows)]

    def mapping(self) -> list[dict[str, Any]]:
        """Each thread of this rank's process: its new tid and the original pid, tid and names."""
        out = []
        for (pid, tid), new in self.threads.items():
            out.append(
                {
                    "tid": new,
                    "pid_was": pid,
                    "tid_was": tid,
                    "process_name": self.meta.get(("process_name", pid, None)),
                    "process_labels": self.meta.get(("process_labels", pid, None)),
                }
            )
        return out


def _encode_batch(events: list[Any]) -> bytes:
    try:
        return _ENC.encode(events)[1:-1]
    except (msgspec.EncodeError, UnicodeEncodeError, OverflowError):
        return _encode_json(events)


def _encode_json(events: list[Any]) -> bytes:
    """Python's json (NaN and Infinity as it writes them; lone surrogates escaped)."""
    return ",".join(json.dumps(e, separators=(",", ":")) for e in events).encode()


def _rank_events(writer: _RankWriter, trace: Trace) -> dict[str, Any] | None:
    """Feed one rank's events to ``writer``: a Kineto file's own events (streamed, each decoded,
    rewritten and encoded again), else the model's; returns the file's top-level fields (None: the
    model was written)."""
    if _copyable(trace):
        mark = writer.out.written
        try:
            top, _warnings = stream_events(trace.source, writer)
            if writer.count:
                return {k: v for k, v in top.items() if k != "traceEvents"}
        except (Fallback, TraceError, OSError):
            if writer.out.written != mark:
                raise OSError(f"{trace.source}: the input changed while it was copied") from None
    writer.shift_ns = int(trace.origin_ns) - writer.base_ns  # the model's times are µs from the trace's origin
    batch: list[dict[str, Any]] = []
    for e in _model_events(trace):
        batch.append(e)
        if len(batch) >= _BATCH:
            writer._emit(batch, _encode_batch)
            batch = []
    writer._emit(batch, _encode_batch)
    return None


def _alignment_events(
    parts: list[RankPart], side: SideBySide, pids: list[int], align_tids: list[int], base_ns: int
) -> Iterator[dict[str, Any]]:
    """The collectives as the alignment matched them: a slice per rank per matched collective on each
    rank's "collectives (aligned)" track, on that rank's own clock, and flows from the first rank to
    arrive to the next, in arrival order (the last one is the rank the others waited for)."""
    flow = 0
    for n, c in enumerate(side.shared):
        have = []
        for r, (s, e) in enumerate(zip(c.starts, c.ends)):
            if s is None or e is None or r >= len(parts):
                continue
            off = side.offsets_ns[r] or 0.0
            own_s, own_e = int(round(s + off)) - base_ns, int(round(e + off)) - base_ns
            first = min(x for x in c.starts if x is not None)
            behind = s - first
            have.append((s, r, own_s))
            yield {
                "ph": "X",
                "cat": ALIGNMENT_CATEGORY,
                "pid": pids[r],
                "tid": align_tids[r],
                "name": f"{c.kind} #{n}" + (" (late)" if c.late_rank == r else ""),
                "ts": _us1(own_s),
                "dur": _us1(max(0, own_e - own_s)),
                "args": {
                    "collective": n,
                    "kind": c.kind,
                    "arrival_behind_first_us": round(behind / 1e3, 3),
                    "late": c.late_rank == r,
                    "clock_offset_us": round(off / 1e3, 3),
                },
            }
        have.sort()
        for (_a, ra, ta), (_b, rb, tb) in zip(have, have[1:]):
            flow += 1
            common = {"cat": ALIGNMENT_CATEGORY, "name": "waits for", "id": flow}
            yield {"ph": "s", "pid": pids[ra], "tid": align_tids[ra], "ts": _us1(ta), **common}
            yield {"ph": "f", "bp": "e", "pid": pids[rb], "tid": align_tids[rb], "ts": _us1(tb), **common}


def write_perfetto_ranks(path: str, parts: list[RankPart], side: SideBySide | None = None, source: str = "") -> None:
    """A rank set in one file, streamed into ``path`` atomically: a process per rank (``rank N``,
    sorted by rank) with its verdict and findings tracks, its collectives as the alignment ``side``
    (:class:`trainscope.analyzers.ranks.lanes.SideBySide`) matched them, and every event of its trace.
    OSError when the path cannot be written."""
    bases = [_base_ns(p.trace) if _copyable(p.trace) else int(p.trace.origin_ns) for p in parts]
    base = min(bases) if bases else 0
    out = _Sink(path)
    try:
        out.write(b'{"traceEvents":[')
        tids = _Tids()
        pids = [RANK_PID_BASE + i for i in range(len(parts))]
        ranks_field = []
        align_tids = []
        first = True
        for i, p in enumerate(parts):
            pid = pids[i]
            n_f = len(AnalysisDocument.of(p.doc).findings)
            own = [tids.take() for _ in range(n_f + 1)]
            align_tids.append(tids.take())
            device = p.analysis.device if p.analysis.device is not None else 0
            labels = os.path.basename(p.trace.source) if isinstance(p.trace.source, str) else ""
            head = [
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": p.label}},
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": p.sort}},
                {
                    "ph": "M",
                    "name": "process_labels",
                    "pid": pid,
                    "tid": 0,
                    "args": {"labels": f"{labels}, slowest" if p.main else labels},
                },
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid,
                    "tid": align_tids[i],
                    "args": {"name": "collectives (aligned)"},
                },
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid,
                    "tid": align_tids[i],
                    "args": {"sort_index": -2000},
                },
            ]
            first = _write_events(out, head, first)
            offset = int(p.trace.origin_ns) - base
            evs = findings_events(
                p.model,
                p.doc,
                device,
                offset,
                n_events=model_event_count(p.trace),
                pid=pid,
                tids=own,
                process=False,
                step_scope="p",
            )
            first = _write_events(out, evs, first)
            w = _RankWriter(out, pid, i, len(parts), bases[i], base, tids)
            top = _rank_events(w, p.trace)
            names = [
                e
                for new, name, k in w.thread_names()
                for e in (
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": new, "args": {"name": name}},
                    {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": new, "args": {"sort_index": k}},
                )
            ]
            _write_events(out, names, first)
            ranks_field.append(
                {
                    "rank": p.analysis.rank,
                    "label": p.label,
                    "pid": pid,
                    "source": p.trace.source if isinstance(p.trace.source, str) else None,
                    "events": "copied from the input file" if top is not None else "written from trainscope's model",
                    "input_events": w.count,
                    "verdict": AnalysisDocument.of(p.doc).verdict.to_dict(),
                    "findings": [f.id for f in AnalysisDocument.of(p.doc).findings],
                    "finding_tids": own[1:],
                    "verdict_tid": own[0],
                    "alignment_tid": align_tids[i],
                    "threads": w.mapping(),
                    "fields": top if top is not None else {},
                    "slowest": p.main,
                }
            )
        if side is not None and side.shared:
            _write_events(out, _alignment_events(parts, side, pids, align_tids, base), first)
        main = next((r for r in ranks_field if r["slowest"]), ranks_field[0] if ranks_field else None)
        top_fields = {
            "schemaVersion": 1,
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": base,
            "trainscope": {
                "source": source,
                "ranks": ranks_field,
                "verdict": main["verdict"] if main else None,
                "findings": main["findings"] if main else [],
                "flow_ids": "an input flow id n of the set's i-th rank (of N) is n * N + i",
                "alignment": None
                if side is None
                else {
                    "reference": side.reference,
                    "offsets_us": [None if o is None else round(o / 1e3, 3) for o in side.offsets_ns],
                    "collectives": len(side.shared),
                },
            },
        }
        out.write(b"]," + _ENC.encode(top_fields)[1:])
        out.commit()
    except BaseException:
        out.abort()
        raise
