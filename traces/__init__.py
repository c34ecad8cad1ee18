"""The normalized model every collector produces and every analyzer reads."""

from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS
from trainscope.traces.model import Annotations
from trainscope.traces.model import Copies
from trainscope.traces.model import Counters
from trainscope.traces.model import CpuOps
from trainscope.traces.model import Device
from trainscope.traces.model import Kernels
from trainscope.traces.model import MemoryEvents
from trainscope.traces.model import Memsets
from trainscope.traces.model import RuntimeCalls
from trainscope.traces.model import Thread
from trainscope.traces.model import Trace
from trainscope.traces.model import TraceSet

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
