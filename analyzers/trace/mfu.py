"""Model FLOPs utilization, from recorded FLOP counts and/or estimated from operator shapes, and
the Iron Law of training performance measured factor by factor.

MFU = FLOPs per step × steps per second / peak FLOP/s (Machine Learning Systems (mlsysbook.ai),
Model Training chapter). Two estimates, shown side by side when both exist:

- **recorded**: the ``flops`` the profiler counts for matmul/convolution operators
  (``with_flops=True``) over the dense FP16/BF16 tensor peak (or ``--peak-tflops``);
- **estimated from shapes**: the FLOPs of the window's matrix products (GEMM, convolution,
  attention) from their operators' recorded shapes (:mod:`cost`), over the device's peak at the
  precision most of those FLOPs ran in (tensor-core peak where that precision has tensor cores).

The Iron Law: step time = FLOPs per step / (GPUs × peak × η). With the step time measured, η is the
MFU; pipeline efficiency (the share of step time a kernel runs) is shown beside it, and the gap
between them is attributed from the roofline: memory-bound busy time, compute-bound math off the
tensor cores, kernels of unknown bound, communication, host-device copies — a GPU can be busy and
still far from peak. The gap is read off the verdict's exclusive sinks (:mod:`sinks`): every
nanosecond of busy time once, kernels overlapping on concurrent streams included, so the two
readings of the same trace agree (summed kernel time would count an overlap twice).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

import numpy as np

from trainscope.analyzers.devices import DeviceSpec
from trainscope.analyzers.devices import lookup_device
from trainscope.analyzers.intervals import contains
from trainscope.analyzers.trace.record_options import how_to_record
from trainscope.analyzers.trace.roofline import Roofline
from trainscope.analyzers.trace.sinks import Sinks
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.traces.model import Trace


@dataclass(frozen=True)
class IronLaw:
    step_s: float  # mean step time (measured)
    flops_per_step: float
    flops_source: str
    gpus: int
    gpus_source: str
    peak_tflops: float
    peak_source: str
    efficiency_pct: float  # η = MFU
    pipeline_efficiency_pct: float  # GPU busy share of step time
    gap: dict[str, float] = field(default_factory=dict)  # cause → % of step time (busy but not at peak)

    @property
    def formula(self) -> str:
        return (
            f"step time = FLOPs/step / (GPUs × peak × η) = {self.flops_per_step:.3g} / "
            f"({self.gpus} × {self.peak_tflops:g}e12 × {self.efficiency_pct / 100:.3g}) = {self.step_s * 1e3:.1f} ms"
        )


@dataclass(frozen=True)
class MFU:
    value_pct: float | None
    reason: str  # how it was computed, or why it is unknown
    flops_per_step: float | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    basis: str | None = None  # "recorded flops" | "estimated from shapes" (what value_pct is)
    shapes_pct: float | None = None  # the estimate from shapes, also when recorded FLOPs exist
    shapes_reason: str = ""
    shapes_flops_per_step: float | None = None
    recorded_pct: float | None = None
    iron_law: IronLaw | None = None


def _recorded(
    trace: Trace, segmentation: StepSegmentation, device: int | None, peak_tflops: float | None, spec: DeviceSpec | None
) -> MFU:
    ops = trace.cpu_ops
    has = ~np.isnan(ops.flops)
    if not has.any():
        return MFU(None, f"unknown: the trace has no FLOP counts ({how_to_record(trace.format, 'flops')})")
    ws, we = segmentation.starts, segmentation.ends
    inside = contains((ws, we), ops.ts)  # steps are sorted and disjoint
    flops = float(ops.flops[has & inside].sum())
    total_s = float((we - ws).sum()) / 1e9
    if flops <= 0 or total_s <= 0:
        return MFU(None, "unknown: no FLOP-counted operators inside the analyzed steps")
    if peak_tflops is not None:
        peak, source = peak_tflops, "--peak-tflops"
    else:
        if spec is None:
            dev = trace.device(device) if device is not None else None
            spec = lookup_device(dev)
        if spec is None:
            dev = trace.device(device) if device is not None else None
            name = dev.name if dev else "unknown device"
            return MFU(None, f"unknown: no peak FLOP/s known for {name!r} (pass --peak-tflops)", flops / len(ws))
        peak, source = spec.tensor_tflops, spec.source
    value = 100.0 * flops / total_s / (peak * 1e12)
    return MFU(
        value,
        f"{flops / len(ws) / 1e12:.3g} TFLOP per step (profiler-counted) over {peak:g} TFLOP/s peak",
        flops / len(ws),
        peak,
        source,
        "recorded flops",
        recorded_pct=value,
    )


def model_flops_utilization(
    trace: Trace,
    segmentation: StepSegmentation,
    device: int | None,
    peak_tflops: float | None = None,
    roof: Roofline | None = None,
    busy_pct: float | None = None,
    sinks: Sinks | None = None,
) -> MFU:
    """MFU from recorded FLOPs and, given the window's :class:`~trainscope.analyzers.trace.roofline.Roofline`
    (``roof``), estimated from shapes, with the Iron Law when a peak is known. ``sinks``: the
    verdict's exclusive split of the same steps, which the Iron Law's gap is read from (none
    without it)."""
    spec = roof.spec if roof is not None else None
    rec = _recorded(trace, segmentation, device, peak_tflops, spec)
    if roof is None:
        return rec
    steps = max(1, len(segmentation.starts))
    total_s = float((segmentation.ends - segmentation.starts).sum()) / 1e9
    shaped = roof.source_ms.get("shapes", 0.0) + roof.source_ms.get("recorded flops", 0.0)
    s_pct, s_reason, s_fps, s_peak, s_src, s_on_tc = None, "", None, None, None, True
    if shaped <= 0:
        s_reason = f"no kernel has FLOPs from operator shapes ({how_to_record(trace.format, 'shapes')})"
    elif spec is None:
        rate = roof.matrix_flops / total_s / 1e12 if total_s > 0 else 0.0
        s_reason = (
            f"achieved {rate:.3g} TFLOP/s of GEMM/conv/attention (from shapes), but no peak FLOP/s known for "
            f"{roof.device!r}: pass --peak-tflops for MFU"
        )
    elif total_s <= 0:
        s_reason = "no step time"
    else:
        by_prec = roof.matrix_flops_by_precision
        prec = max(by_prec, key=lambda p: by_prec[p]) if by_prec else "bf16"
        p = "fp32" if prec in ("unknown", "int") else prec
        s_peak, on_tc = spec.peak(p, True)
        s_src, s_on_tc = spec.source, on_tc
        flops = roof.matrix_flops
        s_fps = flops / steps
        if s_peak:
            s_pct = 100.0 * flops / total_s / (s_peak * 1e12)
            unit = (" matrix-core" if spec.vendor == "amd" else " tensor-core") if on_tc else ""
            s_reason = (
                f"estimated from shapes: {s_fps / 1e12:.3g} TFLOP of GEMM/conv/attention per step "
                f"/ {total_s / steps * 1e3:.1f} ms step / {s_peak:g} TFLOP/s {p}{unit} peak"
            )
            cover = 100.0 * roof.matrix_costed_ms / roof.matrix_ms if roof.matrix_ms else 100.0
            if cover < 95.0:
                s_reason += f" (shapes cover {cover:.0f} % of GEMM/conv/attention kernel time: a lower bound)"
        else:
            s_reason = f"no {p} peak known for the {spec.key}"
    on_tensor_cores = True  # the recorded FLOPs' peak (or --peak-tflops) is the dense tensor peak
    if rec.value_pct is not None:
        value, reason, fps, peak, src, basis = (
            rec.value_pct,
            rec.reason,
            rec.flops_per_step,
            rec.peak_tflops,
            rec.peak_source,
            rec.basis,
        )
    elif s_pct is not None:
        value, reason, fps, peak, src, basis = s_pct, s_reason, s_fps, s_peak, s_src, "estimated from shapes"
        on_tensor_cores = s_on_tc
    else:
        reason = ("unknown: " + s_reason) if shaped > 0 else rec.reason + ("; " + s_reason if s_reason else "")
        value, fps, peak, src, basis = None, None, None, None, None
    law = None
    if value is not None and fps and peak and total_s > 0:
        gpus = 1
        busy = busy_pct if busy_pct is not None else 0.0
        law = IronLaw(
            step_s=total_s / steps,
            flops_per_step=fps,
            flops_source="profiler-counted FLOPs"
            if basis == "recorded flops"
            else "operator shapes (GEMM/conv/attention)",
            gpus=gpus,
            gpus_source="this rank's trace (FLOPs and time per GPU)"
            + (f"; the job ran {trace.world_size} ranks" if trace.world_size else ""),
            peak_tflops=peak,
            peak_source=src or "",
            efficiency_pct=value,
            pipeline_efficiency_pct=busy,
            gap=_gap(roof, sinks, busy, value, on_tensor_cores),
        )
    return MFU(value, reason, fps, peak, src, basis, s_pct, s_reason, s_fps, rec.recorded_pct, law)


# The gap's causes, each with the verdict sinks it is read from (:data:`~trainscope.analyzers.trace.sinks.SINKS`).
OFF_TENSOR_CORES = "compute-bound math off the tensor cores"
TC_BELOW_PEAK = "tensor-core math below peak"  # what the MFU leaves of compute-bound tensor-core time
GAP_SINKS: dict[str, tuple[str, ...]] = {
    "memory-bound kernels": ("memory-bound",),  # memsets included: they only write bytes
    OFF_TENSOR_CORES: ("compute-bound",),  # × the roofline's off-tensor-core share of it
    "kernels of unknown bound": ("busy-unknown",),
    "communication kernels": ("comm", "imbalance"),  # not overlapped with compute
    "host-device copies": ("copies",),  # not overlapped with any kernel
}


def _gap(
    roof: Roofline, sinks: Sinks | None, busy_pct: float, mfu_pct: float, peak_on_tc: bool = True
) -> dict[str, float]:
    """Busy but not at peak, in % of step time, read off the verdict's exclusive sinks: each instant
    of GPU-busy time counts once (:func:`~trainscope.analyzers.intervals.exclusive_layers`), so
    kernels overlapping on concurrent streams are not counted twice. The compute-bound sink splits
    by the roofline's share of compute-bound kernel time whose roof is not a tensor-core roof.

    The MFU itself is busy time at peak: it is taken out of the compute-bound part whose roof the
    MFU's peak is (tensor-core math when the peak is a tensor-core peak; math off the tensor cores
    when it is the FP32 peak of FP32 math run without tensor cores), then out of the other part. So
    the causes add up to pipeline efficiency − MFU whenever the compute-bound sink holds the MFU
    (the other causes are their sinks as they are); what is left of the tensor-core part is
    "tensor-core math below peak"."""
    if sinks is None or not sinks.total_ns or busy_pct <= 0:
        return {}
    compute_ms = roof.bound_ms.get("compute", 0.0)
    off_tc = min(1.0, roof.non_tensor_compute_ms / compute_ms) if compute_ms > 0 else 0.0
    ns = {k: max(0, s.ns) for k, s in sinks.by_key.items()}  # whole ns: no float residue below zero
    out = {cause: 100.0 * sum(ns.get(k, 0) for k in keys) / sinks.total_ns for cause, keys in GAP_SINKS.items()}
    compute = out.pop(OFF_TENSOR_CORES)
    parts = {OFF_TENSOR_CORES: compute * off_tc, TC_BELOW_PEAK: compute * (1.0 - off_tc)}
    at_peak = max(0.0, mfu_pct)
    first, second = (TC_BELOW_PEAK, OFF_TENSOR_CORES) if peak_on_tc else (OFF_TENSOR_CORES, TC_BELOW_PEAK)
    for key in (first, second):
        take = min(parts[key], at_peak)
        parts[key] -= take
        at_peak -= take
    out = {**out, **parts}
    order = (*GAP_SINKS, TC_BELOW_PEAK)
    return {k: round(max(0.0, out[k]), 2) for k in order}
