"""The trace with trainscope's findings as their own tracks, in the JSON trace-event format that
ui.perfetto.dev and chrome://tracing open (and Kineto readers such as Holistic Trace Analysis read).

Events keep Kineto's categories (``kernel``, ``gpu_memcpy``, ``cuda_runtime``, ``cpu_op``,
``user_annotation`` …) so the export reads back like the profiler's own file. The findings live in
one extra process, "trainscope findings": a track (thread) per finding holding the intervals it
cites — the time of the breakdown category that carries it inside the steps — written as
``gpu_user_annotation`` ranges on the analyzed GPU (Kineto's category for ranges on the GPU
timeline), a "verdict" track with one range over the steps named by the verdict, and the step
boundaries as global instant markers.
"""
from __future__ import annotations

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.analysis import Analysis
from trainscope.analyzers.timeline import FINDING_CATEGORY, GPU_CATEGORIES, TimelineModel
from trainscope.traces.model import COPY_KINDS, MEMORY_KINDS, Trace

FINDINGS_PID = 999_999  # a pid no profiler uses, for the findings process
MAX_INTERVALS_PER_FINDING = 5_000  # the longest ones, when a category has more (Perfetto stays quick)
FINDING_PREFIX = "finding "  # the findings tracks' range names start with it (readers can pick them out)


def _us(ns: np.ndarray | int) -> list[float]:
    return (np.asarray(ns, np.float64) / 1e3).round(3).tolist()


def finding_intervals(model: TimelineModel, finding_id: str) -> list[tuple[int, int]]:
    """The intervals a finding cites: its category's time inside the steps (longest kept first when
    there are more than MAX_INTERVALS_PER_FINDING), in time order. Empty when it has no category."""
    cat = FINDING_CATEGORY.get(finding_id)
    steps = model.segmentation.steps
    if cat is None or not steps:
        return []
    s, e = model.gpu_sets[GPU_CATEGORIES.index(cat)]
    keep = iv.contains((np.asarray(model.step_starts), np.asarray(model.step_ends)), s)
    s, e = s[keep], np.minimum(e[keep], model.step_ends[np.searchsorted(model.step_starts, s[keep], side="right") - 1])
    if len(s) > MAX_INTERVALS_PER_FINDING:
        top = np.sort(np.argsort(-(e - s), kind="stable")[:MAX_INTERVALS_PER_FINDING])
        s, e = s[top], e[top]
    return list(zip(s.tolist(), e.tolist()))


def perfetto_document(trace: Trace, analysis: Analysis, model: TimelineModel, doc: dict) -> dict:
    """The whole export as one JSON-able dict (``traceEvents`` plus Kineto's top-level fields)."""
    strings = trace.strings
    dev = analysis.device if analysis.device is not None else 0
    events: list[dict] = []

    def threads_of(col: np.ndarray) -> list[tuple[str, str]]:
        return [(t.pid, t.tid) for t in trace.threads] if len(col) else []

    host = threads_of(np.arange(len(trace.threads)))

    def host_ids(thread: int) -> tuple[object, object]:
        pid, tid = host[thread] if 0 <= thread < len(host) else ("0", str(thread))
        return (int(pid) if str(pid).lstrip("-").isdigit() else pid), (int(tid) if str(tid).lstrip("-").isdigit() else tid)

    k = trace.kernels
    for ts, dur, name, d, stream, corr in zip(_us(k.ts), _us(k.dur), k.name.tolist(), k.device.tolist(),
                                              k.stream.tolist(), k.correlation.tolist()):
        events.append({"ph": "X", "cat": "kernel", "name": strings[name], "pid": d, "tid": stream, "ts": ts,
                       "dur": dur, "args": {"device": d, "stream": stream, "correlation": corr}})
    c = trace.copies
    for ts, dur, d, stream, kind, src, dst, nbytes, corr in zip(
            _us(c.ts), _us(c.dur), c.device.tolist(), c.stream.tolist(), c.kind.tolist(), c.src.tolist(),
            c.dst.tolist(), c.bytes.tolist(), c.correlation.tolist()):
        name = f"Memcpy {COPY_KINDS[kind]} ({MEMORY_KINDS[src].capitalize()} -> {MEMORY_KINDS[dst].capitalize()})"
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": d, "tid": stream, "ts": ts, "dur": dur,
                       "args": {"device": d, "stream": stream, "bytes": nbytes, "correlation": corr}})
    m = trace.memsets
    for ts, dur, d, stream, nbytes, corr in zip(_us(m.ts), _us(m.dur), m.device.tolist(), m.stream.tolist(),
                                                m.bytes.tolist(), m.correlation.tolist()):
        events.append({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": d, "tid": stream, "ts": ts,
                       "dur": dur, "args": {"device": d, "stream": stream, "bytes": nbytes, "correlation": corr}})
    r = trace.runtime
    for ts, dur, th, name, corr in zip(_us(r.ts), _us(r.dur), r.thread.tolist(), r.name.tolist(),
                                       r.correlation.tolist()):
        pid, tid = host_ids(th)
        events.append({"ph": "X", "cat": "cuda_runtime", "name": strings[name], "pid": pid, "tid": tid, "ts": ts,
                       "dur": dur, "args": {"correlation": corr}})
    o = trace.cpu_ops
    for ts, dur, th, name in zip(_us(o.ts), _us(o.dur), o.thread.tolist(), o.name.tolist()):
        pid, tid = host_ids(th)
        events.append({"ph": "X", "cat": "cpu_op", "name": strings[name], "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                       "args": {}})
    a = trace.annotations
    for ts, dur, th, name, d in zip(_us(a.ts), _us(a.dur), a.thread.tolist(), a.name.tolist(), a.device.tolist()):
        pid, tid = host_ids(th)
        cat = "gpu_user_annotation" if d >= 0 else "user_annotation"
        events.append({"ph": "X", "cat": cat, "name": strings[name], "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                       "args": {"device": d} if d >= 0 else {}})
    for (pid, tid), t in zip(host, trace.threads):
        if t.name:
            p, q = host_ids(host.index((pid, tid)))
            events.append({"ph": "M", "name": "thread_name", "pid": p, "tid": q, "args": {"name": t.name}})

    events += findings_events(model, doc, dev)
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": int(trace.origin_ns),
        "displayTimeUnit": "ms",
        "deviceProperties": [{"id": d.id, "name": d.name, "totalGlobalMem": d.total_memory or 0}
                             for d in trace.devices],
        "trainscope": {"verdict": doc["verdict"], "findings": [f["id"] for f in doc["findings"]],
                       "findings_pid": FINDINGS_PID},
        "traceEvents": events,
    }


def findings_events(model: TimelineModel, doc: dict, device: int) -> list[dict]:
    """The findings process: metadata, the verdict track, a track per finding, step markers."""
    pid = FINDINGS_PID
    v = doc["verdict"]
    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "trainscope findings"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0, "args": {"name": "verdict"}},
    ]
    steps = model.segmentation.steps
    if steps:
        lo, hi = steps[0].start_ns, steps[-1].end_ns
        out.append({"ph": "X", "cat": "gpu_user_annotation", "pid": pid, "tid": 0,
                    "name": f"verdict {v['axis']} ({v['confidence']:.2f})", "ts": _us(lo), "dur": _us(hi - lo),
                    "args": {"device": device, "summary": v["summary"], "bottleneck": v["bottleneck"]}})
        for st in steps:
            out.append({"ph": "i", "s": "g", "cat": "trainscope_step", "pid": pid, "tid": 0,
                        "name": f"step boundary: {st.label}", "ts": _us(st.start_ns)})
    for n, f in enumerate(doc["findings"], 1):
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": n,
                    "args": {"name": f"{f['id']} ({f['severity']})"}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": n, "args": {"sort_index": n}})
        for s, e in finding_intervals(model, f["id"]):
            out.append({"ph": "X", "cat": "gpu_user_annotation", "pid": pid, "tid": n,
                        "name": f"{FINDING_PREFIX}{f['id']}: {f['title']}", "ts": _us(s), "dur": _us(e - s),
                        "args": {"device": device, "finding": f["id"], "severity": f["severity"],
                                 "stake_pct": f["stake_pct"]}})
    return out


def write_perfetto(path: str, trace: Trace, analysis: Analysis, doc: dict, model: TimelineModel | None = None) -> None:
    """Write the export atomically (OSError when the path cannot be written)."""
    import json

    from trainscope.reports.output import write_atomic

    if model is None:
        from trainscope.analyzers.kernels import kernel_classes

        model = TimelineModel(trace, analysis.segmentation, analysis.device, kernel_classes(trace)[0])
    write_atomic(path, json.dumps(perfetto_document(trace, analysis, model, doc), separators=(",", ":"),
                                  allow_nan=False))
