"""The ``deep`` (HTA second opinion) and ``stragglers`` parts of the document, and their text and
Markdown sections. Kept apart from document.py/text.py/markdown.py, which only call in here."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

from trainscope.analyzers.deep.critical_path import CP_CATEGORIES
from trainscope.analyzers.deep.critical_path import CP_LABELS
from trainscope.analyzers.deep.second_opinion import DeepAnalysis
from trainscope.analyzers.ranks.story import RankStory
from trainscope.analyzers.rules import Rules
from trainscope.reports.analysis_document import Stragglers
from trainscope.reports.parts import evidence_dict
from trainscope.reports.parts import rounded as _r

if TYPE_CHECKING:
    from trainscope.analyzers.ranks.alignment import Alignment


class Escape(Protocol):
    """How the Markdown lines escape a name (reports/mdsafe.py ``md_escape``): cut to ``limit`` characters."""

    def __call__(self, text: object, limit: int | None = None) -> str: ...


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
        "reconciliation": None if rec is None else asdict(rec),  # its fields, as the reconciliation names them
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
            "evidence": [evidence_dict(e) for e in ls.evidence],
        },
        "launch_error": d.launch_error,
    }


def stragglers_dict(story: RankStory, analyses: list[Any] | None = None, rules: Rules | None = None) -> dict[str, Any]:
    """The ``stragglers`` part of the document: the one rank story (analyzers/ranks/story.py), with
    each rank's verdict from ``analyses`` (the ranks' analyses after the reduce, in the story's order)."""
    rules = rules or Rules()
    aligned = story.basis == "aligned"
    al = story.alignment
    slow_cut = (1 + rules.value("straggler.step_pct") / 100) * story.median_step_ms
    out: dict[str, Any] = {
        "basis": "arrival measured from the collectives' common end"
        if aligned
        else "arrival in matched collectives, offset from each rank's own step start (no clock sync needed)",
        "method": story.basis,
        "collective_source": story.source,
        "matched_collectives": al.instances if aligned and al is not None else story.considered,
        "considered": story.considered,
        "median_step_ms": story.median_step_ms,
        "summary": story.summary,
        "stragglers": [] if story.straggler_index is None else [story.straggler],
        "straggler": story.straggler,
        "headline_rank": story.headline_rank,
        "headline_index": story.headline_index,
        "headline_reason": story.headline_reason,
        "headline": story.headline_line,
        "tie_us": story.tie_us,
        "cold_start": {"excluded": story.cold_excluded, "evidence": story.cold_why, "kept": story.cold_note},
        "ranks": [],
        "slow_collectives": [],
    }
    for r in story.ranks:
        a = analyses[r.index] if analyses is not None and r.index < len(analyses) else None
        latest = story.collectives[r.latest] if r.latest is not None else None
        out["ranks"].append(
            {
                "rank": r.rank,
                "source": r.source,
                "step_p50_ms": r.step_p50_ms,
                "collective_pct": r.collective_pct,
                "mean_late_ms": r.mean_late_ms,
                "max_late_ms": r.max_late_ms,
                "late_in": r.last_in,
                "considered": story.considered,
                "wait_ms_per_step": r.wait_ms_per_step,
                "transfer_ms_per_step": r.transfer_ms_per_step,
                "late": r.index == story.straggler_index,
                "slow": len(story.ranks) > 1 and r.step_p50_ms > slow_cut,
                "headline": r.index == story.headline_index,
                "latest_collective": None
                if latest is None or r.latest is None
                else {
                    "index": r.latest,
                    "kind": latest.kind,
                    "step": latest.step,
                    "late_ms": latest.arrival_ms[r.index],
                },
                "axis": a.verdict.axis if a is not None else None,
                "bottleneck": a.verdict.bottleneck if a is not None else None,
            }
        )
    warm = [(i, c) for i, c in enumerate(story.collectives) if not c.cold]
    for i, c in sorted(warm, key=lambda x: -x[1].spread_ms)[:5]:
        out["slow_collectives"].append(
            {
                "step": c.step,
                "name": c.kind,
                "index": i,
                "spread_ms": c.spread_ms,
                "last_rank": None if c.last_index is None else story.ranks[c.last_index].rank,
            }
        )
    if al is not None:
        out["alignment"] = alignment_dict(al)
    return out


def _cost(d: dict[str, Any]) -> str:
    mem = (
        f", peak memory {d['peak_rss_mb']:.0f} MiB (+{d['rss_growth_mb']:.0f} MiB)"
        if d["peak_rss_mb"] is not None
        else ""
    )
    v = d["versions"]
    return f"HTA {v.get('traceinsight', '?')} took {d['elapsed_s']:.1f} s{mem}"


def deep_text_lines(d: dict[str, Any], bold: Callable[[str], str]) -> list[str]:
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


def straggler_headline(s: Stragglers | dict[str, Any]) -> tuple[str, str | None]:
    """(the straggler line, None): the rank story's one line (``stragglers.summary``), the line every
    view leads with. (The second element once named a disagreement between two methods; the story
    has one answer.)"""
    return Stragglers.of(s).summary, None


def _late_rank_table(s: Stragglers) -> list[str]:
    """Every rank's lateness as the story counts it: the one table every view shows."""
    rows = [
        f"  {'rank':>4}  {'late by (mean)':>14}  {'at most':>9}  {'last at':>9}  {'waiting/step':>12}  "
        f"{'transfer/step':>13}  verdict"
    ]
    for r in sorted(s.ranks, key=lambda r: (-r.mean_late_ms, -(r.step_p50_ms or 0.0)))[:16]:
        flag = " ◀ straggler" if r.late else ""
        flag += " ▶ headline" if r.headline else ""
        verdict = (r.axis or "") + (" · " + r.bottleneck if r.bottleneck else "")
        rows.append(
            f"  {r.rank if r.rank is not None else '?':>4}  {r.mean_late_ms:11.1f} ms  "
            f"{r.max_late_ms:6.1f} ms  {str(r.late_in) + ' of ' + str(r.considered):>9}  "
            f"{r.wait_ms_per_step:9.1f} ms  {r.transfer_ms_per_step:10.1f} ms  {verdict}{flag}"
        )
    if len(s.ranks) > 16:
        rows.append(f"  … {len(s.ranks) - 16} more ranks in the JSON document")
    return rows


def stragglers_text_lines(story: Stragglers | dict[str, Any], bold: Callable[[str], str]) -> list[str]:
    s = Stragglers.of(story)
    head, _ = straggler_headline(s)
    out = [bold("Stragglers") + f"  ({s.basis})"]
    out += [("  " if i == 0 else "    ") + line for i, line in enumerate(textwrap.wrap(head, 90))]
    if s.headline:
        out += [("  " if i == 0 else "    ") + line for i, line in enumerate(textwrap.wrap(s.headline, 90))]
    al = s.alignment
    imb = al.get("rank_imbalance") if al else None
    if imb:
        line = f"rank {imb['rank']}'s extra work per step against the others' median: {extra_work_words(imb)}"
        out += [("  " if i == 0 else "    ") + x for i, x in enumerate(textwrap.wrap(line, 90))]
    if al and al.get("matched_collectives"):
        out.append(f"  {al['matching']}")
        out.append(f"  {al['clock_offsets']}")
    out += _late_rank_table(s)
    if s.ranks_view:
        out += [""] + ranks_view_text_lines(s.ranks_view, bold)
    return out


def extra_work_words(imb: dict[str, Any]) -> str:
    """The straggler's extra work per step (what balancing can move), then its extra kernel time per
    class, largest first (what balancing would even out)."""
    work = imb.get("extra_work") or []
    total = imb.get("extra_work_ms_per_step")
    classes = ", ".join(f"{w['kernel_class']} +{w['ms_per_step']:.3g} ms" for w in work[:3])
    if total is not None:
        return f"{total:.3g} ms of {imb.get('work_basis')}" + (f" ({classes})" if classes else "")
    return classes or "no kernel class takes longer (or no GPU kernels to compare)"


def deep_markdown_lines(d: dict[str, Any], esc: Escape) -> list[str]:
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


def stragglers_markdown_lines(story: Stragglers | dict[str, Any], esc: Escape) -> list[str]:
    s = Stragglers.of(story)
    head, _ = straggler_headline(s)
    out = ["## Stragglers", "", f"**{esc(head[:1].upper() + head[1:])}**", ""]
    if s.headline:
        out += [esc(s.headline[:1].upper() + s.headline[1:]) + ".", ""]
    al = s.alignment
    imb = al.get("rank_imbalance") if al else None
    if imb:
        out += [
            esc(f"Rank {imb['rank']}'s extra work per step against the others' median: {extra_work_words(imb)}."),
            "",
        ]
    out += [
        "| rank | late by ms (mean) | at most ms | last at | waiting ms/step | transfer ms/step | straggler | verdict |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in s.ranks:
        mark = "yes" if r.late else ""
        mark += " (headline)" if r.headline else ""
        out.append(
            f"| {r.rank} | {r.mean_late_ms:.1f} | {r.max_late_ms:.1f} | {r.late_in} of {r.considered} | "
            f"{r.wait_ms_per_step:.1f} | {r.transfer_ms_per_step:.1f} | {mark.strip()} | "
            f"{esc(r.axis or '')} {esc(r.bottleneck or '')} |"
        )
    out.append("")
    if s.ranks_view:
        out += ranks_view_markdown_lines(s.ranks_view, s.alignment, esc)
    return out


def alignment_dict(al: Alignment) -> dict[str, Any]:
    """The ranks aligned on their collectives' ends (analyzers/ranks/alignment.py :class:`Alignment`)."""
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
            "extra_work_ms_per_step": imb.extra_work_ms_per_step,
            "work_basis": imb.work_basis,
            "summary": imb.summary,
        },
    }


_SHADES = "▁▂▃▄▅▆▇█"


def ranks_view_text_lines(v: dict[str, Any], bold: Callable[[str], str]) -> list[str]:
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


def ranks_view_markdown_lines(v: dict[str, Any], al: dict[str, Any] | None, esc: Escape) -> list[str]:
    d = v["step_ms_distribution"]
    if not d:
        return []
    out = ["## Ranks", ""]
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
