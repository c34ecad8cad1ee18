"""The analysis pipeline: one trace in, one :class:`Analysis` out (pure, no I/O)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.attention import attention_evidence, unfused_attention_finding
from trainscope.analyzers.breakdown import Breakdown, primary_device, step_breakdown
from trainscope.analyzers.devices import DeviceSpec, device_for, lookup_device, with_overrides
from trainscope.analyzers.gpu_metrics import CounterSummary, counter_summary, with_counter_evidence
from trainscope.analyzers.host_device import blocking_syncs, host_device_findings, pageable_copies
from trainscope.analyzers.kernels import KernelSummary, kernel_classes, kernel_summary
from trainscope.analyzers.memory import DeviceMemory, device_memory
from trainscope.analyzers.mfu import MFU, model_flops_utilization
from trainscope.analyzers.phases import PhaseBreakdown, phase_breakdown
from trainscope.analyzers.recommendations import Recommendation, recommend
from trainscope.analyzers.cost import kernel_costs
from trainscope.analyzers.roofline import Roofline, roofline, tensor_core_names
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
    roofline: Roofline | None = None  # per-kernel roofline over the steps on this GPU (None: no kernels)


def analyze_trace(trace: Trace, rules: Rules | None = None, peak_tflops: float | None = None,
                  step_range: str | None = None, peak_bandwidth: float | None = None) -> Analysis:
    """``step_range`` names the annotation range that marks a step (raises StepRangeError when
    the trace has none)."""
    rules = rules or Rules()
    seg = segment_steps(trace, step_range)
    device = primary_device(trace)
    classes = kernel_classes(trace)  # regexes over long kernel names: classify once, use twice
    bd = step_breakdown(trace, seg, device, classes[0])
    # Steps are sorted and disjoint: one binary search per kernel says whether it starts in one.
    in_steps = iv.contains((seg.starts, seg.ends), trace.kernels.ts)
    dev = device_for(trace, device)
    spec = lookup_device(dev)
    roof_spec = with_overrides(spec, peak_tflops, peak_bandwidth)
    costs = kernel_costs(trace) if len(trace.kernels) else None
    if costs is not None and roof_spec is not None:  # tensor cores from the precision, the name only without one
        classes = (classes[0], tensor_core_names(trace, costs, roof_spec, classes[1]))
    ks = kernel_summary(trace, in_steps, device, classes=classes)
    mem = device_memory(trace)
    roof = None
    if costs is not None:
        on = in_steps & (trace.kernels.device == device) if device is not None else in_steps
        roof = roofline(trace, on, roof_spec, costs, device_name=dev.name if dev else None)
    mfu = model_flops_utilization(trace, seg, device, peak_tflops, roof, bd.gpu_busy_pct)

    # Counted once, in the steps and on this GPU, for both findings that cite it.
    pageable = pageable_copies(trace, seg, device)
    names_single = name_mask(trace, _SINGLE_PROCESS_LOADER)
    single = bool(names_single[trace.cpu_ops.name].any() or names_single[trace.annotations.name].any())
    inp = DiagnosisInput(
        has_gpu=trace.has_gpu_activity, segmentation=seg, breakdown=bd, kernels=ks, memory=mem,
        single_process_loader=single, pageable_htod_copies=pageable.count,
        kernels_per_step=ks.count / max(1, len(seg.steps)), roofline=roof,
    )
    found = findings(inp, rules)
    # Findings of their own modules: host-device traffic, attention, hardware counters.
    if trace.has_gpu_activity:
        found += host_device_findings(pageable, blocking_syncs(trace, seg, device), rules)
        unfused = unfused_attention_finding(attention_evidence(trace, seg, device, classes[0]),
                                            bd.share_pct("compute"), bd.gpu_busy_pct, rules)
        found += [unfused] if unfused else []
    counters = counter_summary(trace, seg, device)
    found = with_counter_evidence(found, counters, bd.gpu_busy_pct, bd.share_pct("compute"), rules)
    found.sort(key=finding_order)
    verdict = classify(inp, found, rules)
    # No projected gains from evidence too thin for a verdict.
    recs = [] if verdict.axis == "insufficient_evidence" else recommend(found, bd, spec, dev.name if dev else None)
    warnings = list(trace.warnings)
    if not trace.has_gpu_activity and len(trace.counters):
        # Sampled counters only (a `watch --record` recording, an nvidia-smi CSV): the live rules decide.
        from trainscope.analyzers.live import counters_diagnosis

        found, verdict, recs, note = counters_diagnosis(trace, rules)
        warnings.append(note)
    hw = trace.op_inputs.hw_flops
    if hw and not len(trace.kernels):
        top = max(hw, key=hw.get)
        warnings.append(f"hardware FP counters (CUPTI profiler) for {len(hw)} kernel names, {sum(hw.values()):.3g} FLOPs in "
                        f"all ({100 * hw[top] / sum(hw.values()):.0f} % in {top.split('(')[0][:60]}), but no kernel events: "
                        "counter ranges are replayed, so their durations are not kernel times and no roofline is drawn")
    if trace.has_gpu_activity and seg.method == "whole_trace":
        warnings.append(seg.note)
    return Analysis(
        source=trace.source, rank=trace.rank, device=device, device_name=dev.name if dev else None,
        device_spec=spec, segmentation=seg, breakdown=bd, kernels=ks, memory=mem, mfu=mfu,
        findings=found, verdict=verdict, recommendations=recs, warnings=warnings,
        phases=phase_breakdown(trace, seg, device, classes[0]), counters=counters, source_format=trace.format,
        roofline=roof,
    )


def analyze_set(traces: TraceSet, rules: Rules | None = None, peak_tflops: float | None = None,
                step_range: str | None = None, peak_bandwidth: float | None = None) -> list[Analysis]:
    """One analysis per rank, in rank order."""
    return [analyze_trace(t, rules, peak_tflops, step_range, peak_bandwidth) for t in traces.traces]


def slowest(analyses: list[Analysis]) -> Analysis:
    """The rank whose median step is longest: in synchronous training it sets everyone's pace."""
    return max(analyses, key=lambda a: a.breakdown.step_ms.p50)
