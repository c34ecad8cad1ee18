"""Compatibility: the live sample models live in :mod:`trainscope.traces.samples` (the trace model
package, which analyzers may import); this module re-exports them for collectors and old imports."""

from trainscope.traces.samples import HOST_DEVICE
from trainscope.traces.samples import PART_FIELDS
from trainscope.traces.samples import THROTTLE_REASONS
from trainscope.traces.samples import GpuProcess
from trainscope.traces.samples import GpuSample
from trainscope.traces.samples import HostSample
from trainscope.traces.samples import ProcessGroup
from trainscope.traces.samples import RankSample
from trainscope.traces.samples import Snapshot
from trainscope.traces.samples import StepSample
from trainscope.traces.samples import counter_rows
from trainscope.traces.samples import snapshot_from_counters
from trainscope.traces.samples import trace_snapshots

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
