"""What the trace rules read: everything the analysis pipeline measured once, handed to every
finding's ``measure``."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import Evidence

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.trace.allocator_peak import DeviceMemory
    from trainscope.analyzers.trace.attention import AttentionEvidence
    from trainscope.analyzers.trace.breakdown import Breakdown
    from trainscope.analyzers.trace.context import Context
    from trainscope.analyzers.trace.copy_traffic import CopyTraffic
    from trainscope.analyzers.trace.fusion import FusionCandidates
    from trainscope.analyzers.trace.gpu_gaps import GpuGaps
    from trainscope.analyzers.trace.host_device import BlockingSyncs
    from trainscope.analyzers.trace.host_device import PageableCopies
    from trainscope.analyzers.trace.host_idle import HostIdle
    from trainscope.analyzers.trace.kernels import KernelSummary
    from trainscope.analyzers.trace.module_tree import ModuleTree
    from trainscope.analyzers.trace.one_off import SteadyWindow
    from trainscope.analyzers.trace.roofline import Roofline
    from trainscope.analyzers.trace.sinks import Sinks
    from trainscope.analyzers.trace.steps import StepSegmentation


@dataclass(frozen=True)
class DiagnosisInput:
    """Everything the verdict and the findings read, gathered by the analysis pipeline."""

    has_gpu: bool
    segmentation: StepSegmentation
    breakdown: Breakdown
    kernels: KernelSummary
    memory: list[DeviceMemory]
    single_process_loader: bool
    pageable_htod_copies: int
    kernels_per_step: float
    sinks: Sinks | None = None
    pageable: PageableCopies | None = None
    syncs: BlockingSyncs | None = None
    attention: AttentionEvidence | None = None
    context: Context | None = None  # training/inference, framework, collectives, when detected
    # idle class -> heaviest host frames/calls during GPU idle
    host_evidence: dict[str, tuple[Evidence, ...]] = field(default_factory=dict)
    host_idle: HostIdle | None = None  # GPU idle split by what the host was doing
    busy_evidence: tuple[Evidence, ...] = ()  # how busy time was split into memory-/compute-bound
    imbalance_evidence: tuple[Evidence, ...] = ()
    roofline: Roofline | None = None  # over the steps' kernels on this GPU, when there are kernels
    copy_traffic: CopyTraffic | None = None  # copies by direction and host memory, GPU ops in the steps
    gaps: GpuGaps | None = None  # idle no host event explains, classified from the GPU timeline and runtime calls
    extra: dict[str, object] = field(default_factory=dict)
    steady: SteadyWindow | None = None  # the start-up ledger and the judged window (analyzers/trace/one_off.py)
    fusion: FusionCandidates | None = None  # repeated back-to-back kernel sequences (analyzers/trace/fusion.py)
    tree: ModuleTree | None = (
        None  # where in the model: the trace's ranges over the steps (analyzers/trace/module_tree.py)
    )

    def is_leader(self, sink: str) -> bool:
        lead = self.sinks.leader if self.sinks is not None else None
        return lead is not None and lead.key == sink
