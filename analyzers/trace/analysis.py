"""The analysis pipeline: one trace in, one :class:`Analysis` out (pure, no I/O)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers import findings as registry
from trainscope.analyzers import intervals as iv
from trainscope.analyzers.devices import DeviceSpec
from trainscope.analyzers.devices import device_for
from trainscope.analyzers.devices import lookup_device
from trainscope.analyzers.devices import with_overrides
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.live.engine import counters_diagnosis
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace import heap
from trainscope.analyzers.trace.allocator_peak import DeviceMemory
from trainscope.analyzers.trace.allocator_peak import device_memory
from trainscope.analyzers.trace.attention import attention_evidence
from trainscope.analyzers.trace.breakdown import Breakdown
from trainscope.analyzers.trace.breakdown import host_layers
from trainscope.analyzers.trace.breakdown import primary_device
from trainscope.analyzers.trace.breakdown import refiled
from trainscope.analyzers.trace.breakdown import step_breakdown
from trainscope.analyzers.trace.busy_bound import BusyBound
from trainscope.analyzers.trace.busy_bound import busy_bound
from trainscope.analyzers.trace.context import Context
from trainscope.analyzers.trace.context import detect_context
from trainscope.analyzers.trace.context import refine
from trainscope.analyzers.trace.copy_traffic import copy_traffic
from trainscope.analyzers.trace.cost import kernel_costs
from trainscope.analyzers.trace.fusion import FusionCandidates
from trainscope.analyzers.trace.fusion import fusion_candidates
from trainscope.analyzers.trace.gpu_gaps import INFERRED
from trainscope.analyzers.trace.gpu_gaps import GpuGaps
from trainscope.analyzers.trace.gpu_gaps import gpu_gaps
from trainscope.analyzers.trace.gpu_metrics import CounterSummary
from trainscope.analyzers.trace.gpu_metrics import counter_context
from trainscope.analyzers.trace.gpu_metrics import counter_split
from trainscope.analyzers.trace.gpu_metrics import counter_summary
from trainscope.analyzers.trace.host_device import blocking_syncs
from trainscope.analyzers.trace.host_device import pageable_copies
from trainscope.analyzers.trace.host_idle import EXPLAINED
from trainscope.analyzers.trace.host_idle import HostIdle
from trainscope.analyzers.trace.host_idle import host_idle
from trainscope.analyzers.trace.host_idle import host_idle_evidence
from trainscope.analyzers.trace.host_only import host_only_verdict
from trainscope.analyzers.trace.host_only import host_time
from trainscope.analyzers.trace.host_only import record_gpu_work
from trainscope.analyzers.trace.hw_counters import HwCounterReport
from trainscope.analyzers.trace.hw_counters import counters_mfu_reason
from trainscope.analyzers.trace.hw_counters import counters_only_verdict
from trainscope.analyzers.trace.hw_counters import hw_counter_report
from trainscope.analyzers.trace.kernels import HIGH_INTENSITY
from trainscope.analyzers.trace.kernels import LOW_INTENSITY
from trainscope.analyzers.trace.kernels import KernelSummary
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.analyzers.trace.kernels import kernel_summary
from trainscope.analyzers.trace.mfu import MFU
from trainscope.analyzers.trace.mfu import model_flops_utilization
from trainscope.analyzers.trace.module_tree import ModuleTree
from trainscope.analyzers.trace.module_tree import module_tree
from trainscope.analyzers.trace.one_off import SteadyWindow
from trainscope.analyzers.trace.one_off import one_off_costs
from trainscope.analyzers.trace.one_off import steady_window
from trainscope.analyzers.trace.phases import PhaseBreakdown
from trainscope.analyzers.trace.phases import phase_breakdown
from trainscope.analyzers.trace.recommendations import Recommendation
from trainscope.analyzers.trace.recommendations import recommend
from trainscope.analyzers.trace.record_options import how_to_record
from trainscope.analyzers.trace.repairs import RepairLog
from trainscope.analyzers.trace.repairs import ensure_checked
from trainscope.analyzers.trace.repairs import with_repairs
from trainscope.analyzers.trace.roofline import Roofline
from trainscope.analyzers.trace.roofline import roofline
from trainscope.analyzers.trace.roofline import tensor_core_names
from trainscope.analyzers.trace.sinks import Sinks
from trainscope.analyzers.trace.sinks import moved
from trainscope.analyzers.trace.sinks import sink_rows
from trainscope.analyzers.trace.sinks import split_sinks
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.analyzers.trace.steps import name_mask
from trainscope.analyzers.trace.steps import segment_steps
from trainscope.analyzers.trace.verdict import NOT_REPRESENTATIVE
from trainscope.analyzers.trace.verdict import DiagnosisInput
from trainscope.analyzers.trace.verdict import Finding
from trainscope.analyzers.trace.verdict import Verdict
from trainscope.analyzers.trace.verdict import classify
from trainscope.analyzers.trace.verdict import findings
from trainscope.analyzers.trace.verdict import not_steady
from trainscope.analyzers.trace.verdict import primary_first
from trainscope.traces.model import Column
from trainscope.traces.model import Trace
from trainscope.traces.model import TraceSet

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
    context: Context | None = None  # training/inference, graphs, compiled, framework, collectives
    sinks: Sinks | None = None  # step time split into exclusive sinks (the verdict's ranking)
    host_idle: HostIdle | None = None  # GPU idle split by what the host was doing (input/launch/sync/other)
    hw_counters: HwCounterReport | None = None  # measured FLOPs per kernel (CUPTI counter mode), where recorded
    busy_bound: BusyBound | None = None  # what a kernel-level fix can remove, bounded by the roofline
    fusion: FusionCandidates | None = None  # repeated back-to-back kernel sequences and what fusing them saves
    # The start-up ledger (one-off costs, phase ranges) and the window judged: the steady state, or NOT
    # REPRESENTATIVE when the window holds none (analyzers/trace/one_off.py)
    steady: SteadyWindow | None = None
    # What the findings and verdict read (kept so a cross-rank pass can re-judge with imbalance).
    observations: DiagnosisInput | None = field(default=None, repr=False, compare=False)
    repairs: RepairLog | None = field(default=None, repr=False, compare=False)  # the invariant pass's log
    tree: ModuleTree | None = None  # where in the model: the trace's ranges as a tree over the steps


# From this many host rows and kernels, ``jobs >= 2`` runs the host side (host-idle attribution, then
# the GPU gaps it leaves) in a thread beside the kernel stages: at 1 GB (9 M rows) that chain is ≈ 4 of
# the analysis' 12 CPU-s, and numpy releases the GIL for most of it (analysis wall 11.4–13.0 → 7.5–7.8 s,
# docs/scale.md); the two chains' temporaries then coexist (+150–170 MiB there). Below ≈ 1 M rows the
# chain takes well under a second, and the serial order keeps the peak lower.
BESIDE_MIN_ROWS = 1_000_000


def analyze_trace(
    trace: Trace,
    rules: Rules | None = None,
    peak_tflops: float | None = None,
    step_range: str | None = None,
    peak_bandwidth: float | None = None,
    jobs: int = 1,
) -> Analysis:
    """``step_range`` names the annotation range that marks a step (raises StepRangeError when
    the trace has none). ``jobs`` ≥ 2 lets a large trace's host side run on a second core
    (:data:`BESIDE_MIN_ROWS`); the result is the same either way."""
    rules = rules or Rules()
    # Each stage of a large trace frees what it built; the allocator keeps it unless handed back
    # (heap.release) before the next stage's peak: the reader's, the nesting's, the layers'.
    heap.release()
    repairs = ensure_checked(trace, rules.value("step.stub_fraction"))  # the invariant pass, once per trace
    heap.release()
    ctx = detect_context(trace)
    seg = segment_steps(trace, step_range, rules)
    # Phases before verdicts: the one-off costs (start-up, compilation, capture, upload, teardown) are
    # found first, and the window judged is the steady state — or none, said so.
    ledger = one_off_costs(trace, rules, steps=seg)
    seg, steady = steady_window(trace, seg, ledger, rules, explicit=step_range is not None)
    device = primary_device(trace)
    beside = None
    if jobs >= 2 and trace.has_gpu_activity and host_rows(trace) >= BESIDE_MIN_ROWS:
        cold_start_ms = rules.value("launch.cold_start_ms")
        beside = _Beside(lambda: host_side(trace, seg, device, cold_start_ms))
    try:
        return _analyzed_trace(trace, rules, peak_tflops, peak_bandwidth, repairs, ctx, seg, steady, device, beside)
    except Exception:
        if beside is not None:
            beside.join()  # an error here: the host side ends before the caller goes on (an interrupt does not wait)
            beside = None  # its result (interval sets of millions at 1 GB) not held by the traceback's frame
        raise


_HostSide = tuple[HostIdle | None, GpuGaps | None]


class _Beside:
    """:func:`host_side` running in a thread of its own; :meth:`result` waits for it and returns what it
    returned or raises what it raised. A daemon thread: an interrupt (Ctrl-C) ends the process without
    waiting for it."""

    def __init__(self, call: Callable[[], _HostSide]) -> None:
        self._out: _HostSide | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name="trainscope-host-side", daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], _HostSide]) -> None:
        try:
            self._out = call()
        except BaseException as e:  # handed to the caller by result()
            self._error = e

    def join(self) -> None:
        self._thread.join()

    def result(self) -> _HostSide:
        self.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out


def host_rows(trace: Trace) -> int:
    """The rows :data:`BESIDE_MIN_ROWS` counts: operators, runtime calls, annotations and kernels."""
    return len(trace.cpu_ops) + len(trace.runtime) + len(trace.annotations) + len(trace.kernels)


def host_side(trace: Trace, seg: StepSegmentation, device: int | None, cold_start_ms: float) -> _HostSide:
    """Host-idle attribution, then the GPU gaps it leaves unexplained: one chain (the gaps read the
    attribution's explained sets) that needs the steps only — none of the kernel stages' results."""
    if not trace.has_gpu_activity:
        return None, None
    heap.release()
    hidle = host_idle(trace, seg, device, cold_start_ms)
    heap.release()
    return hidle, explained_gaps(trace, seg, device, hidle)


def _analyzed_trace(
    trace: Trace,
    rules: Rules,
    peak_tflops: float | None,
    peak_bandwidth: float | None,
    repairs: RepairLog,
    ctx: Context,
    seg: StepSegmentation,
    steady: SteadyWindow,
    device: int | None,
    beside: _Beside | None,
) -> Analysis:
    """:func:`analyze_trace` from the steady window on; ``beside``: the host side, running."""
    classes = kernel_classes(trace)  # regexes over long kernel names: classify once, use twice
    heap.release()
    serial: _HostSide | None = None
    if beside is None and trace.has_gpu_activity:
        # one core: the host side here, around the breakdown, so the host layers are built once for
        # both and held from one to the other only (not through the kernel stages)
        attributed = host_idle(trace, seg, device, rules.value("launch.cold_start_ms"))
        heap.release()
        layers = host_layers(trace)
        bd = step_breakdown(trace, seg, device, classes[0], host=layers)
        serial = (attributed, explained_gaps(trace, seg, device, attributed, layers))
        del attributed, layers
    else:
        bd = step_breakdown(trace, seg, device, classes[0])
    heap.release()
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
    roof = bound = fusion = None
    if costs is not None:
        on = in_steps & (trace.kernels.device == device) if device is not None else in_steps
        roof = roofline(trace, on, roof_spec, costs, device_name=dev.name if dev else None)
        bound = busy_bound(trace, on, costs, roof)
        fusion = fusion_candidates(trace, on, costs, roof, rules, steps=len(seg.steps))
        ctx = refine(ctx, roof)
        del on
    heap.release()
    tree = module_tree(
        trace,
        (seg.starts, seg.ends),
        device,
        costs,
        {r.name: (r.bound, r.pct_of_roof) for r in roof.rows} if roof is not None else None,
    )
    del costs, in_steps  # read above only: a million kernels' figures not held through the later stages

    counters = counter_summary(trace, seg, device)
    warnings = list(trace.warnings)
    if not trace.has_gpu_activity and len(trace.counters):
        # Sampled counters only (a `watch --record` recording, an nvidia-smi CSV): the live rules
        # decide, once — the trace rules have no events to read.

        found, verdict, recs, note = counters_diagnosis(trace, rules)
        warnings.append(note)
        sinks = hidle = inp = None
    else:
        if beside is not None:
            hidle, gaps = beside.result()
        elif serial is not None:
            hidle, gaps = serial
        else:
            hidle, gaps = host_side(trace, seg, device, rules.value("launch.cold_start_ms"))
        heap.release()
        inp = observations(
            trace,
            seg,
            device,
            bd,
            ks,
            mem,
            classes,
            counters,
            roof,
            ctx,
            rules,
            hidle,
            gaps=gaps,
            steady=steady,
            fusion=fusion,
            tree=tree,
        )
        sinks = inp.sinks
        if sinks is not None and trace.has_gpu_activity:  # one story: the idle rows show the sinks' figures
            bd = refiled(bd, sink_rows(sinks))
        found, verdict, recs = judge(inp, bd, spec, dev.name if dev else None, ctx, rules, bound=bound)
    # the Iron Law's gap is read off the verdict's sinks (one attribution of busy time)
    mfu = model_flops_utilization(trace, seg, device, peak_tflops, roof, bd.gpu_busy_pct, sinks)
    hwc = hw_counter_report(trace) if trace.op_inputs.hw_ranges else None
    if hwc is not None and not len(trace.kernels):  # counter mode: a GPU trace without kernel timing
        verdict = counters_only_verdict(hwc)
        mfu = replace(mfu, reason=counters_mfu_reason(hwc))
        warnings += [hwc.summary(), hwc.agreement_note]
    ho = host_time(trace)  # an Nsight export without GPU rows: judged on what it holds (host_only.py)
    if ho is not None and verdict.axis == "insufficient_evidence":
        verdict = host_only_verdict(ho, trace)
        recs = [record_gpu_work(ho, trace)]
    if trace.has_gpu_activity and seg.method == "whole_trace":
        warnings.append(f"{seg.note}; to time steps, {how_to_record(trace.format, 'steps')}")
    if seg.stub_note:
        warnings.append(seg.stub_note)
    if steady.left_out:
        warnings.append(f"judged {steady.judged}; left out as not steady state: {'; '.join(steady.left_out)}")
    return with_repairs(
        Analysis(
            source=trace.source,
            rank=trace.rank,
            device=device,
            device_name=dev.name if dev else None,
            device_spec=spec,
            segmentation=seg,
            breakdown=bd,
            kernels=ks,
            memory=mem,
            mfu=mfu,
            findings=found,
            verdict=verdict,
            recommendations=recs,
            warnings=warnings,
            phases=phase_breakdown(trace, seg, device, classes[0]),
            counters=counters,
            source_format=trace.format,
            roofline=roof,
            context=ctx,
            sinks=sinks,
            host_idle=hidle,
            observations=inp,
            hw_counters=hwc,
            busy_bound=bound,
            fusion=fusion,
            repairs=repairs,
            steady=steady,
            tree=tree,
        ),
        repairs,
    )


def busy_split(
    ks: KernelSummary, counters: CounterSummary | None, roof: Roofline | None, rules: Rules
) -> tuple[dict[str, float], str, list[Evidence]]:
    """How compute-kernel time divides into memory-bound, compute-bound and unknown: hardware counters
    where they decide, else the roofline's per-kernel calls, else the kernel-class mix (the last
    resort DIAGNOSIS §2.3 allows), with the evidence lines of the source used."""
    decided = counter_split(counters, rules)
    if decided is not None:
        return decided[0], "hardware counters", decided[1]
    context_lines = counter_context(counters)
    if roof is not None and roof.busy_ms > 0:
        lines = [
            Evidence(
                f"{b}-bound kernels (roofline: intensity {'<' if b == 'memory' else '≥'} ridge point), "
                "share of compute-kernel time",
                round(roof.share_pct(b), 2),
                "%",
                "",
                "roofline: " + roof.device,
            )
            for b in ("memory", "compute")
        ]
        lines += [
            Evidence(roof.evidence_line(b), None, "", "", "roofline: " + roof.device)
            for b in ("memory", "compute")
            if roof.bound_ms.get(b, 0.0) > 0
        ]
        if roof.bound_ms.get("unknown", 0.0) > 0:
            lines.append(
                Evidence(
                    "kernels of unknown bound (no FLOPs/bytes, no recognizable name)",
                    round(roof.share_pct("unknown"), 2),
                    "%",
                    "",
                    "roofline",
                )
            )
        return (
            {b: roof.bound_ms.get(b, 0.0) for b in ("memory", "compute", "unknown")},
            "roofline",
            lines + context_lines,
        )
    high = sum(ks.by_class_ns.get(c, 0) for c in HIGH_INTENSITY)
    low = sum(ks.by_class_ns.get(c, 0) for c in LOW_INTENSITY)
    other = ks.by_class_ns.get("other", 0)
    compute_total = high + low + other
    lines = [
        Evidence(
            "GEMM/convolution/attention share of compute-kernel time",
            round(100.0 * high / compute_total, 2) if compute_total else 0.0,
            "%",
            "",
            "kernel names (no roofline)",
        ),
        Evidence(
            "elementwise/normalization/softmax/reduction share of compute-kernel time",
            round(100.0 * low / compute_total, 2) if compute_total else 0.0,
            "%",
            "",
            "kernel names (no roofline)",
        ),
    ]
    return (
        {"memory": float(low), "compute": float(high), "unknown": float(other)},
        "kernel classes",
        lines + context_lines,
    )


def host_idle_attribution(h: HostIdle | None, bd: Breakdown) -> tuple[dict[str, int], dict[str, tuple[Evidence, ...]]]:
    """GPU-idle time that host frames and runtime calls explain beyond what the breakdown already
    files (its data-wait, sync and launch idle), by sink class; and each class's evidence lines
    (heaviest frames, calls, cold start)."""
    if h is None or not h.idle_ns:
        return {}, {}
    # Input (host stages whose output the GPU then receives) and sync (blocking calls) rest on recorded
    # events. Launch time beyond the breakdown's — idle between launches where the host recorded
    # nothing, e.g. in an event-sampled trace — is inferred from position alone: it stays unexplained.
    # Allocator calls (the alloc class) are runtime calls the breakdown files as host overhead: the
    # sinks take them from there (sinks.FROM_HOST_OVERHEAD), whole.
    already = {"input-preprocessing": bd.ns["idle_data_wait"], "sync": bd.ns["idle_sync"], "allocator": 0}
    mine = {"input-preprocessing": "input", "sync": "sync", "allocator": "alloc"}
    extra = {k: max(0, h.ns.get(c, 0) - already[k]) for k, c in mine.items()}
    evidence = {c: tuple(host_idle_evidence(h, c)) for c in ("input", "sync", "launch", "alloc") if h.ns.get(c, 0) > 0}
    return extra, evidence


def graph_replays(trace: Trace, seg: StepSegmentation, device: int | None) -> dict[str, object]:
    """GPU time (union, in the steps, on this GPU) of CUDA graph replays traced without their kernels
    (the reader names them in ``metadata["graph_names"]``), and their count."""
    names = trace.metadata.get("graph_names") if trace.metadata else None
    if not names or not isinstance(names, list):  # the Nsight reader stores a list of labels
        return {}
    want = set(names)
    ids = np.array([i for i, s in enumerate(trace.strings) if s in want], np.int64)
    k = trace.kernels
    on = codes.isin(k.name, ids) & iv.contains((seg.starts, seg.ends), k.ts)
    if device is not None:
        on &= k.device == device
    if not on.any():
        return {}
    u = iv.union(k.ts[on], k.end[on])
    ns = int(iv.overlap_per_window(u, seg.starts, seg.ends).sum())
    return {"graph_replay_ns": ns, "graph_replays": int(on.sum())}


GAPS_SOURCE = "GPU-idle gaps " + INFERRED


def explained_gaps(
    trace: Trace,
    seg: StepSegmentation,
    device: int | None,
    hidle: HostIdle | None,
    layers: dict[str, iv.IntervalSet] | None = None,
) -> GpuGaps:
    """The GPU-idle gaps no recorded host activity explains (the breakdown's host layers, the host
    frames' input and sync time), classified from the GPU timeline and the runtime calls.
    ``layers``: :func:`host_layers` of ``trace``, where the caller already has them."""
    if layers is None:
        layers = host_layers(trace)
    busy = layers["idle_host_overhead"]  # the host coverage's union, when every thread launches
    sets = list(layers.values())
    del layers
    if hidle is not None:
        sets += [v for k, v in hidle.intervals.items() if k in EXPLAINED and len(v[0])]
    # handed over as sets: gpu_gaps unites them and drops them, so this frame holds neither the
    # layers' other sets nor their union through the host coverage (the gaps' peak)
    return gpu_gaps(trace, seg, device, explained_sets=sets, host_busy=busy)


def sink_floors(rules: Rules) -> dict[str, float]:
    """Per sink, the moderate grade of the broad finding that names it: a smaller sink is no verdict."""
    out = {}
    for decl in registry.specs(offline=True):
        if decl.sink and decl.refines is None and decl.can_be_primary and decl.severity.moderate:
            out[decl.sink] = rules.value(decl.severity.moderate)
    return out


def observations(
    trace: Trace,
    seg: StepSegmentation,
    device: int | None,
    bd: Breakdown,
    ks: KernelSummary,
    mem: list[DeviceMemory],
    classes: tuple[Column, Column],
    counters: CounterSummary | None,
    roof: Roofline | None,
    ctx: Context,
    rules: Rules,
    hidle: HostIdle | None = None,
    gaps: GpuGaps | None = None,  # host_side's: the GPU gaps the host-idle attribution leaves
    imbalance_ns: int = 0,
    imbalance_evidence: tuple[Evidence, ...] = (),
    steady: SteadyWindow | None = None,
    fusion: FusionCandidates | None = None,
    tree: ModuleTree | None = None,
) -> DiagnosisInput:
    """Everything the findings read, measured once: the sinks of step time and the evidence of the
    modules that refine them (host-device traffic, attention, counters, host frames)."""
    # Counted once, in the steps and on this GPU, for every finding that cites it.
    pageable = pageable_copies(trace, seg, device)
    syncs = blocking_syncs(trace, seg, device)
    names_single = name_mask(trace, _SINGLE_PROCESS_LOADER)
    single = bool(names_single[trace.cpu_ops.name].any() or names_single[trace.annotations.name].any())
    split, source, busy_lines = busy_split(ks, counters, roof, rules)
    host_ns, host_ev = host_idle_attribution(hidle, bd)
    sinks = split_sinks(
        bd,
        busy_split=split,
        busy_source=source,
        host_idle_ns=host_ns,
        sync_bubble_ns=syncs.bubble_ns,
        imbalance_ns=imbalance_ns,
        saturated=bd.gpu_busy_pct >= rules.value("gpu_busy.saturated"),
        floors=sink_floors(rules),
        gap_ns=gaps.sink_ns() if gaps is not None else None,
        gap_source=GAPS_SOURCE,
    )
    return DiagnosisInput(
        has_gpu=trace.has_gpu_activity,
        segmentation=seg,
        breakdown=bd,
        kernels=ks,
        memory=mem,
        single_process_loader=single,
        pageable_htod_copies=pageable.count,
        kernels_per_step=ks.count / max(1, len(seg.steps)),
        sinks=sinks,
        pageable=pageable,
        syncs=syncs,
        attention=attention_evidence(trace, seg, device, classes[0]) if trace.has_gpu_activity else None,
        context=ctx,
        host_evidence=host_ev,
        host_idle=hidle,
        busy_evidence=tuple(busy_lines),
        imbalance_evidence=tuple(imbalance_evidence),
        roofline=roof,
        gaps=gaps,
        extra={**graph_replays(trace, seg, device), "gpus_described": len(trace.devices)},
        copy_traffic=copy_traffic(trace, seg, device) if trace.has_gpu_activity else None,
        steady=steady,
        fusion=fusion,
        tree=tree,
    )


def analyze_set(
    traces: TraceSet,
    rules: Rules | None = None,
    peak_tflops: float | None = None,
    step_range: str | None = None,
    peak_bandwidth: float | None = None,
    jobs: int = 1,
) -> list[Analysis]:
    """One analysis per rank, in rank order, each rank judged on its own (``jobs``: as
    :func:`analyze_trace`'s). Rank imbalance is decided once, in the reduce over ranks
    (``trainscope.api``'s ``analyze``): the collectives' alignment where they match
    (``ranks.with_aligned_imbalance``), else the compute-time estimate (:func:`with_rank_imbalance`)."""
    return [analyze_trace(t, rules, peak_tflops, step_range, peak_bandwidth, jobs) for t in traces.traces]


def with_rank_imbalance(analyses: list[Analysis], rules: Rules) -> list[Analysis]:
    """Synchronous ranks meet in their collectives, so a rank with less kernel work than the busiest
    one spends the difference waiting inside a collective for it: that share of its communication time
    is imbalance, not communication cost. Per rank: wait = min(communication, busiest rank's compute
    time − this rank's) per step; the rank is re-judged with that time as the imbalance sink."""

    def per_step(a: Analysis, cat: str) -> float:
        return a.breakdown.ns[cat] / max(1, len(a.breakdown.steps))

    judged = [a for a in analyses if a.observations is not None and a.sinks is not None and a.breakdown.total_ns]
    if len(judged) < 2 or sum(1 for a in judged if a.breakdown.ns["communication"] > 0) < 2:
        return analyses
    busiest = max(judged, key=lambda a: per_step(a, "compute"))
    top = per_step(busiest, "compute")
    out = []
    for a in analyses:
        if a not in judged or a is busiest or a.sinks is None:  # judged ones have sinks
            out.append(a)
            continue
        wait = min(per_step(a, "communication"), top - per_step(a, "compute"))
        if wait <= 0:
            out.append(a)
            continue
        n = max(1, len(a.breakdown.steps))
        who = f"rank {busiest.rank}" if busiest.rank is not None else busiest.source
        sinks = moved(a.sinks, "comm", "imbalance", int(wait * n), f"compute-kernel time per step against {who}")
        lines = (
            Evidence(
                "compute-kernel time per step on this rank",
                round(per_step(a, "compute") / 1e6, 2),
                "ms",
                "",
                "step breakdown",
                None,
            ),
            Evidence(
                f"compute-kernel time per step on the busiest rank ({who})",
                round(top / 1e6, 2),
                "ms",
                "",
                "step breakdown",
                None,
            ),
            Evidence("ranks compared", len(judged), "ranks", "", "trace set", None),
        )
        out.append(rejudged(a, sinks, lines, rules))
    return out


def judge(
    inp: DiagnosisInput,
    bd: Breakdown,
    spec: DeviceSpec | None,
    device_name: str | None,
    ctx: Context | None,
    rules: Rules,
    bound: BusyBound | None = None,
) -> tuple[list[Finding], Verdict, list[Recommendation]]:
    """The one judge: observations → findings, the verdict (primary finding first) and the fixes, whose
    projections ``bound`` (what a kernel-level fix can remove, by the roofline) limits. No projected
    gains from evidence too thin for a verdict."""
    found = findings(inp, rules)
    verdict = classify(inp, found, rules)
    found = primary_first(found, verdict)
    if verdict.axis == "insufficient_evidence":
        recs = []
    else:
        # A window with no steady state gets the fixes of its one-off costs only: how to record the
        # steady state, and what removes the costs (in seconds once per process, never per step).
        mine = [f for f in found if not_steady(f)] if verdict.axis == NOT_REPRESENTATIVE else found
        recs = recommend(
            mine,
            bd,
            spec,
            device_name,
            ctx,
            rules,
            bound=bound,
            single_loader=inp.single_process_loader,
            steady=inp.steady,
        )
    return found, verdict, recs


def rejudged(
    a: Analysis,
    sinks: Sinks,
    imbalance_evidence: tuple[Evidence, ...],
    rules: Rules,
    extra: dict[str, object] | None = None,
) -> Analysis:
    """``a`` judged again with ``sinks`` (its imbalance sink set by a cross-rank measure), the
    evidence of that measure and, in ``extra``, what else the reduce measured of the rank (the
    others' wait for it when it is the straggler): the reduce over ranks calls this once per rank."""
    assert a.observations is not None
    inp = replace(
        a.observations,
        sinks=sinks,
        imbalance_evidence=imbalance_evidence,
        extra=a.observations.extra if extra is None else extra,
    )
    found, verdict, recs = judge(inp, a.breakdown, a.device_spec, a.device_name, a.context, rules, bound=a.busy_bound)
    return with_repairs(
        replace(a, sinks=sinks, observations=inp, findings=found, verdict=verdict, recommendations=recs), a.repairs
    )


def slowest(analyses: list[Analysis]) -> Analysis:
    """The rank whose median step is longest: in synchronous training it sets everyone's pace."""
    return max(analyses, key=lambda a: a.breakdown.step_ms.p50)
