"""The analysis pipeline: one trace in, one :class:`Analysis` out (pure, no I/O)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.attention import attention_evidence, unfused_attention_finding
from trainscope.analyzers.breakdown import Breakdown, primary_device, step_breakdown
from trainscope.analyzers.context import Context, detect_context
from trainscope.analyzers.devices import DeviceSpec, lookup
from trainscope.analyzers.gpu_metrics import CounterSummary, counter_summary, with_counter_evidence
from trainscope.analyzers.host_device import blocking_syncs, host_device_findings, pageable_copies
from trainscope.analyzers.host_idle import HostIdle, host_idle, with_host_idle
from trainscope.analyzers.kernels import KernelSummary, kernel_classes, kernel_summary
from trainscope.analyzers.memory import DeviceMemory, device_memory
from trainscope.analyzers.mfu import MFU, model_flops_utilization
from trainscope.analyzers.phases import PhaseBreakdown, phase_breakdown
from trainscope.analyzers.recommendations import Recommendation, recommend
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.steps import StepSegmentation, name_mask, segment_steps
from trainscope.analyzers.verdict import DiagnosisInput, Finding, Verdict, classify, finding_order, findings
from trainscope.traces.model import Trace, TraceSet

_SINGLE_PROCESS_LOADER = re.compile(r"_SingleProcessDataLoaderIter")


@dataclass
class Analysis:
    source: str
    rank: int | None
    device: int | None
    device_name: str | None
    device_spec: DeviceSpec | None
    segmentation: StepSegmentation
    breakdown: Breakdown
    kernels: KernelSummary
    memory: list[DeviceMemory]
    mfu: MFU
    findings: list[Finding]
    verdict: Verdict
    recommendations: list[Recommendation]
    warnings: list[str] = field(default_factory=list)
    phases: PhaseBreakdown | None = None  # forward/backward/optimizer, where ranges name them
    counters: CounterSummary | None = None  # hardware counters (Nsight GPU_METRICS), where sampled
    source_format: str = "kineto"  # Trace.format: "kineto" or "nsys-sqlite"
    context: Context | None = None  # training/inference, graphs, compiled, framework, collectives
    host_idle: HostIdle | None = None  # GPU idle split by what the host was doing (input/launch/sync/other)


def analyze_trace(trace: Trace, rules: Rules | None = None, peak_tflops: float | None = None,
                  step_range: str | None = None) -> Analysis:
    """``step_range`` names the annotation range that marks a step (raises StepRangeError when
    the trace has none)."""
    rules = rules or Rules()
    ctx = detect_context(trace)
    seg = segment_steps(trace, step_range)
    device = primary_device(trace)
    classes = kernel_classes(trace)  # regexes over long kernel names: classify once, use twice
    bd = step_breakdown(trace, seg, device, classes[0])
    # Steps are sorted and disjoint: one binary search per kernel says whether it starts in one.
    ks = kernel_summary(trace, iv.contains((seg.starts, seg.ends), trace.kernels.ts), device, classes=classes)
    mem = device_memory(trace)
    mfu = model_flops_utilization(trace, seg, device, peak_tflops)
    dev = trace.device(device) if device is not None else None
    spec = lookup(dev.name if dev else None)

    # Counted once, in the steps and on this GPU, for both findings that cite it.
    pageable = pageable_copies(trace, seg, device)
    names_single = name_mask(trace, _SINGLE_PROCESS_LOADER)
    single = bool(names_single[trace.cpu_ops.name].any() or names_single[trace.annotations.name].any())
    inp = DiagnosisInput(
        has_gpu=trace.has_gpu_activity, segmentation=seg, breakdown=bd, kernels=ks, memory=mem,
        single_process_loader=single, pageable_htod_copies=pageable.count,
        kernels_per_step=ks.count / max(1, len(seg.steps)), context=ctx,
    )
    found = findings(inp, rules)
    # Findings of their own modules: host-device traffic, attention, hardware counters.
    if trace.has_gpu_activity:
        found += host_device_findings(pageable, blocking_syncs(trace, seg, device), rules, ctx)
        unfused = unfused_attention_finding(attention_evidence(trace, seg, device, classes[0]),
                                            bd.share_pct("compute"), bd.gpu_busy_pct, rules)
        found += [unfused] if unfused else []
    hidle = host_idle(trace, seg, device, rules.value("launch.cold_start_ms")) if trace.has_gpu_activity else None
    if hidle is not None:
        found = with_host_idle(found, hidle, rules, ctx)
    counters = counter_summary(trace, seg, device)
    found = with_counter_evidence(found, counters, bd.gpu_busy_pct, bd.share_pct("compute"), rules)
    found.sort(key=finding_order)
    verdict = classify(inp, found, rules)
    # No projected gains from evidence too thin for a verdict.
    recs = [] if verdict.axis == "insufficient_evidence" else recommend(found, bd, spec, dev.name if dev else None, ctx)
    warnings = list(trace.warnings)
    if not trace.has_gpu_activity and len(trace.counters):
        # Sampled counters only (a `watch --record` recording, an nvidia-smi CSV): the live rules decide.
        from trainscope.analyzers.live import counters_diagnosis

        found, verdict, recs, note = counters_diagnosis(trace, rules)
        warnings.append(note)
    if trace.has_gpu_activity and seg.method == "whole_trace":
        warnings.append(seg.note)
    if seg.stub_note:
        warnings.append(seg.stub_note)
    return Analysis(
        source=trace.source, rank=trace.rank, device=device, device_name=dev.name if dev else None,
        device_spec=spec, segmentation=seg, breakdown=bd, kernels=ks, memory=mem, mfu=mfu,
        findings=found, verdict=verdict, recommendations=recs, warnings=warnings,
        phases=phase_breakdown(trace, seg, device, classes[0]), counters=counters, source_format=trace.format,
        context=ctx, host_idle=hidle,
    )


def analyze_set(traces: TraceSet, rules: Rules | None = None, peak_tflops: float | None = None,
                step_range: str | None = None) -> list[Analysis]:
    """One analysis per rank, in rank order."""
    return [analyze_trace(t, rules, peak_tflops, step_range) for t in traces.traces]


def slowest(analyses: list[Analysis]) -> Analysis:
    """The rank whose median step is longest: in synchronous training it sets everyone's pace."""
    return max(analyses, key=lambda a: a.breakdown.step_ms.p50)
