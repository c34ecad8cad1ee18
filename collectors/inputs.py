"""Turn a user's path into a :class:`TraceSet`: detect the format, load one file or a rank directory."""

from __future__ import annotations

import os
import re

from trainscope.collectors.errors import TraceError
from trainscope.collectors.formats import RANK_FILE_SUFFIXES
from trainscope.collectors.formats import directory_reader_for
from trainscope.collectors.formats import reader_for
from trainscope.collectors.readers import Progress
from trainscope.collectors.readers import check_regular_file
from trainscope.traces.model import Trace
from trainscope.traces.model import TraceSet

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.I)


def open_traces(path: str, progress: Progress | None = None) -> TraceSet:
    """Load ``path``: a Kineto ``.json``/``.json.gz`` file, an Nsight Systems export (``.sqlite``,
    or ``.nsys-rep``/``.qdrep`` through ``nsys export``), or a directory of per-rank traces."""
    if not os.path.exists(path):
        raise TraceError(path, "no such file or directory")
    if os.path.isdir(path):
        one = directory_reader_for(path)  # a folder that is one export (nsys export --type arrowdir)
        if one is not None:
            return TraceSet(path=path, traces=one.loader()(path, progress))
        return _open_directory(path, progress)
    check_regular_file(path)
    return TraceSet(path=path, traces=open_any(path, progress))


def open_any(path: str, progress: Progress | None = None) -> list[Trace]:
    """The traces one file holds: one for Kineto, one per GPU process for an Nsight export; the
    kind is the first row of :data:`~trainscope.collectors.formats.READERS` that claims the file."""
    check_regular_file(path)
    if not os.access(path, os.R_OK):
        raise TraceError(path, "permission denied")
    return reader_for(path).loader()(path, progress)


def open_file(path: str, progress: Progress | None = None) -> Trace:
    """The one trace a file holds (an Nsight export of several GPU processes: TraceError)."""
    traces = open_any(path, progress)
    if len(traces) != 1:
        raise TraceError(path, f"holds {len(traces)} GPU processes; open it with open_traces")
    return traces[0]


def _open_directory(path: str, progress: Progress | None) -> TraceSet:
    files = sorted(
        os.path.join(path, f)
        for f in os.listdir(path)
        if f.lower().endswith(RANK_FILE_SUFFIXES) and os.path.isfile(os.path.join(path, f))
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
