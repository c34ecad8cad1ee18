"""The ``deep`` (HTA second opinion) and ``stragglers`` parts of the document, and their text and
Markdown sections. Kept apart from document.py/text.py/markdown.py, which only call in here."""

from __future__ import annotations

import textwrap
from typing import Any

from trainscope.analyzers.critical_path import CP_CATEGORIES, CP_LABELS
from trainscope.analyzers.deep import DeepAnalysis
from trainscope.analyzers.stragglers import StragglerReport


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


def deep_dict(d: DeepAnalysis) -> dict[str, Any]:
    cp, rec, ls = d.critical_path, d.reconciliation, d.launch
    return {
        "engine": "Holistic Trace Analysis",
        "versions": d.versions,
        "status": d.status,
        "reason": d.reason,
        "rank": d.rank,
        "step": d.step,
        "elapsed_s": _r(d.elapsed_s),
        "peak_rss_mb": d.peak_rss_mb,
        "rss_growth_mb": d.rss_growth_mb,
        "stage_s": {k: _r(v) for k, v in d.stage_s.items()},
        "critical_path": None
        if cp is None
        else {
            "step": cp.step,
            "step_ms": _r(cp.step_ms, 3),
            "path_ms": _r(cp.path_ms, 3),
            "span_ms": _r(cp.span_ms, 3),
            "edges": cp.edges,
            "has_cuda_sync_events": cp.has_cuda_sync,
            "shares_pct": {c: _r(cp.shares_pct.get(c, 0.0)) for c in CP_CATEGORIES},
            "dominant": cp.dominant,
            "top_events": [
                {"name": e.name, "category": e.category, "ms": _r(e.ms, 3), "count": e.count} for e in cp.top_events
            ],
        },
        "critical_path_error": d.critical_path_error,
        "reconciliation": None
        if rec is None
        else {
            "agree": rec.agree,
            "verdict_family": rec.verdict_family,
            "path_family": rec.path_family,
            "summary": rec.summary,
            "reasons": rec.reasons,
        },
        "launch": None
        if ls is None
        else {
            "launches": ls.launches,
            "short_kernels": ls.short_kernels,
            "short_kernel_pct": _r(ls.short_kernel_pct),
            "runtime_outliers": ls.runtime_outliers,
            "delay_outliers": ls.delay_outliers,
            "median_launch_us": _r(ls.median_launch_us),
            "median_kernel_us": _r(ls.median_kernel_us),
            "median_delay_us": _r(ls.median_delay_us),
            "p95_delay_us": _r(ls.p95_delay_us),
            "queues": [
                {"stream": q.stream, "samples": q.samples, "mean": _r(q.mean), "p50": _r(q.p50), "max": _r(q.max)}
                for q in ls.queues
            ],
            "supports_launch_overhead": ls.supports_launch_overhead,
            "conclusion": ls.conclusion,
            "evidence": [
                {
                    "metric": e.metric,
                    "value": e.value,
                    "unit": e.unit,
                    "threshold": e.threshold,
                    "source": e.source,
                    "meets": e.meets,
                }
                for e in ls.evidence
            ],
        },
        "launch_error": d.launch_error,
    }


def stragglers_dict(s: StragglerReport) -> dict[str, Any]:
    return {
        "basis": "arrival in matched collectives, offset from each rank's own step start (no clock sync needed)",
        "collective_source": s.collective_source,
        "matched_collectives": s.matched,
        "median_step_ms": s.median_step_ms,
        "summary": s.summary,
        "stragglers": [r.rank for r in s.stragglers],
        "ranks": [
            {
                "rank": r.rank,
                "source": r.source,
                "step_p50_ms": r.step_p50_ms,
                "collective_pct": r.collective_pct,
                "mean_late_ms": r.mean_late_ms,
                "late_in": r.late_in,
                "late": r.late,
                "slow": r.slow,
                "axis": r.axis,
                "bottleneck": r.bottleneck,
            }
            for r in s.ranks
        ],
        "slow_collectives": [
            {"step": c.step, "name": c.name, "index": c.index, "spread_ms": c.spread_ms, "last_rank": c.last_rank}
            for c in s.slow_collectives
        ],
    }


def _cost(d: dict) -> str:
    mem = (
        f", peak memory {d['peak_rss_mb']:.0f} MiB (+{d['rss_growth_mb']:.0f} MiB)"
        if d["peak_rss_mb"] is not None
        else ""
    )
    v = d["versions"]
    return f"HTA {v.get('traceinsight', '?')} took {d['elapsed_s']:.1f} s{mem}"


def deep_text_lines(d: dict, bold) -> list[str]:
    out = [bold("Deep analysis (Holistic Trace Analysis)") + f"  {_cost(d)}"]
    if d["status"] == "skipped":
        out.append(f"  skipped: {d['reason']}")
        return out
    cp = d["critical_path"]
    if cp:
        out.append(
            f"  critical path of {cp['step']}: {cp['path_ms']:.1f} ms of work along a chain spanning "
            f"{cp['span_ms']:.1f} ms of the {cp['step_ms']:.1f} ms step"
        )
        for c in CP_CATEGORIES:
            pct = cp["shares_pct"][c]
            bar = "█" * int(round(pct / 100 * 24)) + "·" * (24 - int(round(pct / 100 * 24)))
            out.append(f"  {CP_LABELS[c]:34s} {pct:5.1f} % {bar}")
        if cp["top_events"]:
            line = "on the path: " + ", ".join(f"{e['name'][:48]} {e['ms']:.1f} ms" for e in cp["top_events"][:5])
            out.extend(("  " if i == 0 else "    ") + x for i, x in enumerate(textwrap.wrap(line, 92)))
    else:
        out.append(f"  critical path: skipped — {d['critical_path_error']}")
    rec = d["reconciliation"]
    if rec:
        out.append("")
        mark = {True: "✔", False: "≠", None: "·"}[rec["agree"]]
        for i, line in enumerate(textwrap.wrap(f"{mark} vs verdict: {rec['summary']}", 92)):
            out.append(("  " if i == 0 else "    ") + line)
        for reason in rec["reasons"]:
            for i, line in enumerate(textwrap.wrap(reason, 88)):
                out.append(("    – " if i == 0 else "      ") + line)
    ls = d["launch"]
    if ls:
        out.append("")
        line = (
            f"launches: {ls['launches']:,} with their kernels; {ls['short_kernel_pct']:.0f} % of kernels shorter "
            f"than their launch; launch-delay outliers {ls['delay_outliers']:,}; median delay {ls['median_delay_us']:.0f} µs"
        )
        out.extend(("  " if i == 0 else "    ") + x for i, x in enumerate(textwrap.wrap(line, 92)))
        if ls["queues"]:
            out.append(
                "  CUDA queue: "
                + ", ".join(f"stream {q['stream']} mean {q['mean']:.1f} max {q['max']:.0f}" for q in ls["queues"][:4])
            )
        verdict = {True: "supports", False: "does not support", None: "cannot judge"}[ls["supports_launch_overhead"]]
        for i, line in enumerate(textwrap.wrap(f"{verdict} host/launch-overhead: {ls['conclusion']}", 92)):
            out.append(("  " if i == 0 else "    ") + line)
    elif d["launch_error"]:
        out.append(f"  launch statistics: skipped — {d['launch_error']}")
    return out


def straggler_headline(s: dict) -> tuple[str, str | None]:
    """(the straggler line, a line naming both answers when the two methods disagree, else None).

    With ranks aligned on their collectives' common end the line is theirs (arrival lateness);
    without (no collective matched on two ranks), the step-offset comparison's."""
    al = s.get("alignment")
    if not al or not al.get("matched_collectives"):
        return s["summary"], None
    imb = al.get("rank_imbalance")
    basis = f"{al['matched_collectives']} collectives aligned on their common end"
    test = al.get("test")
    if imb:
        longest = f", the longest single wait {test['max_spread_ms']:.1f} ms" if test else ""
        head = (
            f"straggler: {test['figures'] if test else 'rank ' + str(imb['rank'])}; the others wait "
            f"{imb['others_wait_ms_per_step']:.1f} ms per step for it{longest} ({basis})"
        )
    elif test:
        head = f"no clear straggler: {test['figures']} ({basis})"
    else:
        head = f"no clear straggler: no collective has a last rank ({basis})"
    # The aligned method is the answer; the step-offset comparison is shown only where nothing aligns.
    return head, None


def stragglers_text_lines(s: dict, bold) -> list[str]:
    head, note = straggler_headline(s)
    aligned = bool(s.get("alignment") and s["alignment"].get("matched_collectives"))
    basis = "arrival measured from the collectives' common end" if aligned else s["basis"]
    out = [bold("Stragglers") + f"  ({basis})"]
    out += [("  " if i == 0 else "    ") + line for i, line in enumerate(textwrap.wrap(head, 90))]
    if note:
        out += [("  ≠ " if i == 0 else "    ") + line for i, line in enumerate(textwrap.wrap(note, 88))]
    if aligned:
        out += [""] + alignment_text_lines(s["alignment"], bold)
    else:  # nothing to align: the step-offset comparison is the only measure
        out.append(f"  {'rank':>4}  {'step p50':>9}  {'in collectives':>14}  {'late by':>9}  {'last in':>7}  verdict")
        for r in s["ranks"]:
            flag = " ◀ straggler" if r["late"] or r["slow"] else ""
            out.append(
                f"  {r['rank'] if r['rank'] is not None else '?':>4}  {r['step_p50_ms']:6.1f} ms  "
                f"{r['collective_pct']:12.1f} %  {r['mean_late_ms']:6.1f} ms  {r['late_in']:>7}  "
                f"{r['axis']}{' · ' + r['bottleneck'] if r['bottleneck'] else ''}{flag}"
            )
    if s["slow_collectives"] and not aligned:
        out.append(
            "  widest arrival spreads: "
            + ", ".join(
                f"{c['step']} {c['name']}#{c['index']} {c['spread_ms']:.1f} ms (last: rank {c['last_rank']})"
                for c in s["slow_collectives"][:3]
            )
        )
    if s.get("alignment") and not aligned:
        out += [""] + alignment_text_lines(s["alignment"], bold)
    if s.get("ranks_view"):
        out += [""] + ranks_view_text_lines(s["ranks_view"], bold)
    return out


def deep_markdown_lines(d: dict, esc) -> list[str]:
    out = ["## Deep analysis (Holistic Trace Analysis)", "", esc(_cost(d)), ""]
    if d["status"] == "skipped":
        return out + [f"Skipped: {esc(d['reason'])}", ""]
    cp = d["critical_path"]
    if cp:
        out += [
            f"Critical path of {esc(cp['step'])}: {cp['path_ms']:.1f} ms of work along a chain spanning "
            f"{cp['span_ms']:.1f} ms of the {cp['step_ms']:.1f} ms step.",
            "",
            "| bound by | share of critical path |",
            "|---|---:|",
        ]
        out += [f"| {CP_LABELS[c]} | {cp['shares_pct'][c]:.1f} % |" for c in CP_CATEGORIES]
        out.append("")
        if cp["top_events"]:
            out += ["| on the path | bound by | ms | edges |", "|---|---|---:|---:|"]
            out += [
                f"| {esc(e['name'], 100)} | {CP_LABELS[e['category']]} | {e['ms']:.2f} | {e['count']} |"
                for e in cp["top_events"]
            ]
            out.append("")
    else:
        out += [f"Critical path skipped: {esc(d['critical_path_error'])}", ""]
    rec = d["reconciliation"]
    if rec:
        out += [f"**Against the verdict:** {esc(rec['summary'])}", ""]
        out += [f"- {esc(r)}" for r in rec["reasons"]]
        out.append("")
    ls = d["launch"]
    if ls:
        verdict = {True: "supports", False: "does not support", None: "cannot judge"}[ls["supports_launch_overhead"]]
        out += [
            f"**Launch statistics** {verdict} host/launch\\-overhead: {esc(ls['conclusion'])}",
            "",
            "| evidence | value | threshold | source |",
            "|---|---:|---|---|",
        ]
        for e in ls["evidence"]:
            val = "—" if e["value"] is None else f"{e['value']:g} {e['unit']}".strip()
            out.append(f"| {esc(e['metric'])} | {esc(val)} | {esc(e['threshold'])} | {esc(e['source'])} |")
        out.append("")
    elif d["launch_error"]:
        out += [f"Launch statistics skipped: {esc(d['launch_error'])}", ""]
    return out


def stragglers_markdown_lines(s: dict, esc) -> list[str]:
    head, note = straggler_headline(s)
    out = ["## Stragglers", "", f"**{esc(head[:1].upper() + head[1:])}**", ""]
    if note:
        out += [esc(note), ""]
    aligned = bool(s.get("alignment") and s["alignment"].get("matched_collectives"))
    if not aligned:  # the step-offset comparison only where no collective aligns
        out += [
            "| rank | step p50 ms | in collectives | late by ms | last in | straggler | verdict |",
            "|---:|---:|---:|---:|---:|---|---|",
        ]
        for r in s["ranks"]:
            out.append(
                f"| {r['rank']} | {r['step_p50_ms']:.1f} | {r['collective_pct']:.1f} % | {r['mean_late_ms']:.1f} | "
                f"{r['late_in']} | {'yes' if r['late'] or r['slow'] else ''} | {esc(r['axis'])} {esc(r['bottleneck'] or '')} |"
            )
        out.append("")
    if s["slow_collectives"] and not aligned:
        out += ["| step | collective | arrival spread ms | last rank |", "|---|---|---:|---:|"]
        out += [
            f"| {esc(c['step'])} | {esc(c['name'])} \\#{c['index']} | {c['spread_ms']:.1f} | {c['last_rank']} |"
            for c in s["slow_collectives"]
        ]
        out.append("")
    if s.get("ranks_view"):
        out += ranks_view_markdown_lines(s["ranks_view"], s.get("alignment"), esc)
    return out


def with_alignment(stragglers: dict, al) -> dict:
    """``stragglers`` (:func:`stragglers_dict`) with the alignment added; where collectives aligned,
    its answer is the ``stragglers`` list and the step-offset list is kept as ``step_offset_stragglers``."""
    stragglers["alignment"] = alignment_dict(al)
    if al.instances:
        stragglers["step_offset_stragglers"] = stragglers["stragglers"]
        stragglers["stragglers"] = [] if al.imbalance is None else [al.imbalance.rank]
    return stragglers


def alignment_dict(al) -> dict[str, Any]:
    """The ranks aligned on their collectives' ends (analyzers/ranks.py :class:`Alignment`)."""
    imb = al.imbalance
    return {
        "basis": (
            "collectives matched across ranks by process group and sequence number where the trace records "
            "them (kind and size must agree), else by kind and common end instant; arrival measured from the end"
        ),
        "source": al.source,
        "reference_rank": al.reference,
        "matched_collectives": al.instances,
        "matched_by": {"process_group_sequence": al.by_seq, "end_instant": al.by_end, "refused": al.refused},
        "matching": al.method_note,
        "straggler": None if imb is None else imb.rank,
        "test": None
        if al.test is None or al.test.rank_index is None
        else {
            "rank": al.ranks[al.test.rank_index].rank,
            "last_in": al.test.last_in,
            "considered": al.test.considered,
            "ranks": al.test.ranks,
            "p_value": round(al.test.p_value, 6),
            "alpha": al.test.alpha,
            "mean_late_ms": round(al.test.mean_late_ms, 3),
            "jitter_ms": round(al.test.jitter_ms, 3),
            "cold_excluded": al.test.cold_excluded,
            "cold_ms": round(al.test.cold_ms, 3),
            "max_spread_ms": round(al.test.max_spread_ms, 3),
            "p_lateness": round(al.test.p_lateness, 6),
            "significant": al.test.significant,
            "beyond_jitter": al.test.beyond_jitter,
            "clear": al.test.clear,
            "figures": al.test.figures(f"rank {al.ranks[al.test.rank_index].rank}"),
        },
        "clock_offsets": al.offsets_note,
        "ranks": [
            {
                "rank": r.rank,
                "clock_offset_us": r.clock_offset_us,
                "matched": r.matched,
                "mean_late_ms": r.mean_late_ms,
                "last_in": r.last_in,
                "wait_ms_per_step": r.wait_ms_per_step,
                "transfer_ms_per_step": r.transfer_ms_per_step,
            }
            for r in al.ranks
        ],
        "rank_imbalance": None
        if imb is None
        else {
            "rank": imb.rank,
            "late_ms": imb.late_ms,
            "last_in": imb.last_in,
            "matched": imb.matched,
            "others_wait_ms_per_step": imb.others_wait_ms_per_step,
            "others_wait_pct": imb.others_wait_pct,
            "extra_work": [{"kernel_class": c, "ms_per_step": ms} for c, ms in imb.extra_work],
            "summary": imb.summary,
        },
    }


_SHADES = "▁▂▃▄▅▆▇█"


def alignment_text_lines(al: dict, bold) -> list[str]:
    out = [bold("Ranks aligned on collective ends") + f"  ({al['matched_collectives']} collectives, {al['source']})"]
    if al["rank_imbalance"]:
        out += [
            "  rank imbalance: " + line if i == 0 else "    " + line
            for i, line in enumerate(textwrap.wrap(al["rank_imbalance"]["summary"], 88))
        ]
    if al.get("matching"):
        out.append(f"  {al['matching']}")
    out.append(f"  {al['clock_offsets']}")
    out.append(f"  {'rank':>4}  {'late by':>9}  {'last in':>7}  {'waiting/step':>12}  {'transfer/step':>13}")
    for r in sorted(al["ranks"], key=lambda r: -r["mean_late_ms"])[:16]:
        out.append(
            f"  {r['rank'] if r['rank'] is not None else '?':>4}  {r['mean_late_ms']:6.1f} ms  {r['last_in']:>7}  "
            f"{r['wait_ms_per_step']:9.1f} ms  {r['transfer_ms_per_step']:10.1f} ms"
        )
    return out


def ranks_view_text_lines(v: dict, bold) -> list[str]:
    """Ranks by lateness with a heat strip of their step times (darker: longer) and the spread."""
    d = v["step_ms_distribution"]
    if not d:
        return []
    out = [
        bold("Step time across ranks") + f"  p5 {d['p5']:.1f} · p50 {d['p50']:.1f} · p95 {d['p95']:.1f} · "
        f"max {d['max']:.1f} ms  (rows: ranks, latest first; columns: steps; taller = longer)"
    ]
    lo, hi = d["min"], d["max"]
    for r, row in list(zip(v["by_lateness"], v["heat_ms"]))[:32]:
        strip = "".join(
            " " if x is None else _SHADES[min(7, int((x - lo) / (hi - lo) * 8)) if hi > lo else 3] for x in row
        )
        late = f"{r['mean_late_ms']:6.1f} ms late" if r["mean_late_ms"] is not None else " " * 14
        out.append(
            f"  rank {r['rank'] if r['rank'] is not None else '?':>4}  {late}  |{strip}|  p50 {r['step_p50_ms']:.1f} ms"
        )
    if len(v["by_lateness"]) > 32:
        out.append(f"  … {len(v['by_lateness']) - 32} more ranks in the JSON document")
    return out


def ranks_view_markdown_lines(v: dict, al: dict | None, esc) -> list[str]:
    d = v["step_ms_distribution"]
    if not d:
        return []
    out = ["## Ranks", ""]
    if al and al["rank_imbalance"]:
        out += [f"**Rank imbalance:** {esc(al['rank_imbalance']['summary'])}", ""]
    if al:
        out += [esc(al["clock_offsets"]) + (f"; {esc(al['matching'])}" if al.get("matching") else ""), ""]
    out += [
        f"Step time across ranks: p5 {d['p5']:.1f}, p50 {d['p50']:.1f}, p95 {d['p95']:.1f}, max {d['max']:.1f} ms.",
        "",
        "| rank | late by ms | step p50 ms | steps (taller = longer) |",
        "|---:|---:|---:|---|",
    ]
    lo, hi = d["min"], d["max"]
    for r, row in zip(v["by_lateness"], v["heat_ms"]):
        strip = "".join(
            "·" if x is None else _SHADES[min(7, int((x - lo) / (hi - lo) * 8)) if hi > lo else 3] for x in row
        ).replace(" ", "·")
        late = f"{r['mean_late_ms']:.1f}" if r["mean_late_ms"] is not None else "—"
        out.append(f"| {r['rank']} | {late} | {r['step_p50_ms']:.1f} | `{strip}` |")
    out.append("")
    return out
