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
holding every interval it cites — the time of the breakdown category that carries it inside the
steps — written as ``gpu_user_annotation`` ranges on the analyzed GPU (Kineto's category for
ranges on the GPU timeline), a "verdict" track with one range over the steps named by the verdict,
and the step boundaries as global instant markers. No track is capped: every interval is written.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import IO, Iterable

import msgspec
import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.analysis import Analysis
from trainscope.analyzers.timeline import FINDING_CATEGORY, GPU_CATEGORIES, TimelineModel
from trainscope.traces.model import COPY_KINDS, MEMORY_KINDS, Trace

FINDINGS_PID = 999_999  # a pid no profiler uses, for the findings process
FINDING_PREFIX = "finding "  # the findings tracks' range names start with it (readers can pick them out)
_BATCH = 65_536  # events encoded per msgspec call on the model path
_ENC = msgspec.json.Encoder()
_COPY_BLOCK = 4 << 20  # bytes per read where the kernel cannot copy the input's events itself


def _us(ns: np.ndarray | int, offset_ns: int = 0) -> list[float]:
    return ((np.asarray(ns, np.float64) + offset_ns) / 1e3).round(3).tolist()


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


def findings_events(model: TimelineModel, doc: dict, device: int, offset_ns: int = 0) -> Iterable[dict]:
    """The findings process: metadata, the verdict track, a track per finding, step markers.
    ``offset_ns`` moves the model's times (ns from the trace origin) onto the output's clock."""
    pid = FINDINGS_PID
    v = doc["verdict"]
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "trainscope findings"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}}
    yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "verdict"}}
    steps = model.segmentation.steps
    if steps:
        lo, hi = steps[0].start_ns, steps[-1].end_ns
        yield {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "pid": pid,
            "tid": 0,
            "name": f"verdict {v['axis']} ({v['confidence']:.2f})",
            "ts": _us1(lo, offset_ns),
            "dur": _us1(hi - lo),
            "args": {"device": device, "summary": v["summary"], "bottleneck": v["bottleneck"]},
        }
        for st in steps:
            yield {
                "ph": "i",
                "s": "g",
                "cat": "trainscope_step",
                "pid": pid,
                "tid": 0,
                "name": f"step boundary: {st.label}",
                "ts": _us1(st.start_ns, offset_ns),
            }
    for n, f in enumerate(doc["findings"], 1):
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": n, "args": {"name": f"{f['id']} ({f['severity']})"}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": n, "args": {"sort_index": n}}
        name = f"{FINDING_PREFIX}{f['id']}: {f['title']}"
        args = {"device": device, "finding": f["id"], "severity": f["severity"], "stake_pct": f["stake_pct"]}
        starts, ends = finding_arrays(model, f["id"])
        for lo in range(0, len(starts), _BATCH):  # Python objects for one batch at a time
            for s, e in zip(starts[lo : lo + _BATCH].tolist(), ends[lo : lo + _BATCH].tolist()):
                yield {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "pid": pid,
                    "tid": n,
                    "name": name,
                    "ts": _us1(s, offset_ns),
                    "dur": _us1(e - s),
                    "args": args,
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


def _write_events(out: _Sink, events: Iterable[dict], first: bool) -> bool:
    """Append ``events`` to an open ``traceEvents`` array in batches; returns whether the array is
    still empty."""
    batch: list[dict] = []
    for e in events:
        batch.append(e)
        if len(batch) >= _BATCH:
            first = _flush(out, batch, first)
            batch = []
    return _flush(out, batch, first) if batch else first


def _flush(out: _Sink, batch: list[dict], first: bool) -> bool:
    body = _ENC.encode(batch)[1:-1]  # "[a,b]" → "a,b"
    out.write(body if first else b"," + body)
    return False


def _trainscope_field(doc: dict, copied: bool) -> dict:
    return {
        "verdict": doc["verdict"],
        "findings": [f["id"] for f in doc["findings"]],
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

    def feed_raw(self, raws: list) -> None:
        if not raws:
            return
        self._start()
        body = b",".join(raws)
        self.out.write(body if self.first else b"," + body)
        self.first = False
        self.count += len(raws)

    def feed_dicts(self, events: list, progress=None) -> None:
        """Events off msgspec's JSON (NaN, Infinity): re-encoded as Python's json writes them."""
        import json

        if not events:
            return
        self._start()
        body = ",".join(json.dumps(e, separators=(",", ":")) for e in events).encode()
        self.out.write(body if self.first else b"," + body)
        self.first = False
        self.count += len(events)

    def feed_typed(self, events: list) -> bool:  # not reached: raw slices come to feed_raw
        return False

    def check_first(self) -> None:
        pass


_TAILS = (1 << 20, 8 << 20)  # bytes from the end of a plain file searched for the end of the event array


def _array_span(path: str) -> tuple[int, int, dict] | None:
    """Where a plain (not gzip) trace's event array holds its events — (first byte after "[", end of
    the last event, the top-level fields) — found from the head and the last 1 MB alone (8 MB when
    the fields after the events are longer); None when
    the file does not end in a whole event array (damage, truncation, gzip: then every event is
    validated on the way)."""
    import re

    from trainscope.collectors.kineto_stream import _array_ends, _top
    from trainscope.collectors.readers import GZIP_MAGIC

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
        if not first[len(head) : len(head) + 4096].lstrip()[:1] == b"{":
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


def _copy_kineto(out: _Sink, trace: Trace, model: TimelineModel, doc: dict, device: int) -> bool:
    """The source file's events and top-level fields, then the findings; False (nothing written)
    when the stream cannot place the file.

    A plain file that ends in a whole event array (the analysis has just read it) is copied as
    bytes between the array's brackets, unparsed (by the kernel where it can: :meth:`_Sink.copy_from`); anything else (gzip, damage) goes through the
    stream reader, every event validated by msgspec as raw JSON on the way."""
    from trainscope.collectors.errors import TraceError
    from trainscope.collectors.kineto_stream import Fallback, stream_events

    try:
        span = _array_span(trace.source)
    except (OSError, ValueError):
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


def _finish_copy(out: _Sink, trace: Trace, model: TimelineModel, doc: dict, device: int, top: dict) -> bool:
    base = top.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) and np.isfinite(base) else 0
    # The model's times are ns from trace.origin_ns (= the file's clock origin + its base): move them back.
    _write_events(out, findings_events(model, doc, device, int(trace.origin_ns) - base_ns), first=False)
    top = {k: v for k, v in top.items() if k != "trainscope"}
    top["trainscope"] = _trainscope_field(doc, copied=True)
    rest = _ENC.encode(top)  # "{...}"
    out.write(b"]," + rest[1:] if len(rest) > 2 else b"]}")
    return True


# -- other input: the model, written in Kineto's vocabulary -------------------------------------
def _model_events(trace: Trace) -> Iterable[dict]:
    strings = trace.strings
    host = [
        (
            int(t.pid) if str(t.pid).lstrip("-").isdigit() else t.pid,
            int(t.tid) if str(t.tid).lstrip("-").isdigit() else t.tid,
        )
        for t in trace.threads
    ]

    def host_ids(thread: int) -> tuple[object, object]:
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
        yield {
            "ph": "X",
            "cat": "kernel",
            "name": strings[name],
            "pid": d,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": {"device": d, "stream": stream, "correlation": corr},
        }
    c = trace.copies
    for ts, dur, d, stream, kind, src, dst, nbytes, corr in zip(
        _us(c.ts),
        _us(c.dur),
        c.device.tolist(),
        c.stream.tolist(),
        c.kind.tolist(),
        c.src.tolist(),
        c.dst.tolist(),
        c.bytes.tolist(),
        c.correlation.tolist(),
    ):
        name = f"Memcpy {COPY_KINDS[kind]} ({MEMORY_KINDS[src].capitalize()} -> {MEMORY_KINDS[dst].capitalize()})"
        yield {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": name,
            "pid": d,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": {"device": d, "stream": stream, "bytes": nbytes, "correlation": corr},
        }
    m = trace.memsets
    for ts, dur, d, stream, nbytes, corr in zip(
        _us(m.ts), _us(m.dur), m.device.tolist(), m.stream.tolist(), m.bytes.tolist(), m.correlation.tolist()
    ):
        yield {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "pid": d,
            "tid": stream,
            "ts": ts,
            "dur": dur,
            "args": {"device": d, "stream": stream, "bytes": nbytes, "correlation": corr},
        }
    r = trace.runtime
    for ts, dur, th, name, corr in zip(
        _us(r.ts), _us(r.dur), r.thread.tolist(), r.name.tolist(), r.correlation.tolist()
    ):
        pid, tid = host_ids(th)
        yield {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": strings[name],
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": {"correlation": corr},
        }
    o = trace.cpu_ops
    for ts, dur, th, name in zip(_us(o.ts), _us(o.dur), o.thread.tolist(), o.name.tolist()):
        pid, tid = host_ids(th)
        yield {
            "ph": "X",
            "cat": "cpu_op",
            "name": strings[name],
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": {},
        }
    a = trace.annotations
    for ts, dur, th, name, d in zip(_us(a.ts), _us(a.dur), a.thread.tolist(), a.name.tolist(), a.device.tolist()):
        pid, tid = host_ids(th)
        cat = "gpu_user_annotation" if d >= 0 else "user_annotation"
        yield {
            "ph": "X",
            "cat": cat,
            "name": strings[name],
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": {"device": d} if d >= 0 else {},
        }
    mem = trace.memory
    if len(mem):
        for ts, dt, d, nbytes, alloc, res in zip(
            _us(mem.ts),
            mem.device_type.tolist(),
            mem.device.tolist(),
            mem.bytes.tolist(),
            mem.allocated.tolist(),
            mem.reserved.tolist(),
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


def _write_model(out: _Sink, trace: Trace, model: TimelineModel, doc: dict, device: int) -> None:
    out.write(b'{"traceEvents":[')
    first = _write_events(out, _model_events(trace), first=True)
    _write_events(out, findings_events(model, doc, device), first=first)
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


def write_perfetto(path: str, trace: Trace, analysis: Analysis, doc: dict, model: TimelineModel | None = None) -> None:
    """Stream the export into ``path``, atomically (OSError when the path cannot be written)."""
    if model is None:
        from trainscope.analyzers.kernels import kernel_classes

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
