"""A GPU kept busy by work whose bound the trace cannot establish: CUDA graphs replayed with their
kernels untraced (Nsight's graph-level trace), or kernels with no shapes, FLOPs or counters. The GPU is
busy, but whether compute or memory bounds that work the trace does not say — so the verdict is
GPU-bound with the bound unknown, and the fix is to record what would tell."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import verdict_class
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.findings.common import ev
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.record_options import how_to_record

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.findings.observations import DiagnosisInput
    from trainscope.analyzers.trace.analysis import Analysis

NODE_HINT = "nsys profile --cuda-graph-trace=node"


def _replay_ns(extra: dict[str, object]) -> float:
    raw = extra.get("graph_replay_ns", 0)
    return float(raw) if isinstance(raw, (int, float)) else 0.0


def _count(raw: object) -> float:
    return float(raw) if isinstance(raw, (int, float)) else 0.0


def _replay_ms_per_step(a: Analysis) -> float | None:
    if a.observations is None:
        return None
    return _replay_ns(a.observations.extra) / 1e6 / max(1, len(a.breakdown.steps))


def _graphs(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    ns = _replay_ns(obs.extra) if obs.extra else 0.0
    b = obs.breakdown
    if not obs.has_gpu or not ns or not b.total_ns:
        return None
    stake = 100.0 * ns / b.total_ns
    lines = [
        ctx(
            "GPU time in CUDA graph replays whose kernels were not traced",
            stake,
            "% of step time",
            "trace: CUPTI_ACTIVITY_KIND_GRAPH_TRACE (graph-level trace)",
        ),
        ctx("graph replays in the steps", _count(obs.extra.get("graph_replays", 0)), "replays", "trace"),
        ev(rules, "gpu_busy.saturated", "GPU busy (kernels, copies, memsets, graph replays)", b.gpu_busy_pct),
    ]
    detail = (
        f"the GPU is busy running CUDA graphs traced at graph level: no kernel names, FLOPs or bytes, so "
        f"whether compute or memory bounds them is unknown — profile with `{NODE_HINT}` for kernel detail"
    )
    return GRAPH_REPLAYS.finding(stake, lines, detail, rules)


GRAPH_REPLAYS = FindingSpec(
    id="algorithm/graph-replays",
    axis="algorithm",
    title="GPU busy with CUDA graph replays of unknown bound",
    measure=_graphs,
    can_be_primary=False,
    severity=by_stake("gpu_busy.saturated"),
    fix=catalog_fix("record-graph-nodes", projection="none", fill={"NODE_HINT": NODE_HINT}),
    diff_measure=DiffMeasure("GPU time in untraced CUDA graph replays", "ms per step", _replay_ms_per_step),
    critical_path="gpu-compute",
    headline="GPU-BOUND (CUDA graphs, bound unknown)",
    sink="busy-unknown",
    breakdown=("compute",),
    describes="GPU time in CUDA graph replays traced without their kernels (Nsight graph-level trace)",
)


def _unknown_bound(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    """Kernel work of unknown bound filling a saturated GPU (graph replays have their own finding)."""

    b, sinks = obs.breakdown, obs.sinks
    if not obs.has_gpu or sinks is None or not b.total_ns or (obs.extra and _replay_ns(obs.extra)):
        return None
    stake = sinks.pct("busy-unknown")
    if b.gpu_busy_pct < rules.value("gpu_busy.saturated") or stake < 50.0:
        return None
    fmt = obs.context.source_format if obs.context is not None else None
    lines = [
        ctx("kernel time whose bound is unknown (no shapes, FLOPs or counters)", stake, "% of step time", "sinks"),
        ev(rules, "gpu_busy.saturated", "GPU busy (kernels, copies, memsets)", b.gpu_busy_pct),
    ]
    detail = (
        "the GPU is saturated by kernels the trace gives no shapes, FLOPs or hardware counters for, so whether "
        f"compute or memory bounds them is unknown — {how_to_record(fmt, 'shapes')}"
    )
    return UNKNOWN_BOUND.finding(stake, lines, detail, rules)


def _unknown_ms_per_step(a: Analysis) -> float | None:
    return a.sinks.ms_per_step("busy-unknown") if a.sinks is not None else None


UNKNOWN_BOUND = FindingSpec(
    id="algorithm/gpu-bound-unknown",
    axis="algorithm",
    title="GPU saturated by kernel work of unknown bound",
    measure=_unknown_bound,
    can_be_primary=False,
    severity=by_stake("gpu_busy.saturated"),
    fix=catalog_fix("measure-the-bound", projection="none"),
    diff_measure=DiffMeasure("kernel time of unknown bound", "ms per step", _unknown_ms_per_step),
    **verdict_class("gpu-bound"),
    breakdown=("compute",),
    describes="a saturated GPU whose kernel work carries no shapes, FLOPs or counters to bound it by",
)

SPECS = (GRAPH_REPLAYS, UNKNOWN_BOUND)
