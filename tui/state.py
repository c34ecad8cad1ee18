"""What the analyze app shows, computed off the UI thread by :mod:`trainscope.api`: the report (traces,
one analysis per rank, the document), and per-rank views (timeline model, full kernel table) built on demand."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Callable

from trainscope import api
from trainscope.analyzers import intervals as iv
from trainscope.analyzers.analysis import Analysis
from trainscope.analyzers.kernels import KernelSummary, kernel_classes, kernel_summary
from trainscope.analyzers.memory_usage import MemoryCurve, memory_curves
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.timeline import TimelineModel
from trainscope.api import Report
from trainscope.reports.document import analysis_dict
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
    """The app's state: the :class:`trainscope.api.Report` (what ``trainscope analyze`` reports) and
    a :class:`RankView` per rank for the screens."""

    report: Report
    ranks: list[RankView] = field(default_factory=list)
    decorate: Callable[[dict], dict] | None = None  # optional sections a caller adds to the document

    @property
    def path(self) -> str:
        return self.report.source

    @property
    def rules(self) -> Rules:
        return self.report.rules

    @property
    def traces(self) -> TraceSet:
        return self.report.traces

    @property
    def analyses(self) -> list[Analysis]:
        return self.report.ranks

    @property
    def main_rank(self) -> int:  # index of the rank the report leads with (the slowest)
        return self.report.main_index

    @property
    def stragglers(self) -> dict | None:
        return self.report.stragglers

    @property
    def deep(self) -> dict | None:
        return self.report.deep

    @deep.setter
    def deep(self, value: dict | None) -> None:
        self.report.deep = value

    def document(self) -> dict:
        """The same document ``--report``/``--format json`` produce."""
        doc = self.report.to_dict()
        return self.decorate(doc) if self.decorate else doc


def session_from(report: Report, progress: Progress | None = None) -> Session:
    """The app's session over an analyzed report; builds the main rank's timeline (the first
    screens need it) here, off the UI thread."""
    ranks = [RankView(t, a, report.rules) for t, a in zip(report.traces.traces, report.ranks)]
    session = Session(report, ranks)
    if progress:
        progress("building the timeline", None)
    _ = ranks[report.main_index].timeline
    return session


def build_session(path: str, traces: TraceSet | None, rules: Rules, peak_tflops: float | None = None,
                  progress: Progress | None = None, step_range: str | None = None, ledger=None) -> Session:
    """:func:`trainscope.api.analyze` on ``traces`` (read from ``path`` when None), as a session.
    Raises :class:`trainscope.api.BadInput`."""
    report = api.analyze(traces if traces is not None else path, rules=rules, peak_tflops=peak_tflops,
                         step_range=step_range, progress=progress, source=path)
    report.ledger = ledger
    return session_from(report, progress)
