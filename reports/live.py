"""Renderings of the live diagnosis: the headless line, the JSON line (same vocabulary as
``trainscope analyze --format json``: ``verdict.axis``, ``findings[].id``, evidence objects),
the end-of-watch summary and its Markdown report."""
from __future__ import annotations

from trainscope.analyzers.fix_text import code_language

import textwrap
import time
from dataclasses import asdict
from typing import Any

from trainscope import __version__
from trainscope.analyzers.live import READY, LiveStatus, WindowStats
from trainscope.traces.samples import Snapshot
from trainscope.reports.document import AXIS_NAMES, HEADLINES, _evidence
from trainscope.reports.markdown import md_escape

SCHEMA = "trainscope.watch/1"
LIVE_HEADLINES = HEADLINES  # the registry declares the live findings' headlines too


def live_headline(st: LiveStatus) -> str:
    v = st.verdict
    if st.state != READY:
        return "WARMING UP"
    if v.axis == "insufficient_evidence":
        return "INSUFFICIENT EVIDENCE"
    if v.axis == "balanced":
        return "BALANCED"
    return f"{LIVE_HEADLINES.get(v.bottleneck, v.axis.upper())} · D·A·M axis: {AXIS_NAMES[v.axis]}"


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


def _pct(x: float | None, width: int = 3) -> str:
    return "n/a".rjust(width) if x is None else f"{x:{width}.0f}"


def verdict_dict(st: LiveStatus) -> dict[str, Any]:
    v = st.verdict
    return {"axis": v.axis, "confidence": v.confidence, "bottleneck": v.bottleneck, "runner_up": v.runner_up,
            "summary": v.summary,
            "headline": live_headline(st), "evidence": [_evidence(e) for e in v.evidence]}


def findings_list(st: LiveStatus) -> list[dict[str, Any]]:
    return [{"id": f.id, "axis": f.axis, "severity": f.severity, "title": f.title, "stake_pct": _r(f.stake_pct),
             "detail": f.detail, "evidence": [_evidence(e) for e in f.evidence]} for f in st.findings]


def stats_dict(s: WindowStats) -> dict[str, Any]:
    return {k: (_r(v) if isinstance(v, float) else v) for k, v in asdict(s).items()}


def snapshot_dict(snap: Snapshot) -> dict[str, Any]:
    d = snap.to_dict()
    if snap.step is not None:
        d["step"]["data_wait_pct"] = _r(snap.step.data_wait_pct)
    return d


def status_line_dict(st: LiveStatus, snap: Snapshot) -> dict[str, Any]:
    """One JSON line of ``watch --headless --format json``."""
    return {"schema": SCHEMA, "type": "sample", "t": round(snap.t, 3), "wall": round(snap.wall, 3), "state": st.state,
            "verdict": verdict_dict(st), "findings": findings_list(st),
            "fixes": [asdict(f) for f in st.fixes], "window": stats_dict(st.stats),
            "sample": snapshot_dict(snap)}


def summary_dict(st: LiveStatus, info: dict[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA, "type": "summary", "tool": {"name": "trainscope", "version": __version__}, **info,
            "state": st.state, "verdict": verdict_dict(st), "findings": findings_list(st),
            "fixes": [asdict(f) for f in st.fixes], "run": stats_dict(st.stats),
            "changes": [asdict(c) for c in st.changes], "verdict_changes": st.verdict_changes}


def status_line(st: LiveStatus, snap: Snapshot) -> str:
    """One human line per interval for ``--headless``."""
    parts = [f"{snap.t:7.1f}s"]
    for g in snap.gpus:
        if g.lost:
            parts.append(f"GPU{g.index} LOST")
            continue
        gpm = f" sm {_pct(g.sm_util)}% dram {_pct(g.dram_bw_util)}%" if g.sm_util is not None else ""
        parts.append(f"GPU{g.index} {_pct(g.util_gpu)}% mem {_pct(g.mem_pct)}%{gpm}")
    h = snap.host
    if h is not None:
        parts.append(f"CPU {_pct(h.cpu_pct)}% iow {_pct(h.iowait_pct)}%")
        main, wk = h.group("main"), h.group("workers")
        if main is not None:
            w = f" workers {wk.count}×{_pct(wk.cpu_pct / wk.count if wk.count and wk.cpu_pct is not None else None)}%" if wk and wk.count else ""
            parts.append(f"main {_pct(main.cpu_pct)}%{w}")
    s = st.stats
    if s.data_wait_pct is not None:
        parts.append(f"steps {s.steps} wait {s.data_wait_pct:.1f}%")
    elif snap.step_mode != "on":
        parts.append(f"steps {snap.step_mode.split(':')[0]}")
    conf = f" {st.verdict.confidence:.2f}" if st.state == READY and st.verdict.bottleneck else ""
    parts.append(live_headline(st).split(" · ")[0] + (f" ({st.verdict.bottleneck})" if st.verdict.bottleneck else "") + conf)
    return " │ ".join(parts)


def summary_text(st: LiveStatus, info: dict[str, Any]) -> str:
    out = [f"trainscope watch — {info.get('target', '')}".rstrip(" —"),
           f"  watched {st.stats.span_s:.0f} s, {st.stats.samples} samples" + (
               f", {st.stats.steps} step{'s' * (st.stats.steps != 1)} timed" if st.stats.steps else "") + (
               f"; job exit code {info['exit_code']}" if info.get("exit_code") is not None else ""),
           "", f"VERDICT  {live_headline(st)}" + (f"   confidence {st.verdict.confidence:.2f}" if st.state == READY else "")]
    out += [f"  {line}" for line in textwrap.wrap(st.verdict.summary, 92)]
    if st.verdict.evidence:
        out += ["", "Evidence"]
        for e in st.verdict.evidence:
            mark = {True: "✔", False: "✘", None: " "}[e.meets]
            val = "n/a" if e.value is None else f"{e.value:g}"
            out.append(f"  {mark} {e.metric[:60]:60s} {val:>9s} {e.unit[:16]:16s} {e.threshold}")
    others = [f for f in st.findings if f.id != st.verdict.bottleneck]
    if others:
        out += ["", "Other findings"] + [f"  [{f.severity}] {f.id}: {f.title}" for f in others]
    if st.fixes:
        out += ["", "Fixes"]
        for i, fx in enumerate(st.fixes, 1):
            proj = f"  [up to {fx.projected_speedup:.2f}× faster]" if fx.projected_speedup else ""
            out.append(f"  {i}. {fx.title}{proj}")
            out += [f"       {line}" for line in fx.change.splitlines()]
    if len(st.changes) > 1:
        out += ["", f"Verdict changes ({st.verdict_changes} after the first verdict)"] + [f"  {c.t:7.1f}s  {AXIS_NAMES.get(c.axis, c.axis)}"
                                          + (f" ({c.bottleneck})" if c.bottleneck else "") for c in st.changes]
    for n in info.get("notes", []):
        out.append(f"note: {n}")
    return "\n".join(out) + "\n"


def summary_markdown(st: LiveStatus, info: dict[str, Any]) -> str:
    s = st.stats
    e = md_escape
    out = [f"# trainscope watch — {e(str(info.get('target', '')))}", "",
           f"*{time.strftime('%Y-%m-%d %H:%M:%S')}, trainscope {__version__}; watched {s.span_s:.0f} s, "
           f"{s.samples} samples{f', {s.steps} step' + 's' * (s.steps != 1) + ' timed' if s.steps else ''}"
           + (f"; job exit code {info['exit_code']}" if info.get("exit_code") is not None else "") + "*", "",
           f"## Verdict: {e(live_headline(st))}", "", e(st.verdict.summary), ""]
    if st.verdict.evidence:
        out += ["| | metric | value | threshold | source |", "|---|---|---|---|---|"]
        for ev in st.verdict.evidence:
            mark = {True: "✔", False: "✘", None: ""}[ev.meets]
            val = "n/a" if ev.value is None else f"{ev.value:g} {ev.unit}"
            out.append(f"| {mark} | {e(ev.metric)} | {e(val)} | {e(ev.threshold)} | {e(ev.source)} |")
        out.append("")
    out += ["## Run", "", "| metric | value |", "|---|---|"]
    rows = [("GPU utilization (time-weighted)", s.gpu_util, "%"), ("GPU memory used (fullest GPU)", s.gpu_mem_pct, "%"),
            ("SM activity (GPM)", s.sm_util, "%"), ("tensor activity (GPM)", s.tensor_util, "%"),
            ("DRAM bandwidth (GPM)", s.dram_util, "%"), ("host CPU", s.cpu_pct, "%"), ("I/O wait", s.iowait_pct, "%"),
            ("training process CPU", s.main_cpu_pct, "% of a core"), ("DataLoader workers", s.workers, ""),
            ("CPU per worker", s.worker_cpu_pct, "% of a core"), ("data wait (step-exact)", s.data_wait_pct, "% of step time"),
            ("mean step", s.step_ms, "ms")]
    for name, v, unit in rows:
        shown = "n/a" if v is None else (str(v) if isinstance(v, int) else f"{v:.1f} {unit}".strip())
        out.append(f"| {name} | {shown} |")
    out.append("")
    if st.findings:
        out += ["## Findings", ""] + [f"- **{e(f.id)}** ({f.severity}): {e(f.title)} — {e(f.detail)}" for f in st.findings]
        out.append("")
    if st.fixes:
        out += ["## Fixes", ""]
        for i, fx in enumerate(st.fixes, 1):
            proj = f" — up to {fx.projected_speedup:.2f}× faster (upper bound; {e(fx.basis)})" if fx.projected_speedup else ""
            out += [f"{i}. {e(fx.title)}{proj}", "", f"```{code_language(fx.change)}", fx.change, "```", ""]
    if st.changes:
        out += ["## Verdict changes", "", f"{st.verdict_changes} after the first verdict.", "",
                "| at | verdict |", "|---|---|"]
        out += [f"| {c.t:.1f} s | {e(AXIS_NAMES.get(c.axis, c.axis))}{f' ({e(c.bottleneck)})' if c.bottleneck else ''} |"
                for c in st.changes]
        out.append("")
    if info.get("notes"):
        out += ["## Notes", ""] + [f"- {e(n)}" for n in info["notes"]] + [""]
    return "\n".join(out)
