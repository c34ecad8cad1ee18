"""What the trace rules read: everything the analysis pipeline measured once, handed to every
finding's ``measure``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainscope.analyzers.findings.base import Evidence

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.breakdown import Breakdown
    from trainscope.analyzers.kernels import KernelSummary
    from trainscope.analyzers.memory import DeviceMemory
    from trainscope.analyzers.sinks import Sinks
    from trainscope.analyzers.steps import StepSegmentation


@dataclass(frozen=True)
class DiagnosisInput:
    """Everything the verdict and the findings read, gathered by the analysis pipeline."""

    has_gpu: bool
    segmentation: "StepSegmentation"
    breakdown: "Breakdown"
    kernels: "KernelSummary"
    memory: "list[DeviceMemory]"
    single_process_loader: bool
    pageable_htod_copies: int
    kernels_per_step: float
    sinks: "Sinks | None" = None
    pageable: Any = None  # host_device.PageableCopies
    syncs: Any = None  # host_device.BlockingSyncs
    attention: Any = None  # attention.AttentionEvidence
    context: Any = None  # context.Context (training/inference, framework, collectives), when detected
    host_evidence: dict = field(default_factory=dict)  # idle class -> heaviest host frames/calls during GPU idle
    host_idle: Any = None  # host_idle.HostIdle: GPU idle split by what the host was doing
    busy_evidence: tuple[Evidence, ...] = ()  # how busy time was split into memory-/compute-bound
    imbalance_evidence: tuple[Evidence, ...] = ()
    roofline: Any = None  # roofline.Roofline over the steps' kernels on this GPU, when there are kernels
    copy_traffic: Any = None  # copy_traffic.CopyTraffic: copies by direction and host memory, GPU ops in the steps
    gaps: Any = None  # gpu_gaps.GpuGaps: idle no host event explains, classified from the GPU timeline and runtime calls
    extra: dict = field(default_factory=dict)

    def is_leader(self, sink: str) -> bool:
        lead = self.sinks.leader if self.sinks is not None else None
        return lead is not None and lead.key == sink
