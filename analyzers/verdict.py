"""Findings and the D·A·M verdict (DIAGNOSIS.md §1–§4).

Findings name a specific cause with its evidence and the share of step time it accounts for
("stake"). The verdict follows the textbook's flowchart (seed 000 lines 2078–2154), with the
corrections of DIAGNOSIS.md §2: while the GPU is starved (busy below ``gpu_busy.saturated``) the
primary axis is the largest *explained* idle cause — Data only with positive evidence of input
waits; once the GPU is saturated, the roofline (the kernel-name mix only without one) decides
compute-bound (Algorithm) versus memory-bound (Machine), unless a high-severity cause such as
unoverlapped communication outweighs it. A verdict the evidence cannot support is ``insufficient_evidence``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainscope.analyzers.breakdown import Breakdown
from trainscope.analyzers.kernels import KernelSummary
from trainscope.analyzers.memory import DeviceMemory
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.steps import StepSegmentation

if TYPE_CHECKING:
    from trainscope.analyzers.roofline import Roofline

AXES = ("data", "algorithm", "machine", "balanced", "insufficient_evidence")


@dataclass(frozen=True)
class Evidence:
    metric: str
    value: float | None
    unit: str
    threshold: str  # e.g. "≥ 20", "< 50"; "" for context lines
    source: str
    meets: bool | None = None  # whether the value crosses the threshold; None for context


@dataclass(frozen=True)
class Finding:
    id: str  # "data/input-wait", "host/launch-overhead", ...
    axis: str
    severity: str  # "high" | "moderate" | "info"
    title: str
    stake_pct: float  # share of step time this cause accounts for
    evidence: list[Evidence]
    detail: str = ""


@dataclass(frozen=True)
class Verdict:
    axis: str
    confidence: float
    bottleneck: str | None  # the primary finding's id
    summary: str
    evidence: list[Evidence] = field(default_factory=list)


@dataclass(frozen=True)
class DiagnosisInput:
    """Everything the verdict reads, gathered by the analysis pipeline."""

    has_gpu: bool
    segmentation: StepSegmentation
    breakdown: Breakdown
    kernels: KernelSummary
    memory: list[DeviceMemory]
    single_process_loader: bool
    pageable_htod_copies: int
    kernels_per_step: float
    roofline: "Roofline | None" = None  # when present, bounds come from it instead of the name mix


def _ev(rules: Rules, name: str, metric: str, value: float, op: str = "≥") -> Evidence:
    t = rules[name]
    meets = value >= t.value if op == "≥" else value < t.value
    return Evidence(metric, round(value, 2), t.unit, f"{op} {t.value:g}", t.source, meets)


def _ctx(metric: str, value: float | None, unit: str, source: str = "measured") -> Evidence:
    return Evidence(metric, None if value is None else round(value, 2), unit, "", source, None)


def _graded(rules: Rules, key: str, value: float) -> str | None:
    if value >= rules.value(f"{key}.high"):
        return "high"
    if value >= rules.value(f"{key}.moderate"):
        return "moderate"
    return None


def findings(inp: DiagnosisInput, rules: Rules) -> list[Finding]:
    """All findings the evidence supports, largest stake first."""
    if not inp.has_gpu:
        return _cpu_training_findings(inp, rules)
    b, k = inp.breakdown, inp.kernels
    out: list[Finding] = []
    busy = b.gpu_busy_pct

    # Data: positive evidence only — the host waited on the loader while the GPU sat idle.
    idle_data = b.share_pct("idle_data_wait")
    sev = _graded(rules, "data_wait", b.data_wait_pct)
    if sev and idle_data >= rules.value("data_wait.moderate"):
        ev = [_ev(rules, "data_wait.high" if sev == "high" else "data_wait.moderate", "host waiting on DataLoader __next__", b.data_wait_pct),
              _ev(rules, "data_wait.moderate", "GPU idle while waiting for data", idle_data),
              _ev(rules, "gpu_busy.saturated", "GPU busy", busy, "<")]
        detail = "the input pipeline cannot keep the GPU fed"
        if inp.single_process_loader:
            ev.append(_ctx("DataLoader runs in the training process (num_workers=0)", None, "", "trace: _SingleProcessDataLoaderIter"))
            detail += "; batches are loaded in the training process itself (num_workers=0)"
        out.append(Finding("data/input-wait", "data", sev, "Training waits on the input pipeline", idle_data, ev, detail))

    copy = b.share_pct("copy")
    if copy >= rules.value("copy.moderate"):
        ev = [_ev(rules, "copy.moderate", "GPU busy only with memory copies", copy)]
        if inp.pageable_htod_copies:
            ev.append(_ctx("host-to-device copies from pageable memory", inp.pageable_htod_copies, "copies", "trace: Memcpy HtoD (Pageable -> Device)"))
        out.append(Finding("data/copies", "data", "moderate", "Memory copies not overlapped with compute", copy, ev,
                           "copies run while no kernel does"))

    host = b.share_pct("idle_host_overhead")
    sev = _graded(rules, "host_overhead", host)
    if sev:
        ev = [_ev(rules, f"host_overhead.{sev}", "GPU idle while the host launches/computes", host),
              _ctx("median kernel duration", k.median_kernel_ns / 1e3, "µs"),
              _ctx("kernels per step", inp.kernels_per_step, "kernels")]
        tiny = k.median_kernel_ns / 1e3 < rules.value("launch.tiny_kernel_us")
        detail = ("many short kernels: the host cannot issue them as fast as the GPU runs them" if tiny
                  else "host-side work (Python, framework ops) between kernels leaves the GPU waiting")
        out.append(Finding("host/launch-overhead", "algorithm", sev, "GPU waits for the host to issue work", host, ev, detail))

    sync = b.share_pct("idle_sync")
    sev = _graded(rules, "sync", sync)
    if sev:
        out.append(Finding("host/sync", "algorithm", sev, "Host-device synchronization stalls the pipeline", sync,
                           [_ev(rules, f"sync.{sev}", "GPU idle while the host synchronizes", sync)],
                           "cudaDeviceSynchronize/cudaStreamSynchronize or blocking copies (.item(), .cpu(), print) inside the step"))

    comm = b.share_pct("communication")
    sev = _graded(rules, "comm", comm)
    if sev:
        out.append(Finding("comm/unoverlapped", "machine", sev, "Communication not overlapped with compute", comm,
                           [_ev(rules, f"comm.{sev}", "communication with no compute running", comm),
                            _ctx("communication kernels, share of kernel time", k.class_share_pct("communication"), "%")],
                           "collectives run while no compute kernel does"))

    # What the busy time is spent on (DIAGNOSIS §2.3): only meaningful as a bottleneck once busy.
    compute = b.share_pct("compute")
    hi, lo = k.high_intensity_pct, k.low_intensity_pct
    hi_metric, lo_metric = ("GEMM/convolution/attention share of kernel time",
                            "elementwise/normalization/softmax/reduction share of kernel time")
    roof = inp.roofline
    roof_ev: dict[str, list[Evidence]] = {"compute": [], "memory": []}
    if roof is not None and roof.total_ms > 0:
        # The roofline (DIAGNOSIS §2.3): each kernel's intensity against the ridge point at its precision.
        hi, lo = roof.pct_of_kernel_time("compute"), roof.pct_of_kernel_time("memory")
        hi_metric = "compute-bound kernels (roofline: intensity ≥ ridge point), share of kernel time"
        lo_metric = "memory-bound kernels (roofline: intensity < ridge point), share of kernel time"
        for bound in roof_ev:
            roof_ev[bound] = [_ctx(roof.evidence_line(bound), None, "", "roofline: " + roof.device),
                              _ctx("kernels of unknown bound (no FLOPs/bytes, no recognizable name)",
                                   roof.pct_of_kernel_time("unknown"), "%", "roofline")]
    dom = rules.value("kernel_mix.dominant")
    if hi >= dom:
        out.append(Finding("algorithm/compute-bound", "algorithm", "high" if busy >= rules.value("gpu_busy.saturated") else "info",
                           "Busy time is dominated by compute-heavy kernels", compute * hi / 100,
                           [_ev(rules, "kernel_mix.dominant", hi_metric, hi),
                            _ev(rules, "gpu_busy.saturated", "GPU busy", busy)] + roof_ev["compute"],
                           "arithmetic units are the limit while kernels run"))
    elif lo >= dom:
        out.append(Finding("machine/bandwidth", "machine", "high" if busy >= rules.value("gpu_busy.saturated") else "info",
                           "Busy time is dominated by memory-bound kernels", compute * lo / 100,
                           [_ev(rules, "kernel_mix.dominant", lo_metric, lo),
                            _ev(rules, "gpu_busy.saturated", "GPU busy", busy)] + roof_ev["memory"],
                           "kernels that move more bytes than they compute: fusion cuts the traffic"))

    tc = k.tensor_core_pct_of_matmul
    matmul_share = 100.0 * k.matmul_ns / k.total_ns if k.total_ns else 0.0
    movable = 1.0 - (tc or 0.0) / 100  # share of matrix time mixed precision can move to tensor cores
    if roof is not None and roof.total_ms > 0 and roof.spec is not None:
        # Tensor cores from the precision: advice only where that precision has a tensor-core path.
        tc = roof.tensor_core_pct_of_matrix
        matmul_share = 100.0 * roof.matrix_ms / roof.total_ms
        movable = roof.tensor_core_candidate_ms / roof.matrix_ms if roof.matrix_ms else 0.0
    if tc is not None and tc < rules.value("tensor_core.low") and matmul_share >= 20.0 and movable > 0:
        out.append(Finding("algorithm/no-tensor-cores", "algorithm", "moderate", "Matrix math runs without tensor cores",
                           compute * matmul_share / 100 * movable,
                           [_ev(rules, "tensor_core.low", "tensor-core share of GEMM/conv/attention time", tc, "<"),
                            _ctx("GEMM/conv/attention share of kernel time", matmul_share, "%")],
                           "fp32 GEMMs/convolutions run on the CUDA cores; mixed precision moves them to tensor cores"))

    for m in inp.memory:
        pct = m.peak_pct
        if pct is not None and pct >= rules.value("memory.capacity"):
            out.append(Finding("machine/capacity", "machine", "high", f"GPU {m.device} memory near capacity", 0.0,
                               [_ev(rules, "memory.capacity", "peak memory / device memory", pct)],
                               "little headroom: larger batches or models will not fit"))
    grade = {"high": 0, "moderate": 1, "info": 2}
    out.sort(key=lambda f: (grade[f.severity], -f.stake_pct))
    return out


# Causes that cost step time outright (idle GPU, or serialized copies/communication).
_CAUSES = ("data/input-wait", "data/copies", "host/launch-overhead", "host/sync", "comm/unoverlapped")
_MIX = ("algorithm/compute-bound", "machine/bandwidth", "machine/unfused-attention")
_GRADE = {"high": 0, "moderate": 1, "info": 2}


def _cpu_training_findings(inp: DiagnosisInput, rules: Rules) -> list[Finding]:
    """No GPU in the trace (training on the CPU, or a CPU-side rank): only input waits can be
    diagnosed. Time the training loop spends inside DataLoader ``__next__`` is positive evidence
    by itself — with no accelerator to overlap it, it lengthens every step one for one."""
    b = inp.breakdown
    if inp.segmentation.method == "whole_trace" or not b.total_ns:
        return []  # without step boundaries there is no step time to take a share of
    sev = _graded(rules, "data_wait", b.data_wait_pct)
    if not sev:
        return []
    ev = [_ev(rules, "data_wait.high" if sev == "high" else "data_wait.moderate", "host waiting on DataLoader __next__",
              b.data_wait_pct),
          _ctx("GPU kernels in trace", 0, "kernels", "trace: no GPU activity (CPU training)")]
    detail = "training runs on the CPU here, so every millisecond spent loading a batch adds to the step"
    if inp.single_process_loader:
        ev.append(_ctx("DataLoader runs in the training process (num_workers=0)", None, "", "trace: _SingleProcessDataLoaderIter"))
        detail += "; batches are loaded in the training process itself (num_workers=0)"
    return [Finding("data/input-wait", "data", sev, "Training waits on the input pipeline", b.data_wait_pct, ev, detail)]


def finding_order(f: Finding) -> tuple[int, float]:
    """Findings sort by severity, then by the share of step time at stake."""
    return (_GRADE[f.severity], -f.stake_pct)


def classify(inp: DiagnosisInput, found: list[Finding], rules: Rules) -> Verdict:
    """The primary D·A·M axis, a confidence in [0, 1], and the evidence behind it."""
    b = inp.breakdown
    if not inp.has_gpu:
        data = next((f for f in found if f.id == "data/input-wait"), None)
        if data is not None and data.severity == "high":
            # One kind of evidence and no device to cross-check it with: a lower ceiling than on a GPU.
            conf = 0.75 - (0.1 if len(inp.segmentation.steps) < 3 else 0.0)
            return Verdict("data", round(conf, 2), data.id, f"{data.title} — {data.detail}", data.evidence)
        return Verdict("insufficient_evidence", 0.0, None,
                       "the trace has no GPU activity (no kernels, copies or memsets): on a CPU-only trace trainscope "
                       "diagnoses only input waits (DataLoader time within the steps), and none crosses "
                       f"data_wait.high ({rules.value('data_wait.high'):g} %)",
                       [_ctx("GPU kernels in trace", 0, "kernels", "trace")])
    min_k = rules.value("evidence.min_kernels")
    if inp.kernels.count < min_k:
        return Verdict("insufficient_evidence", 0.0, None,
                       f"only {inp.kernels.count} GPU kernels ran inside the analyzed steps: too little to tell where "
                       "the time goes (profile more steps)",
                       [_ev(rules, "evidence.min_kernels", "GPU kernels in the analyzed steps", inp.kernels.count, "<")])
    busy = b.gpu_busy_pct
    saturated = busy >= rules.value("gpu_busy.saturated")
    # Phrased in the direction that supports the branch taken: starved (<) or saturated (≥).
    busy_ev = _ev(rules, "gpu_busy.saturated", "GPU busy (kernels, copies, memsets)", busy, "≥" if saturated else "<")
    causes = sorted((f for f in found if f.id in _CAUSES), key=lambda f: -f.stake_pct)
    mix = [f for f in found if f.id in _MIX]

    if not saturated:
        primary = causes[0] if causes else None
        if primary is None:
            other = b.share_pct("idle_other")
            if other >= max((b.share_pct(c) for c in ("idle_data_wait", "idle_sync", "idle_host_overhead")), default=0):
                return Verdict("insufficient_evidence", 0.0, None,
                               f"the GPU is idle {100 - busy:.0f} % of step time, but the trace records no host "
                               f"activity (data wait, synchronization, launches) that explains most of it",
                               [busy_ev, _ctx("GPU idle with no host activity recorded", other, "%")])
            return Verdict("balanced", 0.5, None, "no single cause stands out in the measured breakdown", [busy_ev])
    else:
        contenders = [f for f in causes if f.severity == "high"] + mix
        contenders.sort(key=lambda f: -f.stake_pct)
        primary = contenders[0] if contenders else None
        if primary is None:
            return Verdict("balanced", 0.5, None,
                           f"the GPU is busy {busy:.0f} % of step time and neither compute-heavy nor memory-bound "
                           "kernels dominate", [busy_ev])

    # Confidence: the grade of the evidence, less for a contested lead or weak step structure.
    conf = 0.9 if primary.severity == "high" else 0.7
    rivals = sorted((f for f in causes + mix if f is not primary and f.axis != primary.axis and f.severity != "info"),
                    key=lambda f: -f.stake_pct)
    if rivals and rivals[0].stake_pct > 0.7 * primary.stake_pct:
        conf -= 0.15
    if inp.segmentation.method == "whole_trace":
        conf -= 0.15
    elif len(inp.segmentation.steps) < 3:
        conf -= 0.1
    conf = round(min(0.97, max(0.05, conf)), 2)
    summary = f"{primary.title} — {primary.detail}" if primary.detail else primary.title
    evidence = list(primary.evidence)
    if not any(e.metric.startswith("GPU busy") for e in evidence):
        evidence.append(busy_ev)
    return Verdict(primary.axis, conf, primary.id, summary, evidence)
