"""Hardware counters as compute- versus memory-bound evidence (docs/diagnosis.md §2.3).

Nsight Systems samples them with ``nsys profile --gpu-metrics-devices=all`` (table
``GPU_METRICS``): "SMs Active", "Tensor Active" and "DRAM Read/Write Bandwidth", each a
throughput percentage of the GPU's peak. Means are taken over the samples inside the steps.
Compute-bound: SM (or tensor) activity high while DRAM bandwidth is low; memory-bound: DRAM
bandwidth high while SM/tensor activity is low. Where counters decide, they replace the
kernel-mix finding of the same direction, whose numbers stay as context.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.rules import Threshold
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.traces.model import Trace

SM_ACTIVE = re.compile(r"^SMs? Active", re.I)
TENSOR_ACTIVE = re.compile(r"^Tensor (Active|Pipe)", re.I)
DRAM_BANDWIDTH = re.compile(r"^DRAM (Read|Write) Bandwidth", re.I)
_SOURCE = "Nsight Systems GPU_METRICS (--gpu-metrics-devices)"


@dataclass(frozen=True)
class CounterSummary:
    device: int | None
    samples: int  # SM-active samples inside the steps
    sm_active_pct: float | None
    tensor_active_pct: float | None
    dram_bandwidth_pct: float | None  # read + write, capped at 100

    @property
    def compute_activity_pct(self) -> float | None:
        vals = [v for v in (self.sm_active_pct, self.tensor_active_pct) if v is not None]
        return max(vals) if vals else None


def _mean(trace: Trace, sel: np.ndarray, rx: re.Pattern[str]) -> tuple[float | None, int, dict[str, float]]:
    c = trace.counters
    per_name: dict[str, float] = {}
    n = 0
    for i in np.unique(c.name[sel]):
        name = trace.strings[int(i)]
        if rx.search(name):
            vals = c.value[sel & (c.name == i)]
            per_name[name] = float(vals.mean())
            n = max(n, len(vals))
    if not per_name:
        return None, 0, per_name
    return sum(per_name.values()) / len(per_name), n, per_name


def counter_summary(trace: Trace, segmentation: StepSegmentation, device: int | None) -> CounterSummary | None:
    c = trace.counters
    if not len(c):
        return None
    sel = iv.contains((segmentation.starts, segmentation.ends), c.ts)
    if device is not None:
        sel &= c.device == device
    sm, n, _ = _mean(trace, sel, SM_ACTIVE)
    tensor, _, _ = _mean(trace, sel, TENSOR_ACTIVE)
    _, _, dram_parts = _mean(trace, sel, DRAM_BANDWIDTH)
    dram = min(100.0, sum(dram_parts.values())) if dram_parts else None
    if sm is None and tensor is None and dram is None:
        return None
    return CounterSummary(device, n, sm, tensor, dram)


def counter_split(s: CounterSummary | None, rules: Rules) -> tuple[dict[str, float], list[Evidence]] | None:
    """The busy-time split the counters decide (all compute-bound, or all memory-bound) and its
    evidence lines; None when the counters are absent or decide neither (then the roofline or the
    kernel mix splits busy time, with the counters as context)."""
    if s is None or s.compute_activity_pct is None or s.dram_bandwidth_pct is None:
        return None
    act, dram = s.compute_activity_pct, s.dram_bandwidth_pct
    t = {
        n: rules[f"gpu_metrics.{n}"] for n in ("compute_active", "compute_dram_max", "memory_dram", "memory_active_max")
    }

    def line(metric: str, v: float, thr: Threshold, op: str) -> Evidence:
        return Evidence(
            metric, round(v, 2), "%", f"{op} {thr.value:g}", thr.source, v >= thr.value if op == "≥" else v < thr.value
        )

    a_name, d_name = (
        "SM / tensor activity (GPU_METRICS mean in the steps)",
        "DRAM bandwidth, read + write (GPU_METRICS mean in the steps)",
    )
    samples = Evidence("counter samples in the steps", s.samples, "samples", "", _SOURCE)
    if act >= t["compute_active"].value and dram < t["compute_dram_max"].value:
        return {"compute": 1.0}, [
            line(a_name, act, t["compute_active"], "≥"),
            line(d_name, dram, t["compute_dram_max"], "<"),
            samples,
        ]
    if dram >= t["memory_dram"].value and act < t["memory_active_max"].value:
        return {"memory": 1.0}, [
            line(d_name, dram, t["memory_dram"], "≥"),
            line(a_name, act, t["memory_active_max"], "<"),
            samples,
        ]
    return None


def counter_context(s: CounterSummary | None) -> list[Evidence]:
    """The counters as context lines, where they decide nothing."""
    if s is None or s.compute_activity_pct is None or s.dram_bandwidth_pct is None:
        return []
    return [
        Evidence("SM / tensor activity (GPU_METRICS)", round(s.compute_activity_pct, 2), "%", "", _SOURCE),
        Evidence("DRAM bandwidth (GPU_METRICS)", round(s.dram_bandwidth_pct, 2), "%", "", _SOURCE),
    ]
