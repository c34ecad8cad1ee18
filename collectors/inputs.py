"""Turn a user's path into a :class:`TraceSet`: detect the format, load one file or a rank directory."""
from __future__ import annotations

import os
import re

from trainscope.collectors.errors import TraceError
from trainscope.collectors.kineto import load_kineto
from trainscope.collectors.nsys import load_nsys
from trainscope.collectors.nsys_report import export_report
from trainscope.collectors.live_trace import live_format, load_live_trace
from trainscope.collectors.readers import GZIP_MAGIC, SQLITE_MAGIC, Progress, check_regular_file, sniff
from trainscope.traces.model import Trace, TraceSet

_KINETO_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
_NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.I)


def open_traces(path: str, progress: Progress | None = None) -> TraceSet:
    """Load ``path``: a Kineto ``.json``/``.json.gz`` file, an Nsight Systems export (``.sqlite``,
    or ``.nsys-rep``/``.qdrep`` through ``nsys export``), or a directory of per-rank traces."""
    if not os.path.exists(path):
        raise TraceError(path, "no such file or directory")
    if os.path.isdir(path):
        from trainscope.collectors.columnar import ArrowDir

        if ArrowDir.looks_like(path):  # nsys export --type arrowdir|parquetdir
            from trainscope.collectors.nsys import load_nsys_columnar

            return TraceSet(path=path, traces=load_nsys_columnar(path, progress))
        return _open_directory(path, progress)
    check_regular_file(path)
    return TraceSet(path=path, traces=open_any(path, progress))


def open_any(path: str, progress: Progress | None = None) -> list[Trace]:
    """The traces one file holds: one for Kineto, one per GPU process for an Nsight export."""
    if not os.access(path, os.R_OK):
        raise TraceError(path, "permission denied")
    lower = path.lower()
    if lower.endswith((".nsys-rep", ".qdrep")):
        return load_nsys(export_report(path, progress), progress)
    if os.path.getsize(path) == 0:
        raise TraceError(path, "file is empty")
    head = sniff(path)
    if head.startswith(SQLITE_MAGIC):
        return load_nsys(path, progress)
    if lower.endswith(".sqlite"):
        raise TraceError(path, "not an SQLite database (an Nsight Systems export is written by "
                               "`nsys export --type sqlite`)")
    return [open_file(path, progress)]


def open_file(path: str, progress: Progress | None = None) -> Trace:
    check_regular_file(path)
    if not os.access(path, os.R_OK):
        raise TraceError(path, "permission denied")
    lower = path.lower()
    if os.path.getsize(path) == 0:
        raise TraceError(path, "file is empty")
    head = sniff(path)
    from trainscope.collectors.snapshot import is_pickle

    if is_pickle(head):
        raise TraceError(path, "is a pickle (a CUDA memory snapshot?): analyze it with `trainscope memory "
                               f"{path}`; analyze reads profiler traces")
    live = live_format(path)  # watch --record recordings, nvidia-smi CSV logs: sampled counters
    if live:
        return load_live_trace(path, live)
    if head.startswith(SQLITE_MAGIC) or lower.endswith(_NSYS_SUFFIXES):
        traces = open_any(path)
        if len(traces) != 1:
            raise TraceError(path, f"holds {len(traces)} GPU processes; open it with open_traces")
        return traces[0]
    if head[:2] == GZIP_MAGIC or head.lstrip()[:1] in (b"{", b"[") or lower.endswith(_KINETO_SUFFIXES):
        return load_kineto(path, progress)
    raise TraceError(path, "unrecognized format: expected a PyTorch profiler trace (.json, .json.gz) "
                           "or an Nsight Systems export (.sqlite, .nsys-rep)")


def _open_directory(path: str, progress: Progress | None) -> TraceSet:
    files = sorted(
        os.path.join(path, f) for f in os.listdir(path)
        if f.lower().endswith(_KINETO_SUFFIXES + (".sqlite",)) and os.path.isfile(os.path.join(path, f))
    )
    if not files:
        raise TraceError(path, "directory holds no trace files (*.json, *.json.gz, *.sqlite)")
    traces: list[Trace] = []
    warnings: list[str] = []
    for f in files:
        try:
            loaded = open_any(f, progress)
        except TraceError as e:
            warnings.append(f"skipped {os.path.basename(f)}: {e.problem}")
            continue
        for t in loaded:
            if t.rank is None:
                m = _RANK_IN_NAME.search(os.path.basename(f))
                t.rank = int(m.group(1)) if m else None
            traces.append(t)
    if not traces:
        raise TraceError(path, "no trace in the directory could be loaded (" + "; ".join(warnings[:3]) + ")")
    # Ranks in rank order; files without a rank keep file order after them.
    traces.sort(key=lambda t: (t.rank is None, t.rank if t.rank is not None else 0))
    return TraceSet(path=path, traces=traces, warnings=warnings)
