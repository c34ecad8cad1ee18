"""The HTML report: one self-contained page (inline CSS and SVG; no scripts, fonts or links to fetch).

It reads the same document as the terminal and Markdown reports, so the numbers cannot disagree,
and draws two pictures from it and the trace: the step breakdown as a stacked bar per step, and
the timeline of the median step (GPU lane and host lane, from the analyzers' timeline model).
Every string that comes from a trace (file, kernel, step, range and device names) is made
visible first (controls, bidi and line-separator characters spelled out as escapes, see
traces/safe_text.py), then goes through :func:`html.escape`: :func:`_e` for one line, :func:`_pre`
for the preformatted blocks. The document is made visible as a whole where a page starts
(:func:`render_html_fragment`), so a name's newline cannot forge a line of a block either.
"""

from __future__ import annotations

import html
import math
import os
from typing import TYPE_CHECKING
from typing import Any

from trainscope.analyzers.trace.breakdown import CATEGORIES
from trainscope.analyzers.trace.breakdown import CATEGORY_LABELS
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.analyzers.views.timeline import HOST_LABELS
from trainscope.analyzers.views.timeline import TimelineModel
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.analysis_document import Evidence
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
from trainscope.reports.document import mfu_lines
from trainscope.reports.document import rank_late_last
from trainscope.reports.document import rank_mark
from trainscope.reports.document import tree_heading
from trainscope.reports.document import tree_rows
from trainscope.reports.document import window_lines
from trainscope.reports.plan import ledger_text_lines
from trainscope.reports.text import _fmt
from trainscope.reports.text import _rate
from trainscope.reports.text import roofline_summary
from trainscope.traces.safe_text import safe_strings
from trainscope.traces.safe_text import visible
from trainscope.traces.safe_text import visible_lines

if TYPE_CHECKING:
    from trainscope.analyzers.trace.analysis import Analysis
    from trainscope.traces.model import Trace

# One colour per breakdown category and host state; busy GPU time green/purple/yellow, idle GPU
# time by the host's reason (data wait red, sync orange, launch overhead blue).
GPU_COLORS = {
    "compute": "#2e9e44",
    "communication": "#b04ac9",
    "copy": "#c9a227",
    "memset": "#a08a3a",
    "idle_data_wait": "#e0443e",
    "idle_sync": "#e08a1e",
    "idle_host_overhead": "#3d7fd9",
    "idle_other": "#c8c8c8",
}
HOST_COLORS = {
    "data_wait": "#e0443e",
    "sync": "#e08a1e",
    "launch": "#3d7fd9",
    "optimizer": "#1fa6a6",
    "backward": "#8a63d2",
    "cpu_op": "#5b8fb9",
    "idle": "#e6e6e6",
}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;margin:0 0 16px}
.verdict{padding:14px 18px;border-radius:8px;background:#fff;border-left:6px solid #888;box-shadow:0 1px 2px #0001}
.verdict.data{border-color:#e0443e}.verdict.algorithm{border-color:#2e9e44}.verdict.machine{border-color:#3d7fd9}
.verdict .head{font-size:18px;font-weight:600}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border-bottom:1px solid #e5e5e5;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0} td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.k{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;word-break:break-all}
pre{background:#f3f3f3;padding:8px;border-radius:4px;overflow-x:auto;font-size:12px}
.fix{background:#fff;padding:8px 14px;margin:8px 0;border-radius:6px;box-shadow:0 1px 2px #0001}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}
svg{background:#fff;display:block;max-width:100%}
footer{color:#888;font-size:12px;margin-top:28px}
"""


def _e(s: str) -> str:
    """One line of text in HTML: controls and invisible-direction characters shown, then escaped."""
    return html.escape(visible(s))


def _pre(s: str) -> str:
    """A preformatted block: as :func:`_e`, keeping its line breaks."""
    return html.escape(visible_lines(s))


def _f(x: Any, fmt: str = "{:.1f}", none: str = "—") -> str:
    return none if x is None else fmt.format(x)


def _legend(colors: dict[str, str], labels: dict[str, str], title: str = "") -> str:
    return (
        '<div class="legend">'
        + (f"<b>{_e(title)}</b> " if title else "")
        + "".join(f'<span><i style="background:{c}"></i>{_e(labels.get(k, k))}</span>' for k, c in colors.items())
        + "</div>"
    )


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``top``: steps of 1, 2 or 5 × 10^k, at most ``most`` + 1 ticks."""
    top = max(float(top), 1e-9)
    raw = top / most
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def breakdown_svg(doc: AnalysisDocument, width: int = 1000, height: int = 260) -> str:
    """One stacked bar per step (at most 200): milliseconds per breakdown category, bottom to top in
    the breakdown's order; outlier steps are marked with a triangle."""
    steps = doc.steps[:200]
    labels = {c: cat.label for c, cat in doc.breakdown.categories.items()} if doc.breakdown is not None else {}
    if not steps:
        return ""
    left, bottom, top = 56, 34, 12
    plot_w, plot_h = width - left - 10, height - bottom - top
    tallest = max(sum(v or 0 for v in s.ms.values()) for s in steps) or 1.0
    ticks = nice_ticks(tallest)
    ymax = ticks[-1]
    slot = plot_w / len(steps)
    bar = max(1.0, slot * 0.8)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="step time breakdown per step">'
    ]
    for v in ticks:  # y grid and labels at round values (0, 50, 100, … not 0, 45, 91, …)
        y = top + plot_h - plot_h * v / ymax
        out.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#555">{v:g}</text>'
        )
    out.append(
        f'<text x="12" y="{top + plot_h / 2:.0f}" font-size="11" fill="#555" '
        f'transform="rotate(-90 12 {top + plot_h / 2:.0f})" text-anchor="middle">ms per step</text>'
    )
    for i, s in enumerate(steps):
        x = left + i * slot + (slot - bar) / 2
        y = top + plot_h
        for c in CATEGORIES:
            ms = s.ms.get(c) or 0.0
            if ms <= 0:
                continue
            h = plot_h * ms / ymax
            y -= h
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.2f}" fill="{GPU_COLORS[c]}">'
                f"<title>{_e(s.label)}: {_e(labels[c])} {ms:.2f} ms</title></rect>"
            )
        if s.outlier:
            out.append(
                f'<path d="M{x + bar / 2:.1f} {y - 2:.1f} l-4 -7 h8 z" fill="#d33"><title>outlier</title></path>'
            )
        if len(steps) <= 30 or i % max(1, len(steps) // 15) == 0:
            label = s.label.split("#")[-1]
            out.append(
                f'<text x="{x + bar / 2:.1f}" y="{top + plot_h + 14}" font-size="10" text-anchor="middle" '
                f'fill="#555">{_e(label[:10])}</text>'
            )
    out.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" font-size="11" text-anchor="middle" fill="#555">step</text>'
    )
    out.append("</svg>")
    return "".join(out)


def median_step_index(analysis: Analysis) -> int | None:
    """The step whose duration is nearest the step-time p50 the report's header shows (with an even
    number of steps the p50 lies between two: the nearer one, the shorter on a tie)."""
    steps = analysis.breakdown.steps
    if not steps:
        return None
    p50 = analysis.breakdown.step_ms.p50 * 1e6
    return min(range(len(steps)), key=lambda i: (abs(steps[i].duration_ns - p50), steps[i].duration_ns))


def timeline_svg(
    trace: Trace,
    analysis: Analysis,
    width: int = 1000,
    columns: int = 500,
    model: TimelineModel | None = None,
) -> str:
    """The median step on two lanes (GPU, host), each column coloured by its dominant category.
    ``model``: the rank's timeline model where the caller has one (``RankView.timeline``), else
    built here."""
    i = median_step_index(analysis)
    if i is None:
        return ""
    step = analysis.breakdown.steps[i]
    if model is None:
        model = TimelineModel(trace, analysis.segmentation, analysis.device, kernel_classes(trace)[0])
    lo, hi = int(step.start_ns), int(step.start_ns + step.duration_ns)
    left, lane_h, gap, top = 56, 34, 10, 10
    plot_w = width - left - 30
    height = top + 2 * lane_h + gap + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="timeline of the median step">'
    ]
    for row, (lane, colors) in enumerate((("gpu", GPU_COLORS), ("host", HOST_COLORS))):
        view = model.lane(lane, lo, hi, columns)
        y = top + row * (lane_h + gap)
        out.append(
            f'<text x="{left - 6}" y="{y + lane_h / 2 + 4:.0f}" font-size="12" text-anchor="end" fill="#333">'
            f"{'GPU' if lane == 'gpu' else 'host'}</text>"
        )
        col_w = plot_w / columns
        start = 0
        dom = view.dominant
        for c in range(1, columns + 1):  # runs of equal colour as one rect
            if c < columns and dom[c] == dom[start]:
                continue
            cat = view.categories[int(dom[start])]
            out.append(
                f'<rect x="{left + start * col_w:.2f}" y="{y}" width="{(c - start) * col_w:.2f}" height="{lane_h}" '
                f'fill="{colors[cat]}"><title>{_e(cat)}</title></rect>'
            )
            start = c
    dur_ms = (hi - lo) / 1e6
    axis_y = top + 2 * lane_h + gap + 14
    for k in range(6):
        x = left + plot_w * k / 5
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{axis_y - 10}" y2="{axis_y - 6}" stroke="#888"/>'
            f'<text x="{x:.1f}" y="{axis_y + 4}" font-size="10" text-anchor="middle" fill="#555">'
            f"{dur_ms * k / 5:.1f} ms</text>"
        )
    out.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{axis_y + 20}" font-size="11" text-anchor="middle" fill="#555">'
        f"{_e(step.label)} (the step nearest the p50 of {analysis.breakdown.step_ms.p50:.1f} ms: "
        f"{dur_ms:.1f} ms)</text>"
    )
    out.append("</svg>")
    return "".join(out)


MEETS = {True: ("✔", "crossed", "#2e9e44"), False: ("✘", "not crossed", "#b3261e"), None: ("", "", "#555")}


def _evidence_rows(evidence: list[Evidence]) -> str:
    rows = []
    for e in evidence:
        val = "—" if e.value is None else _fmt(e.value, e.unit).strip()
        thr = f"{e.threshold} {e.unit}".strip() if e.threshold else ""
        mark, word, color = MEETS[e.meets]
        cell = f'<b style="color:{color}" title="threshold {word}">{mark}</b> {_e(word)}' if mark else ""
        rows.append(
            f"<tr><td>{cell}</td><td>{_e(e.metric)}</td><td class=n>{_e(val)}</td><td>{_e(thr)}</td>"
            f"<td>{_e(e.source)}</td></tr>"
        )
    return "".join(rows)


def _name(d: AnalysisDocument) -> str:
    """The input's file or folder name, the page's title."""
    return os.path.basename(d.input.path.rstrip("/") if d.input else d.source)


def render_html_fragment(
    doc: AnalysisDocument | dict[str, Any],
    trace: Trace | None = None,
    analysis: Analysis | None = None,
    model: TimelineModel | None = None,
) -> str:
    """The report body (for Jupyter's ``_repr_html_``): no <html> wrapper, styles scoped inline.
    ``model``: the rank's timeline model, where the caller has built it."""
    # every name one line, as the text report shows it
    d = AnalysisDocument.from_dict(safe_strings(doc.to_dict() if isinstance(doc, AnalysisDocument) else doc))
    v, b = d.verdict, d.breakdown
    split = communication_split_words(d)
    name = _name(d)
    o: list[str] = []
    w = o.append
    w(f"<h1>trainscope report: {_e(name)}</h1>")
    meta = []
    if d.device.name:
        meta.append(_e(device_label(d)))
    meta.append(f"{len(d.steps)} steps ({_e(d.steps_note or d.steps_method)})")
    if d.steps and b is not None:
        st = b.step_time_ms
        meta.append(
            f"step p50 {_f(st.p50)} ms, p95 {_f(st.p95)} ms; GPU busy {_f(b.gpu_busy_pct)} %, "
            f"data wait {_f(b.data_wait_pct)} %"
        )
    meta += [_e(line) for line in window_lines(d)]
    w(f'<p class="meta">{" · ".join(meta)}</p>')
    w(
        f'<div class="verdict {_e(v.axis)}"><div class="head">{_e(headline(d))}</div>'
        f"<div>confidence {v.confidence:.2f}</div><p>{_e(v.summary)}</p></div>"
    )
    if v.evidence:
        w(
            "<h2>Evidence</h2><table><tr><th>crossed</th><th>evidence</th><th>value</th><th>threshold</th><th>source</th></tr>"
            + _evidence_rows(v.evidence)
            + "</table>"
            + (f"<p>{_e(split)}</p>" if split else "")
        )
    if d.recommendations:
        w(
            "<h2>Fixes, ranked by projected gain</h2><p>Projections are upper bounds computed from the measured breakdown.</p>"
        )
        for rec in d.recommendations:
            w(
                f'<div class="fix"><b>{rec.rank}. {_e(rec.title)}</b> — {_e(gain_words(rec))}<pre>{_pre(rec.change)}</pre>'
                f"<small>Basis: {_e(rec.basis)}</small></div>"
            )
    ss = d.steady_state
    if ss and ss.ledger:
        w(
            "<h2>Start-up ledger</h2>"
            f"<p>One-off costs, paid once per process: {(ss.total_ms or 0.0) / 1e3:,.2f} s in all, "
            f"{ss.one_off_in_window_ms:,.1f} ms of it in the judged window.</p>"
            "<table><tr><th>phase</th><th>cost</th><th>ms</th><th>count</th><th>in window ms</th><th>what</th>"
            "<th>where</th></tr>"
            + "".join(
                f"<tr><td>{_e(c.phase)}</td><td>{_e(c.kind)}</td><td class=n>{c.ms:,.1f}</td>"
                f"<td class=n>{c.count}</td><td class=n>{c.in_window_ms:,.1f}</td><td>{_e(c.what)}</td>"
                f"<td>{_e(c.where)}</td></tr>"
                for c in sorted(ss.ledger, key=lambda c: -(c.ms or 0.0))
            )
            + "</table>"
        )
    if d.steps and d.device.id is not None and not counters_only(d) and b is not None:
        w("<h2>Where step time goes</h2>")
        w(breakdown_svg(d))
        w(_legend(GPU_COLORS, CATEGORY_LABELS))
        w(
            "<table><tr><th>category</th><th>share</th><th>p50 ms</th><th>p95 ms</th></tr>"
            + "".join(
                f"<tr><td>{_e(c.label)}</td><td class=n>{_f(c.pct)} %</td><td class=n>{_f(c.p50_ms, '{:.2f}')}</td>"
                f"<td class=n>{_f(c.p95_ms, '{:.2f}')}</td></tr>"
                for c in b.categories.values()
            )
            + "</table>"
            + (f"<p>{_e(split)}</p>" if split else "")
        )
        if trace is not None and analysis is not None:
            tl = timeline_svg(trace, analysis, model=model)
            if tl:
                w("<h2>Timeline of the median step</h2>")
                w(tl)
                w(_legend(GPU_COLORS, CATEGORY_LABELS, "GPU:"))
                w(_legend(HOST_COLORS, HOST_LABELS, "host:"))
    ph = d.phases
    if ph and ph.phases:
        w(
            "<h2>Phases</h2><p>Host time of the phase ranges; GPU time of the kernels they launched.</p>"
            "<table><tr><th>phase</th><th>host ms</th><th>share</th><th>GPU ms</th><th>kernels</th></tr>"
        )
        for p in ph.phases:
            w(
                f"<tr><td>{_e(p.name)}</td><td class=n>{p.host_ms:.2f}</td><td class=n>{p.host_pct:.1f} %</td>"
                f"<td class=n>{p.kernel_ms:.2f}</td><td class=n>{p.kernels:,}</td></tr>"
            )
        w("</table>")
    rows = tree_rows(d)
    if rows:
        w(
            f"<h2>Where in the model</h2><p>{_e(tree_heading(d))}.</p>"
            "<table><tr><th>node</th><th>GPU ms</th><th>share</th><th>notes</th></tr>"
        )
        for r in rows:
            label = _e(r["label"]) if r["first_level"] else "&#8627; " + _e(r["label"])
            w(
                f"<tr><td>{label}</td><td class=n>{r['gpu_ms']:,.2f}</td><td class=n>{r['gpu_pct']:.1f} %</td>"
                f"<td>{_e(r['detail'])}</td></tr>"
            )
        w("</table>")
    gm = d.gpu_metrics
    if gm:
        parts = gpu_metrics_parts(gm)
        w(f"<h2>GPU metrics</h2><p>{_e(', '.join(parts))} ({gm.samples:,} samples in the steps)</p>")
    k = d.kernels
    if k is not None and k.count:
        tc = k.tensor_core_pct_of_matmul
        cls = ", ".join(
            f"{c} {p:.0f} %" for c, p in sorted(k.class_pct.items(), key=lambda x: -(x[1] or 0.0)) if (p or 0.0) >= 1
        )
        w(
            f"<h2>Top kernels</h2><p>{k.count:,} kernels in the steps, {k.total_ms:.1f} ms; median "
            f"{k.median_us:.1f} µs; tensor cores {'—' if tc is None else f'{tc:.0f} %'} of GEMM/conv/attention time. "
            f"By class: {_e(cls)}.</p>"
        )
        rl = d.roofline
        if rl:
            w(
                f"<p>{_e(roofline_summary(rl))}. Bound: what limits the kernel on the roofline (mem: memory bandwidth, "
                "comp: arithmetic); F/B: FLOPs per byte moved; rate: achieved TFLOP/s (compute-bound) or GB/s; "
                "% of roof: the rate against the roof at that intensity.</p>"
            )
        w(
            "<table><tr><th>share</th><th>total ms</th><th>count</th><th>class</th><th>tensor cores</th>"
            "<th>bound</th><th>F/B</th><th>rate</th><th>% of roof</th><th>kernel</th></tr>"
        )
        bounds = {"memory": "mem", "compute": "comp", "communication": "comm", "unknown": "?"}
        for kk in k.top[:25]:
            inten = f"{kk.intensity:.3g}" if kk.intensity is not None else ""
            pct = f"{kk.pct_of_roof:.0f} %" if kk.pct_of_roof is not None else ""
            w(
                f"<tr><td class=n>{_f(kk.share_pct)} %</td><td class=n>{_f(kk.total_ms, '{:.2f}')}</td>"
                f"<td class=n>{kk.count}</td><td>{_e(kk.kernel_class)}</td><td>{'yes' if kk.tensor_core else 'no'}</td>"
                f"<td>{bounds.get(kk.bound or '', '')}</td><td class=n>{inten}</td><td class=n>{_e(_rate(kk))}</td>"
                f"<td class=n>{pct}</td><td class=k>{_e(kk.name)}</td></tr>"
            )
        w("</table>")
    frows = fusion_rows(d)
    if frows:
        w(
            f"<h2>Fusion candidates</h2><p>{_e(fusion_heading(d))}.</p>"
            "<table><tr><th>sequence</th><th>stream</th><th>occurrences</th><th>ms per step</th>"
            "<th>intermediate bytes per occurrence</th><th>saved ms per step</th></tr>"
        )
        for r in frows:
            w(
                f"<tr><td class=k>{_e(r['sequence'])}</td><td class=n>{r['stream']}</td><td class=n>{r['occurrences']}</td>"
                f"<td class=n>{r['ms_per_step']:.3f}</td><td class=n>{_e(r['bytes'])}</td><td class=n>{_e(r['saved'])}</td></tr>"
            )
        w("</table>")
    if d.findings:
        w("<h2>Findings</h2><ul>")
        for f in d.findings:
            w(
                f"<li><b>{_e(f.id)}</b> ({_e(f.severity)}, {_f(f.stake_pct)} % of step time): "
                f"{_e(f.title)}; {_e(f.detail)}</li>"
            )
        w("</ul>")
    if d.memory or d.mfu:
        w("<h2>Memory and MFU</h2><ul>")
        for m in d.memory:
            cap = f" of {m.capacity_bytes / 2**30:.1f} GiB ({m.peak_pct_of_capacity:.0f} %)" if m.capacity_bytes else ""
            res = f", reserved {m.peak_reserved_bytes / 2**30:.2f} GiB" if m.peak_reserved_bytes is not None else ""
            basis = (
                " (growth since profiling started: the trace records allocator deltas, not totals)"
                if m.basis == "relative"
                else f" ({_e(m.basis)})"
            )
            w(
                f"<li>GPU {m.device}: peak allocated {(m.peak_allocated_bytes or 0) / 2**30:.2f} GiB{basis}{res}{cap}</li>"
            )
        mfu = d.mfu
        if mfu is not None:
            items = mfu_lines(
                mfu, _e, lambda pct, why: f"{pct:.1f} % ({_e(why or '')})", lambda law: iron_law_lines(law, _e)
            )
            o.extend(f"<li>{line}</li>" for line in items)
        w("</ul>")
    if d.ledger:
        w("<h2>Planned memory</h2><pre>" + _pre("\n".join(ledger_text_lines(d.ledger)).strip("\n")) + "</pre>")
    if d.deep:
        w(
            "<h2>Deep analysis (Holistic Trace Analysis)</h2><pre>"
            + _pre("\n".join(deep_text_lines(d.deep, lambda x: x)))
            + "</pre>"
        )
    if d.stragglers:
        w("<h2>Stragglers</h2><pre>" + _pre("\n".join(stragglers_text_lines(d.stragglers, lambda x: x))) + "</pre>")
    if d.ranks:
        lead = d.stragglers.headline if d.stragglers else None
        w("<h2>Ranks</h2>" + (f"<p>{_e(lead[:1].upper() + lead[1:])}.</p>" if lead else ""))
        w(
            "<table><tr><th>rank</th><th>step p50 ms</th><th>GPU busy</th><th>late by ms</th><th>last at</th>"
            "<th>verdict</th></tr>"
        )
        for rk in d.ranks:
            late, last = rank_late_last(rk)
            w(
                f"<tr><td class=n>{rk.rank}</td><td class=n>{_f(rk.step_p50_ms)}</td><td class=n>{_f(rk.gpu_busy_pct)} %</td>"
                f"<td class=n>{late}</td><td class=n>{_e(last)}</td>"
                f"<td>{_e(AXIS_NAMES[rk.axis])} {_e(rk.bottleneck or '')}{_e(rank_mark(rk))}</td></tr>"
            )
        w("</table>")
    if d.warnings:
        w("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(line)}</li>" for line in d.warnings) + "</ul>")
    w(f"<footer>trainscope {_e(d.tool.version if d.tool else '')} · schema {_e(d.schema or '')}</footer>")
    return "\n".join(o)


def render_html(
    doc: AnalysisDocument | dict[str, Any],
    trace: Trace | None = None,
    analysis: Analysis | None = None,
    model: TimelineModel | None = None,
) -> str:
    """The whole page."""
    name = _name(AnalysisDocument.of(doc))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>trainscope: {_e(name)}</title><style>{CSS}</style></head>\n<body><main>\n"
        + render_html_fragment(doc, trace, analysis, model)
        + "\n</main></body></html>\n"
    )


def scoped_css(scope: str = ".trainscope-report") -> str:
    """The page's styles limited to ``scope`` (a notebook cell must not restyle the notebook)."""
    rules = []
    for rule in CSS.replace("\n", "").split("}"):
        if "{" not in rule:
            continue
        sel, body = rule.split("{", 1)
        sel = ",".join(f"{scope} {s.strip()}" if s.strip() not in ("body", "main") else scope for s in sel.split(","))
        rules.append(f"{sel}{{{body}}}")
    return "".join(rules)


def render_html_cell(
    doc: AnalysisDocument | dict[str, Any],
    trace: Trace | None = None,
    analysis: Analysis | None = None,
    model: TimelineModel | None = None,
) -> str:
    """For Jupyter (``Report._repr_html_``): the body with its styles scoped to one element."""
    return (
        f'<div class="trainscope-report"><style>{scoped_css()}</style>'
        + render_html_fragment(doc, trace, analysis, model)
        + "</div>"
    )


def render_text_page(title: str, summary: str, text: str) -> str:
    """A self-contained page of a terminal report (diff, plan, memory): ``--report x.html``."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body><main>\n"
        f'<h1>{_e(title)}</h1><p class="meta">{_e(summary)}</p><pre>{_pre(text)}</pre>'
        "\n</main></body></html>\n"
    )


def render_text_cell(title: str, summary: str, text: str) -> str:
    """For Jupyter (``_repr_html_`` of a diff, plan or memory result): a heading, the one-line
    verdict and the terminal report verbatim (escaped, preformatted), styles scoped to one element."""
    return (
        f'<div class="trainscope-report"><style>{scoped_css()}</style>'
        f'<h1>{_e(title)}</h1><p class="meta">{_e(summary)}</p><pre>{_pre(text)}</pre></div>'
    )
