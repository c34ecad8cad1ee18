"""CUDA graphs traced at graph level in an Nsight Systems export.

With ``nsys profile --cuda-graph-trace=graph`` (the default for CUDA graphs) a graph replay is one
row of ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` — start, end, device, stream, correlation id of the
``cudaGraphLaunch`` that issued it, graph id — and none of its kernels reach
``CUPTI_ACTIVITY_KIND_KERNEL`` (CUPTI's ``CUpti_ActivityGraphTrace``: "execution for a graph without
giving visibility about the execution of its nodes"). Read without this table, a job that runs its
whole step as graph replays looks like an idle GPU. Here each replay becomes one GPU operation of
the trace, on its stream, named by its graph id: its time is GPU busy time whose bound is unknown
(no kernel names, no FLOPs or bytes), and the trace says how to record the kernels
(``--cuda-graph-trace=node``).
"""

from __future__ import annotations

from typing import Any
from typing import Protocol

import numpy as np

from trainscope.traces.model import Kernels
from trainscope.traces.model import Trace

GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NODE_HINT = "nsys profile --cuda-graph-trace=node"
_WANTED = {
    "start": None,
    "end": None,
    "deviceId": "0",
    "streamId": "-1",
    "correlationId": "-1",
    "globalPid": "0",
    "graphId": "-1",
}


def graph_name(graph_id: int) -> str:
    return f"CUDA graph {graph_id} (replay traced at graph level)"


class TableSource(Protocol):
    """What the Nsight reader reads tables through (an SQLite export, or an arrowdir/parquetdir one)."""

    tables: set[str]

    def columns(self, table: str) -> set[str]: ...

    def rows(self, table: str, wanted: dict[str, str | None]) -> Any: ...


def read_graph_replays(src: TableSource) -> dict[str, np.ndarray] | None:
    """The graph replays of the export, as int64 columns (None when the table is absent or empty).
    Rows with no timestamps (CUPTI writes start = end = 0 when it could not time a graph) are
    dropped."""
    if GRAPH_TABLE not in src.tables or not {"start", "end"} <= src.columns(GRAPH_TABLE):
        return None
    r = src.rows(GRAPH_TABLE, dict(_WANTED))
    if not len(r):
        return None
    cols = {c: np.asarray(r[c], dtype=np.int64) for c in _WANTED}
    keep = cols["end"] > cols["start"]
    if not keep.any():
        return None
    return {c: v[keep] for c, v in cols.items()}


def add_graph_replays(src: TableSource, traces: list[Trace], procs: list[int], session_ns: int) -> None:
    """Append each process's graph replays to its trace's GPU operations (``procs[i]`` is the
    ``globalPid >> 24`` of ``traces[i]``), with a warning saying what they are and how to record
    their kernels. Times follow the trace's own origin."""
    g = read_graph_replays(src)
    if g is None:
        return
    proc_of = g["globalPid"] >> 24
    for trace, proc in zip(traces, procs):
        sel = proc_of == proc if len(procs) > 1 else np.ones(len(proc_of), bool)
        if not sel.any():
            continue
        origin = trace.origin_ns - session_ns
        ids = g["graphId"][sel]
        index = {s: i for i, s in enumerate(trace.strings)}
        names = np.empty(len(ids), np.int32)
        labels = []
        for gid in np.unique(ids).tolist():
            label = graph_name(int(gid))
            labels.append(label)
            if label not in index:
                index[label] = len(trace.strings)
                trace.strings.append(label)
            names[ids == gid] = index[label]
        k = trace.kernels
        add = Kernels(
            ts=g["start"][sel] - origin,
            dur=g["end"][sel] - g["start"][sel],
            device=g["deviceId"][sel],
            stream=g["streamId"][sel],
            name=names,
            correlation=g["correlationId"][sel],
        )
        trace.kernels = Kernels(**{f: np.concatenate([getattr(k, f), getattr(add, f)]) for f in Kernels.FIELDS})
        ext = trace.op_inputs.kernel_external
        if len(ext) == len(k):
            trace.op_inputs.kernel_external = np.concatenate([ext, np.full(len(add), -1, np.int64)])
        busy = int(add.dur.sum())
        trace.metadata["graph_replays"] = int(sel.sum())
        trace.metadata["graph_replay_ns"] = busy
        graph_ids = sorted(int(x) for x in np.unique(ids))
        trace.metadata["graph_ids"] = graph_ids
        trace.metadata["graph_names"] = labels  # what the analyzers find the replays by
        trace.warnings.append(
            f"{int(sel.sum()):,} CUDA graph replays traced at graph level ({GRAPH_TABLE}; graphs "
            f"{', '.join(str(x) for x in graph_ids[:5])}): their {busy / 1e6:.1f} ms count as GPU busy "
            f"time on their streams, but their kernels were not recorded — for kernel detail profile with `{NODE_HINT}`"
        )
