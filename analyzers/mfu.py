"""Model FLOPs utilization, when the trace carries FLOP counts (``with_flops=True``).

MFU = FLOPs per step × steps per second / peak FLOP/s (Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Identifying Bottlenecks).
The FLOPs are those the profiler counts for matmul/convolution operators; the peak is the dense
FP16/BF16 tensor peak of the device table, or ``--peak-tflops``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers.devices import lookup
from trainscope.analyzers.intervals import contains
from trainscope.analyzers.steps import StepSegmentation
from trainscope.traces.model import Trace


@dataclass(frozen=True)
class MFU:
    value_pct: float | None
    reason: str  # how it was computed, or why it is unknown
    flops_per_step: float | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None


def model_flops_utilization(trace: Trace, segmentation: StepSegmentation, device: int | None,
                            peak_tflops: float | None = None) -> MFU:
    ops = trace.cpu_ops
    has = ~np.isnan(ops.flops)
    if not has.any():
        return MFU(None, "unknown: the trace has no FLOP counts (record with torch.profiler.profile(with_flops=True))")
    ws, we = segmentation.starts, segmentation.ends
    inside = contains((ws, we), ops.ts)  # steps are sorted and disjoint
    flops = float(ops.flops[has & inside].sum())
    total_s = float((we - ws).sum()) / 1e9
    if flops <= 0 or total_s <= 0:
        return MFU(None, "unknown: no FLOP-counted operators inside the analyzed steps")
    if peak_tflops is not None:
        peak, source = peak_tflops, "--peak-tflops"
    else:
        dev = trace.device(device) if device is not None else None
        spec = lookup(dev.name if dev else None)
        if spec is None:
            name = dev.name if dev else "unknown device"
            return MFU(None, f"unknown: no peak FLOP/s known for {name!r} (pass --peak-tflops)", flops / len(ws))
        peak, source = spec.tensor_tflops, spec.source
    value = 100.0 * flops / total_s / (peak * 1e12)
    return MFU(value, f"{flops / len(ws) / 1e12:.3g} TFLOP per step (profiler-counted) over {peak:g} TFLOP/s peak",
               flops / len(ws), peak, source)
