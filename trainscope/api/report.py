"""One analyzed run as users and the apps see it: :class:`Report` (the main rank typed, every rank's
analysis, the renderings of the one document) and :class:`RankView` (one rank's view models)."""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.ranks.alignment import rank_collectives
from trainscope.analyzers.ranks.alignment import summarize
from trainscope.analyzers.ranks.lanes import side_by_side
from trainscope.analyzers.ranks.late_collectives import latest_arrivals
from trainscope.analyzers.ranks.story import rank_story
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.analyzers.trace.kernels import kernel_summary
from trainscope.analyzers.trace.repairs import ensure_checked
from trainscope.analyzers.views.kernel_launch import kernel_launch
from trainscope.analyzers.views.memory_curve import memory_curves
from trainscope.analyzers.views.timeline import TimelineModel
from trainscope.api.errors import bad_input
from trainscope.api.rendered import RenderedAnalysis
from trainscope.collectors.inputs import open_any
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.document import analysis_dict
from trainscope.reports.document import build_document
from trainscope.reports.document import headline
from trainscope.reports.html import render_html_cell
from trainscope.reports.oneline import report_line
from trainscope.reports.plan import ledger_vs_measured
from trainscope.traces.safe_text import safe_strings

if TYPE_CHECKING:
    import numpy as np

    from trainscope.analyzers.plan.ledger import Ledger
    from trainscope.analyzers.ranks.alignment import RankCollectives
    from trainscope.analyzers.ranks.alignment import RankSummary
    from trainscope.analyzers.ranks.lanes import SideBySide
    from trainscope.analyzers.ranks.late_collectives import LateCollective
    from trainscope.analyzers.ranks.story import RankStory
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.allocator_peak import DeviceMemory
    from trainscope.analyzers.trace.analysis import Analysis
    from trainscope.analyzers.trace.breakdown import Breakdown
    from trainscope.analyzers.trace.breakdown import StepBreakdown
    from trainscope.analyzers.trace.kernels import KernelSummary
    from trainscope.analyzers.trace.recommendations import Recommendation
    from trainscope.analyzers.trace.verdict import Finding
    from trainscope.analyzers.trace.verdict import Verdict
    from trainscope.analyzers.views.kernel_launch import KernelLaunch
    from trainscope.analyzers.views.memory_curve import MemoryCurve
    from trainscope.traces.model import Trace
    from trainscope.traces.model import TraceSet


def shown(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with every trace-derived name made visible (control and escape bytes, lone
    surrogates spelled out): what text and Markdown renderings print."""

    visible: dict[str, Any] = safe_strings(doc)
    return visible


@dataclass(frozen=True)
class Report(RenderedAnalysis):
    """One analyzed run: a trace file, or a directory of per-rank traces.

    The typed parts are those of the *main* rank (for several ranks, the rank story's headline
    rank — the straggler, else the rank whose own work fills most of the shared step:
    analyzers/ranks/story.py): ``verdict``, ``findings``, ``breakdown``, ``kernels``, ``steps``,
    ``memory``, ``recommendations``. ``ranks`` holds every rank's analysis; ``stragglers`` and
    ``deep`` are the report's sections for rank directories and ``deep=True``.
    ``to_dict()`` is the versioned JSON document (``trainscope analyze --format json``).
    ``trace(i)`` is rank ``i``'s trace — for a rank directory mapped in worker processes, read again
    on first use (the parent keeps only ``summaries``) — and ``rank_view(i)`` its view models.

    Frozen: nothing changes a report once it is built (:meth:`with_deep` is a new report); what it
    reads or derives on first use (traces, view models, rank summaries) is kept in its memo."""

    source: str
    rules: Rules = field(repr=False)
    traces: TraceSet = field(repr=False)
    ranks: list[Analysis] = field(repr=False)
    main_index: int = 0
    stragglers: dict[str, Any] | None = field(default=None, repr=False)
    deep: dict[str, Any] | None = field(default=None, repr=False)
    ledger: Ledger | None = field(default=None, repr=False)  # with model=…
    straggler_analysis: RankStory | None = field(default=None, repr=False)  # the rank story (its former name)
    story: RankStory | None = field(default=None, repr=False)  # several ranks
    # A rank directory mapped by the executor: each rank's summary; ``traces`` then holds no trace
    # (only the read warnings) and :meth:`trace` reads a rank's file again when first asked.
    summaries: list[RankSummary] | None = field(default=None, repr=False)
    _memo: _Memo = field(default_factory=lambda: _Memo(), init=False, repr=False, compare=False)

    def with_deep(self, deep: dict[str, Any] | None) -> Report:
        """This report with HTA's section ``deep`` (:func:`trainscope.api.run_deep`): a new report that
        shares this one's memo (the traces read again, the view models: none depends on ``deep``)."""
        new = replace(self, deep=deep)
        object.__setattr__(new, "_memo", self._memo)  # the one place a memo is handed on
        return new

    # the main rank, typed
    @property
    def main(self) -> Analysis:
        return self.ranks[self.main_index]

    @property
    def verdict(self) -> Verdict:
        return self.main.verdict

    @property
    def findings(self) -> list[Finding]:
        return self.main.findings

    @property
    def breakdown(self) -> Breakdown:
        return self.main.breakdown

    @property
    def steps(self) -> list[StepBreakdown]:
        return self.main.breakdown.steps

    @property
    def kernels(self) -> KernelSummary:
        return self.main.kernels

    @property
    def memory(self) -> list[DeviceMemory]:
        return self.main.memory

    @property
    def recommendations(self) -> list[Recommendation]:
        return self.main.recommendations

    @property
    def warnings(self) -> list[str]:
        return list(self.traces.warnings) + list(self.main.warnings)

    @property
    def main_trace(self) -> Trace:
        return self.trace(self.main_index)

    def trace(self, index: int) -> Trace:
        """Rank ``index``'s trace: the one read for the analysis, or — for a rank directory mapped in
        worker processes, which keep only summaries — that rank's file read again in this process,
        once, on first use. Raises :class:`BadInput` when the file cannot be read any more."""
        if len(self.traces.traces) == len(self.ranks):
            return self.traces.traces[index]
        memo = self._memo
        with memo.lock:
            if index not in memo.loaded:
                memo.loaded[index] = _read_rank(self.ranks[index])
            return memo.loaded[index]

    def rank_summaries(self) -> list[RankSummary]:
        """Per rank (in ``ranks`` order), what the reduce and ``diff`` need of it
        (:class:`trainscope.analyzers.ranks.alignment.RankSummary`): the map's, or made once from the traces
        read here. Their ``analysis`` is each rank's own judgement, before the reduce."""
        if self.summaries is not None:
            return self.summaries
        memo = self._memo
        if memo.summaries is None:
            memo.summaries = [summarize(t, a) for t, a in zip(self.traces.traces, self.ranks)]
        return memo.summaries

    def _collectives(self) -> list[RankCollectives]:
        summaries = self.summaries if self.summaries is not None else self._memo.summaries
        if summaries is not None:  # the map (or rank_summaries) already extracted them: no trace is read again
            return [s.collectives for s in summaries]
        return [rank_collectives(self.trace(i)) for i in range(len(self.ranks))]

    def latest_arrivals(self) -> list[LateCollective | None]:
        """Per rank (in ``ranks`` order), the collective of the rank story it reached furthest behind
        the first rank (:class:`trainscope.analyzers.ranks.late_collectives.LateCollective`, absolute ns on
        the rank's own clock), None for a rank with none; computed once. The app's jump from a rank to
        its late collective: never a collective the story leaves out."""
        memo = self._memo
        with memo.views_lock:
            late = memo.late
        if late is None:
            late = [None] * len(self.ranks) if self.story is None else latest_arrivals(self._collectives(), self.story)
            with memo.views_lock:
                memo.late = late
        return late

    def side_by_side(self) -> SideBySide:
        """Every rank on one clock (:class:`trainscope.analyzers.ranks.lanes.SideBySide`): the rank
        story's clock offsets and matched collectives, with its late arrivals and cold starts;
        computed once. The app's ranks-side-by-side view."""
        memo = self._memo
        with memo.views_lock:
            sb = memo.side_by_side
        if sb is None:
            story = self.story if self.story is not None else rank_story(self.rank_summaries(), self.rules)
            sb = side_by_side(self._collectives(), story)
            with memo.views_lock:
                memo.side_by_side = sb
        return sb

    def rank_view(self, index: int | None = None) -> RankView:
        """The view models of one rank (default: the main rank) for the terminal app: its document,
        timeline, full kernel table and memory curves, each built once when first asked."""
        index = self.main_index if index is None else index
        memo = self._memo
        with memo.views_lock:  # not the reading lock: the UI thread asks while a worker reads a trace
            if index not in memo.views:
                memo.views[index] = RankView(self, index)
            return memo.views[index]

    # renderings: all read the one document, so they cannot disagree
    def to_dict(self) -> dict[str, Any]:
        doc = build_document(
            self.source,
            self.ranks,
            self.rules,
            self.traces.warnings,
            deep=self.deep,
            stragglers=self.stragglers,
            main_index=self.main_index,
        )
        return with_ledger(doc, self.ledger)

    @property
    def document(self) -> AnalysisDocument:
        """The analysis document, typed (reports/analysis_document.py); ``to_dict()`` is its JSON."""
        return AnalysisDocument.from_dict(self.to_dict())

    def verdict_line(self) -> str:
        """One line: the headline, confidence and the step time (what ``on_trace_ready`` prints)."""

        doc = AnalysisDocument.from_dict(self.to_dict())  # only to_dict(): a cached report serves it unanalyzed
        v = doc.verdict
        p50 = doc.breakdown.step_time_ms.p50 if doc.breakdown is not None else None
        conf = f" (confidence {v.confidence:.2f})" if v.axis not in ("insufficient_evidence",) else ""
        steps = f" · step p50 {p50:g} ms" if p50 else ""
        return f"trainscope: {headline(doc)}{conf}{steps} — {os.path.basename(self.source.rstrip('/'))}"

    def _repr_html_(self) -> str:
        view = self.rank_view()
        return render_html_cell(self.to_dict(), view.trace, view.analysis, view.timeline)

    def __repr__(self) -> str:
        """One line with the verdict (the main rank's); ``str()`` or ``to_text()`` for the report."""

        a = self.main
        return report_line(
            self.source,
            a.verdict,
            len(a.breakdown.steps),
            a.breakdown.step_ms.p50 if a.breakdown.steps else None,
            len(a.findings),
            len(self.ranks),
        )


@dataclass
class _Memo:
    """What a :class:`Report` reads or derives on first use, each once: rank traces read again
    (``loaded``, under ``lock``), the view models, late arrivals and side-by-side (under
    ``views_lock``: the UI thread asks while a worker reads a trace), and the ranks' summaries made
    here when the map made none."""

    loaded: dict[int, Trace] = field(default_factory=dict)
    views: dict[int, RankView] = field(default_factory=dict)
    late: list[LateCollective | None] | None = None
    side_by_side: SideBySide | None = None
    summaries: list[RankSummary] | None = None
    lock: Any = field(default_factory=threading.Lock)
    views_lock: Any = field(default_factory=threading.Lock)


def _read_rank(a: Analysis) -> Trace:
    """One rank's trace read again from its file (the rank a file holds, when it holds several)."""

    with bad_input(a.source):
        loaded = open_any(a.source)
    trace = next((t for t in loaded if t.rank == a.rank), loaded[0])
    trace.rank = a.rank

    ensure_checked(trace, a.repairs.stub_fraction if a.repairs is not None else 0.02)  # the events the analysis saw
    return trace


class RankView:
    """One rank as the terminal app shows it: the analysis, its document, and the expensive view
    models (timeline, every kernel in the steps, memory curves), each built once when first asked.
    The trace is read on first use (a rank of a directory mapped in worker processes)."""

    def __init__(self, report: Report, index: int) -> None:
        self.report, self.index = report, index
        self.analysis: Analysis = report.ranks[index]
        self.rules: Rules = report.rules

    @property
    def trace(self) -> Trace:
        return self.report.trace(self.index)

    @functools.cached_property
    def doc(self) -> dict[str, Any]:
        doc = analysis_dict(self.analysis, self.rules)
        doc["input"] = {"path": self.analysis.source, "format": self.analysis.source_format, "traces": 1}
        return doc

    @functools.cached_property
    def document(self) -> AnalysisDocument:
        """This rank's document, typed (reports/analysis_document.py)."""
        return AnalysisDocument.from_dict(self.doc)

    @functools.cached_property
    def classes(self) -> tuple[np.ndarray, np.ndarray]:
        return kernel_classes(self.trace)

    @functools.cached_property
    def timeline(self) -> TimelineModel:
        """The :class:`~trainscope.analyzers.views.timeline.TimelineModel` of this rank (lanes, steps, matches)."""

        a = self.analysis
        return TimelineModel(self.trace, a.segmentation, a.device, self.classes[0])

    @functools.cached_property
    def all_kernels(self) -> KernelSummary:
        """Every kernel name inside the steps (the analysis keeps only the top ones)."""

        seg = self.analysis.segmentation
        mask = iv.contains((seg.starts, seg.ends), self.trace.kernels.ts)
        return kernel_summary(self.trace, mask, self.analysis.device, top_n=1 << 30, classes=self.classes)

    @functools.cached_property
    def memory(self) -> list[MemoryCurve]:
        """Allocated memory over time per device (``MemoryCurve``), from the trace's memory events."""

        return memory_curves(self.trace)

    def kernel_launch(self, start_ns: int, name: str) -> KernelLaunch | None:
        """What launched the kernel ``name`` starting at ``start_ns`` (the trace's clock):
        :class:`trainscope.analyzers.views.kernel_launch.KernelLaunch` (runtime call, correlation id, the
        operator around the call and its input shapes, External id), or None."""

        return kernel_launch(self.trace, start_ns, name, self.analysis.device)

    @property
    def label(self) -> str:
        a = self.analysis
        name = os.path.basename(a.source) if a.source else "trace"
        return f"rank {a.rank}" if a.rank is not None else name


def with_ledger(doc: dict[str, Any], ledger: Ledger | None) -> dict[str, Any]:
    """The analysis document with the planned memory ledger (``model_ledger``) beside the measured
    peak of the main device; the document unchanged without a ledger."""
    if ledger is None:
        return doc

    typed = AnalysisDocument.of(doc)
    mem = next((m for m in typed.memory if m.device == typed.device.id), typed.memory[0] if typed.memory else None)
    doc["ledger"] = ledger_vs_measured(
        ledger,
        mem.peak_allocated_bytes if mem else None,
        mem.capacity_bytes if mem else None,
        mem.basis if mem else None,
    )
    return doc
