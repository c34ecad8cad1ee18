"""What-if projections: the step time if one or more fixes worked as well as they possibly could.

Each fix is a *lever*: it removes GPU-idle time (the GPU waited on the host: data, syncs,
launches) or GPU-busy time (copies or communication hidden behind compute, GEMMs sped up by
tensor cores, kernels fused away). With ``T`` the step, ``B`` the GPU's busy time and the removed
totals ``I`` (idle) and ``U`` (busy), the projected step is

    T' = max(T − I − U,  B − U)

The second term is the floor: removing idle time cannot make the step shorter than the GPU's own
work. For one lever this is exactly the formula behind that fix's projection in
:mod:`recommendations` (a test holds them equal); for several, their removals add up, except that
levers drawing on the same time (:data:`POOLS`) together remove no more than it holds. Every
projection is an upper bound on the gain.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainscope.analyzers import findings as registry
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.recommendations import removable


@dataclass(frozen=True)
class Lever:
    recommendation: str  # recommendation id
    label: str  # what is assumed, for a toggle
    idle_pct: float = 0.0  # GPU-idle time removed, % of step time
    busy_pct: float = 0.0  # GPU-busy time removed, % of step time


def _pools() -> dict[str, tuple[str, ...]]:
    """Pools with more than one fix (from the registry): their fixes overlap in the time they remove."""
    out = {}
    for name in registry.POOL_CATEGORIES:
        members = registry.pool_members(name)
        if len(members) > 1:
            out[name] = members
    return out


# Fixes whose removals overlap draw from one pool: together they cannot remove more than the pool
# holds. Pageable copies are a subset of all copies; GPU idle after a blocking sync is filed by the
# breakdown under sync, launch/CPU overhead or "other" idle, where the other two levers also draw.
POOLS: dict[str, tuple[str, ...]] = _pools()
POOL_CATEGORIES: dict[str, tuple[str, ...]] = {k: registry.POOL_CATEGORIES[k] for k in POOLS}


def _pooled(a: Analysis, use: list[Lever], attr: str) -> float:
    """Sum of ``attr`` over ``use``, with each pool's levers capped at what the pool holds."""
    total = 0.0
    pooled = {r for ids in POOLS.values() for r in ids}
    for name, ids in POOLS.items():
        members: list[float] = [getattr(lv, attr) for lv in use if lv.recommendation in ids]
        if members:
            cap = sum(a.breakdown.share_pct(c) for c in POOL_CATEGORIES[name])
            total += min(sum(members), max(cap, max(members)))  # one lever alone keeps its own projection
    rest: float = sum(getattr(lv, attr) for lv in use if lv.recommendation not in pooled)
    return total + rest


@dataclass(frozen=True)
class Projection:
    step_ms: float  # mean step, measured
    projected_step_ms: float
    speedup: float
    levers: tuple[str, ...]
    basis: str


def levers(a: Analysis) -> dict[str, Lever]:
    """The lever of every recommendation of ``a`` that has a projection, by recommendation id: what
    time it removes comes from its finding's declaration (the fix's projection kind)."""
    b = a.breakdown
    by_id: dict[str, Finding] = {}
    for found in a.findings:  # the first of an id: the one its recommendation was projected from
        by_id.setdefault(found.id, found)
    out: dict[str, Lever] = {}
    for r in a.recommendations:
        f = by_id.get(r.finding)
        decl = registry.spec(r.finding)
        fx = decl.fix_for(getattr(a, "context", None)) if decl is not None else None
        if r.projected_speedup is None or f is None or fx is None:
            continue
        if fx.projection in ("idle", "data-wait", "roofline", "busy"):
            # the same lever as the recommendation's projection: its stake, less the one-off costs
            got = removable(f, fx, b, getattr(a, "busy_bound", None), getattr(a, "steady", None))
            if got is None:
                continue
            lever = Lever(r.id, fx.whatif_label, idle_pct=got[0], busy_pct=got[1])
        elif fx.projection == "amdahl" and a.device_spec is not None:
            s = a.device_spec.tensor_tflops / a.device_spec.fp32_tflops
            lever = Lever(r.id, f"{fx.whatif_label} ({s:.1f}× on tensor cores)", busy_pct=f.stake_pct * (1.0 - 1.0 / s))
        else:
            continue  # a fix whose gain this model cannot express: no toggle rather than a wrong one
        out[r.id] = lever
    return out


def project(a: Analysis, chosen: list[str] | tuple[str, ...]) -> Projection:
    """The projected mean step time with the levers ``chosen`` (recommendation ids) all applied."""
    table = levers(a)
    use = [table[c] for c in chosen if c in table]
    b = a.breakdown
    busy = b.gpu_busy_pct
    idle = _pooled(a, use, "idle_pct")
    removed_busy = _pooled(a, use, "busy_pct")
    left_pct = max(100.0 - idle - removed_busy, busy - removed_busy, 1e-6)
    step = b.step_ms.mean
    speedup = 100.0 / left_pct
    basis = (
        f"T' = max(T − idle {idle:.1f} % − busy {removed_busy:.1f} %, GPU busy {busy:.1f} % − {removed_busy:.1f} %)"
        f" = {left_pct:.1f} % of T"
    )
    return Projection(step, step * left_pct / 100.0, speedup, tuple(lv.recommendation for lv in use), basis)
