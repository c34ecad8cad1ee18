"""The normalized trace model every collector produces.

The model is columnar: each table holds one numpy array per field, not one Python object per
event, so a trace with millions of events costs a few arrays rather than millions of dicts.
Names are interned in one string table per trace and referenced by index.

Times are int64 nanoseconds relative to ``Trace.origin_ns`` (an absolute timestamp in ns), so
float microsecond timestamps from newer Kineto versions keep their nanosecond precision and
ranks of one job can be aligned by origin.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import Annotated
from typing import Any

import numpy as np
import numpy.typing as npt

# Copy kinds and memory kinds are small enums stored as int8 codes.
COPY_KINDS: tuple[str, ...] = ("unknown", "HtoD", "DtoH", "DtoD", "HtoH", "PtoP")
MEMORY_KINDS: tuple[str, ...] = ("unknown", "pageable", "pinned", "device", "managed", "host")
MEMORY_DEVICE_TYPES: tuple[str, ...] = ("cpu", "gpu")


@dataclass(frozen=True)
class Device:
    """One accelerator as the trace describes it."""

    id: int
    name: str
    vendor: str = "unknown"  # "nvidia", "amd" or "unknown"
    total_memory: int | None = None  # bytes
    sm_count: int | None = None
    compute_capability: str | None = None


@dataclass(frozen=True)
class Thread:
    """A host lane (process, thread) as the trace names it."""

    pid: str
    tid: str
    name: str = ""


Column = npt.NDArray[Any]
"""A column: one numpy array, one value per row (its dtype is the column's declaration)."""

I8 = Annotated[Column, np.dtype("int8")]
I16 = Annotated[Column, np.dtype("int16")]
I32 = Annotated[Column, np.dtype("int32")]
I64 = Annotated[Column, np.dtype("int64")]
F64 = Annotated[Column, np.dtype("float64")]


_T = typing.TypeVar("_T", bound="Table")


class Table:
    """A set of equal-length numpy columns. A subclass declares each column once, as an annotation
    with its dtype (``ts: I64``); ``FIELDS`` (name → dtype, in declaration order) is made from them,
    so the columns are typed attributes for readers and type checkers alike."""

    FIELDS: Mapping[str, np.dtype[Any]] = {}
    ts: Column  # every timed table has ts and dur; ``end`` reads them
    dur: Column

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hints = typing.get_type_hints(cls, include_extras=True)
        own = [n for n in cls.__dict__.get("__annotations__", {}) if n in hints]
        declared = {
            n: hints[n].__metadata__[0]
            for n in own
            if typing.get_origin(hints[n]) is Annotated and isinstance(hints[n].__metadata__[0], np.dtype)
        }
        if declared:
            cls.FIELDS = declared

    def __init__(self, **columns: Column) -> None:
        missing = set(self.FIELDS) - set(columns)
        if missing:
            raise ValueError(f"{type(self).__name__}: missing columns {sorted(missing)}")
        n = None
        for name, dtype in self.FIELDS.items():
            col = np.asarray(columns[name], dtype=dtype)
            if n is None:
                n = len(col)
            elif len(col) != n:
                raise ValueError(f"{type(self).__name__}: column {name} has {len(col)} rows, expected {n}")
            setattr(self, name, col)
        self._n = n or 0

    def __len__(self) -> int:
        return self._n

    @classmethod
    def empty(cls: type[_T]) -> _T:
        return cls(**{k: np.empty(0, dtype=v) for k, v in cls.FIELDS.items()})

    def select(self: _T, mask: Column) -> _T:
        """Rows where ``mask`` is true (or at the given indices), as a new table."""
        return type(self)(**{k: getattr(self, k)[mask] for k in self.FIELDS})

    @property
    def end(self) -> Column:
        return self.ts + self.dur


class Kernels(Table):
    ts: I64
    dur: I64
    device: I16
    stream: I32
    name: I32
    correlation: I64


class Copies(Table):
    ts: I64
    dur: I64
    device: I16
    stream: I32
    kind: I8
    src: I8
    dst: I8
    bytes: I64
    correlation: I64


class Memsets(Table):
    ts: I64
    dur: I64
    device: I16
    stream: I32
    bytes: I64
    correlation: I64


class RuntimeCalls(Table):
    """CUDA/HIP runtime and driver API calls on host threads."""

    ts: I64
    dur: I64
    thread: I32
    name: I32
    correlation: I64


class CpuOps(Table):
    """Framework operators on host threads; ``flops`` is NaN where the trace has no count."""

    ts: I64
    dur: I64
    thread: I32
    name: I32
    flops: F64


class PythonFrames(Table):
    """Python function frames on host threads (``with_stack=True``): ``name`` reads like
    ``file.py(123): function``; frames nest in time on their thread."""

    ts: I64
    dur: I64
    thread: I32
    name: I32


class Annotations(Table):
    """User and framework ranges (record_function, ProfilerStep#N, NVTX); ``device`` is -1 on the host."""

    ts: I64
    dur: I64
    thread: I32
    name: I32
    device: I16


class MemoryEvents(Table):
    """Allocator events: ``bytes`` is the signed change; totals are -1 where the trace lacks them."""

    ts: I64
    device_type: I8
    device: I16
    bytes: I64
    allocated: I64
    reserved: I64


class Counters(Table):
    """Sampled counters (live monitors, hardware metrics); ``name`` indexes the string table."""

    ts: I64
    device: I16
    name: I32
    value: F64


@dataclass
class OpInputs:
    """What links GPU work to the operator that launched it, and that operator's inputs.

    ``cpu_external`` (one per ``cpu_ops`` row) and ``kernel_external`` (one per ``kernels`` row) are
    Kineto's "External id" (-1 where absent): a kernel belongs to the CPU operator with its id.
    ``cpu_signature`` indexes ``signatures`` (-1: no shapes recorded): each signature is the
    operator's ``(Input Dims, Input type, Concrete Inputs)`` as the profiler wrote them
    (``record_shapes=True``). ``hw_flops`` holds FP operations per kernel name from hardware
    counters (Kineto's CUPTI-profiler mode), where a trace carries them; ``hw_ranges`` the same
    counter ranges one by one in time order: (kernel name, start in absolute ns — subtract
    ``Trace.origin_ns`` —, fp64, fp32, fp16 FLOPs).

    ``cpu_sequence`` and ``cpu_fwd_thread`` (one per ``cpu_ops`` row, -1 where absent; empty when the
    format has none) are Kineto's "Sequence number" and "Fwd thread id": a forward operator and the
    autograd node it created share the sequence number (a counter per thread); on a backward operator
    "Fwd thread id" is the profiler's own id (not the OS tid) of the thread that ran the forward, on a
    forward operator 0.
    """

    cpu_external: Column = field(default_factory=lambda: np.empty(0, np.int64))
    kernel_external: Column = field(default_factory=lambda: np.empty(0, np.int64))
    cpu_signature: Column = field(default_factory=lambda: np.empty(0, np.int32))
    signatures: list[tuple[list[Any], list[Any], list[Any]]] = field(default_factory=list)
    hw_flops: dict[str, float] = field(default_factory=dict)
    hw_ranges: list[tuple[str, int, float, float, float]] = field(default_factory=list)
    cpu_sequence: Column = field(default_factory=lambda: np.empty(0, np.int64))
    cpu_fwd_thread: Column = field(default_factory=lambda: np.empty(0, np.int64))


@dataclass(frozen=True)
class CollectiveArgs:
    """What PyTorch records about one collective (``record_param_comms`` and its NCCL/RCCL kernel
    share these args and their External id): what matches it across ranks. ``None`` where absent
    (older traces record none of them; "Seq" only in recent ones)."""

    process_group: str | None  # "Process Group Name"
    seq: int | None  # "Seq": the collective's sequence number within its process group
    name: str | None  # "Collective name" (allreduce, all_to_allv, send, …)
    in_nelems: int | None  # "In msg nelems"
    out_nelems: int | None  # "Out msg nelems"
    dtype: str | None


@dataclass
class Trace:
    """One rank's (one process's) normalized trace."""

    source: str
    format: str
    origin_ns: int
    strings: list[str]
    devices: list[Device]
    threads: list[Thread]
    kernels: Kernels
    copies: Copies
    memsets: Memsets
    runtime: RuntimeCalls
    cpu_ops: CpuOps
    annotations: Annotations
    memory: MemoryEvents
    counters: Counters
    rank: int | None = None
    world_size: int | None = None
    metadata: dict[str, object] = field(default_factory=dict)
    # What the collector skipped or repaired, as human-readable lines ("1,203 events with
    # negative duration skipped"). Reports show them so nothing is dropped silently.
    warnings: list[str] = field(default_factory=list)
    # OS runtime calls (Nsight ``OSRT_API``: poll, read, pthread waits...). Kept apart from
    # ``runtime``: a thread blocked in poll() is waiting, not issuing GPU work.
    os_runtime: RuntimeCalls = field(default_factory=RuntimeCalls.empty)
    # Input shapes of CPU operators where the profiler recorded them (record_shapes=True):
    # operator name → {repr of its "Input Dims" → calls}. Empty when the trace has none.
    input_dims: dict[str, dict[str, int]] = field(default_factory=dict)
    # Per-operator External ids and input signatures (Kineto); empty for formats without them.
    op_inputs: OpInputs = field(default_factory=OpInputs)
    # Python frames where the profiler recorded stacks (Kineto ``python_function``). Empty otherwise.
    python_frames: PythonFrames = field(default_factory=PythonFrames.empty)
    # Collective metadata by External id (the id the operator and its kernels share); Kineto only.
    collective_args: dict[int, CollectiveArgs] = field(default_factory=dict)

    def device(self, device_id: int) -> Device | None:
        for d in self.devices:
            if d.id == device_id:
                return d
        return None

    @property
    def has_gpu_activity(self) -> bool:
        return len(self.kernels) + len(self.copies) + len(self.memsets) > 0

    @property
    def span_ns(self) -> tuple[int, int]:
        """First start and last end over every timed table (0, 0 when empty)."""
        starts, ends = [], []
        for t in (self.kernels, self.copies, self.memsets, self.runtime, self.cpu_ops, self.annotations):
            if len(t):
                starts.append(int(t.ts.min()))
                ends.append(int(t.end.max()))
        if not starts:
            return (0, 0)
        return (min(starts), max(ends))


@dataclass
class TraceSet:
    """What one input path holds: a single trace, or one trace per rank from a directory."""

    path: str
    traces: list[Trace]
    warnings: list[str] = field(default_factory=list)
