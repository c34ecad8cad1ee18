"""The live verdict: the D·A·M axis of a window of sampled counters, from the findings the live
measures raised (:mod:`trainscope.analyzers.findings`), in the order of the textbook flowchart
(Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Pipeline Optimizations ›
Systematic Optimization Framework) with the corrections of docs/diagnosis.md §2:

1. While the GPU is starved (time-weighted utilization below ``gpu_busy.saturated``), the verdict is
   Data only with positive evidence: a finding of the live flowchart's ``data`` step (the step-exact
   DataLoader wait, or the SageMaker Debugger patterns — GPU near idle while the host/loader CPU or
   I/O wait saturates in most samples). Starved with no such evidence is "insufficient evidence"
   (launch overhead, sync, communication: a trace tells).
2. Otherwise a finding of the ``capacity`` step (memory near capacity).
3. Otherwise one of the ``busy`` step: what the busy time is spent on (GPM, else NVML).
4. No GPU at all (a CPU job): the step-exact wait alone decides Data versus the step itself.

The verdict reads each finding's step from its spec, never a list of finding ids.
"""

from __future__ import annotations

from trainscope.analyzers import findings as registry
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import Verdict
from trainscope.analyzers.findings.common import live_ev
from trainscope.analyzers.findings.kernels import live_cpu_step
from trainscope.analyzers.live.window_stats import WindowStats
from trainscope.analyzers.rules import Rules

_CONF = {"high": 0.9, "moderate": 0.7, "info": 0.5}


def _step(f: Finding) -> str | None:
    s = registry.spec(f.id)
    return s.live.step if s is not None and s.live is not None else None


def _verdict(f: Finding, conf: float | None = None, extra: list[Evidence] | None = None) -> Verdict:
    return Verdict(
        f.axis,
        conf if conf is not None else _CONF[f.severity],
        f.id,
        f"{f.title} — {f.detail}" if f.detail else f.title,
        list(f.evidence) + (extra or []),
    )


def live_verdict(s: WindowStats, found: list[Finding], rules: Rules) -> Verdict:
    """The verdict of a window from its findings (in the live engine's evaluation order)."""
    at = {step: [f for f in found if _step(f) == step] for step in ("data", "capacity", "busy")}
    data = at["data"]
    if s.gpu_util is None:
        if data:
            return _verdict(data[0])
        if s.data_wait_pct is not None and s.enough_steps(rules):
            return _verdict(live_cpu_step(s, rules), 0.6)
        return Verdict(
            "insufficient_evidence",
            0.0,
            None,
            "no GPU counters and no step timings: nothing measures where the time goes "
            "(launch the job with `trainscope watch -- python …` for step-exact timing)",
            [],
        )

    saturated = rules.value("gpu_busy.saturated")
    busy_ev = live_ev(
        rules,
        "gpu_busy.saturated",
        "GPU utilization (time-weighted)",
        s.gpu_util,
        "≥" if s.gpu_util >= saturated else "<",
    )
    if s.gpu_util < saturated:
        if data:  # measured (step-exact) before inferred (counter patterns), high before moderate
            return _verdict(sorted(data, key=lambda f: f.severity != "high")[0], extra=[busy_ev])
        return Verdict(
            "insufficient_evidence",
            0.0,
            None,
            f"the GPU is busy {s.gpu_util:.0f} % of the time, but the counters show no input-pipeline "
            "saturation; launch overhead, synchronization or communication can idle a GPU too — record a "
            "trace and run `trainscope analyze` to tell them apart",
            [busy_ev],
        )
    if at["capacity"]:
        return _verdict(at["capacity"][0], extra=[busy_ev])
    if at["busy"]:
        f = at["busy"][0]
        return _verdict(f, 0.85 if f.severity == "high" else 0.6)
    if s.gpu_mem_ctrl is None and s.dram_util is None:
        why = "this source has neither GPM nor memory-controller counters to tell compute-bound from memory-bound"
    else:
        why = "neither compute nor memory traffic dominates"
    return Verdict("balanced", 0.5, None, f"the GPU is busy {s.gpu_util:.0f} % of the time and {why}", [busy_ev])
