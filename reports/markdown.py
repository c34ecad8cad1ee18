"""The Markdown report: the terminal summary's content, shaped for a pull request."""

from __future__ import annotations

import os
import re

from trainscope.analyzers.findings import code_language
from trainscope.analyzers.plural import unit_for
from trainscope.reports.document import (
    AXIS_NAMES,
    communication_split_words,
    device_label,
    fusion_heading,
    fusion_rows,
    gain_words,
    gpu_metrics_parts,
    headline,
    tree_heading,
    tree_rows,
    window_lines,
)

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~-])")


def md_escape(text: object, limit: int | None = None) -> str:
    """Text safe inside Markdown prose and table cells: kernel and file names contain ``<``,
    ``*``, ``_`` and ``|``, which would otherwise turn into HTML, emphasis or new columns."""
    s = str(text)
    if limit and len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _SPECIAL.sub(r"\\\1", s)
    return s.replace("\r", " ").replace("\n", " ")


def _fence(code: str) -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{code_language(code)}\n{code}\n{fence}"


def render_markdown(doc: dict) -> str:
    b, v = doc["breakdown"], doc["verdict"]
    split = communication_split_words(doc)
    out: list[str] = []
    w = out.append
    w(f"# trainscope report: {md_escape(os.path.basename(doc['input']['path'].rstrip('/')))}")
    w("")
    dev = doc["device"]
    if dev["name"]:
        w(f"- **Device:** {md_escape(device_label(doc))}")
    w(f"- **Steps:** {len(doc['steps'])} ({md_escape(doc['steps_note'])})")
    for line in window_lines(doc):
        w(f"- **Window:** {md_escape(line)}")
    if doc["steps"]:
        st = b["step_time_ms"]
        w(
            f"- **Step time:** p50 {st['p50']:.1f} ms, p95 {st['p95']:.1f} ms; GPU busy {b['gpu_busy_pct']:.1f} %, "
            f"data wait {b['data_wait_pct']:.1f} %"
        )
    w("")
    w(f"## Verdict: {md_escape(headline(doc))} (confidence {v['confidence']:.2f})")
    w("")
    w(md_escape(v["summary"]))
    w("")
    if v["evidence"]:
        w("| evidence | value | threshold | source |")
        w("|---|---:|---|---|")
        for e in v["evidence"]:
            val = "—" if e["value"] is None else f"{e['value']:g} {unit_for(e['value'], e['unit'])}".strip()
            thr = f"{e['threshold']} {e['unit']}".strip() if e["threshold"] else ""
            w(f"| {md_escape(e['metric'])} | {md_escape(val)} | {md_escape(thr)} | {md_escape(e['source'])} |")
        w("")
        if split:
            w(md_escape(split))
            w("")
    if doc["recommendations"]:
        w("## Fixes, ranked by projected gain")
        w("")
        w("Projections are upper bounds computed from the measured breakdown.")
        w("")
        for r in doc["recommendations"]:
            w(f"{r['rank']}. **{md_escape(r['title'])}** — {md_escape(gain_words(r))}")
            w("")
            w(_fence(r["change"]))
            w("")
            w(f"   Basis: {md_escape(r['basis'])}")
            w("")
    st = doc.get("steady_state")
    if st and st["ledger"]:
        w("## Start-up ledger")
        w("")
        w(
            f"One-off costs, paid once per process: {st['total_ms'] / 1e3:,.2f} s in all, "
            f"{st['one_off_in_window_ms']:,.1f} ms of it in the judged window."
        )
        w("")
        w("| phase | cost | ms | count | in window ms | what | where |")
        w("|---|---|---:|---:|---:|---|---|")
        for c in sorted(st["ledger"], key=lambda c: -c["ms"]):
            w(
                f"| {md_escape(c['phase'])} | {md_escape(c['kind'])} | {c['ms']:,.1f} | {c['count']} | "
                f"{c['in_window_ms']:,.1f} | {md_escape(c['what'], 160)} | {md_escape(c['where'], 80)} |"
            )
        w("")
    ph = doc.get("phases")
    if ph and ph["phases"]:
        w("## Phases")
        w("")
        w("| phase | host ms | share of step time | GPU kernel ms | kernels |")
        w("|---|---:|---:|---:|---:|")
        for p in ph["phases"]:
            w(
                f"| {md_escape(p['name'])} | {p['host_ms']:.2f} | {p['host_pct']:.1f} % | {p['kernel_ms']:.2f} | {p['kernels']} |"
            )
        w("")
    rows = tree_rows(doc)
    if rows:
        w("## Where in the model")
        w("")
        w(md_escape(tree_heading(doc)) + ".")
        w("")
        w("| node | GPU ms | share | notes |")
        w("|---|---:|---:|---|")
        for r in rows:
            label = md_escape(r["label"], 160)
            w(
                f"| {label if r['first_level'] else '↳ ' + label} | {r['gpu_ms']:,.2f} | {r['gpu_pct']:.1f} % | {md_escape(r['detail'], 200)} |"
            )
        w("")
    gm = doc.get("gpu_metrics")
    if gm:
        vals = gpu_metrics_parts(gm)
        w(f"**GPU metrics** (Nsight GPU_METRICS, {gm['samples']} samples in the steps): {', '.join(vals)}")
        w("")
    if doc["steps"] and dev["id"] is not None:
        w("## Where step time goes")
        w("")
        w("| category | share | p50 ms | p95 ms |")
        w("|---|---:|---:|---:|")
        for d in b["categories"].values():
            w(f"| {md_escape(d['label'])} | {d['pct']:.1f} % | {d['p50_ms']:.2f} | {d['p95_ms']:.2f} |")
        w("")
        if split:
            w(md_escape(split))
            w("")
        w("| step | duration ms | GPU busy | data wait | outlier |")
        w("|---|---:|---:|---:|---|")
        for s in doc["steps"][:200]:
            w(
                f"| {md_escape(s['label'])} | {s['duration_ms']:.1f} | {s['gpu_busy_pct']:.1f} % | {s['data_wait_pct']:.1f} % | "
                f"{'yes' if s['outlier'] else ''} |"
            )
        w("")
    k = doc["kernels"]
    if k["count"]:
        w("## Top kernels")
        w("")
        w("| share | total ms | count | class | tensor cores | kernel |")
        w("|---:|---:|---:|---|---|---|")
        for kk in k["top"][:15]:
            w(
                f"| {kk['share_pct']:.1f} % | {kk['total_ms']:.2f} | {kk['count']} | {kk['class']} | "
                f"{'yes' if kk['tensor_core'] else 'no'} | {md_escape(kk['name'], 120)} |"
            )
        w("")
    rl = doc.get("roofline")
    if rl and rl["kernels"]:
        out.extend(roofline_markdown_lines(rl))
    frows = fusion_rows(doc)
    if frows:
        w("## Fusion candidates")
        w("")
        w(md_escape(fusion_heading(doc)) + ".")
        w("")
        w("| sequence | stream | occurrences | ms per step | intermediate bytes per occurrence | saved ms per step |")
        w("|---|---:|---:|---:|---:|---:|")
        for r in frows:
            w(
                f"| {md_escape(r['sequence'], 200)} | {r['stream']} | {r['occurrences']} | {r['ms_per_step']:.3f} | "
                f"{r['bytes']} | {md_escape(r['saved'])} |"
            )
        w("")
    if doc["findings"]:
        w("## Findings")
        w("")
        for f in doc["findings"]:
            w(
                f"- **{md_escape(f['id'])}** ({f['severity']}, {f['stake_pct']:.1f} % of step time): "
                f"{md_escape(f['title'])}; {md_escape(f['detail'])}"
            )
        w("")
    w("## Memory and MFU")
    w("")
    for m in doc["memory"]:
        cap = f" of {m['capacity_bytes'] / 2**30:.1f} GiB" if m["capacity_bytes"] else ""
        w(f"- GPU {m['device']}: peak allocated {m['peak_allocated_bytes'] / 2**30:.2f} GiB{cap} ({m['basis']})")
    mfu = doc["mfu"]
    w(
        f"- MFU: {mfu['value_pct']:.1f} % ({md_escape(mfu['reason'])})"
        if mfu["value_pct"] is not None
        else f"- MFU: {md_escape(mfu['reason'])}"
    )
    if mfu.get("basis") == "recorded flops" and mfu.get("shapes_pct") is not None:
        w(f"- MFU {md_escape(mfu['shapes_reason'])}: {mfu['shapes_pct']:.1f} %")
    law = mfu.get("iron_law")
    if law:
        w(
            f"- Iron Law: {md_escape(law['formula'])}. FLOPs/step: {md_escape(law['flops_source'])}; GPUs: "
            f"{md_escape(law['gpus_source'])}; peak: {md_escape(law['peak_source'])}; η = MFU."
        )
        gap = ", ".join(f"{md_escape(k)} {v:.1f} %" for k, v in law["gap_pct"].items() if v >= 0.05)
        w(
            f"- Pipeline efficiency (GPU busy) {law['pipeline_efficiency_pct']:.1f} % against MFU "
            f"{law['efficiency_pct']:.1f} %" + (f"; busy but below peak, % of step time: {gap}" if gap else "")
        )
    w("")
    if doc.get("ledger"):
        from trainscope.reports.plan import ledger_markdown_lines

        out.extend(ledger_markdown_lines(doc["ledger"]))
    if doc.get("deep"):
        from trainscope.reports.deep import deep_markdown_lines

        out.extend(deep_markdown_lines(doc["deep"], md_escape))
    if doc.get("stragglers"):
        from trainscope.reports.deep import stragglers_markdown_lines

        out.extend(stragglers_markdown_lines(doc["stragglers"], md_escape))
    if doc.get("ranks"):
        w("## Ranks")
        w("")
        story = doc.get("stragglers") or {}
        if story.get("headline"):
            w(md_escape(story["headline"][:1].upper() + story["headline"][1:]) + ".")
            w("")
        w("| rank | step p50 ms | GPU busy | late by ms | last at | verdict |")
        w("|---:|---:|---:|---:|---:|---|")
        for r in doc["ranks"]:
            late = f"{r['mean_late_ms']:.1f}" if "mean_late_ms" in r else "—"
            last = f"{r['last_in']} of {r['considered']}" if "last_in" in r else "—"
            mark = (" ◀ straggler" if r.get("straggler") else "") + (" ▶ headline" if r.get("headline") else "")
            w(
                f"| {r['rank']} | {r['step_p50_ms']:.1f} | {r['gpu_busy_pct']:.1f} % | {late} | {last} | "
                f"{AXIS_NAMES[r['axis']]} {md_escape(r['bottleneck'] or '')}{mark} |"
            )
        w("")
    if doc["warnings"]:
        w("## Notes")
        w("")
        for line in doc["warnings"]:
            w(f"- {md_escape(line)}")
        w("")
    w(f"<sub>trainscope {doc['tool']['version']} · schema {doc['schema']}</sub>")
    return "\n".join(out) + "\n"


def _num(x, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def roofline_markdown_lines(rl: dict) -> list[str]:
    """The roofline table: per kernel, intensity, achieved rates, % of roof and bound."""
    bw = rl["bandwidth_gbps"]
    p = rl["bound_pct"]
    ridge = ", ".join(f"{k} {v:g}" for k, v in (rl.get("ridge_flop_per_byte") or {}).items())
    out = [
        "## Roofline",
        "",
        f"{md_escape(rl['device'])}"
        + (f", {bw:g} GB/s" if bw else "")
        + (f"; ridge points (FLOP/B): {ridge}" if ridge else "")
        + f". Kernel time memory-bound {p['memory']:.1f} %, compute-bound {p['compute']:.1f} %, "
        f"unknown {p['unknown']:.1f} %, communication {100 * rl['communication_ms'] / rl['total_ms'] if rl['total_ms'] else 0:.1f} %.",
        "",
        f"- memory: {md_escape(rl['evidence']['memory'])}",
        f"- compute: {md_escape(rl['evidence']['compute'])}",
        "",
        "| share | ms | bound | precision | FLOP/B | TFLOP/s | GB/s | % of roof | source | kernel |",
        "|---:|---:|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rl["kernels"]:
        out.append(
            f"| {r['share_pct']:.1f} % | {r['total_ms']:.2f} | {r['bound']} | {r['precision']} | "
            f"{_num(r['intensity'], '.3g')} | {_num(r['tflops'], '.3g')} | {_num(r['gbps'], '.4g')} | "
            f"{_num(r['pct_of_roof'], '.0f')} | {md_escape(r['cost_source'], 80)} | {md_escape(r['name'], 80)} |"
        )
    out.append("")
    return out
