"""The terminal summary: verdict, evidence, breakdown, top kernels, fixes."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from trainscope.analyzers.plural import unit_for
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.analysis_document import RoofKernel
from trainscope.reports.analysis_document import Roofline
from trainscope.reports.analysis_document import TopKernel
from trainscope.reports.deep import deep_text_lines
from trainscope.reports.deep import stragglers_text_lines
from trainscope.reports.document import AXIS_NAMES
from trainscope.reports.document import communication_split_words
from trainscope.reports.document import counters_only
from trainscope.reports.document import device_label
from trainscope.reports.document import fusion_heading
from trainscope.reports.document import fusion_rows
from trainscope.reports.document import gain_words
from trainscope.reports.document import gpu_metrics_parts
from trainscope.reports.document import headline
from trainscope.reports.document import iron_law_lines
from trainscope.reports.document import rank_mark
from trainscope.reports.document import shapes_mfu
from trainscope.reports.document import tree_heading
from trainscope.reports.document import tree_rows
from trainscope.reports.document import window_lines
from trainscope.reports.parts import evidence_mark
from trainscope.reports.plan import ledger_text_lines

Doc = AnalysisDocument | dict[str, Any]
RoofCols = TopKernel | RoofKernel  # a kernel row with the roofline's columns

_BAR = 24


def _bar(pct: float) -> str:
    n = int(round(max(0.0, min(100.0, pct)) / 100 * _BAR))
    return "█" * n + "·" * (_BAR - n)


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    if unit.startswith("%"):
        return f"{v:.1f} %"
    return f"{v:g} {unit_for(v, unit)}".strip()


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def render_text(doc: Doc, color: bool = False) -> str:
    d = AnalysisDocument.of(doc)
    b = d.breakdown
    v = d.verdict
    bold = (lambda s: f"\033[1m{s}\033[0m") if color else (lambda s: s)
    out: list[str] = []
    w = out.append
    inp = d.input
    w(bold(f"trainscope — {os.path.basename(inp.path.rstrip('/') if inp else d.source)}"))
    dev = d.device
    if dev.name:
        w(f"  device   {device_label(d)}")
    if counters_only(d):
        w(f"  source   sampled counters ({inp.format if inp else ''}): no steps, kernels or timeline to break down")
    else:
        w(f"  steps    {len(d.steps)} — {d.steps_note}")
    for i, line in enumerate(window_lines(d)):
        w(f"  {'window' if i == 0 else '':8s} {line}")
    if d.steps and not counters_only(d) and b is not None:
        st = b.step_time_ms
        w(
            f"  step     p50 {st.p50:.1f} ms   p95 {st.p95:.1f} ms   "
            f"GPU busy {b.gpu_busy_pct:.1f} %   data wait {b.data_wait_pct:.1f} %"
        )
    w("")
    w(bold(f"VERDICT  {headline(d)}") + f"   confidence {v.confidence:.2f}")
    for line in textwrap.wrap(v.summary, 92):
        w(f"  {line}")
    w("")
    if v.evidence:
        w(bold("Evidence"))
        for e in v.evidence:
            mark = evidence_mark(e.meets)
            thr = f"{e.threshold} {e.unit}".strip() if e.threshold else ""
            w(f"  {mark} {_short(e.metric, 52):52s} {_fmt(e.value, e.unit):>12s}  {thr:<22s} {e.source}")
        out.extend(_split_lines(d, "  "))
        w("")

    if d.steps and dev.id is not None and b is not None:
        w(bold("Where step time goes") + "  (exclusive share of summed step time; per-step p50 / p95)")
        for c, cat in b.categories.items():
            if cat.pct == 0 and c not in ("compute", "idle_data_wait"):
                continue
            w(f"  {cat.label:34s} {cat.pct:5.1f} % {_bar(cat.pct or 0.0)}  {cat.p50_ms:8.2f} / {cat.p95_ms:8.2f} ms")
            if c == "communication":
                out.extend(_split_lines(d, "    "))
        outliers = [s for s in d.steps if s.outlier]
        if outliers:
            labels = ", ".join(f"{s.label} ({s.duration_ms:.0f} ms)" for s in outliers[:6])
            w(f"  outlier steps: {labels}{' …' if len(outliers) > 6 else ''}")
        w("")

    ph = d.phases
    if ph and ph.phases:
        w(bold("Phases") + "  (host time of the phase ranges; GPU time of the kernels they launched)")
        for p in ph.phases:
            w(
                f"  {p.name:10s} {p.host_ms:9.2f} ms  {p.host_pct:5.1f} % {_bar(p.host_pct or 0.0)}  "
                f"GPU {p.kernel_ms:8.2f} ms in {p.kernels:,} kernel{'s' * (p.kernels != 1)}"
            )
        w("")
    out.extend(_tree_lines(d, bold))
    gm = d.gpu_metrics
    if gm:
        parts = gpu_metrics_parts(gm)
        w(bold("GPU metrics") + f"  {', '.join(parts)}  ({gm.samples:,} samples in the steps)")
        w("")

    k = d.kernels
    if k is not None and k.count:
        cls = ", ".join(
            f"{c} {p:.0f} %" for c, p in sorted(k.class_pct.items(), key=lambda x: -(x[1] or 0.0)) if (p or 0.0) >= 1
        )
        tc = k.tensor_core_pct_of_matmul
        w(
            bold("Kernels") + f"  {k.count:,} in the steps, {k.total_ms:.1f} ms; median {k.median_us:.1f} µs; "
            f"tensor cores {'—' if tc is None else f'{tc:.0f} %'} of GEMM/conv/attention time"
        )
        w(f"  by class: {cls}")
        rl = d.roofline
        if rl:
            w("  " + roofline_summary(rl))
        for kk in k.top[:8]:
            w(
                f"  {kk.share_pct:5.1f} %  {kk.total_ms:8.2f} ms  ×{kk.count:<6d} {kk.kernel_class:13s} "
                f"{'TC ' if kk.tensor_core else '   '}{roof_cells(kk)}  {_short(kk.name, 44)}"
            )
        w("")

    frows = fusion_rows(d)
    if frows:
        w(bold("Fusion candidates") + "  " + fusion_heading(d))
        w(f"  {'×':>6s} {'ms/step':>9s} {'saved ms/step':>13s} {'bytes/occurrence':>16s}  sequence (stream)")
        for r in frows:
            w(
                f"  {r['occurrences']:6d} {r['ms_per_step']:9.3f} {r['saved']:>13s} {r['bytes']:>16s}  "
                f"{_short(r['sequence'], 70)} (stream {r['stream']})"
            )
        w("")

    recs = d.recommendations
    if recs:
        w(bold("Fixes, ranked by projected gain") + "  (projections are upper bounds)")
        for rec in recs:
            w(f"  {rec.rank}. {rec.title}  [{gain_words(rec)}]")
            for line in rec.change.splitlines():
                w(f"       {line}")
            for line in textwrap.wrap("basis: " + rec.basis, 88):
                w(f"     {line}")
        w("")

    out.extend(startup_ledger_lines(d, bold))
    others = [f for f in d.findings if f.id != v.bottleneck]
    if others:
        w(bold("Other findings"))
        for f in others:
            w(f"  [{f.severity}] {f.id}: {f.title} ({f.stake_pct:.1f} % of step time)")
        w("")

    for m in d.memory:
        cap = f" of {m.capacity_bytes / 2**30:.1f} GiB ({m.peak_pct_of_capacity:.0f} %)" if m.capacity_bytes else ""
        res = f", reserved {m.peak_reserved_bytes / 2**30:.2f} GiB" if m.peak_reserved_bytes is not None else ""
        basis = " (growth since profiling started)" if m.basis == "relative" else ""
        w(f"Memory   GPU {m.device}: peak allocated {(m.peak_allocated_bytes or 0) / 2**30:.2f} GiB{basis}{res}{cap}")
    mfu = d.mfu
    if mfu is not None:
        w(f"MFU      {mfu.value_pct:.1f} % — {mfu.reason}" if mfu.value_pct is not None else f"MFU      {mfu.reason}")
        shapes = shapes_mfu(mfu)
        if shapes is not None:
            w(f"         {shapes:.1f} % — {mfu.shapes_reason}")
        if mfu.iron_law:
            out.extend(f"         {line}" for line in iron_law_lines(mfu.iron_law))

    if d.ledger:
        out.extend(ledger_text_lines(d.ledger))
    if d.deep:
        w("")
        out.extend(deep_text_lines(d.deep, bold))
    if d.stragglers:
        w("")
        out.extend(stragglers_text_lines(d.stragglers, bold))
    if d.ranks:
        w("")
        lead = (d.stragglers.headline if d.stragglers else None) or "the report leads with the slowest rank"
        w(bold("Ranks") + f"  ({lead.split(':')[0].replace('the report leads with ', 'the summary above is ')})")
        for rk in d.ranks:
            late = (
                f"  late {rk.mean_late_ms:5.1f} ms  last at {rk.last_in} of {rk.considered}"
                if rk.mean_late_ms is not None
                else ""
            )
            mark = rank_mark(rk)
            w(
                f"  rank {rk.rank if rk.rank is not None else '?':>3}  step p50 {rk.step_p50_ms:8.1f} ms  "
                f"busy {rk.gpu_busy_pct:5.1f} %{late}  "
                f"{AXIS_NAMES[rk.axis]}{' · ' + rk.bottleneck if rk.bottleneck else ''}{mark}"
            )
    hwc = d.hw_counters
    if hwc:  # counter mode: FLOPs measured per kernel, no timing
        w("")
        w(f"Measured FLOPs  hardware FP counters, {hwc.ranges} kernel ranges (no timing: ranges are replays)")
        for hk in hwc.kernels[:10]:
            w(
                f"  {hk.share_pct:5.1f} %  {hk.flops:10.3g} FLOPs  ×{hk.ranges:<3d} {hk.kernel_class:12.12s} "
                f"{_short(hk.operator or '', 24):24s} {_short(hk.name, 60)}"
            )
    if d.warnings:
        w("")
        for line in d.warnings:
            w(f"note: {line}")
    return "\n".join(out) + "\n"


def _tree_lines(doc: Doc, bold: Callable[[str], str]) -> list[str]:
    """Where in the model: the module tree's first level, then its heaviest nodes (document.tree_rows)."""
    rows = tree_rows(doc)
    if not rows:
        return []
    out = [bold("Where in the model") + "  " + tree_heading(doc)]
    for r in rows:
        label = r["label"] if r["first_level"] else "  " + r["label"]
        out.append(
            f"  {_short(label, 62):62s} {r['gpu_ms']:9.2f} ms {r['gpu_pct']:5.1f} %"
            + (f"  {r['detail']}" if r["detail"] else "")
        )
    return [*out, ""]


def _split_lines(doc: Doc, indent: str) -> list[str]:
    """The communication row's split (reports/document.py), wrapped; none where the rank waits for no one."""
    words = communication_split_words(doc)
    return [indent + line for line in textwrap.wrap(words, 96 - len(indent))] if words else []


def startup_ledger_lines(doc: Doc, bold: Callable[[str], str] = lambda s: s) -> list[str]:
    """The start-up ledger: each one-off cost with what, where and how long (once per process)."""
    st = AnalysisDocument.of(doc).steady_state
    if not st or not st.ledger:
        return []
    out = [
        bold("Start-up ledger") + f"  (one-off costs, once per process: {(st.total_ms or 0.0) / 1e3:,.2f} s; "
        f"{st.one_off_in_window_ms:,.1f} ms of it in the judged window)"
    ]
    for c in sorted(st.ledger, key=lambda c: -(c.ms or 0.0))[:10]:
        inside = f", {c.in_window_ms:,.1f} ms in the window" if c.in_window_ms else ""
        out.append(f"  {c.ms:>10,.1f} ms  {c.phase:13s} {c.kind} ×{c.count}{inside}")
        for line in textwrap.wrap(f"{c.what} — {c.where}", 88):
            out.append(f"               {line}")
    if len(st.ledger) > 10:
        out.append(f"  … {len(st.ledger) - 10} more in the JSON document (steady_state.ledger)")
    out.append("")
    return out


def _roof(kk: RoofCols | dict[str, Any] | SimpleNamespace) -> RoofCols | SimpleNamespace:
    """A kernel row's roofline columns by attribute: the typed row, or a view's own dict row."""
    if isinstance(kk, dict):
        return SimpleNamespace(**{c: kk.get(c) for c in ("bound", "tflops", "gbps", "intensity", "pct_of_roof")})
    return kk


def _rate(kk: RoofCols | dict[str, Any] | SimpleNamespace) -> str:
    r = _roof(kk)
    if r.bound == "compute" and r.tflops is not None:
        return f"{r.tflops:.3g} TFLOP/s"
    if r.gbps is not None:
        return f"{r.gbps / 1000:.3g} TB/s" if r.gbps >= 1000 else f"{r.gbps:.3g} GB/s"
    return ""


def roof_cells(kk: RoofCols | dict[str, Any]) -> str:
    """Bound, arithmetic intensity, achieved rate and % of roof of one kernel row, fixed width."""
    r = _roof(kk)
    bound = {"memory": "mem", "compute": "comp", "communication": "comm", "unknown": "?"}.get(r.bound or "", "")
    inten = f"{r.intensity:.3g} F/B" if r.intensity is not None else ""
    pct = f"{r.pct_of_roof:.0f} %" if r.pct_of_roof is not None else ""
    return f"{bound:4s} {inten:>10s} {_rate(r):>13s} {pct:>5s}"


def roofline_summary(rl: Roofline) -> str:
    """One line: the roofline's split of kernel time and where its figures came from."""
    bw = rl.bandwidth_gbps
    dev = f"{rl.device}, {bw / 1000:.3g} TB/s" if bw else rl.device
    p = rl.bound_pct
    total = rl.total_ms or 0.0
    src = ", ".join(
        f"{k} {100 * (v or 0.0) / total:.0f} %"
        for k, v in rl.source_ms.items()
        if total and (v or 0.0) / total >= 0.005
    )
    return (
        f"roofline ({dev}): memory-bound {p['memory']:.0f} %, compute-bound {p['compute']:.0f} %, "
        f"unknown {p['unknown']:.0f} % of kernel time; FLOPs/bytes from {src or 'nothing'}"
    )
