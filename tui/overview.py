"""The overview: the verdict badge, the key figures, the evidence behind the verdict, top fixes."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.analysis_document import Evidence
from trainscope.reports.analysis_document import Stragglers
from trainscope.reports.deep import straggler_headline
from trainscope.reports.document import communication_split_words
from trainscope.reports.document import counters_only
from trainscope.reports.document import gain_words
from trainscope.reports.document import headline
from trainscope.reports.document import window_lines
from trainscope.traces.safe_text import safe_strings
from trainscope.traces.safe_text import visible
from trainscope.tui.chrome import gib
from trainscope.tui.palette import AXIS_CLASS


def key_figures(doc: AnalysisDocument | dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of the figures a user looks at first."""
    d = AnalysisDocument.of(doc)
    b = d.breakdown
    if counters_only(d):
        return [
            ("source", f"sampled counters ({d.input.format if d.input else ''}): no steps or kernels to break down"),
            ("verdict from", "the live rules over the whole recording (`trainscope thresholds`, live.*)"),
        ]
    rows = [("device", d.device.name or "no GPU in trace")]
    if d.steps:
        rows.append(("steps", f"{len(d.steps)} ({d.steps_method.replace('_', ' ')})"))
    for i, line in enumerate(window_lines(d)):  # the window judged, what was left out as not steady
        rows.append(("window" if i == 0 else "", line))
    if d.steps and b is not None:
        st = b.step_time_ms
        rows.append(("step time", f"p50 {st.p50:.1f} ms · p95 {st.p95:.1f} ms"))
        rows.append(("GPU busy", f"{b.gpu_busy_pct:.1f} % of step time"))
        rows.append(("data wait", f"{b.data_wait_pct:.1f} % of step time"))
        split = communication_split_words(d, with_label=False)
        if split and b.communication_split:  # the communication row, named in its two parts (reports/document.py)
            rows.append((b.communication_split.label, split))
    mfu = d.mfu
    if mfu is not None:
        rows.append(("MFU", f"{mfu.value_pct:.1f} %" if mfu.value_pct is not None else mfu.reason or "unknown"))
    for m in d.memory:
        cap = m.capacity_bytes
        used = max(m.peak_allocated_bytes or 0, m.peak_reserved_bytes or 0)
        pct = f" ({m.peak_pct_of_capacity:.0f} %)" if m.peak_pct_of_capacity is not None else ""
        basis = " since profiling began" if m.basis == "relative" else ""
        rows.append((f"peak memory GPU {m.device}", f"{gib(used, missing='—')} of {gib(cap, missing='—')}{pct}{basis}"))
    if not d.memory:
        rows.append(("peak memory", "unknown — trace recorded without profile_memory"))
    return rows


def ledger_rows(doc: AnalysisDocument | dict[str, Any], top: int = 6) -> list[tuple[str, str]]:
    """The start-up ledger's largest one-off costs: (how long, what and where), once per process."""
    st = AnalysisDocument.of(doc).steady_state
    if not st or not st.ledger:
        return []
    rows = []
    for c in sorted(st.ledger, key=lambda c: -(c.ms or 0.0))[:top]:
        inside = f"; {c.in_window_ms:,.1f} ms in the judged window" if c.in_window_ms else ""
        rows.append((f"{c.ms:,.1f} ms", f"{c.phase} · {c.kind} ×{c.count}: {c.what} — {c.where}{inside}"))
    return rows


def fmt_value(v: float | int | None, unit: str) -> str:
    if v is None:
        return "—"
    return f"{v:.1f} %" if unit.startswith("%") else f"{v:g} {unit}".strip()


EVIDENCE_MARKS = {True: ("✔", "bold"), False: ("✘", ""), None: ("·", "dim")}


def evidence_line(e: Evidence | dict[str, Any], indent: str = "") -> Text:
    """One evidence item as the app shows it (the overview and the fixes tab): its crossed mark, the
    metric, the value where it has one (a fact without a number gets no "—" beside the "— source"),
    the threshold and the source."""
    ev = e if isinstance(e, Evidence) else Evidence.from_dict(e)
    mark, style = EVIDENCE_MARKS[ev.meets]
    line = Text(indent)
    thr = f"  (threshold {ev.threshold} {ev.unit})" if ev.threshold else ""
    if ev.value is None:
        line.append(f"{mark} {ev.metric}", style=style)
    else:
        line.append(f"{mark} {ev.metric}: ", style=style)
        line.append(fmt_value(ev.value, ev.unit), style="bold")
    line.append(f"{thr}  — {ev.source}" if ev.source else thr, style="dim")
    return line


def report_overview(doc: AnalysisDocument | dict[str, Any]) -> tuple[AnalysisDocument, Stragglers | None]:
    """What :meth:`Overview.show` shows of a report's document (``Report.to_dict()``, or the same
    document read from the analysis cache): its body — the main rank's — and, for several ranks,
    the rank story; every string made visible (traces/safe_text.py). The app's first screen from a
    cached document and the loaded app's main rank both come through here, so they cannot differ."""
    d = AnalysisDocument.of(doc)
    shown = AnalysisDocument.from_dict(safe_strings(d.to_dict()))
    return shown, shown.stragglers if d.input is not None and d.input.traces > 1 else None


class Overview(VerticalScroll):
    DEFAULT_CSS = """
    Overview { padding: 0 1; }
    Overview #badge { width: 100%; padding: 0 1; text-style: bold; content-align: center middle; height: 3; }
    Overview .axis-data { background: #b3261e; color: white; }
    Overview .axis-algorithm { background: #1f5fbf; color: white; }
    Overview .axis-machine { background: #7b3fa0; color: white; }
    Overview .axis-balanced { background: #2e7d32; color: white; }
    Overview .axis-none { background: #5f5f5f; color: white; }
    Overview #summary { margin: 1 0 0 0; }
    Overview .heading { text-style: bold; margin: 1 0 0 0; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="badge", markup=False)
        yield Static("", id="summary", markup=False)
        yield Static("Key figures", classes="heading")
        yield Static("", id="figures", markup=False)
        yield Static("Evidence", classes="heading")
        yield Static("", id="evidence", markup=False)
        yield Static("Top fixes (projections are upper bounds; details on the Fixes tab)", classes="heading")
        yield Static("", id="top-fixes", markup=False)
        yield Static("", id="ledger", markup=False)
        yield Static("", id="ranks-summary", markup=False)
        yield Static("", id="warnings", markup=False)

    def show_document(self, doc: AnalysisDocument | dict[str, Any]) -> None:
        """The overview of a report's whole document (see :func:`report_overview`)."""
        self.show(*report_overview(doc))

    def show(
        self, doc: AnalysisDocument | dict[str, Any], stragglers: Stragglers | dict[str, Any] | None = None
    ) -> None:
        d = AnalysisDocument.of(doc)
        v = d.verdict
        badge = self.query_one("#badge", Static)
        for cls in AXIS_CLASS.values():
            badge.remove_class(cls)
        badge.add_class(AXIS_CLASS.get(v.axis, "axis-none"))
        badge.update(f"{headline(d)}   ·   confidence {v.confidence:.2f}")
        self.query_one("#summary", Static).update(Text(visible(v.summary)))
        fig = Text()
        figures = key_figures(d)
        width = max((len(label) for label, _ in figures), default=0)  # one column, however long a label
        for label, value in figures:
            fig.append(f"{label:<{width}}  ", style="bold")
            fig.append(value + "\n")
        self.query_one("#figures", Static).update(fig)
        ev = Text()
        for e in v.evidence:
            ev.append_text(evidence_line(e))
            ev.append("\n")
        if not v.evidence:
            ev.append("no evidence recorded", style="dim")
        self.query_one("#evidence", Static).update(ev)
        fixes = Text()
        for r in d.recommendations[:3]:
            gain = (
                f"up to {r.projected_speedup:.2f}× (step ≥ {r.projected_step_ms:.1f} ms)"
                if r.projected_speedup
                else gain_words(r)  # a one-off cost's fix: seconds once per process
            )
            fixes.append(f"{r.rank}. ", style="bold")
            fixes.append(r.title)
            fixes.append(f" — {gain}\n", style="bold")
        if not d.recommendations:
            fixes.append(
                "none: "
                + (
                    "too little evidence for a verdict"
                    if v.axis == "insufficient_evidence"
                    else "no finding crosses its threshold"
                )
            )
        self.query_one("#top-fixes", Static).update(fixes)
        ledger = Text()
        rows = ledger_rows(d)
        if rows and d.steady_state is not None:
            ledger.append("\nStart-up ledger ", style="bold")
            ledger.append(
                f"(one-off costs, once per process: {(d.steady_state.total_ms or 0.0) / 1e3:,.2f} s)\n", style="dim"
            )
            for ms, what in rows:
                ledger.append(f"  {ms:>12}  ", style="bold")
                ledger.append(visible(what) + "\n")
        box = self.query_one("#ledger", Static)
        box.update(ledger)
        box.display = bool(rows)  # no empty line where the trace holds no one-off cost
        # A rank directory: what the Ranks tab finds is said here too, so the two never disagree silently.
        ranks = Text()
        story = Stragglers.of(stragglers) if stragglers else None
        if story:
            head, _ = straggler_headline(story)  # the same line the reports lead with
            ranks.append("\nRanks ", style="bold")
            ranks.append(visible(head) + "\n")
            if story.headline:
                ranks.append("  " + visible(story.headline) + "\n", style="dim")
            late = [r for r in story.ranks if r.late]  # the story's straggler, its figures
            for rk in late:
                ranks.append(
                    f"  ◀ rank {rk.rank}: arrives {rk.mean_late_ms:.1f} ms after the first rank on average "
                    f"(at most {rk.max_late_ms:.1f} ms; last at {rk.late_in} of {rk.considered}) — details on "
                    "the Ranks tab\n"
                )
            if v.axis == "insufficient_evidence" and late:
                ranks.append(
                    "  The verdict above is this rank's own; the straggler is the lead across ranks.\n", style="dim"
                )
        self.query_one("#ranks-summary", Static).update(ranks)
        warn = Text()
        for w in d.warnings:
            warn.append(f"⚠ {w}\n", style="yellow")
        self.query_one("#warnings", Static).update(warn)
