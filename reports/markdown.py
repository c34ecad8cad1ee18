"""The Markdown report: the terminal summary's content, shaped for a pull request."""

from __future__ import annotations

import os
from typing import Any

from trainscope.analyzers.findings import code_language
from trainscope.analyzers.plural import unit_for
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.analysis_document import IronLaw
from trainscope.reports.analysis_document import Roofline
from trainscope.reports.deep import deep_markdown_lines
from trainscope.reports.deep import stragglers_markdown_lines
from trainscope.reports.document import AXIS_NAMES
from trainscope.reports.document import communication_split_words
from trainscope.reports.document import device_label
from trainscope.reports.document import fusion_heading
from trainscope.reports.document import fusion_rows
from trainscope.reports.document import gain_words
from trainscope.reports.document import gpu_metrics_parts
from trainscope.reports.document import headline
from trainscope.reports.document import iron_law_gap_words
from trainscope.reports.document import mfu_lines
from trainscope.reports.document import rank_late_last
from trainscope.reports.document import rank_mark
from trainscope.reports.document import tree_heading
from trainscope.reports.document import tree_rows
from trainscope.reports.document import window_lines
from trainscope.reports.mdsafe import md_bullets
from trainscope.reports.mdsafe import md_escape
from trainscope.reports.mdsafe import md_table
from trainscope.reports.plan import ledger_markdown_lines


def _fence(code: str) -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{code_language(code)}\n{code}\n{fence}"


def _section(title: str, lead: str) -> list[str]:
    """A section's heading and its lead sentence."""
    return [f"## {title}", "", md_escape(lead) + ".", ""]


def _iron_law_markdown(law: IronLaw) -> list[str]:
    """The Iron Law in the Markdown report: its formula and sources, then pipeline efficiency (GPU
    busy) against MFU and where busy time falls below peak."""
    gap = iron_law_gap_words(law, md_escape)
    return [
        f"Iron Law: {md_escape(law.formula)}. FLOPs/step: {md_escape(law.flops_source)}; GPUs: "
        f"{md_escape(law.gpus_source)}; peak: {md_escape(law.peak_source)}; η = MFU.",
        f"Pipeline efficiency (GPU busy) {law.pipeline_efficiency_pct:.1f} % against MFU "
        f"{law.efficiency_pct:.1f} %" + (f"; busy but below peak, % of step time: {gap}" if gap else ""),
    ]


def render_markdown(doc: AnalysisDocument | dict[str, Any]) -> str:
    d = AnalysisDocument.of(doc)
    b, v = d.breakdown, d.verdict
    split = communication_split_words(d)
    out: list[str] = []
    w = out.append
    w(f"# trainscope report: {md_escape(os.path.basename(d.input.path.rstrip('/') if d.input else d.source))}")
    w("")
    dev = d.device
    if dev.name:
        w(f"- **Device:** {md_escape(device_label(d))}")
    w(f"- **Steps:** {len(d.steps)} ({md_escape(d.steps_note)})")
    for line in window_lines(d):
        w(f"- **Window:** {md_escape(line)}")
    if d.steps and b is not None:
        st = b.step_time_ms
        w(
            f"- **Step time:** p50 {st.p50:.1f} ms, p95 {st.p95:.1f} ms; GPU busy {b.gpu_busy_pct:.1f} %, "
            f"data wait {b.data_wait_pct:.1f} %"
        )
    w("")
    w(f"## Verdict: {md_escape(headline(d))} (confidence {v.confidence:.2f})")
    w("")
    w(md_escape(v.summary))
    w("")
    if v.evidence:
        w("| evidence | value | threshold | source |")
        w("|---|---:|---|---|")
        for e in v.evidence:
            val = "—" if e.value is None else f"{e.value:g} {unit_for(e.value, e.unit)}".strip()
            thr = f"{e.threshold} {e.unit}".strip() if e.threshold else ""
            w(f"| {md_escape(e.metric)} | {md_escape(val)} | {md_escape(thr)} | {md_escape(e.source)} |")
        w("")
        if split:
            w(md_escape(split))
            w("")
    if d.recommendations:
        w("## Fixes, ranked by projected gain")
        w("")
        w("Projections are upper bounds computed from the measured breakdown.")
        w("")
        for r in d.recommendations:
            w(f"{r.rank}. **{md_escape(r.title)}** — {md_escape(gain_words(r))}")
            w("")
            w(_fence(r.change))
            w("")
            w(f"   Basis: {md_escape(r.basis)}")
            w("")
    ss = d.steady_state
    if ss and ss.ledger:
        w("## Start-up ledger")
        w("")
        w(
            f"One-off costs, paid once per process: {(ss.total_ms or 0.0) / 1e3:,.2f} s in all, "
            f"{ss.one_off_in_window_ms:,.1f} ms of it in the judged window."
        )
        w("")
        w("| phase | cost | ms | count | in window ms | what | where |")
        w("|---|---|---:|---:|---:|---|---|")
        for c in sorted(ss.ledger, key=lambda c: -(c.ms or 0.0)):
            w(
                f"| {md_escape(c.phase)} | {md_escape(c.kind)} | {c.ms:,.1f} | {c.count} | "
                f"{c.in_window_ms:,.1f} | {md_escape(c.what, 160)} | {md_escape(c.where, 80)} |"
            )
        w("")
    ph = d.phases
    if ph and ph.phases:
        w("## Phases")
        w("")
        w("| phase | host ms | share of step time | GPU kernel ms | kernels |")
        w("|---|---:|---:|---:|---:|")
        for p in ph.phases:
            w(f"| {md_escape(p.name)} | {p.host_ms:.2f} | {p.host_pct:.1f} % | {p.kernel_ms:.2f} | {p.kernels} |")
        w("")
    rows = tree_rows(d)
    if rows:
        out += _section("Where in the model", tree_heading(d))
        out += md_table(
            "| node | GPU ms | share | notes |",
            "|---|---:|---:|---|",
            (
                [
                    ("" if r["first_level"] else "↳ ") + md_escape(r["label"], 160),
                    f"{r['gpu_ms']:,.2f}",
                    f"{r['gpu_pct']:.1f} %",
                    md_escape(r["detail"], 200),
                ]
                for r in rows
            ),
        )
        w("")
    gm = d.gpu_metrics
    if gm:
        vals = gpu_metrics_parts(gm)
        w(f"**GPU metrics** (Nsight GPU_METRICS, {gm.samples} samples in the steps): {', '.join(vals)}")
        w("")
    if d.steps and dev.id is not None and b is not None:
        w("## Where step time goes")
        w("")
        w("| category | share | p50 ms | p95 ms |")
        w("|---|---:|---:|---:|")
        for cat in b.categories.values():
            w(f"| {md_escape(cat.label)} | {cat.pct:.1f} % | {cat.p50_ms:.2f} | {cat.p95_ms:.2f} |")
        w("")
        if split:
            w(md_escape(split))
            w("")
        out += md_table(
            "| step | duration ms | GPU busy | data wait | outlier |",
            "|---|---:|---:|---:|---|",
            (
                [
                    md_escape(s.label),
                    f"{s.duration_ms:.1f}",
                    f"{s.gpu_busy_pct:.1f} %",
                    f"{s.data_wait_pct:.1f} %",
                    "yes" if s.outlier else "",
                ]
                for s in d.steps[:200]
            ),
        )
        w("")
    k = d.kernels
    if k is not None and k.count:
        w("## Top kernels")
        w("")
        out += md_table(
            "| share | total ms | count | class | tensor cores | kernel |",
            "|---:|---:|---:|---|---|---|",
            (
                [
                    f"{kk.share_pct:.1f} %",
                    f"{kk.total_ms:.2f}",
                    kk.count,
                    kk.kernel_class,
                    "yes" if kk.tensor_core else "no",
                    md_escape(kk.name, 120),
                ]
                for kk in k.top[:15]
            ),
        )
        w("")
    rl = d.roofline
    if rl and rl.kernels:
        out.extend(roofline_markdown_lines(rl))
    frows = fusion_rows(d)
    if frows:
        out += _section("Fusion candidates", fusion_heading(d))
        out += md_table(
            "| sequence | stream | occurrences | ms per step | intermediate bytes per occurrence | saved ms per step |",
            "|---|---:|---:|---:|---:|---:|",
            (
                [
                    md_escape(r["sequence"], 200),
                    r["stream"],
                    r["occurrences"],
                    f"{r['ms_per_step']:.3f}",
                    r["bytes"],
                    md_escape(r["saved"]),
                ]
                for r in frows
            ),
        )
        w("")
    if d.findings:
        w("## Findings")
        w("")
        for f in d.findings:
            w(
                f"- **{md_escape(f.id)}** ({f.severity}, {f.stake_pct:.1f} % of step time): "
                f"{md_escape(f.title)}; {md_escape(f.detail)}"
            )
        w("")
    w("## Memory and MFU")
    w("")
    for m in d.memory:
        cap = f" of {m.capacity_bytes / 2**30:.1f} GiB" if m.capacity_bytes else ""
        w(f"- GPU {m.device}: peak allocated {(m.peak_allocated_bytes or 0) / 2**30:.2f} GiB{cap} ({m.basis})")
    mfu = d.mfu
    if mfu is not None:
        items = mfu_lines(mfu, md_escape, lambda pct, why: f"MFU {md_escape(why)}: {pct:.1f} %", _iron_law_markdown)
        out.extend(f"- {line}" for line in items)
    w("")
    if d.ledger:
        out.extend(ledger_markdown_lines(d.ledger))
    if d.deep:
        out.extend(deep_markdown_lines(d.deep, md_escape))
    if d.stragglers:
        out.extend(stragglers_markdown_lines(d.stragglers, md_escape))
    if d.ranks:
        w("## Ranks")
        w("")
        lead = d.stragglers.headline if d.stragglers else None
        if lead:
            w(md_escape(lead[:1].upper() + lead[1:]) + ".")
            w("")
        out += md_table(
            "| rank | step p50 ms | GPU busy | late by ms | last at | verdict |",
            "|---:|---:|---:|---:|---:|---|",
            (
                [
                    rr.rank,
                    f"{rr.step_p50_ms:.1f}",
                    f"{rr.gpu_busy_pct:.1f} %",
                    *rank_late_last(rr),
                    f"{AXIS_NAMES[rr.axis]} {md_escape(rr.bottleneck or '')}{rank_mark(rr)}",
                ]
                for rr in d.ranks
            ),
        )
        w("")
    out += md_bullets("## Notes", d.warnings)
    w(f"<sub>trainscope {d.tool.version if d.tool else ''} · schema {d.schema}</sub>")
    return "\n".join(out) + "\n"


def _num(x: float | None, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def roofline_markdown_lines(rl: Roofline) -> list[str]:
    """The roofline table: per kernel, intensity, achieved rates, % of roof and bound."""
    bw = rl.bandwidth_gbps
    p = rl.bound_pct
    ridge = ", ".join(f"{k} {v:g}" for k, v in (rl.ridge_flop_per_byte or {}).items())
    comm_pct = 100 * (rl.communication_ms or 0.0) / rl.total_ms if rl.total_ms else 0
    out = [
        "## Roofline",
        "",
        f"{md_escape(rl.device)}"
        + (f", {bw:g} GB/s" if bw else "")
        + (f"; ridge points (FLOP/B): {ridge}" if ridge else "")
        + f". Kernel time memory-bound {p['memory']:.1f} %, compute-bound {p['compute']:.1f} %, "
        f"unknown {p['unknown']:.1f} %, communication {comm_pct:.1f} %.",
        "",
        f"- memory: {md_escape(rl.evidence['memory'])}",
        f"- compute: {md_escape(rl.evidence['compute'])}",
        "",
        "| share | ms | bound | precision | FLOP/B | TFLOP/s | GB/s | % of roof | source | kernel |",
        "|---:|---:|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rl.kernels:
        out.append(
            f"| {r.share_pct:.1f} % | {r.total_ms:.2f} | {r.bound} | {r.precision} | "
            f"{_num(r.intensity, '.3g')} | {_num(r.tflops, '.3g')} | {_num(r.gbps, '.4g')} | "
            f"{_num(r.pct_of_roof, '.0f')} | {md_escape(r.cost_source, 80)} | {md_escape(r.name, 80)} |"
        )
    out.append("")
    return out
