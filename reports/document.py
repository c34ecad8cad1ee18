"""The analysis as a plain, versioned document: the JSON output, and the single source every
other rendering (terminal, Markdown) reads, so they cannot disagree."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from trainscope import __version__
from trainscope.analyzers import findings as registry
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.analysis import slowest
from trainscope.analyzers.trace.breakdown import CATEGORIES
from trainscope.analyzers.trace.breakdown import CATEGORY_LABELS
from trainscope.analyzers.trace.host_only import NO_GPU_ROWS
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.sinks import SINK_LABELS
from trainscope.collectors.formats import COUNTER_FORMATS  # the reader table's counters-only rows
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.analysis_document import GpuMetrics
from trainscope.reports.analysis_document import IronLaw
from trainscope.reports.analysis_document import Mfu
from trainscope.reports.analysis_document import RankRow
from trainscope.reports.analysis_document import Recommendation
from trainscope.reports.analysis_document import TreeNode
from trainscope.reports.parts import evidence_dict
from trainscope.reports.parts import finding_dict
from trainscope.reports.parts import rounded as _r

if TYPE_CHECKING:
    from trainscope.analyzers.trace.roofline import RooflineRow

Doc = AnalysisDocument | dict[str, Any]  # what the helpers below take: the typed document, or its dict

SCHEMA = "trainscope.analysis/2"  # 2: mfu.value_pct may be estimated from shapes (mfu.basis); roofline

HEADLINES = {s.id: s.headline for s in registry.REGISTRY.values()}  # declared with each finding
# (finding id, title) → headline, for a finding raised under a title variant (FindingSpec.headline_variants)
HEADLINE_VARIANTS = {(s.id, t): h for s in registry.REGISTRY.values() for t, h in s.headline_variants}


def headline_word(bottleneck: str | None, summary: str, default: str) -> str:
    """The verdict's headline word for its bottleneck finding: the variant its title names, where the
    summary (which opens with the finding's title) opens with one, else the finding's headline, else
    ``default``. Every view of a verdict (report, diff, app badge, one-line) reads it here."""
    for (fid, title), word in HEADLINE_VARIANTS.items():
        if fid == bottleneck and summary.startswith(title):
            return word
    return HEADLINES.get(bottleneck or "", default)


AXIS_NAMES = {
    "data": "Data",
    "algorithm": "Algorithm",
    "machine": "Machine",
    "balanced": "balanced",
    "insufficient_evidence": "insufficient evidence",
    "not_representative": "not representative (one-off costs)",
}


def _steps_note(a: Analysis) -> str:
    """How the steps were found, and the stub step markers the invariant pass set aside (the steps
    line then says why fewer steps are analyzed than the trace marks)."""
    note = a.segmentation.note
    stub = a.repairs.repairs.get("stub-step") if a.repairs is not None else None
    if stub is not None and stub.count:
        note += f"; {stub.count:,} stub step marker{'s' if stub.count != 1 else ''} set aside" + (
            f" ({stub.example})" if stub.example else ""
        )
    return note


def counters_only(doc: Doc) -> bool:
    """True when the verdict comes from sampled counters: there are no steps or kernels to show."""
    inp = AnalysisDocument.of(doc).input
    return inp is not None and inp.format in COUNTER_FORMATS


GPU_METRICS_LABELS: tuple[tuple[str, str], ...] = (
    ("sm_active_pct", "SM active"),
    ("tensor_active_pct", "tensor active"),
    ("dram_bandwidth_pct", "DRAM bandwidth"),
)


def gpu_metrics_parts(gm: GpuMetrics | dict[str, Any]) -> list[str]:
    """The GPU_METRICS figures the document holds, as every renderer words them ("SM active 71.2 %")."""
    g = gm if isinstance(gm, GpuMetrics) else GpuMetrics.from_dict(gm)
    values = [(label, getattr(g, key)) for key, label in GPU_METRICS_LABELS]
    return [f"{label} {v:.1f} %" for label, v in values if v is not None]


def known_parts(*figures: tuple[str, float | None]) -> list[str]:
    """Each ``(format, value)`` worded by its format (``("step {:.1f} ms", 12.34)`` → ``step 12.3 ms``),
    leaving out the values that are not known (None)."""
    return [form.format(v) for form, v in figures if v is not None]


def device_label(doc: Doc) -> str:
    """'Tesla V100 (GPU 0), rank 3'; a device the trace does not name is just 'GPU 0'."""
    if isinstance(doc, AnalysisDocument):
        dev_id, dev_name, rank = doc.device.id, doc.device.name, doc.rank
    else:  # a dict document, or the part of one a caller has (device and rank)
        dev_id, dev_name, rank = doc["device"]["id"], doc["device"]["name"], doc.get("rank")
    if dev_id is None:  # the trace names a device but records no GPU work on it (counters only)
        name = dev_name or "no GPU"
    else:
        name = dev_name if dev_name == f"GPU {dev_id}" else f"{dev_name} (GPU {dev_id})"
    return str(name) + (f", rank {rank}" if rank is not None else "")


def headline(doc: Doc) -> str:
    d = AnalysisDocument.of(doc)
    v = d.verdict
    if v.axis == "insufficient_evidence":
        # An Nsight export without GPU rows (analyzers/trace/host_only.py): the GPU is what lacks evidence.
        return "INSUFFICIENT GPU EVIDENCE" if v.bottleneck == NO_GPU_ROWS else "INSUFFICIENT EVIDENCE"
    if v.axis == "not_representative":
        phases = d.steady_state.phases if d.steady_state is not None else []
        return "NOT REPRESENTATIVE" + (f" ({' / '.join(phases)})" if phases else "")
    if v.axis == "balanced":
        return "BALANCED"
    word = headline_word(v.bottleneck, v.summary or "", v.axis.upper())
    return f"{word} · D·A·M axis: {AXIS_NAMES[v.axis]}"


def gain_words(r: Recommendation | dict[str, Any], step: bool = False) -> str:
    """A recommendation's gain as every renderer words it: an upper bound per step, or — for a one-off
    cost's fix — seconds once per process, never a per-step speed-up."""
    if isinstance(r, Recommendation):
        once, speedup, step_ms = r.once_per_process_s, r.projected_speedup, r.projected_step_ms
    else:  # a recommendation of a dict document (a caller's dict may lack the optional figures)
        once, speedup, step_ms = r.get("once_per_process_s"), r["projected_speedup"], r.get("projected_step_ms")
    if once is not None:
        amount = f"{once:,.2f} s" if once >= 0.1 else f"{once * 1e3:,.1f} ms"
        return f"saves up to {amount} once per process (not per step)"
    if speedup is None:
        return "no projection"
    return f"up to {speedup:.2f}× faster" + (f" (step ≥ {step_ms:.1f} ms)" if step and step_ms is not None else "")


def rank_mark(rk: RankRow) -> str:
    """A rank's marks in the rank tables: the straggler, and the rank the report leads with."""
    return (" ◀ straggler" if rk.straggler else "") + (" ▶ headline" if rk.headline else "")


def rank_late_last(rk: RankRow) -> tuple[str, str]:
    """A rank's mean lateness at the collectives (ms) and how often it came last, "—" where unmeasured."""
    late = f"{rk.mean_late_ms:.1f}" if rk.mean_late_ms is not None else "—"
    return late, f"{rk.last_in} of {rk.considered}" if rk.last_in is not None else "—"


def mfu_words(mfu: Mfu, esc: Callable[[str], str] = str) -> str:
    """The MFU with the reason for its basis in parentheses, or the reason alone where there is no MFU."""
    return esc(mfu.reason) if mfu.value_pct is None else f"{mfu.value_pct:.1f} % ({esc(mfu.reason)})"


def shapes_mfu(mfu: Mfu) -> float | None:
    """The MFU estimated from the recorded shapes, which every report shows beside an MFU from the
    recorded FLOPs (the two bases side by side); None where the MFU has no second basis."""
    return mfu.shapes_pct if mfu.basis == "recorded flops" else None


def iron_law_gap_words(law: IronLaw, esc: Callable[[str], str] = str) -> str:
    """Where the GPU is busy but below peak, as % of step time (the Iron Law's gap terms of 0.05 % or more)."""
    return ", ".join(f"{esc(g)} {x:.1f} %" for g, x in law.gap_pct.items() if x >= 0.05)


def iron_law_lines(law: IronLaw, esc: Callable[[str], str] = str) -> list[str]:
    """The Iron Law in the text and HTML reports: pipeline efficiency (GPU busy) against MFU, and
    where busy time falls below peak; ``esc`` makes a trace's text safe for the view."""
    gap = iron_law_gap_words(law)
    return [
        f"Iron Law: {esc(law.formula)}; pipeline efficiency (GPU busy) {law.pipeline_efficiency_pct:.1f} % "
        f"vs MFU {law.efficiency_pct:.1f} %"
    ] + ([f"busy but below peak (% of step time): {esc(gap)}"] if gap else [])


def mfu_lines(
    mfu: Mfu,
    esc: Callable[[str], str],
    shapes_line: Callable[[float, str | None], str],
    law_lines: Callable[[IronLaw], list[str]],
) -> list[str]:
    """The MFU items of the Markdown and HTML reports, in one order, each view wording two of them:
    the MFU with its basis, the estimate from the recorded shapes beside it (:func:`shapes_mfu`;
    ``shapes_line(percent, its reason)``), then the Iron Law (``law_lines``)."""
    shapes = shapes_mfu(mfu)
    return (
        [f"MFU: {mfu_words(mfu, esc)}"]
        + ([shapes_line(shapes, mfu.shapes_reason)] if shapes is not None else [])
        + (law_lines(mfu.iron_law) if mfu.iron_law else [])
    )


def window_lines(doc: Doc) -> list[str]:
    """Which window was judged and what was left out as not steady state, in one or two lines (text,
    Markdown, HTML and the app say it the same way); empty when nothing was set apart."""
    st = AnalysisDocument.of(doc).steady_state
    if not st:
        return []
    out = []
    if st.left_out or not st.representative or st.steady_range:
        out.append(f"judged {st.judged}" + (f"; left out: {'; '.join(st.left_out)}" if st.left_out else ""))
    if st.ranges:
        parts = [
            f"{p.name} {p.ms:,.1f} ms{' ×' + str(p.count) if p.count > 1 else ''} ({'judged' if p.judged else p.kind})"
            for p in st.ranges
        ]
        offer = list(dict.fromkeys(p.name for p in st.ranges if not p.judged))
        out.append(
            "phase ranges: "
            + ", ".join(parts)
            + (f" — judge one with --step-range NAME ({', '.join(offer)})" if offer else "")
        )
    return out


# The two parts of the breakdown's "communication (not overlapped)" row on a rank that waits for
# others, named as their sinks are wherever else they appear (the verdict's evidence, the sinks):
# one name per number (issue 37).
RANK_WAIT_LABEL = SINK_LABELS["imbalance"]  # "waiting for a slower rank inside collectives"
TRANSFER_LABEL = SINK_LABELS["comm"]  # "communication not overlapped with compute"


def communication_split(a: Analysis) -> dict[str, Any] | None:
    """The breakdown's communication row split into the time the rank waits inside its collectives
    for the other ranks (its ``imbalance`` sink) and the rest (its ``comm`` sink: the transfer with
    no compute beside it), as labelled figures; None when the rank waits for no one (a single trace,
    the straggler itself) or the trace has no GPU (a host collective's wait is no breakdown row).
    The two parts sum to the row: the cross-rank correction moves the wait out of ``comm`` only."""
    s, b = a.sinks, a.breakdown
    if s is None or s.cpu_only or b.device is None or not b.total_ns:
        return None
    wait, rest = s.by_key.get("imbalance"), s.by_key.get("comm")
    if wait is None or rest is None or wait.ns <= 0:
        return None
    if abs(wait.ns + rest.ns - b.ns["communication"]) > len(b.steps) + 1:  # not a split of this row
        return None
    n = max(1, len(b.steps))
    return {
        "label": CATEGORY_LABELS["communication"],
        "pct": _r(b.share_pct("communication")),
        "ms_per_step": _r(b.ns["communication"] / 1e6 / n, 3),
        "parts": [
            {
                "key": "rank_wait",
                "sink": "imbalance",
                "label": RANK_WAIT_LABEL,
                "pct": _r(wait.pct),
                "ms_per_step": _r(s.ms_per_step("imbalance"), 3),
            },
            {
                "key": "transfer",
                "sink": "comm",
                "label": TRANSFER_LABEL,
                "pct": _r(rest.pct),
                "ms_per_step": _r(s.ms_per_step("comm"), 3),
            },
        ],
    }


def communication_split_words(doc: Doc, with_label: bool = True) -> str | None:
    """'communication (not overlapped) 27.4 % = waiting for a slower rank inside collectives 2.6 %
    (15.9 ms per step) + communication not overlapped with compute 24.8 % (152.6 ms per step)': the
    one sentence every view prints of the split (the row's
    label left out with ``with_label=False``, for a view that prints it beside)."""
    b = AnalysisDocument.of(doc).breakdown
    c = b.communication_split if b is not None else None
    if not c:
        return None
    parts = " + ".join(f"{p.label} {p.pct:.1f} % ({p.ms_per_step:.1f} ms per step)" for p in c.parts)
    return (f"{c.label} " if with_label else "") + f"{c.pct:.1f} % = {parts}"


def analysis_dict(a: Analysis, rules: Rules) -> dict[str, Any]:
    b = a.breakdown
    outlier = rules.value("step.outlier_ratio")
    median = b.step_ms.p50
    spec = a.device_spec
    roof_rows = {r.name: r for r in a.roofline.rows} if a.roofline is not None else {}
    return {
        "source": a.source,
        "rank": a.rank,
        "device": {
            "id": a.device,
            "name": a.device_name,
            "spec": spec.key if spec else None,
            "peak_tensor_tflops": spec.tensor_tflops if spec else None,
            "spec_source": spec.source if spec else None,
            "peak_bandwidth_gbps": spec.memory_gbps if spec else None,
            "peaks_tflops": dict(spec.peaks) if spec else None,
            "tensor_core_precisions": sorted(spec.matrix) if spec else None,
        },
        "steps_method": a.segmentation.method,
        "steps_note": _steps_note(a),
        "verdict": {
            "axis": a.verdict.axis,
            "confidence": a.verdict.confidence,
            "bottleneck": a.verdict.bottleneck,
            "summary": a.verdict.summary,
            "evidence": [evidence_dict(e) for e in a.verdict.evidence],
            "runner_up": a.verdict.runner_up,
        },
        "findings": [finding_dict(f) for f in a.findings],
        "breakdown": {
            "basis": "exclusive shares of summed step time; GPU busy = compute + communication + copy + memset",
            "total_ms": _r(b.total_ns / 1e6, 3),
            "gpu_busy_pct": _r(b.gpu_busy_pct),
            "data_wait_pct": _r(b.data_wait_pct),
            "step_time_ms": {"p50": _r(b.step_ms.p50, 3), "p95": _r(b.step_ms.p95, 3), "mean": _r(b.step_ms.mean, 3)},
            "categories": {
                c: {
                    "label": CATEGORY_LABELS[c],
                    "pct": _r(b.share_pct(c)),
                    "ms": _r(b.ns[c] / 1e6, 3),
                    "p50_ms": _r(b.category_ms[c].p50, 3),
                    "p95_ms": _r(b.category_ms[c].p95, 3),
                }
                for c in CATEGORIES
            },
            "communication_split": communication_split(a),
        },
        "steps": [
            {
                "label": s.label,
                "start_ms": _r(s.start_ns / 1e6, 3),
                "duration_ms": _r(s.duration_ns / 1e6, 3),
                "gpu_busy_pct": _r(100.0 * s.gpu_busy_ns / s.duration_ns if s.duration_ns else 0.0),
                "data_wait_pct": _r(100.0 * s.host_data_wait_ns / s.duration_ns if s.duration_ns else 0.0),
                "outlier": bool(median and s.duration_ns / 1e6 > outlier * median),
                "ms": {c: _r(s.ns[c] / 1e6, 3) for c in CATEGORIES},
            }
            for s in b.steps
        ],
        "kernels": {
            "count": a.kernels.count,
            "total_ms": _r(a.kernels.total_ns / 1e6, 3),
            "median_us": _r(a.kernels.median_kernel_ns / 1e3, 3),
            "class_pct": {c: _r(a.kernels.class_share_pct(c)) for c in ALL_CLASSES},
            "tensor_core_pct_of_matmul": _r(a.kernels.tensor_core_pct_of_matmul),
            "top": [
                {
                    "name": k.name,
                    "class": k.kernel_class,
                    "tensor_core": k.tensor_core,
                    "count": k.count,
                    "total_ms": _r(k.total_ns / 1e6, 3),
                    "mean_us": _r(k.mean_ns / 1e3, 3),
                    "share_pct": _r(k.share_pct),
                    **_roof_cols(roof_rows.get(k.name)),
                }
                for k in a.kernels.top
            ],
        },
        "memory": [
            {
                "device": m.device,
                "peak_allocated_bytes": m.peak_allocated,
                "peak_reserved_bytes": m.peak_reserved,
                "capacity_bytes": m.capacity,
                "peak_pct_of_capacity": _r(m.peak_pct),
                "basis": m.basis,
            }
            for m in a.memory
        ],
        "mfu": _mfu(a),
        "roofline": _roofline(a),
        "fusion_candidates": _fusion(a),
        "recommendations": [
            {
                "rank": i + 1,
                "id": r.id,
                "finding": r.finding,
                "title": r.title,
                "change": r.change,
                "projected_speedup": r.projected_speedup,
                "projected_step_ms": r.projected_step_ms,
                "bound": "upper",
                "basis": r.basis,
                # a one-off cost's fix: seconds removed once per process (never a per-step speed-up)
                "once_per_process_s": r.once_s,
            }
            for i, r in enumerate(a.recommendations)
        ],
        "steady_state": _steady_state(a),
        "phases": _phases(a),
        "gpu_metrics": _counters(a),
        "hw_counters": _hw_counters(a),
        "context": _context(a),
        "sinks": _sinks(a),
        "host_idle": _host_idle(a),
        "tree": _tree(a),
        "warnings": a.warnings,
        # The invariant pass's repairs by reason (analyzers/trace/repairs.py; docs/repairs.md): each also a warning line.
        "repairs": a.repairs.as_list() if a.repairs is not None else [],
    }


def _roof_cols(r: RooflineRow | None) -> dict[str, Any]:
    """Roofline columns of one kernel name (all null when the kernel has no roofline row)."""
    if r is None:
        return {
            "intensity": None,
            "tflops": None,
            "gbps": None,
            "pct_of_roof": None,
            "bound": None,
            "precision": None,
            "cost_source": None,
        }
    return {
        "intensity": _r(r.intensity, 4),
        "tflops": _r(r.tflops, 3),
        "gbps": _r(r.gbps, 1),
        "pct_of_roof": _r(r.pct_of_roof, 1),
        "bound": r.bound,
        "precision": r.precision,
        "cost_source": r.source,
    }


def _roofline(a: Analysis, top: int = 20) -> dict[str, Any] | None:
    roof = a.roofline
    if roof is None:
        return None
    return {
        "basis": "per kernel: intensity = FLOPs / bytes against the ridge point (peak at the kernel's precision / "
        "bandwidth); times are summed kernel ms in the steps on this GPU",
        "device": roof.device,
        "bandwidth_gbps": roof.bandwidth_gbps,
        "ridge_flop_per_byte": {
            p: _r(roof.ridge(p, True), 1) for p in ("fp32", "tf32", "bf16", "fp8") if roof.ridge(p, True) is not None
        }
        if roof.spec
        else None,
        "bound_ms": {k: _r(v, 3) for k, v in roof.bound_ms.items()},
        "bound_pct": {k: _r(roof.pct_of_kernel_time(k)) for k in roof.bound_ms},
        "communication_ms": _r(roof.communication_ms, 3),
        "total_ms": _r(roof.total_ms, 3),
        "source_ms": {k: _r(v, 3) for k, v in roof.source_ms.items()},
        "tensor_core_pct_of_matrix": _r(roof.tensor_core_pct_of_matrix),
        "evidence": {b: roof.evidence_line(b) for b in ("memory", "compute")},
        "notes": roof.notes,
        "kernels": [
            {
                "name": r.name,
                "count": r.count,
                "total_ms": _r(r.total_ms, 3),
                "share_pct": _r(r.share_pct),
                "flops": r.flops,
                "bytes": r.bytes,
                "tensor_cores": r.tensor_cores,
                "roof_tflops": r.roof_tflops,
                **_roof_cols(r),
            }
            for r in roof.rows[:top]
        ],
    }


def _fusion(a: Analysis, top: int = 5) -> dict[str, Any] | None:
    """The heaviest fusion candidates (analyzers/trace/fusion.py), null where there are none."""
    f = a.fusion
    if f is None or not f.candidates:
        return None
    return {
        "basis": f.basis,
        "found": f.found,
        "steps": f.steps,
        "bandwidth_gbps": f.bandwidth_gbps,
        "candidates": [
            {
                "label": c.label,
                "kernels": list(c.kernels),
                "classes": list(c.classes),
                "shapes": list(c.shapes),
                "device": c.device,
                "stream": c.stream,
                "occurrences": c.occurrences,
                "total_ms": _r(c.total_ms, 6),
                "ms_per_step": _r(c.ms_per_step, 6),
                "memory_ms_per_step": _r(c.memory_ms / c.steps, 6),
                "intermediate_bytes": None if c.intermediate_bytes is None else round(c.intermediate_bytes),
                "saved_ms_per_step": _r(c.saved_ms_per_step, 6),
                "summary": c.words(),
            }
            for c in f.candidates[:top]
        ],
    }


def fusion_heading(doc: Doc) -> str:
    """The one sentence every renderer puts over the fusion candidates."""
    fc = AnalysisDocument.of(doc).fusion_candidates
    assert fc is not None, "fusion_heading: the document has no fusion candidates"
    shown = len(fc.candidates)
    return (
        f"repeated back-to-back kernel sequences, most memory-bound time first ({shown} of {fc.found}); "
        "saving ≤ intermediate bytes at peak bandwidth"
    )


def fusion_rows(doc: Doc) -> list[dict[str, Any]]:
    """The fusion candidates as every renderer shows them (empty when the document has none)."""
    fc = AnalysisDocument.of(doc).fusion_candidates
    if not fc:
        return []
    return [
        {
            "sequence": c.label,
            "occurrences": c.occurrences,
            "stream": c.stream,
            "ms_per_step": c.ms_per_step,
            "bytes": "unknown" if c.intermediate_bytes is None else f"{c.intermediate_bytes:,}",
            "saved": "unknown" if c.saved_ms_per_step is None else f"≤ {c.saved_ms_per_step:.3g}",
        }
        for c in fc.candidates
    ]


def _hw_counters(a: Analysis) -> dict[str, Any] | None:
    """Measured FLOPs per kernel from hardware FP counters (CUPTI counter mode), where recorded."""
    h = getattr(a, "hw_counters", None)
    if h is None:
        return None
    return {
        "total_flops": h.total_flops,
        "ranges": h.ranges,
        "linked_ranges": h.linked_ranges,
        "by_precision": h.by_precision,
        "by_class": h.by_class,
        "cannot_give": h.cannot_give,
        "agreement_note": h.agreement_note,
        "agreement": [
            {
                "class": c.kernel_class,
                "kernels": c.kernels,
                "counted_flops": c.counted_flops,
                "model_flops": c.model_flops,
                "ratio": _r(c.ratio, 3),
            }
            for c in h.agreement
        ],
        "kernels": [
            {
                "name": k.name,
                "class": k.kernel_class,
                "operator": k.operator,
                "ranges": k.ranges,
                "flops": k.flops,
                "by_precision": k.by_precision,
                "share_pct": _r(k.share_pct),
                "model_flops": k.model_flops,
            }
            for k in h.kernels
        ],
    }


def _mfu(a: Analysis) -> dict[str, Any]:
    m = a.mfu
    law = m.iron_law
    return {
        "value_pct": _r(m.value_pct),
        "reason": m.reason,
        "flops_per_step": m.flops_per_step,
        "peak_tflops": m.peak_tflops,
        "peak_source": m.peak_source,
        "basis": m.basis,
        "recorded_pct": _r(m.recorded_pct),
        "shapes_pct": _r(m.shapes_pct),
        "shapes_reason": m.shapes_reason,
        "iron_law": None
        if law is None
        else {
            "formula": law.formula,
            "step_ms": _r(law.step_s * 1e3, 3),
            "flops_per_step": law.flops_per_step,
            "flops_source": law.flops_source,
            "gpus": law.gpus,
            "gpus_source": law.gpus_source,
            "peak_tflops": law.peak_tflops,
            "peak_source": law.peak_source,
            "efficiency_pct": _r(law.efficiency_pct, 3),
            "pipeline_efficiency_pct": _r(law.pipeline_efficiency_pct),
            "gap_pct": law.gap,
        },
    }


def _sinks(a: Analysis) -> dict[str, Any] | None:
    """Step time split into exclusive sinks (the verdict is the largest that can be primary)."""
    s = a.sinks
    if s is None:
        return None
    return {
        "basis": "exclusive shares of summed step time; busy time split by " + s.busy_source,
        "saturated": s.saturated,
        "by_sink": {
            k: {
                "pct": _r(v.pct),
                "ms_per_step": _r(s.ms_per_step(k), 3),
                "can_be_primary": v.can_be_primary,
                "source": v.source,
            }
            for k, v in s.by_key.items()
        },
    }


def _context(a: Analysis) -> dict[str, Any] | None:
    c = a.context
    if c is None:
        return None
    return {
        "mode": c.mode,
        "graphs": c.graphs,
        "compiled": c.compiled,
        "framework": c.framework,
        "collectives_ms": c.collectives,
        "evidence": c.evidence,
    }


def _host_idle(a: Analysis) -> dict[str, Any] | None:
    h = a.host_idle
    if h is None:
        return None
    return {
        "idle_ms": _r(h.idle_ns / 1e6),
        "ms": {k: _r(v / 1e6) for k, v in h.ns.items()},
        "share_pct": {k: _r(h.share_pct(k)) for k in h.ns},
        "primary": h.primary,
        "source": h.source,
        "thread": h.thread,
        "frames": [
            {
                "name": f.name,
                "file": f.file,
                "line": f.line,
                "function": f.function,
                "count": f.count,
                "idle_ms": _r(f.idle_ns / 1e6),
                "share_pct": f.share_pct,
                "class": f.cls,
            }
            for f in h.frames
        ],
        "calls": [
            {
                "name": c.name,
                "class": c.cls,
                "count": c.count,
                "idle_ms": _r(c.idle_ns / 1e6),
                "longest_ms": _r(c.longest_ns / 1e6),
            }
            for c in h.calls
        ],
        "cold_start": None
        if h.cold_start is None
        else {
            "count": h.cold_start.count,
            "idle_ms": _r(h.cold_start.idle_ns / 1e6),
            "longest_ms": _r(h.cold_start.longest_ns / 1e6),
        },
        "evidence": h.evidence,
    }


def _steady_state(a: Analysis) -> dict[str, Any] | None:
    """The judged window, what was left out as not steady state, and the start-up ledger: one-off
    costs with what, where and how long (once per process), and the user's phase ranges."""
    w = a.steady
    if w is None:
        return None
    inside = {id(c): ns for c, ns in w.in_window()}
    return {
        "basis": "one-off costs found from the trace's evidence (analyzers/trace/one_off.py), paid once per process (or "
        "once per shape); the verdict judges the window without them, or says NOT REPRESENTATIVE",
        "judged": w.judged,
        "representative": w.representative,
        "reason": w.reason,
        "phases": list(w.headline_phases),
        "left_out": list(w.left_out),
        "steady_range": w.steady_range,
        "offered_ranges": list(w.offered),
        "window_ms": _r(w.window_ns / 1e6, 3),
        "one_off_in_window_ms": _r(w.one_off_ns / 1e6, 3),
        "one_off_in_window_pct": _r(w.one_off_pct),
        "total_ms": _r(w.ledger.total_ns / 1e6, 3),
        "ledger": [
            {
                "kind": c.kind,
                "phase": c.phase,
                "what": c.what,
                "where": c.where,
                "ms": _r(c.ns / 1e6, 3),
                "count": c.count,
                "in_window_ms": _r(inside.get(id(c), 0) / 1e6, 3),
                "rule": c.rule,
            }
            for c in w.ledger.costs
        ],
        "ranges": [
            {
                "name": p.name,
                "kind": p.kind,
                "count": p.count,
                "ms": _r(p.ns / 1e6, 3),
                "gpu_busy_ms": _r(p.gpu_busy_ns / 1e6, 3),
                "one_off": p.one_off,
                "judged": p.name == w.steady_range,
            }
            for p in w.ledger.ranges
        ],
    }


def _phases(a: Analysis) -> dict[str, Any] | None:
    """Forward/backward/optimizer from the trace's ranges; None when it has none."""
    p = a.phases
    if p is None:
        return None
    return {
        "basis": "host time: exclusive union of the phase's ranges in the steps; GPU time: kernels launched while "
        "the phase's range was open (by correlation id)",
        "unassigned_ms": _r(p.unassigned_ns / 1e6, 3),
        "phases": [
            {
                "name": s.name,
                "ranges": s.ranges,
                "host_ms": _r(s.host_ns / 1e6, 3),
                "host_pct": _r(s.share_pct(p.step_ns)),
                "kernels": s.kernels,
                "kernel_ms": _r(s.kernel_ns / 1e6, 3),
                "gpu_busy_ms": _r(s.gpu_busy_ns / 1e6, 3),
                "kernel_class_ms": {c: _r(v / 1e6, 3) for c, v in s.class_ns.items()},
            }
            for s in p.phases
        ],
    }


TREE_MAX_NODES = 40  # nodes the document carries: the first level, then the heaviest with their ancestors


def _tree(a: Analysis, cap: int = TREE_MAX_NODES) -> dict[str, Any] | None:
    """Where in the model (analyzers/trace/module_tree.py): the first level and the heaviest nodes, each with
    its parent's index, depth first; None when the trace has neither ranges nor GPU work."""
    t = a.tree
    if t is None:
        return None
    walk = t.walk()
    keep: set[int] = {i for i, (d, _) in enumerate(walk) if d == 0}
    index = {id(n): i for i, (_, n) in enumerate(walk)}
    parent_of: dict[int, int] = {}
    for i, (_, n) in enumerate(walk):
        for c in n.children:
            parent_of[index[id(c)]] = i
    for i in sorted(range(len(walk)), key=lambda i: (-walk[i][1].gpu_ns_inclusive, i)):
        if len(keep) >= cap:
            break
        if walk[i][1].gpu_ns_inclusive <= 0:
            break
        chain = [i]
        while chain[-1] in parent_of:
            chain.append(parent_of[chain[-1]])
        if len(keep | set(chain)) <= cap:
            keep |= set(chain)
    rows = sorted(keep)
    pos = {i: j for j, i in enumerate(rows)}
    total = t.gpu_ns
    nodes = []
    for i in rows:
        d, n = walk[i]
        nodes.append(
            {
                "parent": pos.get(parent_of.get(i, -1)),
                "depth": d,
                "path": list(n.path),
                "name": n.name,
                "kind": n.kind,
                "count": n.count,
                "host_ms": _r(n.host_ns / 1e6, 3),
                "gpu_ms": _r(n.gpu_ns_inclusive / 1e6, 3),
                "gpu_exclusive_ms": _r(n.gpu_ns_exclusive / 1e6, 3),
                "gpu_pct": _r(100.0 * n.gpu_ns_inclusive / total if total else 0.0),
                "flops": n.flops,
                "bytes": n.bytes,
                "tflops": _r(n.tflops, 3),
                "gbps": _r(n.gbps, 1),
                "bound": n.bound,
                "pct_of_roof": _r(n.share_of_peak_pct, 1),
                "top_kernels": [{"name": nm, "count": c, "ms": _r(ns / 1e6, 3)} for nm, c, ns in n.top_kernels],
                "instances": n.instances,
                "spread_ms": (
                    None
                    if n.spread_ns is None
                    else {
                        "min": _r(n.spread_ns[0] / 1e6, 3),
                        "median": _r(n.spread_ns[1] / 1e6, 3),
                        "max": _r(n.spread_ns[2] / 1e6, 3),
                    }
                ),
                "slowest": n.slowest,
            }
        )
    return {
        "basis": "GPU time of the operations in the steps on this GPU, each filed under the innermost range "
        "around the runtime call that launched it (correlation id); exclusive times partition it, the first "
        "level's inclusive times sum to it; siblings whose names differ only in digits are folded",
        "gpu_ms": _r(total / 1e6, 3),
        "windows": t.windows,
        "ranges": dict(t.ranges),
        "unlinked": t.unlinked,
        "nodes_total": len(walk),
        "nodes": nodes,
        "notes": list(t.notes),
    }


def tree_rows(doc: Doc, heaviest: int = 5) -> list[dict[str, Any]]:
    """The top of the tree as every renderer shows it: the first level, then the heaviest nodes below
    it by exclusive GPU time (the leaves where the time is spent), each with its path, share, bound and,
    for a folded block, its spread. Empty when the document has no tree or the tree no range."""
    t = AnalysisDocument.of(doc).tree
    if not t or not t.nodes or not t.ranges or all(n.kind == "outside" for n in t.nodes):
        return []  # no range of the trace's own holds GPU work: nothing says where in the model
    nodes = t.nodes
    total = t.gpu_ms

    def row(n: TreeNode, label: str, first: bool) -> dict[str, Any]:
        detail = []
        if n.bound != "unknown":
            detail.append(
                f"{n.bound}-bound" + (f", {n.pct_of_roof:.0f} % of roof" if n.pct_of_roof is not None else "")
            )
        if n.instances > 1 and n.spread_ms is not None:
            sp = n.spread_ms
            detail.append(
                f"×{n.instances}: {sp.min:.2f}–{sp.max:.2f} ms each (median {sp.median:.2f}), slowest {n.slowest}"
            )
        excl = n.gpu_exclusive_ms or 0.0
        return {
            "label": label,
            "first_level": first,
            "gpu_ms": n.gpu_ms if first else n.gpu_exclusive_ms,
            "gpu_pct": n.gpu_pct if first else (100.0 * excl / total if total else 0.0),
            "host_ms": n.host_ms,
            "count": n.count,
            "detail": "; ".join(detail),
        }

    out = [row(n, n.name, True) for n in nodes if n.depth == 0]
    below = sorted((n for n in nodes if n.depth > 0 and n.gpu_exclusive_ms), key=lambda n: -(n.gpu_exclusive_ms or 0.0))
    out += [row(n, path_label(n.path), False) for n in below[:heaviest]]
    return out


def path_label(path: list[str]) -> str:
    """A node's path as one short line: the first level, then its last two names (``…`` between)."""
    return " › ".join(path if len(path) <= 3 else [path[0], "…", *path[-2:]])


def tree_heading(doc: Doc) -> str:
    """The one sentence every renderer puts over the tree's rows."""
    t = AnalysisDocument.of(doc).tree
    assert t is not None, "tree_heading: the document has no tree"
    return (
        f"GPU time by the trace's own ranges ({t.gpu_ms:,.1f} ms in {t.windows} step"
        f"{'s' if t.windows != 1 else ''}): the first level, then the heaviest nodes by their own (exclusive) time"
    )


def _counters(a: Analysis) -> dict[str, Any] | None:
    c = a.counters
    if c is None:
        return None
    return {
        "device": c.device,
        "samples": c.samples,
        "sm_active_pct": _r(c.sm_active_pct),
        "tensor_active_pct": _r(c.tensor_active_pct),
        "dram_bandwidth_pct": _r(c.dram_bandwidth_pct),
    }


def _story_figures(stragglers: dict[str, Any] | None, i: int) -> dict[str, Any]:
    """Rank ``i``'s figures from the rank story (``stragglers.ranks[i]``): the same lateness, last-at
    count, straggler and headline marks the ``stragglers`` section and every view print."""
    rows = (stragglers or {}).get("ranks") or []
    if i >= len(rows):
        return {}
    r = rows[i]
    return {
        "mean_late_ms": r["mean_late_ms"],
        "max_late_ms": r["max_late_ms"],
        "last_in": r["late_in"],
        "considered": r["considered"],
        "straggler": r["late"],
        "headline": r["headline"],
    }


def build_document(
    path: str,
    analyses: list[Analysis],
    rules: Rules,
    input_warnings: list[str] | None = None,
    deep: dict[str, Any] | None = None,
    stragglers: dict[str, Any] | None = None,
    main_index: int | None = None,
) -> dict[str, Any]:
    """The top-level document. For several ranks the body is the rank story's headline rank
    (``main_index``, else ``stragglers['headline_index']``: the straggler, else the rank whose own
    work fills most of the shared step — analyzers/ranks/story.py; the longest median step only
    without a story) and ``ranks`` compares them all with the story's lateness figures. ``deep`` and
    ``stragglers`` are the already-built parts of reports/deep.py (``analyze --deep``; a rank directory)."""
    if main_index is None and stragglers is not None:
        main_index = stragglers.get("headline_index")
    if len(analyses) == 1:
        main = analyses[0]
    elif main_index is not None and 0 <= main_index < len(analyses):
        main = analyses[main_index]
    else:
        main = slowest(analyses)
    formats = [a.source_format for a in analyses]
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": {"name": "trainscope", "version": __version__},
        "input": {"path": path, "format": formats[0] if len(set(formats)) == 1 else "mixed", "traces": len(analyses)},
    }
    doc.update(analysis_dict(main, rules))
    doc["warnings"] = list(input_warnings or []) + doc["warnings"]
    # Repairs of the other ranks' traces are said too: a repaired rank can change which rank is shown.
    doc["warnings"] += [
        f"rank {a.rank if a.rank is not None else a.source}: {w}"
        for a in analyses
        if a is not main
        for w in a.warnings
        if w.startswith(("repair ", "confidence lowered"))
    ]
    if len(analyses) > 1:
        doc["ranks"] = [
            {
                "rank": a.rank,
                "source": a.source,
                "axis": a.verdict.axis,
                "bottleneck": a.verdict.bottleneck,
                "confidence": a.verdict.confidence,
                "step_p50_ms": _r(a.breakdown.step_ms.p50, 3),
                "step_p95_ms": _r(a.breakdown.step_ms.p95, 3),
                "gpu_busy_pct": _r(a.breakdown.gpu_busy_pct),
                "data_wait_pct": _r(a.breakdown.data_wait_pct),
                **_story_figures(stragglers, i),
            }
            for i, a in enumerate(analyses)
        ]
    if stragglers is not None:
        doc["stragglers"] = stragglers
    if deep is not None:
        doc["deep"] = deep
    doc["thresholds"] = [{"name": t.name, "value": t.value, "unit": t.unit, "source": t.source} for t in rules.all()]
    return doc
