"""Renderings of the live diagnosis: the headless line, the JSON line (same vocabulary as
``trainscope analyze --format json``: ``verdict.axis``, ``findings[].id``, evidence objects),
the end-of-watch summary and its Markdown report."""

from __future__ import annotations

import textwrap
import time
from dataclasses import asdict
from typing import Any

from trainscope import __version__
from trainscope.analyzers.findings import code_language
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.live.engine import READY
from trainscope.analyzers.live.engine import LiveStatus
from trainscope.analyzers.live.engine import WindowStats
from trainscope.analyzers.live.split import BASIS
from trainscope.analyzers.live.split import LABELS
from trainscope.analyzers.live.split import PARTS
from trainscope.analyzers.live.split import SHORT
from trainscope.analyzers.live.split import SplitWindow
from trainscope.analyzers.live.split import StepSplit
from trainscope.reports.document import AXIS_NAMES
from trainscope.reports.document import headline_word
from trainscope.reports.mdsafe import md_escape
from trainscope.reports.parts import evidence_dict
from trainscope.reports.parts import evidence_mark
from trainscope.reports.parts import finding_dict
from trainscope.reports.parts import rounded as _r
from trainscope.traces.samples import Snapshot

SCHEMA = "trainscope.watch/1"


def live_headline(st: LiveStatus) -> str:
    v = st.verdict
    if st.state != READY:
        return "WARMING UP"
    if v.axis == "insufficient_evidence":
        return "INSUFFICIENT EVIDENCE"
    if v.axis == "balanced":
        return "BALANCED"
    return f"{headline_word(v.bottleneck, v.summary, v.axis.upper())} · D·A·M axis: {AXIS_NAMES[v.axis]}"


def _pct(x: float | None, width: int = 3) -> str:
    return "n/a".rjust(width) if x is None else f"{x:{width}.0f}"


def verdict_dict(st: LiveStatus) -> dict[str, Any]:
    v = st.verdict
    return {
        "axis": v.axis,
        "confidence": v.confidence,
        "bottleneck": v.bottleneck,
        "runner_up": v.runner_up,
        "summary": v.summary,
        "headline": live_headline(st),
        "evidence": [evidence_dict(e) for e in v.evidence],
    }


def findings_list(st: LiveStatus) -> list[dict[str, Any]]:
    return [finding_dict(f) for f in st.findings]


def stats_dict(s: WindowStats) -> dict[str, Any]:
    return {k: (_r(v) if isinstance(v, float) else v) for k, v in asdict(s).items()}


def snapshot_dict(snap: Snapshot) -> dict[str, Any]:
    d = snap.to_dict()
    if snap.step is not None:
        d["step"]["data_wait_pct"] = _r(snap.step.data_wait_pct)
    return d


def ranks_dict(st: LiveStatus) -> dict[str, Any] | None:
    """Per rank over the window (a job with several ranks), and the rank holding the others back."""
    rw = st.ranks
    if rw is None:
        return None
    return {
        "straggler": rw.straggler,
        "evidence": rw.evidence,
        "ranks": [{k: (_r(v) if isinstance(v, float) else v) for k, v in asdict(r).items()} for r in rw.ranks],
    }


def rank_lines(st: LiveStatus | None) -> list[str]:
    """One line per rank (dashboard, summary): iteration, input wait, own work, RSS, GPU."""
    rw = st.ranks if st is not None else None
    if rw is None:
        return []
    out = []
    for r in rw.ranks:
        gpu = (
            f"  GPU {r.gpu} {r.gpu_util:.0f} % {r.gpu_mem / 2**30:.1f} GiB"
            if r.gpu is not None and r.gpu_util is not None and r.gpu_mem is not None
            else ""
        )
        mark = "  ◀ holds the others back" if rw.straggler == r.rank else ""
        out.append(
            f"rank {r.rank:>4s}  iter {_ms(r.step_ms)}  input wait {_ms(r.wait_ms)} ({_pct(r.wait_pct)} %)  "
            f"own work {_ms(r.own_ms)}  RSS {_gib(r.rss)}{gpu}{mark}"
        )
    return out


_BAR = {"data": "d", "h2d": "h", "forward": "f", "backward": "b", "optimizer": "o", "hook": "w", "other": "·"}


def split_line(sp: StepSplit, short: bool = False, bar: int = 0) -> str:
    """The step's split as one line — the only place it is worded (headless line, summary, report,
    dashboard): each part's share of the step time, in step order; ``short`` for the headless
    line; ``bar`` > 0 prefixes a bar of that width (a letter per part: d data, h host→device,
    f forward, b backward, o optimizer, w watch's hook, · other)."""
    head = f"[{split_bar(sp, bar)}] " if bar > 0 else ""
    if short:
        return f"{head}split {sp.step_ms:.1f} ms: " + " ".join(f"{SHORT[p]} {sp.pct(p):.0f}" for p in PARTS) + " %"
    body = " · ".join(f"{LABELS[p]} {sp.pct(p):.0f} %" for p in PARTS)
    return f"{head}step {sp.step_ms:.1f} ms: {body}"


def split_bar(sp: StepSplit, width: int) -> str:
    """Each part's share of ``width`` cells (largest remainders, so the cells always add up)."""
    raw = [sp.pct(p) / 100 * width for p in PARTS]
    cells = [int(x) for x in raw]
    for i in sorted(range(len(PARTS)), key=lambda i: raw[i] - cells[i], reverse=True)[: max(0, width - sum(cells))]:
        cells[i] += 1
    return "".join(_BAR[p] * c for p, c in zip(PARTS, cells))


def holdback_line(sw: SplitWindow | None) -> str:
    """What holds the slowest rank back, in one line ("" for a single process or no split)."""
    if sw is None or not sw.ranks:
        return ""
    h = sw.holds
    if h is None:
        return "no part holds one rank back"
    return (
        f"rank {h.rank} is held back by its {LABELS[h.part]}: {h.rank_ms:.1f} ms per iteration vs "
        f"{h.others_ms:.1f} ms on the other ranks (+{h.excess_ms:.1f} ms)"
    )


def split_lines(st: LiveStatus | None, bar: int = 0, short: bool = False) -> list[str]:
    """Where in the step, for every view: the job's split, each rank's, and the part that holds
    the slowest rank back. Empty when the hook timed no parts."""
    sw = st.split if st is not None else None
    if sw is None:
        return []
    out = [f"where in the step  {split_line(sw.split, short, bar)}"] if sw.split is not None else []
    for name, sp in sw.ranks:
        mark = f"  ◀ held back by its {LABELS[sw.holds.part]}" if sw.holds is not None and sw.holds.rank == name else ""
        out.append(f"rank {name:>4s}  {split_line(sp, short, bar)}{mark}")
    if sw.ranks:
        out.append(holdback_line(sw))
    return out


def split_dict(sw: SplitWindow | None) -> dict[str, Any] | None:
    """The split in JSON: per part ms per iteration and % of step, whole job and per rank."""
    if sw is None:
        return None

    def one(sp: StepSplit) -> dict[str, Any]:
        return {
            "steps": sp.steps,
            "step_ms": _r(sp.step_ms, 3),
            "parts": {p: {"ms": _r(sp.part_ms(p), 3), "pct": _r(sp.pct(p))} for p in PARTS},
        }

    d: dict[str, Any] = {"basis": BASIS, **(one(sw.split) if sw.split is not None else {})}
    if sw.ranks:
        d["ranks"] = [{"rank": name, **one(sp)} for name, sp in sw.ranks]
        h = sw.holds
        d["holds_back"] = (
            None
            if h is None
            else {
                "rank": h.rank,
                "part": h.part,
                "rank_ms": _r(h.rank_ms, 3),
                "others_ms": _r(h.others_ms, 3),
                "excess_ms": _r(h.excess_ms, 3),
                "how": h.why,
            }
        )
        d["evidence"] = sw.evidence
    return d


def _ms(x: float | None) -> str:
    return "   n/a" if x is None else f"{x:6.1f} ms"


def _gib(x: int | None) -> str:
    return "n/a" if x is None else f"{x / 2**30:.2f} GiB"


def status_line_dict(st: LiveStatus, snap: Snapshot) -> dict[str, Any]:
    """One JSON line of ``watch --headless --format json``."""
    d = {
        "schema": SCHEMA,
        "type": "sample",
        "t": round(snap.t, 3),
        "wall": round(snap.wall, 3),
        "state": st.state,
        "verdict": verdict_dict(st),
        "findings": findings_list(st),
        "fixes": [asdict(f) for f in st.fixes],
        "window": stats_dict(st.stats),
        "sample": snapshot_dict(snap),
    }
    if st.ranks is not None:
        d["ranks"] = ranks_dict(st)
    if st.split is not None:
        d["split"] = split_dict(st.split)
    return d


def summary_dict(st: LiveStatus, info: dict[str, Any]) -> dict[str, Any]:
    d = {
        "schema": SCHEMA,
        "type": "summary",
        "tool": {"name": "trainscope", "version": __version__},
        **info,
        "state": st.state,
        "verdict": verdict_dict(st),
        "findings": findings_list(st),
        "fixes": [asdict(f) for f in st.fixes],
        "run": stats_dict(st.stats),
        "changes": [asdict(c) for c in st.changes],
        "verdict_changes": st.verdict_changes,
    }
    if st.ranks is not None:
        d["ranks"] = ranks_dict(st)
    if st.split is not None:
        d["split"] = split_dict(st.split)
    return d


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
            w = (
                f" workers {wk.count}×{_pct(wk.cpu_pct / wk.count if wk.count and wk.cpu_pct is not None else None)}%"
                if wk and wk.count
                else ""
            )
            parts.append(f"main {_pct(main.cpu_pct)}%{w}")
    s = st.stats
    if st.ranks is not None:
        parts.append(
            "ranks "
            + " ".join(f"{r.rank}:{_pct(r.wait_pct).strip()}%" for r in st.ranks.ranks)
            + (f" straggler {st.ranks.straggler}" if st.ranks.straggler else "")
        )
    if s.data_wait_pct is not None:
        parts.append(f"steps {s.steps} wait {s.data_wait_pct:.1f}%")
    if st.split is not None and st.split.split is not None:
        held = st.split.holds
        parts.append(
            split_line(st.split.split, short=True)
            + (f" held back: rank {held.rank} {SHORT[held.part]}" if held is not None else "")
        )
    elif snap.step_mode != "on":
        parts.append(f"steps {snap.step_mode.split(':')[0]}")
    creep = next((f for f in st.findings if f.id == "machine/memory-creep"), None)
    if creep is not None:
        parts.append("MEMORY CREEP " + creep.detail.split(" over the last")[0])
    conf = f" {st.verdict.confidence:.2f}" if st.state == READY and st.verdict.bottleneck else ""
    parts.append(
        live_headline(st).split(" · ")[0] + (f" ({st.verdict.bottleneck})" if st.verdict.bottleneck else "") + conf
    )
    return " │ ".join(parts)


def _value(ev: Evidence, unit: bool = False) -> str:
    """An evidence line's value as the summaries show it ("n/a" where the window had none)."""
    if ev.value is None:
        return "n/a"
    return f"{ev.value:g} {ev.unit}" if unit else f"{ev.value:g}"


def summary_text(st: LiveStatus, info: dict[str, Any]) -> str:
    out = [
        f"trainscope watch — {info.get('target', '')}".rstrip(" —"),
        f"  watched {st.stats.span_s:.0f} s, {st.stats.samples} samples"
        + (f", {st.stats.steps} step{'s' * (st.stats.steps != 1)} timed" if st.stats.steps else "")
        + (f"; job exit code {info['exit_code']}" if info.get("exit_code") is not None else ""),
        "",
        f"VERDICT  {live_headline(st)}" + (f"   confidence {st.verdict.confidence:.2f}" if st.state == READY else ""),
    ]
    out += [f"  {line}" for line in textwrap.wrap(st.verdict.summary, 92)]
    if st.verdict.evidence:
        out += ["", "Evidence"]
        for e in st.verdict.evidence:
            mark = evidence_mark(e.meets)
            out.append(f"  {mark} {e.metric[:60]:60s} {_value(e):>9s} {e.unit[:16]:16s} {e.threshold}")
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
        out += ["", f"Verdict changes ({st.verdict_changes} after the first verdict)"] + [
            f"  {c.t:7.1f}s  {AXIS_NAMES.get(c.axis, c.axis)}" + (f" ({c.bottleneck})" if c.bottleneck else "")
            for c in st.changes
        ]
    if st.ranks is not None:
        out += ["", "Ranks (over the whole run)"] + [f"  {line}" for line in rank_lines(st)]
        out += [f"  {line}" for line in textwrap.wrap(st.ranks.evidence, 92)]
    if split_lines(st):
        out += ["", "Where in the step (host wall time of each part; on a GPU, launch time)"]
        out += [f"  {line}" for line in split_lines(st)]
        if st.split is not None and st.split.evidence:
            out += [f"  {line}" for line in textwrap.wrap(st.split.evidence, 92)]
    if info.get("captures"):
        out += ["", "Captures (torch.profiler, diagnosed as `trainscope analyze` would)"]
        for c in info["captures"]:
            out.append("  " + capture_headline(c))
            if c.get("status") == "done":
                out.append(f"      {capture_overhead(c)}")
                for r in c.get("ranks") or ():  # each rank's step and verdict, the straggler line
                    out += textwrap.wrap(str(r), 100, initial_indent="      ", subsequent_indent="        ")
    for n in info.get("notes", []):
        out.append(f"note: {n}")
    return "\n".join(out) + "\n"


def capture_headline(c: dict[str, Any]) -> str:
    """One line for a capture (its dict: :meth:`trainscope.api.capture.Capture.to_dict`): what it
    cost the job per step next to its verdict, and the verdict judged with that cost set apart."""
    head = f"capture {c.get('id')} ({c.get('trigger')}"
    if c.get("status") != "done":
        return f"{head}): no capture: {c.get('why')}"
    verdict = str(c.get("verdict_line") or "").removeprefix("trainscope: ")
    limit = ", stopped by the time limit" if c.get("time_limit") else ""
    judged = capture_judgement(c)
    return (
        f"{head}, {c.get('steps_captured')} steps at {c.get('started_t') or 0:.1f} s{limit}; "
        f"{capture_cost(c)}): {verdict}{f' [{judged}]' if judged else ''} — trace {c.get('path')}"
    )


def capture_cost(c: dict[str, Any]) -> str:
    """The capture's cost to the job in a few words: "profiler overhead +12 % per step"."""
    o = c.get("overhead")
    return "profiler overhead not measured" if not o else f"profiler overhead {o['pct']:+.0f} % per step"


def capture_judgement(c: dict[str, Any]) -> str:
    """The trace's launch/CPU-overhead share with the profiler's measured cost set apart, when the
    capture's verdict is launch/CPU overhead ("" otherwise: the breakdown line carries it)."""
    sa = c.get("set_apart")
    if not sa or not sa.get("verdict_is_launch"):
        return ""
    base = (
        f"launch/CPU overhead {sa['launch_pct_in_trace']:.1f} % in the trace, ≈ {sa['launch_pct_set_apart']:.1f} % "
        f"with the profiler's own {sa['cost_ms_per_step']:.2f} ms per step set apart"
    )
    if sa.get("verdict_is_profilers"):
        return f"the profiler's cost, not the job's: {base} (under {sa['moderate_pct']:g} %)"
    return base


def _capture_who(c: dict[str, Any]) -> str:
    pids = c.get("pids") or []
    return f"pid {c.get('pid')}" if len(pids) <= 1 else f"{len(pids)} ranks (pids {', '.join(map(str, pids))})"


def capture_overhead(c: dict[str, Any]) -> str:
    o = c.get("overhead")
    once = ", ".join(
        f"{name} {c[k]:.2f} s"
        for name, k in (("profiler start", "start_s"), ("warm-up step", "warmup_s"), ("trace export", "export_s"))
        if c.get(k) is not None
    )
    tail = f"; once: {once}" if once else ""
    settings = c.get("settings") or {}
    if settings:
        extra = [k for k in ("shapes", "stack", "memory") if settings.get(k)]
        what = "every operator" if settings.get("ops") else "user scopes only (steps, DataLoader)"
        tail += f"; recorded: {what}" + (f" + {', '.join(extra)}" if extra else "")
    if not o:
        return "overhead: not measured (no steps timed around the capture)" + tail
    basis = f"{o['before_steps']} before" + (f" + {o['after_steps']} after" if o.get("after_steps") else "")
    return (
        f"overhead {o['pct']:+.0f} % per step (median {o['during_ms']:.1f} ms during vs {o['around_ms']:.1f} ms "
        f"around, {basis}){tail}"
    )


def summary_markdown(st: LiveStatus, info: dict[str, Any]) -> str:
    s = st.stats
    e = md_escape
    out = [
        f"# trainscope watch — {e(str(info.get('target', '')))}",
        "",
        f"*{time.strftime('%Y-%m-%d %H:%M:%S')}, trainscope {__version__}; watched {s.span_s:.0f} s, "
        f"{s.samples} samples{f', {s.steps} step' + 's' * (s.steps != 1) + ' timed' if s.steps else ''}"
        + (f"; job exit code {info['exit_code']}" if info.get("exit_code") is not None else "")
        + "*",
        "",
        f"## Verdict: {e(live_headline(st))}",
        "",
        e(st.verdict.summary),
        "",
    ]
    if st.verdict.evidence:
        out += ["| | metric | value | threshold | source |", "|---|---|---|---|---|"]
        for ev in st.verdict.evidence:
            mark = evidence_mark(ev.meets, "")
            out.append(f"| {mark} | {e(ev.metric)} | {e(_value(ev, True))} | {e(ev.threshold)} | {e(ev.source)} |")
        out.append("")
    out += ["## Run", "", "| metric | value |", "|---|---|"]
    rows = [
        ("GPU utilization (time-weighted)", s.gpu_util, "%"),
        ("GPU memory used (fullest GPU)", s.gpu_mem_pct, "%"),
        ("SM activity (GPM)", s.sm_util, "%"),
        ("tensor activity (GPM)", s.tensor_util, "%"),
        ("DRAM bandwidth (GPM)", s.dram_util, "%"),
        ("host CPU", s.cpu_pct, "%"),
        ("I/O wait", s.iowait_pct, "%"),
        ("training process CPU", s.main_cpu_pct, "% of a core"),
        ("DataLoader workers", s.workers, ""),
        ("CPU per worker", s.worker_cpu_pct, "% of a core"),
        ("data wait (step-exact)", s.data_wait_pct, "% of step time"),
        ("mean step", s.step_ms, "ms"),
    ]
    for name, v, unit in rows:
        shown = "n/a" if v is None else (str(v) if isinstance(v, int) else f"{v:.1f} {unit}".strip())
        out.append(f"| {name} | {shown} |")
    out.append("")
    if st.findings:
        out += ["## Findings", ""] + [
            f"- **{e(f.id)}** ({f.severity}): {e(f.title)} — {e(f.detail)}" for f in st.findings
        ]
        out.append("")
    if st.fixes:
        out += ["## Fixes", ""]
        for i, fx in enumerate(st.fixes, 1):
            proj = (
                f" — up to {fx.projected_speedup:.2f}× faster (upper bound; {e(fx.basis)})"
                if fx.projected_speedup
                else ""
            )
            out += [f"{i}. {e(fx.title)}{proj}", "", f"```{code_language(fx.change)}", fx.change, "```", ""]
    if st.changes:
        out += [
            "## Verdict changes",
            "",
            f"{st.verdict_changes} after the first verdict.",
            "",
            "| at | verdict |",
            "|---|---|",
        ]
        out += [
            f"| {c.t:.1f} s | {e(AXIS_NAMES.get(c.axis, c.axis))}{f' ({e(c.bottleneck)})' if c.bottleneck else ''} |"
            for c in st.changes
        ]
        out.append("")
    if st.ranks is not None:
        out += [
            "## Ranks",
            "",
            "| rank | pid | iterations | iteration | input wait | own work | RSS | GPU |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in st.ranks.ranks:
            gpu = "n/a" if r.gpu is None else f"{r.gpu}" + (f" ({r.gpu_util:.0f} %)" if r.gpu_util is not None else "")
            name = e(r.rank) + (" **holds the others back**" if st.ranks.straggler == r.rank else "")
            out.append(
                f"| {name} | {r.pid} | {r.steps} | {_ms(r.step_ms).strip()} | {_ms(r.wait_ms).strip()} "
                f"({_pct(r.wait_pct).strip()} %) | {_ms(r.own_ms).strip()} | {_gib(r.rss)} | {gpu} |"
            )
        out += ["", e(st.ranks.evidence), ""]
    if split_lines(st):
        out += ["## Where in the step", "", f"*{e(BASIS)}*", ""] + [f"- {e(line)}" for line in split_lines(st)]
        if st.split is not None and st.split.evidence:
            out += ["", e(st.split.evidence)]
        out.append("")
    for c in info.get("captures") or []:
        out += [f"## Capture {c.get('id')}: {e(str(c.get('trigger')))}", ""]
        if c.get("status") != "done":
            out += [f"No capture: {e(str(c.get('why')))}", ""]
            continue
        out += [
            f"{c.get('steps_captured')} iterations captured at {c.get('started_t') or 0:.1f} s "
            f"(asked at {c.get('requested_t') or 0:.1f} s), {_capture_who(c)}; trace `{e(str(c.get('path')))}`.",
            "",
            "| | |",
            "|---|---|",
            f"| counters then | {e(str(c.get('counters') or 'n/a'))} |",
            f"| trace says | {e(str(c.get('verdict_line') or '').removeprefix('trainscope: '))} |",
            f"| overhead | {e(capture_overhead(c))} |",
        ]
        if capture_judgement(c):
            out.append(f"| with the profiler's cost set apart | {e(capture_judgement(c))} |")
        out += [""]
        if c.get("summary"):
            out += [e(str(c["summary"])), ""]
        out += [f"- {e(str(x))}" for x in c.get("evidence") or []]
        if c.get("breakdown"):
            out += ["", "Step breakdown: " + e(" · ".join(c["breakdown"]))]
        if c.get("top_kernels"):
            out += ["", "Top kernels:", ""] + [f"- {e(str(k))}" for k in c["top_kernels"]]
        if c.get("ranks"):
            out += ["", "Ranks:", ""] + [f"- {e(str(r))}" for r in c["ranks"]]
        out.append("")
    if info.get("notes"):
        out += ["## Notes", ""] + [f"- {e(n)}" for n in info["notes"]] + [""]
    return "\n".join(out)
