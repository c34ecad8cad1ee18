"""What the analyze app shows, computed off the UI thread by :mod:`trainscope.api`: the report (one
analysis per rank, the document) and per-rank view models (:class:`trainscope.api.RankView`:
timeline, full kernel table, memory curves) that the api builds on demand. A rank directory is
mapped by the api's executor like ``trainscope analyze DIR``; a rank's trace is read only when one
of its views is first shown."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any
from typing import overload

from trainscope.api.analysis import analyze
from trainscope.api.analysis import cached_document as lookup
from trainscope.api.report import RankView
from trainscope.api.report import Report

if TYPE_CHECKING:
    from trainscope.analyzers.plan.ledger import Ledger
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.analysis import Analysis
    from trainscope.traces.model import TraceSet

Progress = Callable[[str, "float | None"], None]

__all__ = ["RankView", "Session", "build_session", "cached_document", "session_from"]


class _Ranks:
    """``session.ranks[i]``: rank ``i``'s view models, made by the report when first asked."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def __len__(self) -> int:
        return len(self.report.ranks)

    @overload
    def __getitem__(self, index: int) -> RankView: ...

    @overload
    def __getitem__(self, index: slice) -> list[RankView]: ...

    def __getitem__(self, index: int | slice) -> RankView | list[RankView]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self.report.rank_view(index % len(self))

    def __iter__(self) -> Iterator[RankView]:
        return (self[i] for i in range(len(self)))


@dataclass
class Session:
    """The app's state: the :class:`trainscope.api.Report` (what ``trainscope analyze`` reports) and
    a :class:`trainscope.api.RankView` per rank for the screens."""

    report: Report
    decorate: Callable[[dict[str, Any]], dict[str, Any]] | None = (
        None  # optional sections a caller adds to the document
    )
    ranks: _Ranks = field(init=False)

    def __post_init__(self) -> None:
        self.ranks = _Ranks(self.report)

    @property
    def path(self) -> str:
        return self.report.source

    @property
    def rules(self) -> Rules:
        return self.report.rules

    @property
    def traces(self) -> TraceSet:
        """The traces read in this process (none for a rank directory mapped in worker processes:
        use ``ranks[i].trace``, which reads one when needed)."""
        return self.report.traces

    @property
    def analyses(self) -> list[Analysis]:
        return self.report.ranks

    @property
    def main_rank(self) -> int:  # index of the rank the report leads with (the rank story's headline rank)
        return self.report.main_index

    @property
    def stragglers(self) -> dict[str, Any] | None:
        return self.report.stragglers

    @property
    def deep(self) -> dict[str, Any] | None:
        return self.report.deep

    @deep.setter
    def deep(self, value: dict[str, Any] | None) -> None:
        self.report = self.report.with_deep(value)  # a report is never changed: this session's is a new one

    def document(self) -> dict[str, Any]:
        """The same document ``--report``/``--format json`` produce."""
        doc = self.report.to_dict()
        return self.decorate(doc) if self.decorate else doc


def session_from(report: Report, progress: Progress | None = None) -> Session:
    """The app's session over an analyzed report; builds the main rank's timeline (the first
    screens need it) here, off the UI thread."""
    session = Session(report)
    if progress:
        progress("building the timeline", None)
    _ = session.ranks[report.main_index].timeline
    return session


def build_session(
    path: str,
    traces: TraceSet | None,
    rules: Rules,
    peak_tflops: float | None = None,
    progress: Progress | None = None,
    step_range: str | None = None,
    ledger: Ledger | None = None,
    jobs: int | None = None,
    dask: Any = None,
    peak_bandwidth: float | None = None,
    cache: bool = False,
    model: str | None = None,
) -> Session:
    """:func:`trainscope.api.analyze` on ``traces`` (read from ``path`` when None: a rank directory
    is mapped in ``jobs`` worker processes or on ``dask``, as the command line does), as a session;
    ``cache``: through the analysis cache — a file read as its columns (the trace cache), the
    document stored for :func:`cached_document` (the next look opens on it) — analyzed in full
    either way. ``model``: the ``--model`` spec (the planned ledger, and the cache's key); ``ledger``
    the ledger itself (for a caller that has no spec). Raises :class:`trainscope.api.BadInput`."""
    report = analyze(
        traces if traces is not None else path,
        rules=rules,
        peak_tflops=peak_tflops,
        peak_bandwidth=peak_bandwidth,
        step_range=step_range,
        model=model,
        progress=progress,
        source=path,
        jobs=jobs,
        dask=dask,
        cache=cache,
        trace_cache=cache,
    )
    if not isinstance(report, Report):  # a CachedReport: the session needs the whole analysis
        report = report.full()
    if ledger is not None or model is None:
        report = replace(report, ledger=ledger)
    return session_from(report, progress)


def cached_document(
    path: str,
    rules: Rules,
    peak_tflops: float | None = None,
    step_range: str | None = None,
    peak_bandwidth: float | None = None,
    model: str | None = None,
    cache: bool = True,
) -> dict[str, Any] | None:
    """The document :func:`build_session` with these options will hold, read from the analysis
    cache without analyzing (what an earlier session or ``trainscope analyze`` stored); None when
    it is not there, or ``cache`` is off (``--no-cache``, ``TRAINSCOPE_NO_CACHE``). The app shows
    its first screen, the Overview, from it while the session loads."""
    if not cache:
        return None
    return lookup(
        path,
        rules=rules,
        peak_tflops=peak_tflops,
        peak_bandwidth=peak_bandwidth,
        step_range=step_range,
        model=model,
        source=path,
    )
