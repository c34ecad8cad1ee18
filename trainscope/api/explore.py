"""Reading into an analyzed run, as a program asks (the MCP server, a script): one finding explained
with its evidence and sources, the kernels or steps filtered, a time window of the timeline. Every
answer is a plain dict built from the report's own document and view models — the numbers and
sources the report prints, nothing inferred beyond them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.trace.kernel_families import family_of
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.views.trace_window import KINDS
from trainscope.analyzers.views.trace_window import window
from trainscope.api.errors import BadInput
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.document import headline_word

if TYPE_CHECKING:
    from trainscope.analyzers.trace.kernels import KernelStat
    from trainscope.analyzers.trace.module_tree import Node
    from trainscope.api.report import Report


def _rank(report: Report, rank: int | None) -> int:
    if rank is None:
        return report.main_index
    ranks = [a.rank for a in report.ranks]
    if rank in ranks:
        return ranks.index(rank)
    if 0 <= rank < len(report.ranks) and all(r is None for r in ranks):
        return rank
    raise BadInput(f"no rank {rank} in {report.source} (ranks: {', '.join(str(r) for r in ranks)})")


def _doc(report: Report, index: int) -> AnalysisDocument:
    """Rank ``index``'s analysis document, typed: the report's own for its main rank."""
    return AnalysisDocument.of(report.to_dict() if index == report.main_index else report.rank_view(index).doc)


def explain_finding(report: Report, finding: str, *, rank: int | None = None) -> dict[str, Any]:
    """One finding of the run: its grade, stake, evidence (each line with its source), where it stands
    in the verdict, the thresholds that grade it (value, unit, source), the fixes for it with their
    projections, and the step and interval of the timeline that show it most."""

    i = _rank(report, rank)
    doc = _doc(report, i)
    found = doc.finding(finding)
    if found is None:
        raised = ", ".join(f.id for f in doc.findings) or "none"
        known = "" if finding in REGISTRY else " (not a finding trainscope knows)"
        raise BadInput(f"finding {finding!r}{known} is not raised on {report.source} (raised: {raised})")
    v = doc.verdict
    spec = REGISTRY.get(finding)
    rules = report.rules
    thresholds = []
    if spec is not None:
        for name in spec.severity.rule_names:
            t = rules[name]
            thresholds.append(
                {"name": name, "value": t.value, "unit": t.unit, "meaning": t.meaning, "source": t.source}
            )
    role = (
        "primary (the verdict)" if v.bottleneck == finding else "runner-up" if v.runner_up == finding else "secondary"
    )
    where = None
    view = report.rank_view(i)
    try:
        step, match = view.timeline.evidence(finding)
    except BadInput:
        step, match = None, None
    if step is not None:
        st = view.analysis.segmentation.steps[step]
        where = {
            "step": st.label,
            "step_start_ms": round(st.start_ns / 1e6, 3),
            "interval": None
            if match is None
            else {
                "start_ms": round(match.start_ns / 1e6, 3),
                "end_ms": round(match.end_ns / 1e6, 3),
                "what": match.name,
            },
        }
    return {
        "source": report.source,
        "rank": doc.rank,
        "finding": found.to_dict(),
        "role": role,
        "verdict": {"axis": v.axis, "bottleneck": v.bottleneck, "confidence": v.confidence},
        "headline": headline_word(finding, found.title, found.title),
        "graded_by": thresholds,
        "fixes": [r.to_dict() for r in doc.recommendations if r.finding == finding],
        "timeline": where,
    }


def _round_or_none(x: float | None, digits: int) -> float | None:
    return round(x, digits) if x is not None else None


def _family(name: str) -> str | None:
    """The library/kernel family of the declared table the kernel's name belongs to, if any."""

    f = family_of(name)
    return f.name if f is not None else None


def kernel_table(
    report: Report,
    *,
    name_contains: str | None = None,
    kernel_class: str | None = None,
    min_total_ms: float | None = None,
    limit: int = 50,
    rank: int | None = None,
    sort: str = "total",
) -> dict[str, Any]:
    """Every kernel name that started inside the analyzed steps on the analyzed GPU (the app's Kernels
    tab), filtered by a case-insensitive name substring, class and total time; largest total first
    (``sort="total"``) or furthest from its own roof first (``sort="pct_of_roof"``, kernels without a
    roof last). Each row carries its roofline bound and % of roof where the roofline has them."""

    if kernel_class is not None and kernel_class not in ALL_CLASSES:
        raise BadInput(f"unknown kernel class {kernel_class!r} (one of: {', '.join(ALL_CLASSES)})")
    if sort not in ("total", "pct_of_roof"):
        raise BadInput(f"unknown sort {sort!r} (one of: total, pct_of_roof)")
    i = _rank(report, rank)
    view = report.rank_view(i)
    ks = view.all_kernels
    roof = view.analysis.roofline
    roof_rows = {r.name: r for r in roof.rows} if roof is not None else {}
    steps = max(1, len(view.analysis.segmentation.steps))
    rows = [
        k
        for k in ks.top
        if (not name_contains or name_contains.lower() in k.name.lower())
        and (kernel_class is None or k.kernel_class == kernel_class)
        and (min_total_ms is None or k.total_ns / 1e6 >= min_total_ms)
    ]
    if sort == "pct_of_roof":

        def _pct(k: KernelStat) -> float | None:
            r = roof_rows.get(k.name)
            return r.pct_of_roof if r is not None else None

        rows.sort(key=lambda k: (_pct(k) is None, _pct(k) or 0.0, -k.total_ns))
    return {
        "source": report.source,
        "rank": view.analysis.rank,
        "device": view.analysis.device_name,
        "basis": "kernels starting inside the analyzed steps on the analyzed GPU",
        "total_kernel_ms": round(ks.total_ns / 1e6, 3),
        "kernel_count": ks.count,
        "steps": steps,
        "matched": len(rows),
        "kernels": [
            {
                "name": k.name,
                "class": k.kernel_class,
                "tensor_core": k.tensor_core,
                "count": k.count,
                "total_ms": round(k.total_ns / 1e6, 3),
                "mean_us": round(k.mean_ns / 1e3, 3),
                "ms_per_step": round(k.total_ns / 1e6 / steps, 3),
                "share_pct": round(k.share_pct, 2),
                "family": _family(k.name),
                "bound": roof_rows[k.name].bound if k.name in roof_rows else None,
                "pct_of_roof": _round_or_none(roof_rows[k.name].pct_of_roof if k.name in roof_rows else None, 1),
            }
            for k in rows[:limit]
        ],
    }


def step_table(
    report: Report,
    *,
    min_duration_ms: float | None = None,
    outliers_only: bool = False,
    limit: int | None = None,
    rank: int | None = None,
) -> dict[str, Any]:
    """The analyzed steps as the report lists them (start, duration, GPU busy, data wait, time per
    category, outlier flag), filtered."""
    i = _rank(report, rank)
    doc = _doc(report, i)
    rows = [
        s.to_dict()
        for s in doc.steps
        if (min_duration_ms is None or (s.duration_ms or 0.0) >= min_duration_ms) and (not outliers_only or s.outlier)
    ]
    return {
        "source": report.source,
        "rank": doc.rank,
        "steps_method": doc.steps_method,
        "steps_note": doc.steps_note,
        "step_time_ms": doc.breakdown.step_time_ms.to_dict() if doc.breakdown is not None else None,
        "matched": len(rows),
        "steps": rows[:limit] if limit is not None else rows,
    }


def timeline_window(
    report: Report,
    start_ms: float,
    end_ms: float,
    *,
    kinds: Sequence[str] | None = None,
    name_contains: str | None = None,
    limit: int = 200,
    rank: int | None = None,
) -> dict[str, Any]:
    """Every event overlapping [start_ms, end_ms) on the clock of the report's step starts (kernels,
    copies, memsets, framework ops, ranges, runtime calls), by start time, at most ``limit``; the busy
    time per kind inside the window."""

    i = _rank(report, rank)
    view = report.rank_view(i)
    try:
        w = window(
            view.trace,
            view.analysis.segmentation,
            int(round(start_ms * 1e6)),
            int(round(end_ms * 1e6)),
            tuple(kinds) if kinds else KINDS,
            name_contains,
            limit,
        )
    except ValueError as e:
        raise BadInput(str(e)) from None
    return {
        "source": report.source,
        "rank": view.analysis.rank,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "steps": w.steps,
        "matched": w.matched,
        "shown": len(w.events),
        "busy_ms": {k: round(v / 1e6, 3) for k, v in w.busy_ns.items()},
        "events": [
            {
                "kind": e.kind,
                "name": e.name,
                "lane": e.lane,
                "start_ms": round(e.start_ns / 1e6, 4),
                "duration_ms": round(e.duration_ns / 1e6, 4),
                "step": e.step,
            }
            for e in w.events
        ],
    }


TREE_SORTS = ("gpu_ms", "gpu_exclusive_ms", "pct_of_roof")


def tree_table(
    report: Report,
    *,
    under: str | None = None,
    name_contains: str | None = None,
    max_depth: int | None = None,
    sort: str = "gpu_ms",
    rank: int | None = None,
) -> dict[str, Any]:
    """Where in the model (analyzers/trace/module_tree.py): every node of the rank's module tree, depth first
    (each level in ``sort`` order: ``gpu_ms`` inclusive, ``gpu_exclusive_ms``, ``pct_of_roof``, highest
    first), with its path and figures; filtered to the subtree of the first node whose path ends with
    ``under`` (names joined by " › ", "/" or "."; case-insensitive), to names containing ``name_contains``,
    and to ``max_depth`` levels below the first level (or below ``under``)."""
    if sort not in TREE_SORTS:
        raise BadInput(f"unknown sort {sort!r} (one of: {', '.join(TREE_SORTS)})")
    i = _rank(report, rank)
    a = report.ranks[i]
    t = a.tree
    base: dict[str, Any] = {
        "source": report.source,
        "rank": a.rank,
        "basis": "GPU time of the operations in the steps on this GPU, each filed under the innermost range "
        "around the runtime call that launched it; exclusive times partition it, the first level's inclusive "
        "times sum to it; siblings whose names differ only in digits are folded",
        "gpu_ms": 0.0 if t is None else round(t.gpu_ns / 1e6, 3),
        "windows": 0 if t is None else t.windows,
        "nodes_total": 0 if t is None else len(t.walk()),
        "notes": [] if t is None else list(t.notes),
        "matched": 0,
        "nodes": [],
    }
    if t is None:
        base["notes"].append("no module tree: the trace records neither ranges nor GPU work in its steps")
        return base

    def key(n: Node) -> float:
        if sort == "gpu_ms":
            return -n.gpu_ns_inclusive
        if sort == "gpu_exclusive_ms":
            return -n.gpu_ns_exclusive
        return -(n.share_of_peak_pct if n.share_of_peak_pct is not None else -1.0)

    tops = list(t.roots)
    start_depth = 0
    if under:
        want = [p.strip().lower() for p in under.replace("›", "/").replace("/", ".").split(".") if p.strip()]

        def tail(n: Node) -> list[str]:
            names = [p.lower() for p in ".".join(n.path).split(".")]
            return names[-len(want) :] if want else names

        hit = next(((d, n) for d, n in t.walk() if tail(n) == want), None)
        if hit is None:
            raise BadInput(
                f"no node whose path ends with {under!r} (the first level: {', '.join(r.name for r in t.roots)})"
            )
        start_depth, tops = hit[0], [hit[1]]
    rows: list[dict[str, Any]] = []
    total = t.gpu_ns

    def walk(n: Node, d: int) -> None:
        if max_depth is not None and d - start_depth > max_depth:
            return
        if name_contains is None or name_contains.lower() in n.name.lower():
            rows.append(
                {
                    "path": list(n.path),
                    "depth": d,
                    "kind": n.kind,
                    "count": n.count,
                    "gpu_ms": round(n.gpu_ns_inclusive / 1e6, 3),
                    "gpu_exclusive_ms": round(n.gpu_ns_exclusive / 1e6, 3),
                    "gpu_pct": round(100.0 * n.gpu_ns_inclusive / total, 2) if total else 0.0,
                    "host_ms": round(n.host_ns / 1e6, 3),
                    "bound": n.bound,
                    "pct_of_roof": None if n.share_of_peak_pct is None else round(n.share_of_peak_pct, 1),
                    "tflops": None if n.tflops is None else round(n.tflops, 3),
                    "gbps": None if n.gbps is None else round(n.gbps, 1),
                    "instances": n.instances,
                    "spread_ms": None
                    if n.spread_ns is None
                    else {k: round(v / 1e6, 3) for k, v in zip(("min", "median", "max"), n.spread_ns)},
                    "slowest": n.slowest,
                    "children": len(n.children),
                    "top_kernels": [{"name": nm, "count": c, "ms": round(ns / 1e6, 3)} for nm, c, ns in n.top_kernels],
                }
            )
        for c in sorted(n.children, key=key):
            walk(c, d + 1)

    for r in tops if under else sorted(tops, key=key) if sort != "gpu_ms" else tops:
        walk(r, start_depth)
    base["matched"] = len(rows)
    base["nodes"] = rows
    return base
