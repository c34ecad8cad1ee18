"""Turn a user's path into a :class:`TraceSet`: detect the format, load one file or a rank directory."""
from __future__ import annotations

import os
import re

from trainscope.collectors.errors import TraceError
from trainscope.collectors.kineto import load_kineto
from trainscope.collectors.live_trace import live_format, load_live_trace
from trainscope.collectors.readers import GZIP_MAGIC, SQLITE_MAGIC, Progress, sniff
from trainscope.traces.model import Trace, TraceSet

_KINETO_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.I)


def open_traces(path: str, progress: Progress | None = None) -> TraceSet:
    """Load ``path``: a Kineto ``.json``/``.json.gz`` file, or a directory of per-rank traces."""
    if not os.path.exists(path):
        raise TraceError(path, "no such file or directory")
    if os.path.isdir(path):
        return _open_directory(path, progress)
    return TraceSet(path=path, traces=[open_file(path, progress)])


def open_file(path: str, progress: Progress | None = None) -> Trace:
    if not os.access(path, os.R_OK):
        raise TraceError(path, "permission denied")
    lower = path.lower()
    if lower.endswith((".nsys-rep", ".qdrep")):
        raise TraceError(
            path,
            "Nsight Systems reports are not supported yet; export one with "
            f"`nsys export --type sqlite --output {_stem(path)}.sqlite {path}` "
            "(SQLite exports are the planned input) or record the run with torch.profiler",
        )
    if os.path.getsize(path) == 0:
        raise TraceError(path, "file is empty")
    head = sniff(path)
    live = live_format(path)  # watch --record recordings, nvidia-smi CSV logs: sampled counters
    if live:
        return load_live_trace(path, live)
    if head.startswith(SQLITE_MAGIC):
        raise TraceError(path, "is an SQLite file (an Nsight Systems export?); Nsight input is not supported yet")
    if head[:2] == GZIP_MAGIC or head.lstrip()[:1] in (b"{", b"[") or lower.endswith(_KINETO_SUFFIXES):
        return load_kineto(path, progress)
    raise TraceError(path, "unrecognized format: expected a PyTorch profiler trace (.json or .json.gz)")


def _open_directory(path: str, progress: Progress | None) -> TraceSet:
    files = sorted(
        os.path.join(path, f) for f in os.listdir(path)
        if f.lower().endswith(_KINETO_SUFFIXES) and os.path.isfile(os.path.join(path, f))
    )
    if not files:
        raise TraceError(path, "directory holds no trace files (*.json, *.json.gz)")
    traces: list[Trace] = []
    warnings: list[str] = []
    for f in files:
        try:
            t = open_file(f, progress)
        except TraceError as e:
            warnings.append(f"skipped {os.path.basename(f)}: {e.problem}")
            continue
        if t.rank is None:
            m = _RANK_IN_NAME.search(os.path.basename(f))
            t.rank = int(m.group(1)) if m else None
        traces.append(t)
    if not traces:
        raise TraceError(path, "no trace in the directory could be loaded (" + "; ".join(warnings[:3]) + ")")
    # Ranks in rank order; files without a rank keep file order after them.
    traces.sort(key=lambda t: (t.rank is None, t.rank if t.rank is not None else 0))
    return TraceSet(path=path, traces=traces, warnings=warnings)


def _stem(path: str) -> str:
    base = os.path.basename(path)
    return base.rsplit(".", 1)[0]
