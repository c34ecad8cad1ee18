"""HTA's critical path of one step, summarized, and set beside the shares-based verdict.

Holistic Trace Analysis builds a dependency graph of a step (CPU ops, launches, kernels, waits)
and takes its longest weighted path: the chain that sets the step's length. It labels each edge
on the path with what bounds it (``bound_by``). Here those labels become six shares of the path,
and :func:`reconcile` says whether the path points at the same cause as the verdict, which comes
from exclusive time shares, and if not, why. Pure functions over HTA's edge table; HTA is run
by :mod:`trainscope.analyzers.deep.second_opinion`.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

from trainscope.analyzers import findings as registry

# HTA BoundType value -> trainscope category, in display order.
CP_CATEGORIES: tuple[str, ...] = (
    "data_loading",
    "cpu",
    "launch_overhead",
    "gpu_compute",
    "gpu_communication",
    "kernel_gaps",
)
CP_LABELS = {
    "data_loading": "data loading",
    "cpu": "CPU work",
    "launch_overhead": "kernel launch overhead",
    "gpu_compute": "GPU compute",
    "gpu_communication": "GPU communication",
    "kernel_gaps": "kernel-to-kernel gaps",
}
HTA_BOUND = {
    "data_loading": "data_loading",
    "cpu_bound": "cpu",
    "gpu_kernel_launch_overhead": "launch_overhead",
    "gpu_compute_bound": "gpu_compute",
    "gpu_communication_bound": "gpu_communication",
    "gpu_kernel_kernel_overhead": "kernel_gaps",
}
# Which family of findings each path category is evidence for. Gaps between kernels and
# launch delays are the host failing to keep the GPU queue full.
CATEGORY_FAMILY = {
    "data_loading": "data",
    "cpu": "host",
    "launch_overhead": "host",
    "kernel_gaps": "host",
    "gpu_compute": "gpu-compute",
    "gpu_communication": "communication",
}
# Each finding's family, as declared in the registry (FindingSpec.critical_path; "none": no time on the path).
FINDING_FAMILY = {s.id: s.critical_path for s in registry.REGISTRY.values() if s.critical_path not in (None, "none")}
FAMILY_LABELS = {
    "data": "data loading",
    "host": "host (CPU work and kernel launches)",
    "gpu-compute": "GPU compute",
    "communication": "communication",
}
FAMILY_CATEGORIES = {fam: [c for c, f in CATEGORY_FAMILY.items() if f == fam] for fam in FAMILY_LABELS}


@dataclass(frozen=True)
class PathEvent:
    """One event name's time on the critical path (summed over its edges)."""

    name: str
    category: str
    ms: float
    count: int


@dataclass(frozen=True)
class CriticalPath:
    step: str  # the step label, e.g. "ProfilerStep#1010"
    step_ms: float  # the step's length (trainscope's segmentation)
    path_ms: float  # summed edge weights on the path
    span_ms: float  # from the path's first node to its last
    shares_pct: dict[str, float]  # CP_CATEGORIES -> % of path_ms
    top_events: list[PathEvent]
    edges: int
    has_cuda_sync: bool  # HTA needs CUDA sync events to see the host waiting on the GPU

    @property
    def dominant(self) -> str:
        return max(CP_CATEGORIES, key=lambda c: self.shares_pct.get(c, 0.0))

    def family_pct(self, family: str) -> float:
        return sum(self.shares_pct.get(c, 0.0) for c in FAMILY_CATEGORIES[family])

    @property
    def dominant_family(self) -> str:
        return max(FAMILY_LABELS, key=self.family_pct)


@dataclass(frozen=True)
class Reconciliation:
    agree: bool | None  # None: the verdict names no cause to compare with
    verdict_family: str | None
    path_family: str
    summary: str
    reasons: list[str] = field(default_factory=list)


def summarize_path(
    edges: Any, step: str, step_ms: float, span_us: float, has_cuda_sync: bool, top_n: int = 8
) -> CriticalPath:
    """Summarize HTA's ``CPGraph.get_critical_path_breakdown()`` table (one row per path edge;
    ``duration`` in µs, ``bound_by`` an HTA BoundType value, ``""`` for zero-weight dependencies)."""
    rows = edges[edges["bound_by"].isin(list(HTA_BOUND))]
    total_us = float(edges["duration"].sum())
    by = rows.groupby("bound_by")["duration"].sum()
    shares = dict.fromkeys(CP_CATEGORIES, 0.0)
    for bound, us in by.items():
        shares[HTA_BOUND[bound]] += 100.0 * float(us) / total_us if total_us else 0.0
    named = rows[rows["duration"] > 0]
    grouped = named.groupby(["s_name", "bound_by"])["duration"].agg(["sum", "count"])
    grouped = grouped.sort_values("sum", ascending=False).head(top_n)
    top = [
        PathEvent(str(name), HTA_BOUND[bound], float(r["sum"]) / 1e3, int(r["count"]))
        for (name, bound), r in grouped.iterrows()
    ]
    return CriticalPath(
        step=step,
        step_ms=step_ms,
        path_ms=total_us / 1e3,
        span_ms=span_us / 1e3,
        shares_pct={c: round(v, 2) for c, v in shares.items()},
        top_events=top,
        edges=len(edges),
        has_cuda_sync=has_cuda_sync,
    )


def reconcile(
    cp: CriticalPath,
    bottleneck: str | None,
    step_breakdown_pct: dict[str, float],
    host_ahead_queue: float | None = None,
) -> Reconciliation:
    """Does the critical path point at the verdict's cause? ``step_breakdown_pct`` is the
    verdict's exclusive breakdown of step time (category -> %), used to explain a disagreement;
    ``host_ahead_queue`` the busiest stream's mean CUDA-queue length (HTA) when it shows the host
    running ahead of the GPU (at or above ``launch.queue_starved``), else None."""
    path_family = cp.dominant_family
    lead = f"{cp.family_pct(path_family):.0f} % of the critical path is {FAMILY_LABELS[path_family]}"
    fam = FINDING_FAMILY.get(bottleneck or "")
    if fam is None:
        return Reconciliation(
            None, None, path_family, f"{lead}; the shares-based verdict names no single cause to compare with", []
        )
    on_path = cp.family_pct(fam)
    if fam == path_family:
        return Reconciliation(
            True, fam, path_family, f"agrees: {lead}, the same cause as the verdict ({bottleneck})", []
        )
    reasons: list[str] = []
    stake = _verdict_stake(bottleneck, step_breakdown_pct)
    reasons.append(
        f"the verdict ({bottleneck}) counts {stake:.1f} % of step time in which only that was happening; "
        f"on the critical path {FAMILY_LABELS[fam]} is {on_path:.1f} %: that time ran beside a longer chain "
        f"of {FAMILY_LABELS[path_family]}, so removing it alone would shorten the step by less than its share"
        if stake is not None
        else f"on the critical path {FAMILY_LABELS[fam]} is {on_path:.1f} %"
    )
    if fam == "communication" and on_path < 1.0:
        reasons.append(
            "collectives run on their own stream; HTA links a kernel back to the host only through "
            "CUDA synchronization events, so communication the host never waits on explicitly "
            "cannot be on its path"
        )
    if not cp.has_cuda_sync and path_family == "host":
        reasons.append(
            "the trace has no CUDA synchronization events (PyTorch ≥ 2.1 records them with "
            "`experimental_config=_ExperimentalConfig(enable_cuda_sync_events=True)`): HTA cannot see the host waiting on the GPU, so "
            "host time that was really a wait counts as CPU work on the path"
        )
    coverage = 100.0 * cp.span_ms / cp.step_ms if cp.step_ms else 0.0
    if coverage < 80.0:
        reasons.append(
            f"the path spans {cp.span_ms:.1f} ms of the {cp.step_ms:.1f} ms step ({coverage:.0f} %): "
            "HTA's path is the heaviest chain of dependent work it can see, not a cover of the step, while the "
            "shares cover all of it"
        )
    if path_family == "host" and host_ahead_queue is not None:
        reasons.append(
            f"HTA's own queue lengths show the host ahead of the GPU (busiest stream holds {host_ahead_queue:.1f} "
            "operations on average): the GPU did not wait for that host chain, which again points at "
            "missing GPU-to-host dependencies rather than a host-bound step"
        )
    cpu_events = [e for e in cp.top_events if CATEGORY_FAMILY[e.category] == "host"][:3]
    if path_family == "host" and cpu_events:
        reasons.append("largest host items on the path: " + ", ".join(f"{e.name} {e.ms:.1f} ms" for e in cpu_events))
    summary = (
        f"disagrees: {lead}, while the shares-based verdict is {bottleneck}. The critical path names "
        f"what shortens this step; the shares name where the GPU's time went"
    )
    return Reconciliation(False, fam, path_family, summary, reasons)


def _verdict_stake(bottleneck: str | None, pct: dict[str, float]) -> float | None:
    decl = registry.spec(bottleneck or "")
    cats = decl.breakdown if decl is not None and decl.breakdown else None
    return None if cats is None else sum(pct.get(c, 0.0) for c in cats)
