"""Recordings (``watch --record``) and nvidia-smi CSV logs as inputs: detection, loading as
snapshots (for replay), and conversion to the normalized :class:`Trace` (Counters table) that
``trainscope analyze`` reads."""

from __future__ import annotations

import os

from trainscope.collectors.errors import TraceError
from trainscope.collectors.nvidia_smi_csv import looks_like_nvidia_smi_csv
from trainscope.collectors.nvidia_smi_csv import read_nvidia_smi_csv
from trainscope.collectors.readers import check_regular_file
from trainscope.collectors.recording import Recording
from trainscope.collectors.recording import is_recording
from trainscope.collectors.recording import read_recording
from trainscope.collectors.samples import counter_rows
from trainscope.traces.builder import StringTable
from trainscope.traces.builder import TableBuilder
from trainscope.traces.builder import skipped_warning
from trainscope.traces.model import Annotations
from trainscope.traces.model import Copies
from trainscope.traces.model import Counters
from trainscope.traces.model import CpuOps
from trainscope.traces.model import Device
from trainscope.traces.model import Kernels
from trainscope.traces.model import MemoryEvents
from trainscope.traces.model import Memsets
from trainscope.traces.model import RuntimeCalls
from trainscope.traces.model import Trace
from trainscope.traces.samples import trace_snapshots  # noqa: F401 (moved to the model; re-exported)

RECORDING_FORMAT, CSV_FORMAT = "trainscope.recording", "nvidia-smi-csv"


def live_format(path: str) -> str | None:
    """Which live-counter format ``path`` holds, or None."""
    if is_recording(path):
        return RECORDING_FORMAT
    if looks_like_nvidia_smi_csv(path):  # a .csv suffix alone is not enough: the header decides
        return CSV_FORMAT
    return None


def open_recording(path: str) -> Recording:
    """A recording or nvidia-smi CSV as snapshots (``watch --replay``)."""
    if not os.path.exists(path):
        raise TraceError(path, "no such file or directory")
    if os.path.isdir(path):
        raise TraceError(path, "is a directory; expected a recording (.jsonl) or an nvidia-smi CSV")
    check_regular_file(path)
    if not os.access(path, os.R_OK):
        raise TraceError(path, "permission denied")
    kind = live_format(path)
    if kind == RECORDING_FORMAT:
        rec = read_recording(path)
    elif kind == CSV_FORMAT:
        rec = read_nvidia_smi_csv(path)
    else:
        raise TraceError(path, "not a trainscope recording or an nvidia-smi CSV log")
    if not rec.snapshots:
        raise TraceError(path, "the recording holds no complete sample")
    return rec


def recording_to_trace(rec: Recording, fmt: str) -> Trace:
    """Every snapshot's metrics as rows of the Counters table (ts relative to the first sample)."""
    strings = StringTable()
    rows = TableBuilder(Counters)
    origin = rec.snapshots[0].wall or float(rec.header.get("started") or 0.0)
    origin_ns = int(origin * 1e9)
    names: dict[int, str] = {}
    totals: dict[int, int] = {}
    for s in rec.snapshots:
        ts = int(round(s.t * 1e9))
        for g in s.gpus:
            if g.name:
                names.setdefault(g.index, g.name)
            if g.mem_total:
                totals.setdefault(g.index, g.mem_total)
        for device, name, value in counter_rows(s):
            rows.add(ts, device, strings.intern(name), value)
    counters = rows.build()
    devices = [
        Device(i, names.get(i, f"GPU {i}"), "nvidia", totals.get(i))
        for i in sorted(set(names) | set(totals) | {g.index for s in rec.snapshots for g in s.gpus})
    ]
    return Trace(
        source=rec.path,
        format=fmt,
        origin_ns=origin_ns,
        strings=strings.strings,
        devices=devices,
        threads=[],
        kernels=Kernels.empty(),
        copies=Copies.empty(),
        memsets=Memsets.empty(),
        runtime=RuntimeCalls.empty(),
        cpu_ops=CpuOps.empty(),
        annotations=Annotations.empty(),
        memory=MemoryEvents.empty(),
        counters=counters,
        metadata={"recording_header": rec.header, "samples": len(rec.snapshots)},
        warnings=list(rec.warnings) + skipped_warning([rows], "counter values"),
    )


def load_live_trace(path: str, fmt: str) -> Trace:
    rec = read_recording(path) if fmt == RECORDING_FORMAT else read_nvidia_smi_csv(path)
    if not rec.snapshots:
        raise TraceError(path, "the recording holds no complete sample")
    return recording_to_trace(rec, fmt)
