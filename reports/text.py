"""The terminal summary: verdict, evidence, breakdown, top kernels, fixes."""

from __future__ import annotations

import os
import textwrap

from trainscope.analyzers.plural import unit_for
from trainscope.reports.document import (
    AXIS_NAMES,
    communication_split_words,
    counters_only,
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

_BAR = 24


def _bar(pct: float) -> str:
    n = int(round(max(0.0, min(100.0, pct)) / 100 * _BAR))
    return "█" * n + "·" * (_BAR - n)


def _fmt(v, unit: str) -> str:
    if v is None:
        return "—"
    if unit.startswith("%"):
        return f"{v:.1f} %"
    return f"{v:g} {unit_for(v, unit)}".strip()


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def render_text(doc: dict, color: bool = False) -> str:
    b = doc["breakdown"]
    v = doc["verdict"]
    bold = (lambda s: f"\033[1m{s}\033[0m") if color else (lambda s: s)
    out: list[str] = []
    w = out.append
    w(bold(f"trainscope — {os.path.basename(doc['input']['path'].rstrip('/'))}"))
    dev = doc["device"]
    if dev["name"]:
        w(f"  device   {device_label(doc)}")
    if counters_only(doc):
        w(f"  source   sampled counters ({doc['input']['format']}): no steps, kernels or timeline to break down")
    else:
        w(f"  steps    {len(doc['steps'])} — {doc['steps_note']}")
    for i, line in enumerate(window_lines(doc)):
        w(f"  {'window' if i == 0 else '':8s} {line}")
    if doc["steps"] and not counters_only(doc):
        st = b["step_time_ms"]
        w(
            f"  step     p50 {st['p50']:.1f} ms   p95 {st['p95']:.1f} ms   "
            f"GPU busy {b['gpu_busy_pct']:.1f} %   data wait {b['data_wait_pct']:.1f} %"
        )
    w("")
    w(bold(f"VERDICT  {headline(doc)}") + f"   confidence {v['confidence']:.2f}")
    for line in textwrap.wrap(v["summary"], 92):
        w(f"  {line}")
    w("")
    if v["evidence"]:
        w(bold("Evidence"))
        for e in v["evidence"]:
            mark = {True: "✔", False: "✘", None: " "}[e["meets"]]
            thr = f"{e['threshold']} {e['unit']}".strip() if e["threshold"] else ""
            w(f"  {mark} {_short(e['metric'], 52):52s} {_fmt(e['value'], e['unit']):>12s}  {thr:<22s} {e['source']}")
        out.extend(_split_lines(doc, "  "))
        w("")

    if doc["steps"] and dev["id"] is not None:
        w(bold("Where step time goes") + "  (exclusive share of summed step time; per-step p50 / p95)")
        for c, d in b["categories"].items():
            if d["pct"] == 0 and c not in ("compute", "idle_data_wait"):
                continue
            w(f"  {d['label']:34s} {d['pct']:5.1f} % {_bar(d['pct'])}  {d['p50_ms']:8.2f} / {d['p95_ms']:8.2f} ms")
            if c == "communication":
                out.extend(_split_lines(doc, "    "))
        outliers = [s for s in doc["steps"] if s["outlier"]]
        if outliers:
            labels = ", ".join(f"{s['label']} ({s['duration_ms']:.0f} ms)" for s in outliers[:6])
            w(f"  outlier steps: {labels}{' …' if len(outliers) > 6 else ''}")
        w("")

    ph = doc.get("phases")
    if ph and ph["phases"]:
        w(bold("Phases") + "  (host time of the phase ranges; GPU time of the kernels they launched)")
        for p in ph["phases"]:
            w(
                f"  {p['name']:10s} {p['host_ms']:9.2f} ms  {p['host_pct']:5.1f} % {_bar(p['host_pct'])}  "
                f"GPU {p['kernel_ms']:8.2f} ms in {p['kernels']:,} kernel{'s' * (p['kernels'] != 1)}"
            )
        w("")
    rows = tree_rows(doc)
    if rows:
        w(bold("Where in the model") + "  " + tree_heading(doc))
        for r in rows:
            label = r["label"] if r["first_level"] else "  " + r["label"]
            w(
                f"  {_short(label, 62):62s} {r['gpu_ms']:9.2f} ms {r['gpu_pct']:5.1f} %"
                + (f"  {r['detail']}" if r["detail"] else "")
            )
        w("")
    gm = doc.get("gpu_metrics")
    if gm:
        parts = gpu_metrics_parts(gm)
        w(bold("GPU metrics") + f"  {', '.join(parts)}  ({gm['samples']:,} samples in the steps)")
        w("")

    k = doc["kernels"]
    if k["count"]:
        cls = ", ".join(f"{c} {p:.0f} %" for c, p in sorted(k["class_pct"].items(), key=lambda x: -x[1]) if p >= 1)
        tc = k["tensor_core_pct_of_matmul"]
        w(
            bold("Kernels") + f"  {k['count']:,} in the steps, {k['total_ms']:.1f} ms; median {k['median_us']:.1f} µs; "
            f"tensor cores {'—' if tc is None else f'{tc:.0f} %'} of GEMM/conv/attention time"
        )
        w(f"  by class: {cls}")
        rl = doc.get("roofline")
        if rl:
            w("  " + roofline_summary(rl))
        for kk in k["top"][:8]:
            w(
                f"  {kk['share_pct']:5.1f} %  {kk['total_ms']:8.2f} ms  ×{kk['count']:<6d} {kk['class']:13s} "
                f"{'TC ' if kk['tensor_core'] else '   '}{roof_cells(kk)}  {_short(kk['name'], 44)}"
            )
        w("")

    frows = fusion_rows(doc)
    if frows:
        w(bold("Fusion candidates") + "  " + fusion_heading(doc))
        w(f"  {'×':>6s} {'ms/step':>9s} {'saved ms/step':>13s} {'bytes/occurrence':>16s}  sequence (stream)")
        for r in frows:
            w(
                f"  {r['occurrences']:6d} {r['ms_per_step']:9.3f} {r['saved']:>13s} {r['bytes']:>16s}  "
                f"{_short(r['sequence'], 70)} (stream {r['stream']})"
            )
        w("")

    recs = doc["recommendations"]
    if recs:
        w(bold("Fixes, ranked by projected gain") + "  (projections are upper bounds)")
        for r in recs:
            w(f"  {r['rank']}. {r['title']}  [{gain_words(r)}]")
            for line in r["change"].splitlines():
                w(f"       {line}")
            for line in textwrap.wrap("basis: " + r["basis"], 88):
                w(f"     {line}")
        w("")

    out.extend(startup_ledger_lines(doc, bold))
    others = [f for f in doc["findings"] if f["id"] != v["bottleneck"]]
    if others:
        w(bold("Other findings"))
        for f in others:
            w(f"  [{f['severity']}] {f['id']}: {f['title']} ({f['stake_pct']:.1f} % of step time)")
        w("")

    for m in doc["memory"]:
        cap = (
            f" of {m['capacity_bytes'] / 2**30:.1f} GiB ({m['peak_pct_of_capacity']:.0f} %)"
            if m["capacity_bytes"]
            else ""
        )
        res = f", reserved {m['peak_reserved_bytes'] / 2**30:.2f} GiB" if m["peak_reserved_bytes"] is not None else ""
        basis = " (growth since profiling started)" if m["basis"] == "relative" else ""
        w(f"Memory   GPU {m['device']}: peak allocated {m['peak_allocated_bytes'] / 2**30:.2f} GiB{basis}{res}{cap}")
    mfu = doc["mfu"]
    w(
        f"MFU      {mfu['value_pct']:.1f} % — {mfu['reason']}"
        if mfu["value_pct"] is not None
        else f"MFU      {mfu['reason']}"
    )
    if mfu.get("basis") == "recorded flops" and mfu.get("shapes_pct") is not None:
        w(f"         {mfu['shapes_pct']:.1f} % — {mfu['shapes_reason']}")
    law = mfu.get("iron_law")
    if law:
        w(
            f"         Iron Law: {law['formula']}; pipeline efficiency (GPU busy) {law['pipeline_efficiency_pct']:.1f} % "
            f"vs MFU {law['efficiency_pct']:.1f} %"
        )
        gap = ", ".join(f"{k} {v:.1f} %" for k, v in law["gap_pct"].items() if v >= 0.05)
        if gap:
            w(f"         busy but below peak (% of step time): {gap}")

    if doc.get("ledger"):
        from trainscope.reports.plan import ledger_text_lines

        out.extend(ledger_text_lines(doc["ledger"]))
    if doc.get("deep"):
        from trainscope.reports.deep import deep_text_lines

        w("")
        out.extend(deep_text_lines(doc["deep"], bold))
    if doc.get("stragglers"):
        from trainscope.reports.deep import stragglers_text_lines

        w("")
        out.extend(stragglers_text_lines(doc["stragglers"], bold))
    if doc.get("ranks"):
        w("")
        story = doc.get("stragglers") or {}
        lead = story.get("headline") or "the report leads with the slowest rank"
        w(bold("Ranks") + f"  ({lead.split(':')[0].replace('the report leads with ', 'the summary above is ')})")
        for r in doc["ranks"]:
            late = (
                f"  late {r['mean_late_ms']:5.1f} ms  last at {r['last_in']} of {r['considered']}"
                if "mean_late_ms" in r
                else ""
            )
            mark = (" ◀ straggler" if r.get("straggler") else "") + (" ▶ headline" if r.get("headline") else "")
            w(
                f"  rank {r['rank'] if r['rank'] is not None else '?':>3}  step p50 {r['step_p50_ms']:8.1f} ms  "
                f"busy {r['gpu_busy_pct']:5.1f} %{late}  "
                f"{AXIS_NAMES[r['axis']]}{' · ' + r['bottleneck'] if r['bottleneck'] else ''}{mark}"
            )
    hwc = doc.get("hw_counters")
    if hwc:  # counter mode: FLOPs measured per kernel, no timing
        w("")
        w(f"Measured FLOPs  hardware FP counters, {hwc['ranges']} kernel ranges (no timing: ranges are replays)")
        for k in hwc["kernels"][:10]:
            w(
                f"  {k['share_pct']:5.1f} %  {k['flops']:10.3g} FLOPs  ×{k['ranges']:<3d} {k['class']:12.12s} "
                f"{_short(k['operator'] or '', 24):24s} {_short(k['name'], 60)}"
            )
    if doc["warnings"]:
        w("")
        for line in doc["warnings"]:
            w(f"note: {line}")
    return "\n".join(out) + "\n"


def _split_lines(doc: dict, indent: str) -> list[str]:
    """The communication row's split (reports/document.py), wrapped; none where the rank waits for no one."""
    words = communication_split_words(doc)
    return [indent + line for line in textwrap.wrap(words, 96 - len(indent))] if words else []


def startup_ledger_lines(doc: dict, bold=lambda s: s) -> list[str]:
    """The start-up ledger: each one-off cost with what, where and how long (once per process)."""
    st = doc.get("steady_state")
    if not st or not st["ledger"]:
        return []
    out = [
        bold("Start-up ledger") + f"  (one-off costs, once per process: {st['total_ms'] / 1e3:,.2f} s; "
        f"{st['one_off_in_window_ms']:,.1f} ms of it in the judged window)"
    ]
    for c in sorted(st["ledger"], key=lambda c: -c["ms"])[:10]:
        inside = f", {c['in_window_ms']:,.1f} ms in the window" if c["in_window_ms"] else ""
        out.append(f"  {c['ms']:>10,.1f} ms  {c['phase']:13s} {c['kind']} ×{c['count']}{inside}")
        for line in textwrap.wrap(f"{c['what']} — {c['where']}", 88):
            out.append(f"               {line}")
    if len(st["ledger"]) > 10:
        out.append(f"  … {len(st['ledger']) - 10} more in the JSON document (steady_state.ledger)")
    out.append("")
    return out


def _rate(kk: dict) -> str:
    if kk.get("bound") == "compute" and kk.get("tflops") is not None:
        return f"{kk['tflops']:.3g} TFLOP/s"
    if kk.get("gbps") is not None:
        return f"{kk['gbps'] / 1000:.3g} TB/s" if kk["gbps"] >= 1000 else f"{kk['gbps']:.3g} GB/s"
    return ""


def roof_cells(kk: dict) -> str:
    """Bound, arithmetic intensity, achieved rate and % of roof of one kernel row, fixed width."""
    bound = {"memory": "mem", "compute": "comp", "communication": "comm", "unknown": "?"}.get(kk.get("bound") or "", "")
    inten = f"{kk['intensity']:.3g} F/B" if kk.get("intensity") is not None else ""
    pct = f"{kk['pct_of_roof']:.0f} %" if kk.get("pct_of_roof") is not None else ""
    return f"{bound:4s} {inten:>10s} {_rate(kk):>13s} {pct:>5s}"


def roofline_summary(rl: dict) -> str:
    """One line: the roofline's split of kernel time and where its figures came from."""
    bw = rl["bandwidth_gbps"]
    dev = f"{rl['device']}, {bw / 1000:.3g} TB/s" if bw else rl["device"]
    p = rl["bound_pct"]
    total = rl["total_ms"] or 0.0
    src = ", ".join(f"{k} {100 * v / total:.0f} %" for k, v in rl["source_ms"].items() if total and v / total >= 0.005)
    return (
        f"roofline ({dev}): memory-bound {p['memory']:.0f} %, compute-bound {p['compute']:.0f} %, "
        f"unknown {p['unknown']:.0f} % of kernel time; FLOPs/bytes from {src or 'nothing'}"
    )
