"""CUDA graphs replayed with their kernels untraced (Nsight's graph-level trace): the GPU is busy,
but with what — and so whether compute or memory bounds it — the trace does not say."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import DiffMeasure, Finding, FindingSpec, Fix, by_stake
from trainscope.analyzers.findings.common import ctx, ev
from trainscope.analyzers.rules import Rules

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.analysis import Analysis
    from trainscope.analyzers.findings.observations import DiagnosisInput

NODE_HINT = "nsys profile --cuda-graph-trace=node"


def _replay_ns(extra: dict[str, object]) -> float:
    raw = extra.get("graph_replay_ns", 0)
    return float(raw) if isinstance(raw, (int, float)) else 0.0


def _count(raw: object) -> float:
    return float(raw) if isinstance(raw, (int, float)) else 0.0


def _replay_ms_per_step(a: "Analysis") -> float | None:
    if a.observations is None:
        return None
    return _replay_ns(a.observations.extra) / 1e6 / max(1, len(a.breakdown.steps))


def _graphs(obs: "DiagnosisInput", rules: Rules) -> Finding | None:
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
    fix=Fix(
        "record-graph-nodes",
        "Record the graphs' kernels to find what bounds them",
        f"# the replays were traced at graph level; trace their nodes:\n# {NODE_HINT} python your_script.py",
        f"# the replays were traced at graph level; trace their nodes:\n# {NODE_HINT} ./app",
        projection="none",
        basis="no projection: the kernels' bound is unknown",
    ),
    whatif_pool=None,
    diff_measure=DiffMeasure("GPU time in untraced CUDA graph replays", "ms per step", _replay_ms_per_step),
    critical_path="gpu-compute",
    headline="GPU-BOUND (CUDA graphs, bound unknown)",
    label_class=None,
    sink="busy-unknown",
    breakdown=("compute",),
    describes="GPU time in CUDA graph replays traced without their kernels (Nsight graph-level trace)",
)

SPECS = (GRAPH_REPLAYS,)
