"""The CUDA memory snapshot model (``torch.cuda.memory._dump_snapshot``, as read by
:mod:`trainscope.collectors.snapshot`): the allocator's segments and blocks, and each device's
recorded allocator events, columnar."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy.typing as npt

Frame = dict[str, Any]  # {name, filename, line}

ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "oom",
    "snapshot",
    "other",
)


@dataclass
class Block:
    address: int
    size: int
    requested_size: int
    state: str  # active_allocated | active_pending_free | inactive
    frames: list[Frame]


@dataclass
class Segment:
    device: int
    address: int
    total_size: int
    allocated_size: int
    segment_type: str
    blocks: list[Block]


@dataclass
class DeviceTrace:
    """One device's recorded allocator events, columnar."""

    device: int
    action: npt.NDArray[Any]  # int8 codes into ACTIONS
    addr: npt.NDArray[Any]  # int64 (addresses fit: user-space pointers < 2⁴⁷)
    size: npt.NDArray[Any]  # int64 bytes
    time_us: npt.NDArray[Any]  # int64
    frames: list[list[Frame]]  # per event: list of {name, filename, line} dicts (possibly empty)

    def __len__(self) -> int:
        return len(self.action)


@dataclass
class Annotation:
    stage: str  # START | END
    name: str
    device: int
    time_us: int


@dataclass
class Snapshot:
    path: str
    segments: list[Segment]
    traces: list[DeviceTrace]
    annotations: list[Annotation] = field(default_factory=list)
    allocator_settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def devices(self) -> list[int]:
        return sorted({s.device for s in self.segments} | {t.device for t in self.traces if len(t)})
