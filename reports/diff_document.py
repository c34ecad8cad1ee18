"""The diff as a plain, versioned document ("trainscope.diff/1"): the JSON output, and the single
source the terminal and Markdown renderings read."""

from __future__ import annotations

from typing import Any

from trainscope import __version__
from trainscope.analyzers.compare.diff import GateResult
from trainscope.analyzers.compare.diff import Run
from trainscope.analyzers.compare.diff import RunDiff
from trainscope.analyzers.compare.diff import ShareChange
from trainscope.analyzers.compare.history import FixOutcome
from trainscope.analyzers.compare.tree_diff import NodeChange
from trainscope.analyzers.compare.tree_diff import NodeGateResult
from trainscope.analyzers.compare.tree_diff import TreeDiff
from trainscope.analyzers.kernel_match import KernelChange
from trainscope.analyzers.trace.module_tree import STORED_LEVELS
from trainscope.analyzers.trace.module_tree import STORED_NODES
from trainscope.reports.document import AXIS_NAMES
from trainscope.reports.document import headline_word
from trainscope.reports.parts import rounded as _r

SCHEMA = "trainscope.diff/1"
KERNEL_ROWS = 20  # per group (grew, shrank, appeared, disappeared); match_counts has the totals
TREE_ROWS = 10  # nodes that changed most; and per list of renamed, added, removed nodes


def verdict_change_dict(v: Any) -> dict[str, Any]:
    """A verdict change (``diff.VerdictChange``), as the diff documents (traces or stored runs) write it."""
    return {
        "changed": v.changed,
        **{
            side: {
                "axis": getattr(v, f"{side}_axis"),
                "bottleneck": getattr(v, f"{side}_bottleneck"),
                "confidence": getattr(v, f"{side}_confidence"),
                "headline": verdict_headline(
                    getattr(v, f"{side}_axis"), getattr(v, f"{side}_bottleneck"), getattr(v, f"{side}_summary")
                ),
                "summary": getattr(v, f"{side}_summary"),
            }
            for side in ("before", "after")
        },
    }


def comparability_list(checks: Any) -> list[dict[str, Any]]:
    """Whether the two runs can be compared: each check (``diff.Comparability`` rows), before and after."""
    return [
        {"check": c.check, "status": c.status, "before": c.before, "after": c.after, "note": c.note} for c in checks
    ]


def step_time_dict(changes: Any) -> dict[str, dict[str, float | None]]:
    """Step-time statistics before and after (``diff.StepTimeChange`` rows), by statistic."""
    return {
        s.statistic: {
            "before": _r(s.before_ms, 3),
            "after": _r(s.after_ms, 3),
            "change_pct": _r(s.change_pct),
            "speedup": _r(s.speedup, 3),
        }
        for s in changes
    }


def verdict_headline(axis: str, bottleneck: str | None, summary: str = "") -> str:
    if axis == "insufficient_evidence":
        return "INSUFFICIENT EVIDENCE"
    if axis == "balanced":
        return "BALANCED"
    if axis == "not_representative":  # no steady state in the window: not a D·A·M axis
        return "NOT REPRESENTATIVE"
    return f"{headline_word(bottleneck, summary, axis.upper())} · D·A·M axis: {AXIS_NAMES[axis]}"


def _side(r: Run) -> dict[str, Any]:
    a = r.analysis
    return {
        "path": r.path,
        "source": a.source,
        "rank": a.rank,
        "traces": r.ranks,
        "device": a.device_name,
        "has_gpu": r.has_gpu,
        "steps": r.steps,
        "steps_method": a.segmentation.method,
        "batch_leading_dim": r.shapes.batch_dim,
        "shapes_recorded": r.shapes.recorded,
        "memory_recorded": bool(a.memory),
        "warnings": r.warnings,
        "compared": r.chosen,
        "fixed_window": r.fixed_window,
    }


def _work(d: RunDiff) -> dict[str, Any] | None:
    w = d.work
    if w is None:
        return None
    return {
        "basis": "per window (step, or the whole capture window), summed over every rank",
        "fixed_windows": w.fixed_windows,
        "kernel_ms": {
            "before": _r(w.before_kernel_ms, 3),
            "after": _r(w.after_kernel_ms, 3),
            "ratio": _r(w.kernel_time_ratio, 3),
        },
        "kernels": {"before": _r(w.before_kernels, 1), "after": _r(w.after_kernels, 1)},
        "flops": {"before": w.before_flops, "after": w.after_flops},
        "window_ms": {"before": _r(w.before_window_ms, 3), "after": _r(w.after_window_ms, 3)},
        "rank_pairs": [
            {
                "rank": p.rank,
                "before_device": p.before.device_name,
                "after_device": p.after.device_name,
                "before_kernel_ms_per_window": _r(p.before.kernel_ms_per_window, 3),
                "after_kernel_ms_per_window": _r(p.after.kernel_ms_per_window, 3),
                "before_kernels_per_window": _r(p.before.kernels_per_window, 1),
                "after_kernels_per_window": _r(p.after.kernels_per_window, 1),
                "before_step_p50_ms": _r(p.before.step_p50_ms, 3),
                "after_step_p50_ms": _r(p.after.step_p50_ms, 3),
            }
            for p in d.rank_pairs
        ],
    }


def _share(s: ShareChange) -> dict[str, Any]:
    d = {"label": s.label, "before_pct": _r(s.before_pct), "after_pct": _r(s.after_pct), "change_pts": _r(s.change_pts)}
    if s.before_ms_per_step is not None:
        d["before_ms_per_step"] = _r(s.before_ms_per_step, 3)
        d["after_ms_per_step"] = _r(s.after_ms_per_step, 3)
    return d


def _kernel(k: KernelChange) -> dict[str, Any]:
    return {
        "label": k.label,
        "match": k.match,
        "key": k.key,
        "class": k.kernel_class,
        "before_names": list(k.before_names),
        "after_names": list(k.after_names),
        "before_count": k.before_count,
        "after_count": k.after_count,
        "before_ms_per_step": _r(k.before_ms_per_step, 3),
        "after_ms_per_step": _r(k.after_ms_per_step, 3),
        "change_ms_per_step": _r(k.delta_ms_per_step, 3),
        "change_pct": _r(k.change_pct, 1),
    }


def gate_dict(g: GateResult | None) -> dict[str, Any] | None:
    if g is None:
        return None
    t = g.test
    test = (
        None
        if t is None
        else {
            "test": t.test,
            "one_sided": "AFTER worse than BEFORE",
            "p_value": t.p_value,
            "alpha": t.alpha,
            "significant": t.significant,
            "u": t.u,
            "z": _r(t.z, 4),
            "ties": t.ties,
            "n_before": t.n_before,
            "n_after": t.n_after,
            "min_p": t.min_p,
            "probability_worse": _r(t.probability_worse, 4),
            "effect": t.effect,
            "change": _r(t.change, 2),
            "interval": None if t.low is None else [_r(t.low, 2), _r(t.high, 2)],
            "confidence": t.confidence,
            "bootstrap": None if t.resamples is None else {"resamples": t.resamples, "seed": t.seed},
        }
    )
    return {
        "metric": g.metric,
        "threshold": g.threshold,
        "threshold_unit": g.threshold_unit,
        "before": _r(g.before, 3),
        "after": _r(g.after, 3),
        "worse_by": _r(g.change, 2),
        "regressed": g.regressed,
        "refused": g.refused,
        "reason": g.reason,
        "test": test,
    }


def _node(n: NodeChange) -> dict[str, Any]:
    return {
        "path": list(n.path),
        "after_path": None if n.after_path is None else list(n.after_path),
        "status": n.status,
        "kind": n.kind,
        "depth": n.depth,
        "before_ms": _r(n.before_ms, 3),
        "after_ms": _r(n.after_ms, 3),
        "change_ms": _r(n.change_ms, 3),
        "change_pct": _r(n.change_pct, 1),
        "before_self_ms": _r(n.before_self_ms, 3),
        "after_self_ms": _r(n.after_self_ms, 3),
        "before_gpu_pct": _r(n.before_share_pct),
        "after_gpu_pct": _r(n.after_share_pct),
        "before_pct_of_roof": _r(n.before_roof_pct, 1),
        "after_pct_of_roof": _r(n.after_roof_pct, 1),
        "instances": [n.before_instances, n.after_instances],
        "nodes": n.nodes,
    }


def node_gates_list(gates: list[NodeGateResult] | None) -> list[dict[str, Any]]:
    """The node budgets of the gate (``diff --gate``), each with the nodes it judged."""
    out = []
    for g in gates or []:
        out.append(
            {
                "budget": g.budget.text,
                "pattern": g.budget.pattern,
                "limit": g.budget.limit,
                "unit": g.budget.unit,
                "measure": "GPU time per step (relative %)" if g.budget.unit == "%" else "% of roof (points)",
                "regressed": g.regressed,
                "refused": g.refused,
                "reason": g.reason,
                "nodes": [
                    {
                        "path": list(v.node.after_path or v.node.path),
                        "status": v.node.status,
                        "worse_by": _r(v.worse_by, 2),
                        "judged": v.judged,
                        "why_not": v.why_not or None,
                    }
                    for v in g.verdicts[:TREE_ROWS]
                ],
                "nodes_total": len(g.verdicts),
            }
        )
    return out


def tree_diff_dict(t: TreeDiff | None, gates: list[NodeGateResult] | None = None) -> dict[str, Any] | None:
    """Where in the model, before and after (analyzers/compare/tree_diff.py): the first level, the nodes that
    changed most, the renamed, added and removed ones, and the node budgets of the gate."""
    if t is None:
        return None
    return {
        "basis": "GPU time per step window (per capture window without steps) of each node of the module trees "
        "(inclusive: the node and below it); nodes matched by path, a folded block's digit ranges masked; renamed: "
        "unmatched siblings of one kind with the same children (leaves: the same heaviest kernel); a node whose "
        "change lies (≥ 90 %) in one child is listed by that child",
        "before_gpu_ms": _r(t.before_gpu_ms, 3),
        "after_gpu_ms": _r(t.after_gpu_ms, 3),
        "windows": [t.before_windows, t.after_windows],
        "counts": t.counts(),
        "first_level": [_node(t.nodes[i]) for i in t.roots],
        "changed_most": [_node(n) for n in t.changed_most(TREE_ROWS)],
        "renamed": [_node(n) for n in t.by_status("renamed")[:TREE_ROWS]],
        "added": [_node(n) for n in t.by_status("added")[:TREE_ROWS]],
        "removed": [_node(n) for n in t.by_status("removed")[:TREE_ROWS]],
        "gates": node_gates_list(gates),
    } | (
        {
            # a side is a stored run: its tree's top levels (analyzers/trace/module_tree.py top_levels)
            "partial": True,
            "kept": f"the first {STORED_LEVELS} levels, then the heaviest nodes by GPU time; {STORED_NODES} "
            "nodes at most per run",
            "not_kept": t.not_kept,
        }
        if t.partial
        else {}
    )


def fixes_list(fixes: list[FixOutcome]) -> list[dict[str, Any]]:
    """Each earlier fix (analyzers.compare.history.FixOutcome): projected against achieved."""
    return [
        {
            "id": f.recommendation,
            "finding": f.finding,
            "title": f.title,
            "status": f.status,
            "projected_speedup": _r(f.projected_speedup, 3),
            "achieved_speedup": _r(f.achieved_speedup, 3),
            "achieved_basis": "BEFORE's mean step ÷ AFTER's (the basis of the projection)",
            "shared_with": list(f.shared_with),
            "metric": f.metric,
            "unit": f.unit,
            "before": _r(f.before, 3),
            "after": _r(f.after, 3),
            "line": f.line,
        }
        for f in fixes
    ]


def build_diff_document(
    d: RunDiff, gate: GateResult | None = None, node_gates: list[NodeGateResult] | None = None
) -> dict[str, Any]:
    v = d.verdict
    mem = d.memory
    return {
        "schema": SCHEMA,
        "tool": {"name": "trainscope", "version": __version__},
        "before": _side(d.before),
        "after": _side(d.after),
        "comparable": d.comparable,
        "comparability": comparability_list(d.comparability),
        "verdict": verdict_change_dict(v),
        "step_time_ms": step_time_dict(d.step_time),
        "gpu_busy": _share(d.gpu_busy),
        "data_wait": _share(d.data_wait),
        "categories": {c.name: _share(c) for c in d.categories},
        "kernel_classes": {c.name: _share(c) for c in d.kernel_classes},
        "kernels": {
            "basis": "kernels starting inside the analyzed steps on the analyzed GPU; times per step",
            "match_counts": d.match_counts(),
            "grew": [_kernel(k) for k in d.kernels_by("grew", KERNEL_ROWS)],
            "shrank": [_kernel(k) for k in d.kernels_by("shrank", KERNEL_ROWS)],
            "appeared": [_kernel(k) for k in d.kernels_by("appeared", KERNEL_ROWS)],
            "disappeared": [_kernel(k) for k in d.kernels_by("disappeared", KERNEL_ROWS)],
        },
        "memory": None
        if mem is None
        else {
            "before_peak_bytes": mem.before_bytes,
            "after_peak_bytes": mem.after_bytes,
            "change_bytes": mem.change_bytes,
            "change_pct": _r(mem.change_pct),
            "before_basis": mem.before_basis,
            "after_basis": mem.after_basis,
            "before_capacity_bytes": mem.capacity_before,
            "after_capacity_bytes": mem.capacity_after,
        },
        "recommendations": [
            {
                "id": o.recommendation,
                "finding": o.finding,
                "title": o.title,
                "projected_speedup": o.projected_speedup,
                "status": o.status,
                "addressed": o.addressed,
                "metric": o.metric,
                "unit": o.unit,
                "before": _r(o.before),
                "after": _r(o.after),
                "note": o.note,
            }
            for o in d.recommendations
        ],
        "gate": gate_dict(gate),
        "work": _work(d),
        "tree": tree_diff_dict(d.tree, node_gates),
    }
