"""The normalized model every collector produces and every analyzer reads."""

from trainscope.traces.model import (
    COPY_KINDS,
    MEMORY_KINDS,
    Annotations,
    Copies,
    Counters,
    CpuOps,
    Device,
    Kernels,
    MemoryEvents,
    Memsets,
    RuntimeCalls,
    Thread,
    Trace,
    TraceSet,
)

__all__ = [
    "COPY_KINDS",
    "MEMORY_KINDS",
    "Annotations",
    "Copies",
    "Counters",
    "CpuOps",
    "Device",
    "Kernels",
    "MemoryEvents",
    "Memsets",
    "RuntimeCalls",
    "Thread",
    "Trace",
    "TraceSet",
]
