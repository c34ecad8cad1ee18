"""Compatibility: the live sample models live in :mod:`trainscope.traces.samples` (the trace model
package, which analyzers may import); this module re-exports them for collectors and old imports."""

from trainscope.traces.samples import (
    HOST_DEVICE,
    PART_FIELDS,
    THROTTLE_REASONS,
    GpuProcess,
    GpuSample,
    HostSample,
    ProcessGroup,
    RankSample,
    Snapshot,
    StepSample,
    counter_rows,
    snapshot_from_counters,
    trace_snapshots,
)

__all__ = [
    "HOST_DEVICE",
    "PART_FIELDS",
    "THROTTLE_REASONS",
    "GpuProcess",
    "GpuSample",
    "HostSample",
    "ProcessGroup",
    "RankSample",
    "Snapshot",
    "StepSample",
    "counter_rows",
    "snapshot_from_counters",
    "trace_snapshots",
]
