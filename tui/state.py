"""What the analyze app shows, computed off the UI thread: the traces, one analysis per rank,
the report document, and per-rank views (timeline model, full kernel table) built on demand."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Callable

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.analysis import Analysis, analyze_set, slowest
from trainscope.analyzers.kernels import KernelSummary, kernel_classes, kernel_summary
from trainscope.analyzers.memory_usage import MemoryCurve, memory_curves
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.timeline import TimelineModel
from trainscope.reports.document import analysis_dict, build_document
from trainscope.traces.model import Trace, TraceSet

Progress = Callable[[str, "float | None"], None]


@dataclass
class RankView:
    """One rank: its trace and analysis, and the expensive views, each built once when first asked."""

    trace: Trace
    analysis: Analysis
    rules: Rules

    @functools.cached_property
    def doc(self) -> dict:
        doc = analysis_dict(self.analysis, self.rules)
        doc["input"] = {"path": self.analysis.source, "format": self.analysis.source_format, "traces": 1}
        return doc

    @functools.cached_property
    def classes(self):
        return kernel_classes(self.trace)

    @functools.cached_property
    def timeline(self) -> TimelineModel:
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
        return memory_curves(self.trace)

    @property
    def label(self) -> str:
        a = self.analysis
        name = os.path.basename(a.source) if a.source else "trace"
        return f"rank {a.rank}" if a.rank is not None else name


@dataclass
class Session:
    path: str
    rules: Rules
    traces: TraceSet
    analyses: list[Analysis]
    ranks: list[RankView] = field(default_factory=list)
    main_rank: int = 0  # index of the rank the report leads with (the slowest)
    decorate: Callable[[dict], dict] | None = None  # optional sections the CLI adds (e.g. the --model ledger)
    stragglers: dict | None = None  # rank directories: the straggler section of the report
    deep: dict | None = None  # with --deep, once HTA has run: the deep section of the report

    def document(self) -> dict:
        """The same document ``--report``/``--format json`` produce."""
        doc = build_document(self.path, self.analyses, self.rules, self.traces.warnings, deep=self.deep,
                             stragglers=self.stragglers)
        return self.decorate(doc) if self.decorate else doc


def build_session(path: str, traces: TraceSet, rules: Rules, peak_tflops: float | None = None,
                  progress: Progress | None = None, step_range: str | None = None) -> Session:
    """Raises StepRangeError when ``step_range`` names no range in the trace."""
    if progress:
        progress("analyzing", None)
    analyses = analyze_set(traces, rules, peak_tflops, step_range)
    ranks = [RankView(t, a, rules) for t, a in zip(traces.traces, analyses)]
    main = analyses.index(slowest(analyses)) if len(analyses) > 1 else 0
    session = Session(path, rules, traces, analyses, ranks, main)
    if len(analyses) > 1:
        from trainscope.analyzers.stragglers import detect_stragglers
        from trainscope.reports.deep import stragglers_dict

        session.stragglers = stragglers_dict(detect_stragglers(traces.traces, analyses, rules))
        from trainscope.analyzers.ranks import align_ranks, ranks_view, summarize
        from trainscope.reports.deep import alignment_dict

        summaries = [summarize(t, a) for t, a in zip(traces.traces, analyses)]  # the Ranks tab: aligned ranks, heat strip
        alignment = align_ranks(summaries, rules)
        if alignment is not None:
            session.stragglers["alignment"] = alignment_dict(alignment)
        session.stragglers["ranks_view"] = ranks_view(summaries, alignment)
    if progress:
        progress("building the timeline", None)
    _ = ranks[main].timeline  # the first screens need it: build it here, off the UI thread
    return session
