"""trainscope from Python: the one application layer every front end (the CLI, the terminal apps,
``watch``, notebooks, training scripts) goes through.

    >>> import trainscope.api as ts
    >>> r = ts.analyze("run.pt.trace.json.gz")
    >>> r.verdict.axis, r.verdict.confidence
    ('data', 0.9)
    >>> print(r.to_text())

Every function reads and analyzes with the same pipeline as ``trainscope analyze`` (open the
traces → one analysis per rank → stragglers → optional HTA deep analysis → the report document)
and raises one exception family, :class:`TrainscopeError`; :func:`describe` maps any exception to
the one-line message and exit code the command line prints (the only place that mapping lives).
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

if TYPE_CHECKING:  # the heavy modules load on first use, so `import trainscope.api` stays cheap
    from trainscope.analyzers.analysis import Analysis
    from trainscope.analyzers.breakdown import Breakdown, StepBreakdown
    from trainscope.analyzers.diff import GateResult, RunDiff
    from trainscope.analyzers.kernels import KernelSummary
    from trainscope.analyzers.live import LiveStatus
    from trainscope.analyzers.memory import DeviceMemory
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.verdict import Finding, Verdict
    from trainscope.traces.model import Trace, TraceSet
    from trainscope.traces.samples import Snapshot

__all__ = [
    # analysis
    "analyze", "Report", "RankView", "run_deep", "check_deep_available", "model_ledger", "with_ledger", "rules_from",
    "whatif", "whatif_levers",
    # comparison, planning, memory, live
    "diff", "gate", "DiffResult", "plan", "plan_config", "plan_ledger", "normalize_plan", "resolve_device", "PlanResult", "memory", "memory_peaks", "MemoryReport",
    "watch", "Watch", "LiveSample", "live_analyzer", "open_recording",
    # where users are
    "on_trace_ready",
    # errors and exit codes
    "TrainscopeError", "BadInput", "DeepUnavailable", "Regression", "describe",
    "EXIT_OK", "EXIT_INTERNAL", "EXIT_BAD_INPUT", "EXIT_REGRESSION", "EXIT_INTERRUPTED",
]

Progress = Callable[[str, "float | None"], None]

# --- errors: the one hierarchy, and the one place it becomes a message and an exit code -----------

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130



def _shown(doc: dict) -> dict:
    """The document with every trace-derived name made visible (control and escape bytes, lone
    surrogates spelled out): what text and Markdown renderings print."""
    from trainscope.reports.safe_text import safe_strings

    return safe_strings(doc)

class TrainscopeError(Exception):
    """Every error trainscope raises on purpose. ``str(e)`` is one line; ``exit_code`` is what the
    command line exits with."""

    exit_code = EXIT_INTERNAL


class BadInput(TrainscopeError, ValueError):
    """The input cannot be used: unreadable or malformed trace, unknown threshold or GPU, a
    ``step_range`` that names no range, a gate metric one run cannot measure. Exit 2."""

    exit_code = EXIT_BAD_INPUT


class DeepUnavailable(BadInput):
    """``deep=True`` needs Holistic Trace Analysis, which is not installed. Exit 2."""


class Regression(TrainscopeError):
    """``diff(..., fail_if_slower=…)``: the gate's metric got worse by more than allowed. Exit 3.
    Raised only by :meth:`DiffResult.check`; ``diff`` itself returns the result."""

    exit_code = EXIT_REGRESSION

    def __init__(self, message: str, result: "DiffResult | None" = None) -> None:
        super().__init__(message)
        self.result = result


def describe(exc: BaseException) -> tuple[str, int]:
    """The one-line message (without the ``trainscope: `` prefix) and exit code for any exception."""
    from trainscope.collectors.errors import TraceError

    if isinstance(exc, TrainscopeError):
        return str(exc), exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", EXIT_INTERRUPTED
    if isinstance(exc, TraceError):
        return str(exc), EXIT_BAD_INPUT
    if isinstance(exc, MemoryError):
        return "out of memory", EXIT_INTERNAL
    return (f"internal error: {type(exc).__name__}: {exc} "
            "(set TRAINSCOPE_DEBUG=1 for the traceback, and please report it)"), EXIT_INTERNAL


@contextlib.contextmanager
def _bad_input(path: str | None = None, what: str | None = None) -> Iterator[None]:
    """Turn the readers' and analyzers' input errors into :class:`BadInput` (one line each)."""
    from trainscope.analyzers.range_steps import StepRangeError
    from trainscope.collectors.errors import TraceError

    prefix = f"{path}: " if path else ""
    try:
        yield
    except TrainscopeError:
        raise
    except StepRangeError as e:
        raise BadInput(f"{prefix}--step-range: {e}") from None
    except (TraceError, OSError, RecursionError, MemoryError, EOFError, zlib.error) as e:
        # The readers' one mapping of what an input can raise (trainscope.common.input_problem).
        from trainscope.common import input_problem

        raise BadInput(input_problem(e, path or "input")) from None
    except ValueError as e:
        if what is None:
            raise
        raise BadInput(f"{what}: {e}") from None


def _rules(rules: "Rules | None", thresholds: Mapping[str, float] | None) -> "Rules":
    """``rules`` as given, or the defaults with ``thresholds`` ({name: value}) overridden."""
    from trainscope.analyzers.rules import Rules

    if rules is not None:
        if thresholds:
            raise BadInput("give rules or thresholds, not both")
        return rules
    thresholds = dict(thresholds or {})
    unknown = sorted(set(thresholds) - set(Rules.names()))
    if unknown:
        raise BadInput(f"unknown threshold {unknown[0]!r} (see `trainscope thresholds`)")
    return Rules({k: float(v) for k, v in thresholds.items()})


def rules_from(thresholds: Mapping[str, float] | None = None) -> "Rules":
    """The threshold table (``analyzers.rules.Rules``: every threshold with its value, unit and
    source) with ``thresholds`` ({name: value}) overriding the defaults. Raises :class:`BadInput`
    for a name that is not a threshold."""
    return _rules(None, thresholds)


# --- analyze --------------------------------------------------------------------------------------


@dataclass
class Report:
    """One analyzed run: a trace file, or a directory of per-rank traces.

    The typed parts are those of the *main* rank (the slowest one, which sets the pace of
    synchronous training): ``verdict``, ``findings``, ``breakdown``, ``kernels``, ``steps``,
    ``memory``, ``recommendations``. ``ranks`` holds every rank's analysis; ``stragglers`` and
    ``deep`` are the report's sections for rank directories and ``deep=True``.
    ``to_dict()`` is the versioned JSON document (``trainscope analyze --format json``).
    ``trace(i)`` is rank ``i``'s trace — for a rank directory mapped in worker processes, read again
    on first use (the parent keeps only ``summaries``) — and ``rank_view(i)`` its view models."""

    source: str
    rules: "Rules" = field(repr=False)
    traces: "TraceSet" = field(repr=False)
    ranks: "list[Analysis]" = field(repr=False)
    main_index: int = 0
    stragglers: dict | None = field(default=None, repr=False)
    deep: dict | None = field(default=None, repr=False)
    ledger: Any = field(default=None, repr=False)  # analyzers.ledger.Ledger, with model=…
    straggler_analysis: Any = field(default=None, repr=False)  # analyzers.stragglers result, several ranks
    # A rank directory mapped by the executor: each rank's summary; ``traces`` then holds no trace
    # (only the read warnings) and :meth:`trace` reads a rank's file again when first asked.
    summaries: "list | None" = field(default=None, repr=False)
    _loaded: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _views: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False, compare=False)  # reading traces
    _views_lock: Any = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    # the main rank, typed
    @property
    def main(self) -> "Analysis":
        return self.ranks[self.main_index]

    @property
    def verdict(self) -> "Verdict":
        return self.main.verdict

    @property
    def findings(self) -> "list[Finding]":
        return self.main.findings

    @property
    def breakdown(self) -> "Breakdown":
        return self.main.breakdown

    @property
    def steps(self) -> "list[StepBreakdown]":
        return self.main.breakdown.steps

    @property
    def kernels(self) -> "KernelSummary":
        return self.main.kernels

    @property
    def memory(self) -> "list[DeviceMemory]":
        return self.main.memory

    @property
    def recommendations(self) -> list:
        return self.main.recommendations

    @property
    def warnings(self) -> list[str]:
        return list(self.traces.warnings) + list(self.main.warnings)

    @property
    def main_trace(self) -> "Trace":
        return self.trace(self.main_index)

    def trace(self, index: int) -> "Trace":
        """Rank ``index``'s trace: the one read for the analysis, or — for a rank directory mapped in
        worker processes, which keep only summaries — that rank's file read again in this process,
        once, on first use. Raises :class:`BadInput` when the file cannot be read any more."""
        if len(self.traces.traces) == len(self.ranks):
            return self.traces.traces[index]
        with self._lock:
            if index not in self._loaded:
                self._loaded[index] = _read_rank(self.ranks[index])
            return self._loaded[index]

    def latest_arrivals(self) -> list:
        """Per rank (in ``ranks`` order), the collective it reached furthest behind the first rank
        (:class:`trainscope.analyzers.late_collectives.LateCollective`, absolute ns on the rank's
        own clock), None for a rank with nothing matched; computed once. The app's jump from a
        rank to its late collective."""
        with self._views_lock:
            late = self._views.get("latest_arrivals")
        if late is None:
            from trainscope.analyzers.late_collectives import latest_arrivals
            from trainscope.analyzers.ranks import rank_collectives

            if self.summaries is not None:  # the map already extracted them: no trace is read again
                colls = [s.collectives for s in self.summaries]
            else:
                colls = [rank_collectives(self.trace(i)) for i in range(len(self.ranks))]
            late = latest_arrivals(colls, self.rules)
            with self._views_lock:
                self._views["latest_arrivals"] = late
        return late

    def rank_view(self, index: int | None = None) -> "RankView":
        """The view models of one rank (default: the main rank) for the terminal app: its document,
        timeline, full kernel table and memory curves, each built once when first asked."""
        index = self.main_index if index is None else index
        with self._views_lock:  # not the reading lock: the UI thread asks while a worker reads a trace
            if index not in self._views:
                self._views[index] = RankView(self, index)
            return self._views[index]

    # renderings: all read the one document, so they cannot disagree
    def to_dict(self) -> dict:
        from trainscope.reports.document import build_document

        doc = build_document(self.source, self.ranks, self.rules, self.traces.warnings, deep=self.deep,
                             stragglers=self.stragglers)
        return with_ledger(doc, self.ledger)

    def to_json(self) -> str:
        from trainscope.common import to_json

        return to_json(self.to_dict())

    def to_text(self, color: bool = False) -> str:
        from trainscope.reports.text import render_text

        return render_text(_shown(self.to_dict()), color=color)

    def to_markdown(self) -> str:
        from trainscope.reports.markdown import render_markdown

        return render_markdown(_shown(self.to_dict()))

    def to_html(self) -> str:
        """A self-contained HTML page: verdict, evidence, fixes, step breakdown chart, the median
        step's timeline and the kernel table (inline SVG, no scripts, no external files)."""
        from trainscope.reports.html import render_html

        return render_html(self.to_dict(), self.main_trace, self.main)

    def save(self, path: str) -> str:
        """Write the report; the format follows the suffix (.html/.htm, .json, else Markdown)."""
        from trainscope.common import write_atomic

        write_atomic(path, self.render_for(path))
        return path

    def render_for(self, path: str) -> str:
        low = path.lower()
        if low.endswith((".html", ".htm")):
            return self.to_html()
        if low.endswith(".json"):
            return self.to_json()
        return self.to_markdown()

    def verdict_line(self) -> str:
        """One line: the headline, confidence and the step time (what ``on_trace_ready`` prints)."""
        from trainscope.reports.document import headline

        doc = self.to_dict()
        v = doc["verdict"]
        p50 = doc["breakdown"]["step_time_ms"]["p50"]
        conf = f" (confidence {v['confidence']:.2f})" if v["axis"] not in ("insufficient_evidence",) else ""
        steps = f" · step p50 {p50:g} ms" if p50 else ""
        return f"trainscope: {headline(doc)}{conf}{steps} — {os.path.basename(self.source.rstrip('/'))}"

    # Jupyter
    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _repr_html_(self) -> str:
        from trainscope.reports.html import render_html_cell

        return render_html_cell(self.to_dict(), self.main_trace, self.main)

    def __str__(self) -> str:
        return self.to_text()


def _read_rank(a: "Analysis") -> "Trace":
    """One rank's trace read again from its file (the rank a file holds, when it holds several)."""
    from trainscope.collectors.inputs import open_any

    with _bad_input(a.source):
        loaded = open_any(a.source)
    trace = next((t for t in loaded if t.rank == a.rank), loaded[0])
    trace.rank = a.rank
    return trace


class RankView:
    """One rank as the terminal app shows it: the analysis, its document, and the expensive view
    models (timeline, every kernel in the steps, memory curves), each built once when first asked.
    The trace is read on first use (a rank of a directory mapped in worker processes)."""

    def __init__(self, report: Report, index: int) -> None:
        self.report, self.index = report, index
        self.analysis: "Analysis" = report.ranks[index]
        self.rules: "Rules" = report.rules

    @property
    def trace(self) -> "Trace":
        return self.report.trace(self.index)

    @functools.cached_property
    def doc(self) -> dict:
        from trainscope.reports.document import analysis_dict

        doc = analysis_dict(self.analysis, self.rules)
        doc["input"] = {"path": self.analysis.source, "format": self.analysis.source_format, "traces": 1}
        return doc

    @functools.cached_property
    def classes(self):
        from trainscope.analyzers.kernels import kernel_classes

        return kernel_classes(self.trace)

    @functools.cached_property
    def timeline(self):
        """The :class:`~trainscope.analyzers.timeline.TimelineModel` of this rank (lanes, steps, matches)."""
        from trainscope.analyzers.timeline import TimelineModel

        a = self.analysis
        return TimelineModel(self.trace, a.segmentation, a.device, self.classes[0])

    @functools.cached_property
    def all_kernels(self) -> "KernelSummary":
        """Every kernel name inside the steps (the analysis keeps only the top ones)."""
        from trainscope.analyzers import intervals as iv
        from trainscope.analyzers.kernels import kernel_summary

        seg = self.analysis.segmentation
        mask = iv.contains((seg.starts, seg.ends), self.trace.kernels.ts)
        return kernel_summary(self.trace, mask, self.analysis.device, top_n=1 << 30, classes=self.classes)

    @functools.cached_property
    def memory(self) -> list:
        """Allocated memory over time per device (``MemoryCurve``), from the trace's memory events."""
        from trainscope.analyzers.memory_usage import memory_curves

        return memory_curves(self.trace)

    @property
    def label(self) -> str:
        a = self.analysis
        name = os.path.basename(a.source) if a.source else "trace"
        return f"rank {a.rank}" if a.rank is not None else name


def whatif_levers(analysis: "Analysis") -> dict:
    """Every recommendation of an analysis that has a projection, by id: the time its fix removes
    (``analyzers.whatif.Lever``)."""
    from trainscope.analyzers.whatif import levers

    return levers(analysis)


def whatif(analysis: "Analysis", chosen: "list[str] | tuple[str, ...]"):
    """The projected mean step time with the fixes ``chosen`` (recommendation ids) all applied
    (``analyzers.whatif.Projection``; upper bounds, as the report's)."""
    from trainscope.analyzers.whatif import project

    return project(analysis, chosen)


def _open(path: str, progress: Progress | None) -> "TraceSet":
    from trainscope.collectors import open_traces

    with _bad_input(path):
        return open_traces(path, progress or _silent)


def _silent(stage: str, fraction: float | None) -> None:
    pass


def check_deep_available() -> dict[str, str]:
    """HTA's and pandas' versions; raises :class:`DeepUnavailable` with the install line when missing."""
    from trainscope.analyzers.deep import HTAUnavailable, hta_versions

    try:
        return hta_versions()
    except HTAUnavailable as e:
        raise DeepUnavailable(str(e)) from None


def run_deep(report: Report, step: str | None = None, progress: Progress | None = None) -> dict:
    """Holistic Trace Analysis on the report's main rank (critical path of one step, launch
    statistics); sets and returns ``report.deep``. Needs the ``hta`` extra."""
    from trainscope.analyzers.deep import HTAUnavailable, deep_analysis
    from trainscope.reports.deep import deep_dict

    try:
        report.deep = deep_dict(deep_analysis(report.main_trace, report.main, report.rules, step, progress))
    except HTAUnavailable as e:
        raise DeepUnavailable(str(e)) from None
    return report.deep


def analyze(path_or_traces: "str | os.PathLike | TraceSet | Trace", *, step_range: str | None = None,
            rules: "Rules | None" = None, thresholds: Mapping[str, float] | None = None,
            peak_tflops: float | None = None, peak_bandwidth: float | None = None, deep: bool = False, deep_step: str | None = None,
            model: "str | Any | None" = None, progress: Progress | None = None,
            source: str | None = None, jobs: int | None = None, dask: "str | Any | None" = None) -> Report:
    """Diagnose a recorded run: a Kineto trace (.json/.json.gz), a directory (or glob) of per-rank
    traces, an Nsight Systems export (.sqlite; .nsys-rep with nsys on PATH), a ``watch`` recording,
    or an already-read :class:`~trainscope.traces.model.TraceSet` / ``Trace``.

    ``step_range`` names the annotation range that marks a step; ``thresholds`` overrides
    diagnostic thresholds by name (``{"data_wait.high": 25}``) or ``rules`` gives a whole
    :class:`~trainscope.analyzers.rules.Rules`; ``peak_tflops`` and ``peak_bandwidth`` (GB/s) override the device table for MFU and the roofline;
    ``deep`` adds Holistic Trace Analysis (``deep_step``: which step); ``model`` (a spec such as
    ``"params=25.6M,optimizer=momentum,precision=fp32"`` or a ``PlanConfig``) adds the planned
    memory ledger beside the measured peak. ``progress(stage, fraction)`` is called while reading.

    A directory or glob of rank traces is mapped rank by rank (:mod:`trainscope.executor`): in
    ``jobs`` worker processes (default: the cores this process may use; 1: serially), or on the
    Dask cluster whose scheduler is at ``dask`` (an address or a ``distributed.Client``). Only
    per-rank summaries come back; a rank's trace is read again when the report needs it
    (:meth:`Report.trace`: HTML, ``deep``, the app's timeline).
    Raises :class:`BadInput` (and :class:`DeepUnavailable`)."""
    from trainscope.analyzers.analysis import analyze_set, slowest
    from trainscope.traces.model import Trace, TraceSet

    rules = _rules(rules, thresholds)
    if deep_step is not None and not deep:
        raise BadInput("--deep-step needs --deep")
    if jobs is not None and jobs < 1:
        raise BadInput(f"jobs must be at least 1, got {jobs}")
    if deep:
        check_deep_available()  # before the slow part
    planned = model_ledger(model) if model is not None else None
    summaries = None
    if isinstance(path_or_traces, Trace):
        traces = TraceSet([path_or_traces])
        source = source or path_or_traces.source
    elif isinstance(path_or_traces, TraceSet):
        traces = path_or_traces
        source = source or (traces.traces[0].source if traces.traces else "traces")
    else:
        from trainscope.executor import is_rank_set

        path = os.fspath(path_or_traces)
        source = source or path
        if is_rank_set(path):
            summaries, warnings = _map_ranks(path, rules, peak_tflops, peak_bandwidth, step_range, jobs, dask,
                                             progress)
            traces = TraceSet(path, [], warnings)
        else:
            traces = _open(path, progress)
    if summaries is not None:
        analyses = [s.analysis for s in summaries]
    else:
        if progress:
            progress("analyzing", None)
        with _bad_input(source):
            analyses = analyze_set(traces, rules, peak_tflops, step_range, peak_bandwidth)
    main = analyses.index(slowest(analyses)) if len(analyses) > 1 else 0
    report = Report(source, rules, traces, analyses, main, ledger=planned, summaries=summaries)
    if len(analyses) > 1:
        _reduce_ranks(report)
    if deep:
        run_deep(report, deep_step, progress)
    return report


def _map_ranks(path: str, rules: "Rules", peak_tflops: float | None, peak_bandwidth: float | None,
               step_range: str | None, jobs: int | None, dask: Any, progress: Progress | None):
    """The map: every rank file of ``path`` summarized by :mod:`trainscope.executor` → (summaries
    in rank order, one warning per file that could not be read)."""
    # What a worker runs, imported before the pool forks: a child forked while another thread (the
    # app's UI) held the import lock would wait on it forever.
    import trainscope.analyzers.analysis  # noqa: F401
    import trainscope.analyzers.ranks  # noqa: F401
    import trainscope.collectors.inputs  # noqa: F401
    from trainscope.executor import MapOptions, run_rank_set

    options = MapOptions(peak_tflops=peak_tflops, step_range=step_range, peak_bandwidth=peak_bandwidth, rules=rules)
    tick = (lambda done, n: progress(f"ranks {done}/{n}", done / n)) if progress else None
    try:
        rs = run_rank_set(path, options, jobs=jobs, dask=dask, progress=tick)
    except (ValueError, RuntimeError) as e:  # no trace files, a bad --step-range, no Dask, a dead worker
        raise BadInput(f"{path}: {e}") from None
    return rs.summaries, rs.warnings


def _reduce_ranks(report: Report) -> None:
    """The reduce over several ranks: stragglers by step offset, the ranks aligned on the ends of
    their shared collectives, and the many-rank view (sets ``report.stragglers``)."""
    from trainscope.analyzers.ranks import align_ranks, ranks_view, summarize, with_aligned_imbalance
    from trainscope.analyzers.stragglers import stragglers_from
    from trainscope.reports.deep import alignment_dict, stragglers_dict

    rules, analyses = report.rules, report.ranks
    summaries = report.summaries
    if summaries is None:
        summaries = [summarize(t, a) for t, a in zip(report.traces.traces, analyses)]
    report.straggler_analysis = stragglers_from([s.host_collectives for s in summaries], analyses, rules)
    report.stragglers = stragglers_dict(report.straggler_analysis)
    alignment = align_ranks(summaries, rules)
    if alignment is not None:
        report.stragglers["alignment"] = alignment_dict(alignment)
        # Each rank re-judged with the wait the alignment measured inside its collectives: the
        # imbalance sink (and the ranks/imbalance finding) is that measured wait, not an estimate.
        report.ranks[:] = with_aligned_imbalance(summaries, alignment, rules)
    report.stragglers["ranks_view"] = ranks_view(summaries, alignment)


def with_ledger(doc: dict, ledger) -> dict:
    """The analysis document with the planned memory ledger (``model_ledger``) beside the measured
    peak of the main device; the document unchanged without a ledger."""
    if ledger is None:
        return doc
    from trainscope.reports.plan import ledger_vs_measured

    mem = next((m for m in doc["memory"] if m["device"] == doc["device"]["id"]),
               doc["memory"][0] if doc["memory"] else None)
    doc["ledger"] = ledger_vs_measured(ledger, mem["peak_allocated_bytes"] if mem else None,
                                       mem["capacity_bytes"] if mem else None, mem["basis"] if mem else None)
    return doc


def model_ledger(model):
    """The planned memory ledger for ``analyze(model=…)``: a spec string or a ``PlanConfig``."""
    from trainscope.analyzers.ledger import PlanConfig, ledger
    from trainscope.modelspec import parse_model_spec

    try:
        return ledger(model if isinstance(model, PlanConfig) else parse_model_spec(str(model)))
    except ValueError as e:
        msg = str(e)
        raise BadInput(msg if msg.startswith("--model") else f"--model: {msg}") from None


# --- diff -----------------------------------------------------------------------------------------


@dataclass
class DiffResult:
    """What a change did: ``diff`` (analyzers.diff.RunDiff: step times, shares, kernels, memory,
    the fate of BEFORE's fixes, comparability) and, when a gate was asked for, ``gate``."""

    diff: "RunDiff"
    gate: "GateResult | None" = None

    @property
    def regressed(self) -> bool:
        return bool(self.gate is not None and self.gate.regressed)

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressed else EXIT_OK

    def gate_line(self) -> str:
        """The gate's one line (with the comparability caveat), as printed on stderr."""
        if self.gate is None:
            return ""
        d = self.diff
        caveat = ""
        if not d.comparable:
            caveat = " [runs not comparable: " + ", ".join(c.check for c in d.comparability if c.status == "differ") + "]"
        return f"{self.gate.reason}{caveat}"

    def check(self) -> "DiffResult":
        """Raise :class:`Regression` when the gate failed; return self otherwise."""
        if self.regressed:
            raise Regression(self.gate_line(), self)
        return self

    def to_dict(self) -> dict:
        from trainscope.reports.diff_document import build_diff_document

        return build_diff_document(self.diff, self.gate)

    def to_text(self, color: bool = False) -> str:
        from trainscope.reports.diff_text import render_diff_text

        return render_diff_text(_shown(self.to_dict()), color=color)

    def to_markdown(self) -> str:
        from trainscope.reports.diff_markdown import render_diff_markdown

        return render_diff_markdown(_shown(self.to_dict()))

    def _repr_markdown_(self) -> str:
        return self.to_markdown()


def gate(result: "DiffResult | RunDiff", metric: str = "step_p50", fail_if_slower: float = 0.0) -> DiffResult:
    """Check (or re-check) the gate on an existing comparison. Raises :class:`BadInput` when the
    metric cannot be measured in one of the runs."""
    from trainscope.analyzers.diff import GATE_METRICS, GateUnavailable, check_gate

    d = result.diff if isinstance(result, DiffResult) else result
    if metric not in GATE_METRICS:
        raise BadInput(f"unknown metric {metric!r} (one of: {', '.join(GATE_METRICS)})")
    try:
        return DiffResult(d, check_gate(d, metric, fail_if_slower))
    except GateUnavailable as e:
        raise BadInput(str(e)) from None


def diff(before: "str | os.PathLike", after: "str | os.PathLike", *, rules: "Rules | None" = None,
         thresholds: Mapping[str, float] | None = None, metric: str = "step_p50",
         fail_if_slower: float | None = None, progress: Progress | None = None) -> DiffResult:
    """Analyze BEFORE and AFTER and compare them. With ``fail_if_slower`` (relative % for times and
    memory, percentage points for shares) the gate on ``metric`` is checked: see
    :attr:`DiffResult.regressed` and :meth:`DiffResult.check`. Raises :class:`BadInput`."""
    from trainscope.analyzers.analysis import analyze_set
    from trainscope.analyzers.diff import GATE_METRICS, diff_runs, summarize_run

    rules = _rules(rules, thresholds)
    if metric not in GATE_METRICS:
        raise BadInput(f"unknown metric {metric!r} (one of: {', '.join(GATE_METRICS)})")
    progress = progress or _silent
    runs = []
    for i, (label, path) in enumerate((("BEFORE", os.fspath(before)), ("AFTER", os.fspath(after)))):
        def side(stage: str, fraction: float | None, i: int = i, label: str = label) -> None:
            progress(f"{label.lower()}: {stage}", None if fraction is None else (i + fraction) / 2)

        try:
            traces = _open(path, side)
            side("analyzing", None)
            with _bad_input(path):
                runs.append(summarize_run(path, traces, analyze_set(traces, rules)))
        except BadInput as e:
            raise BadInput(f"{label}: {e}") from None
    d = diff_runs(runs[0], runs[1], rules)
    return gate(d, metric, fail_if_slower) if fail_if_slower is not None else DiffResult(d)


# --- plan -----------------------------------------------------------------------------------------


@dataclass
class PlanResult:
    """The training-memory ledger of a model and setup against a device, with the cheapest changes
    that make it fit (``options``)."""

    ledger: Any  # analyzers.ledger.Ledger
    device: Any  # analyzers.memory_devices.GpuMemory
    fit: Any  # analyzers.ledger.Fit
    options: list = field(default_factory=list)  # analyzers.ledger.FitOption
    threshold_pct: float = 90.0
    config: Any = None  # analyzers.ledger.PlanConfig as given

    @property
    def fits(self) -> bool:
        return bool(self.fit.fits)

    def to_dict(self) -> dict:
        from trainscope.reports.plan import build_plan_document

        return build_plan_document(self.ledger, self.device, self.fit, self.options)

    def to_text(self) -> str:
        from trainscope.reports.plan import render_plan_text

        return render_plan_text(_shown(self.to_dict()))

    def to_markdown(self) -> str:
        from trainscope.reports.plan import render_plan_markdown

        return render_plan_markdown(_shown(self.to_dict()))

    def _repr_markdown_(self) -> str:
        return self.to_markdown()


def plan_config(model: "str | Mapping[str, Any] | Any" = None, **fields: Any):
    """A ``PlanConfig`` from a spec string (``"params=1.5B,optimizer=adam"``), a mapping or keyword
    fields (``params=1.5e9, optimizer="adam"``). Raises :class:`BadInput`."""
    from trainscope.analyzers.ledger import PlanConfig
    from trainscope.modelspec import config_from, parse_model_spec

    with _bad_input(what="plan"):
        if isinstance(model, PlanConfig) and not fields:
            return model
        if isinstance(model, str):
            if fields:
                raise ValueError("give a spec string or keyword fields, not both")
            return parse_model_spec(model)
        values = dict(model or {}, **fields)
        no_dropout = bool(values.pop("no_dropout", False))
        try:
            return config_from(values, no_dropout)
        except TypeError as e:
            raise ValueError(str(e)) from None


def normalize_plan(config):
    """A ``PlanConfig`` with canonical keys; :class:`BadInput` (a ``ValueError``) with the user-facing
    message for anything inconsistent (an unknown optimizer, a checkpoint interval the model cannot take)."""
    from trainscope.analyzers.ledger import normalize

    try:
        return normalize(config)
    except BadInput:
        raise
    except ValueError as e:
        raise BadInput(str(e)) from None


def plan_ledger(config):
    """The memory ledger (``analyzers.ledger.Ledger``) of one ``PlanConfig``: what ``plan`` computes
    before fitting it to a device. Raises :class:`BadInput` (a ``ValueError``) as :func:`normalize_plan`."""
    from trainscope.analyzers.ledger import ledger

    try:
        return ledger(config)
    except BadInput:
        raise
    except ValueError as e:
        raise BadInput(str(e)) from None


def resolve_device(gpu: str | None = None, gpu_memory: str | None = None):
    """A device by key (``h100-80``; see ``trainscope plan --help``) or by size (``24GiB``)."""
    from trainscope.modelspec import resolve_gpu

    with _bad_input(what="plan"):
        return resolve_gpu(gpu, gpu_memory)


def plan(model: "str | Mapping[str, Any] | Any" = None, *, gpu: str | None = "h100-80",
         gpu_memory: str | None = None, device: Any = None, options: int = 6, threshold_pct: float | None = None,
         **fields: Any) -> PlanResult:
    """Will this training setup fit the GPU? ``plan(params="1.5B", optimizer="adam", precision="fp32",
    gpu="v100-32")`` or ``plan("params=1.5B,optimizer=adam")``. ``device`` (a ``GpuMemory``) instead
    of ``gpu``/``gpu_memory``; ``threshold_pct``: the share of device memory that counts as full
    (default: the ``memory.capacity`` threshold). Raises :class:`BadInput`."""
    from trainscope.analyzers.ledger import fit, fit_options, ledger
    from trainscope.analyzers.rules import Rules
    from trainscope.modelspec import MODEL_FIELDS

    types = {dest: typ for _, dest, typ, _ in MODEL_FIELDS}
    with _bad_input(what="plan"):
        conv = {}
        for k, v in fields.items():  # "1.5B" and friends, as the flags take them
            conv[k] = types[k](v) if isinstance(v, str) and k in types and types[k] is not str else v
    cfg = plan_config(model, **conv)
    dev = device if device is not None else resolve_device(gpu, gpu_memory)
    with _bad_input(what="plan"):
        lg = ledger(cfg)
    threshold = Rules().value("memory.capacity") if threshold_pct is None else threshold_pct
    f = fit(lg, dev.name, dev.capacity_bytes, threshold)
    opts = fit_options(lg.config, dev.name, dev.capacity_bytes, threshold, limit=max(0, options)) if options else []
    return PlanResult(lg, dev, f, opts, threshold, cfg)


# --- memory ---------------------------------------------------------------------------------------


@dataclass
class MemoryReport:
    """Peak, fragmentation and what was live, from a CUDA memory snapshot or a memory timeline.
    ``devices`` (snapshots): per-device ``DeviceSnapshotMemory``; ``peak`` (timelines)."""

    path: str
    kind: str  # "cuda_snapshot" | "memory_timeline_raw" | "memory_timeline_coalesced"
    document: dict = field(repr=False)
    devices: list | None = field(default=None, repr=False)
    peak: Any = field(default=None, repr=False)
    findings: list = field(default_factory=list)
    snapshot: Any = field(default=None, repr=False)  # traces.memory_snapshot.Snapshot, snapshots only

    def to_dict(self) -> dict:
        return self.document

    def peaks(self) -> list:
        """Per device of a snapshot: the peak view the memory app shows (see :func:`memory_peaks`),
        from the snapshot this report already read; empty for a memory timeline."""
        from trainscope.analyzers.memory_peak import memory_peak

        if self.snapshot is None or not self.devices:
            return []
        return [memory_peak(self.snapshot, m) for m in self.devices]

    def to_text(self) -> str:
        from trainscope.reports.memory import render_memory_text

        return render_memory_text(_shown(self.document))

    def to_markdown(self) -> str:
        from trainscope.reports.memory import render_memory_markdown

        return render_memory_markdown(_shown(self.document))

    def _repr_markdown_(self) -> str:
        return self.to_markdown()


def memory(path: "str | os.PathLike", *, gpu: str | None = None, gpu_memory: str | None = None, top: int = 10,
           rules: "Rules | None" = None, thresholds: Mapping[str, float] | None = None,
           progress: Progress | None = None) -> MemoryReport:
    """Read a CUDA memory snapshot (restricted unpickler: plain data only) or a memory timeline
    and report peak allocated versus reserved memory, what was live at the peak, and capacity
    findings against ``gpu`` / ``gpu_memory``. Raises :class:`BadInput`."""
    import gzip

    from trainscope.analyzers.snapshot_memory import snapshot_findings, snapshot_memory
    from trainscope.analyzers.timeline_memory import timeline_peak
    from trainscope.collectors.errors import TraceError
    from trainscope.collectors.memory_timeline import load_memory_timeline
    from trainscope.collectors.readers import sniff
    from trainscope.collectors.snapshot import is_pickle, load_snapshot
    from trainscope.reports.memory import build_memory_document

    rules = _rules(rules, thresholds)
    progress = progress or _silent
    dev = None
    if gpu or gpu_memory:
        try:
            dev = resolve_device(gpu, gpu_memory)
        except BadInput as e:
            raise BadInput(f"memory: {str(e).removeprefix('plan: ')}") from None
    capacity = {"name": dev.name, "capacity_bytes": dev.capacity_bytes, "source": dev.source} if dev else None
    path = os.fspath(path)
    with _bad_input(path):
        if not os.path.isfile(path):
            raise TraceError(path, "no such file" if not os.path.exists(path) else "not a file")
        head = sniff(path)
        if head[:2] == b"\x1f\x8b":  # a gzipped snapshot is still a pickle
            try:
                with gzip.open(path, "rb") as f:
                    head = f.read(16)
            except (OSError, EOFError):
                pass
        progress("reading", None)
        if is_pickle(head):
            snap = load_snapshot(path)
            progress("analyzing", None)
            devices = snapshot_memory(snap, top=max(0, top), oom_slack_pct=rules.value("memory.oom_slack"))
            found = snapshot_findings(devices, dev.capacity_bytes if dev else None, rules)
            doc = build_memory_document(path, "cuda_snapshot", devices, None, found, capacity, snap.warnings)
            return MemoryReport(path, "cuda_snapshot", doc, devices=devices, findings=found, snapshot=snap)
        tl = load_memory_timeline(path)
        peak = timeline_peak(tl)
        kind = f"memory_timeline_{tl.layout}"
        return MemoryReport(path, kind, build_memory_document(path, kind, None, peak, [], capacity, []), peak=peak)


def memory_peaks(path: "str | os.PathLike") -> list:
    """Per device of a CUDA memory snapshot: allocated bytes over the recorded events, the peak and
    every allocation live at it with its full stack (:class:`~trainscope.analyzers.memory_peak.MemoryPeak`,
    what ``trainscope memory``'s app shows). Raises :class:`BadInput`."""
    from trainscope.analyzers.memory_peak import memory_peak
    from trainscope.analyzers.snapshot_memory import snapshot_memory
    from trainscope.collectors.snapshot import load_snapshot

    path = os.fspath(path)
    with _bad_input(path):
        snap = load_snapshot(path)
        return [memory_peak(snap, m) for m in snapshot_memory(snap, top=0)]


# --- watch ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveSample:
    """One interval of a live watch: the analyzer's status (verdict over the window) and the sample."""

    status: "LiveStatus"
    snapshot: "Snapshot"

    @property
    def verdict(self) -> "Verdict":
        return self.status.verdict

    def line(self) -> str:
        from trainscope.reports.live import status_line

        return status_line(self.status, self.snapshot)

    def to_dict(self) -> dict:
        from trainscope.reports.live import status_line_dict

        return status_line_dict(self.status, self.snapshot)


def live_analyzer(rules: "Rules | None" = None, window_s: float = 30.0, thresholds: Mapping[str, float] | None = None):
    """The live analyzer ``watch`` feeds: ``add(snapshot) -> LiveStatus``; ``summary()``."""
    from trainscope.analyzers.live import LiveAnalyzer

    if not window_s > 0:
        raise BadInput("--window must be > 0")
    return LiveAnalyzer(_rules(rules, thresholds), window_s=window_s)


def open_recording(path: "str | os.PathLike"):
    """A ``watch --record`` recording or an nvidia-smi CSV log (``.snapshots``, ``.header``, ``.warnings``)."""
    from trainscope.collectors.live_trace import open_recording as _open_recording

    path = os.fspath(path)
    with _bad_input(path):
        return _open_recording(path)


class Watch:
    """Live snapshots of a job, GPU and host: iterate for :class:`LiveSample` per interval; use as a
    context manager so sampling stops on exit. ``summary()`` is the verdict over the whole watch.

    ``replay``: a recording (``watch --record``) or nvidia-smi CSV, replayed without waiting.
    Otherwise NVML and the host are sampled every ``interval`` s: the process tree of ``pid``
    (until it exits), or every GPU and its processes; ``duration`` ends it after that many seconds.
    ``record`` writes every sample to a crash-safe JSON-lines recording. Step timing: ``step_hook``
    listens for a job's opt-in DataLoader hook (``pid``), and a job launched by the caller gets the
    injected hook through :meth:`job_environment` then :meth:`follow` (what ``trainscope watch --
    COMMAND`` does).

    Two ways to consume it: pull (``for sample in w``, the samples queued by the sampler thread) or
    push (:meth:`start` with ``on_sample``, called on the sampler thread). :meth:`stop` takes a last
    sample of the partial interval, closes the samplers and returns what was not yet consumed;
    :meth:`finish` closes the recording and returns the verdict over the whole watch."""

    def __init__(self, *, pid: int | None = None, replay: "str | os.PathLike | None" = None, interval: float = 1.0,
                 window: float = 30.0, duration: float | None = None, rules: "Rules | None" = None,
                 thresholds: Mapping[str, float] | None = None, record: "str | os.PathLike | None" = None,
                 step_hook: bool = False) -> None:
        if pid is not None and replay is not None:
            raise BadInput("choose one of: pid, replay")
        if replay is not None and (record is not None or duration is not None):
            raise BadInput("a replay samples nothing new: record and duration do not apply")
        if interval < 0.25:
            raise BadInput("interval must be ≥ 0.25 s (faster sampling costs the job CPU)")
        if duration is not None and not duration > 0:
            raise BadInput("duration must be > 0")
        self.analyzer = live_analyzer(rules, window, thresholds)
        self.pid, self.interval, self.duration = pid, interval, duration
        self.record = os.fspath(record) if record is not None else None
        self.step_hook = step_hook
        self.recording = open_recording(replay) if replay is not None else None
        if pid is not None:
            import psutil

            if not psutil.pid_exists(pid):
                raise BadInput(f"no process with pid {pid}")
        self.lock = threading.Lock()
        self.last: LiveSample | None = None
        self.notes: list[str] = list(self.recording.warnings) if self.recording else []  # from the samples
        self.job_notes: list[str] = []  # from the samplers: step mode, NVML
        self.sampler_cost_s: list[float] = []
        self._job_done: Callable[[], bool] | None = None
        self._launched = False
        self._receiver = None
        self._recorder = None
        self._monitor = None
        self._gpu = None
        self._queue: Any = None
        self._on_sample: Callable[[LiveSample], None] | None = None
        self._gpu_pids: set[int] = set()
        self._deadline: float | None = None
        self._started = False

    # -- feeding -------------------------------------------------------------------------------------

    def add(self, snap: "Snapshot") -> LiveSample:
        """Feed one snapshot (from any sampler) to the analyzer and the recording."""
        with self.lock:
            s = LiveSample(self.analyzer.add(snap), snap)
            self.last = s
            self.notes.extend(n for n in snap.notes if n not in self.notes)
            if self._recorder is not None:
                try:
                    self._recorder.write(snap)
                except OSError as e:
                    self.notes.append(f"recording stopped: {e.strerror or e}")
                    self._recorder = None
            return s

    def latest(self) -> "tuple[LiveStatus | None, Snapshot | None]":
        """The last status and sample (what a metrics endpoint serves), read under the lock."""
        with self.lock:
            return (self.last.status, self.last.snapshot) if self.last else (None, None)

    def summary(self) -> "LiveStatus":
        return self.analyzer.summary()

    # -- a job the caller launches ---------------------------------------------------------------------

    def job_environment(self, folder: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a job the caller is about to launch: with the DataLoader step hook
        injected (its socket and site folder inside ``folder``, a private directory the caller
        removes), or ``base`` unchanged with a note when the socket cannot be opened."""
        from trainscope.collectors.step_receiver import StepReceiver, child_environment

        self._launched = True
        env = dict(os.environ if base is None else base)
        try:
            self._receiver = StepReceiver(os.path.join(folder, "steps.sock"))
            env, _ = child_environment(self._receiver.path, base=env, folder=folder)
        except OSError as e:
            self.job_notes.append(f"step mode off: cannot open the step socket ({e.strerror or e})")
        return env

    def follow(self, pid: int, done: Callable[[], bool] | None = None) -> None:
        """Watch the process tree of ``pid`` (a job the caller launched) until ``done()``."""
        self.pid, self._launched = pid, True
        self._job_done = done

    # -- sampling --------------------------------------------------------------------------------------

    def start(self, on_sample: Callable[[LiveSample], None] | None = None, header: Mapping[str, Any] | None = None) -> None:
        """Open the recording (``header`` adds to its first line) and start the sampler thread;
        ``on_sample(sample)`` (push mode) is called on that thread for each interval. Raises
        :class:`BadInput` when the recording cannot be written."""
        if self.recording is not None or self._started:
            return
        from trainscope.collectors.host import HostSampler
        from trainscope.collectors.monitor import Monitor
        from trainscope.collectors.nvml import NvmlSampler

        self._started = True
        if self.pid is not None and not self._launched and self.step_hook:
            self._listen_for_hook()
        if self.record is not None:
            from trainscope.collectors.recording import RecordingWriter

            head = {"started": time.time(), "interval_s": self.interval, "target": self.target, "command": None,
                    "pid": self.pid, "host": os.uname().nodename,
                    "trainscope": __import__("trainscope").__version__, **dict(header or {})}
            try:
                self._recorder = RecordingWriter(self.record, head)
            except OSError as e:
                self.close()
                raise BadInput(f"cannot write {self.record}: {e.strerror or e}") from None
        import queue

        self._on_sample = on_sample
        self._queue = queue.Queue()
        roots: Any = (self.pid,) if self.pid is not None else (lambda: tuple(sorted(self._gpu_pids)))

        def on_snapshot(snap) -> None:
            if self.pid is None:  # every GPU: follow whatever uses them
                self._gpu_pids.clear()
                self._gpu_pids.update(p.pid for g in snap.gpus for p in (g.processes or ()))
            if self._on_sample is not None:
                self._on_sample(self.add(snap))
            else:
                self._queue.put(snap)

        self._gpu = NvmlSampler()
        self._monitor = Monitor(self.interval, on_snapshot, gpu=self._gpu, host=HostSampler(roots),
                                steps=self._receiver)
        self._monitor.start()
        self._deadline = time.monotonic() + self.duration if self.duration else None

    def _listen_for_hook(self) -> None:
        from trainscope.collectors.step_hook import default_socket_path, private_dir
        from trainscope.collectors.step_receiver import StepReceiver, ensure_private_dir

        try:
            ensure_private_dir(private_dir())
            self._receiver = StepReceiver(default_socket_path(self.pid))
        except OSError as e:
            self.job_notes.append(f"step mode off: cannot listen for the opt-in hook ({e.strerror or e}: "
                                  f"{getattr(e, 'filename', None) or ''})")

    @property
    def target(self) -> str:
        if self.recording is not None:
            return "replay"
        return f"pid {self.pid}" if self.pid is not None else "all GPUs"

    @property
    def expired(self) -> bool:
        """``duration`` has passed since sampling started."""
        return self._deadline is not None and time.monotonic() >= self._deadline

    def job_done(self) -> bool:
        """The watched job has ended (never, when every GPU is watched)."""
        if self._job_done is not None:
            return self._job_done()
        if self.pid is None:
            return False
        import psutil

        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    def finished(self) -> bool:
        return self.job_done() or self.expired

    def __iter__(self) -> Iterator[LiveSample]:
        if self.recording is not None:
            for snap in self.recording.snapshots:
                yield self.add(snap)
            return
        import queue

        self.start()
        while True:
            try:
                yield self.add(self._queue.get(timeout=0.1))
            except queue.Empty:
                pass
            if self.finished():
                break
        yield from self.stop()

    def stop(self) -> list[LiveSample]:
        """Stop sampling after one last sample of the partial interval, close the step socket and
        NVML; return the samples taken but not yet consumed (pull mode). Idempotent."""
        if self._monitor is not None:
            self._monitor.stop(final_sample=True)
            self.sampler_cost_s = list(self._monitor.cost_s)
            self._monitor = None
        tail = []
        while self._queue is not None and not self._queue.empty():
            tail.append(self.add(self._queue.get_nowait()))
        if self._receiver is not None:
            status = self._receiver.status()
            if status.mode != "on" and self._launched:
                self.job_notes.append(f"step mode was off: {status.detail}")
            self._receiver.close()
            if not self._launched:  # the per-user socket folder goes too, when no other watch uses it
                try:
                    os.rmdir(os.path.dirname(self._receiver.path))
                except OSError:
                    pass
            self._receiver = None
        if self._gpu is not None:
            if self._gpu.problem:
                self.job_notes.append(self._gpu.problem)
            self._gpu = None
        return tail

    @property
    def sampler_cpu_ms_per_sample(self) -> float | None:
        xs = self.sampler_cost_s
        return round(1000 * sum(xs) / len(xs), 3) if xs else None

    def finish(self, exit_code: int | None = None) -> "LiveStatus":
        """Stop (if still sampling), close the recording with the job's exit code and the verdict,
        and return the verdict over the whole watch."""
        self.stop()
        st = self.summary()
        if self._recorder is not None:
            try:
                self._recorder.close({"exit_code": exit_code, "verdict": st.verdict.axis})
            except OSError:
                pass
            self._recorder = None
        return st

    def close(self) -> None:
        """Stop sampling and release the samplers (the recording stays open until :meth:`finish`)."""
        if self._monitor is not None:
            self._monitor.stop(final_sample=False)
            self._monitor = None
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        if self._recorder is not None:
            self.finish()


def watch(*, pid: int | None = None, replay: "str | os.PathLike | None" = None, interval: float = 1.0,
          window: float = 30.0, duration: float | None = None, rules: "Rules | None" = None,
          thresholds: Mapping[str, float] | None = None, record: "str | os.PathLike | None" = None,
          step_hook: bool = False) -> Watch:
    """``with watch(pid=…) as w: for s in w: print(s.line())`` — see :class:`Watch`."""
    return Watch(pid=pid, replay=replay, interval=interval, window=window, duration=duration, rules=rules,
                 thresholds=thresholds, record=record, step_hook=step_hook)


# --- torch.profiler -------------------------------------------------------------------------------


def on_trace_ready(dir_name: "str | os.PathLike", *, print_verdict: bool = True, worker_name: str | None = None,
                   use_gzip: bool = False, analyze_kwargs: Mapping[str, Any] | None = None,
                   printer: Callable[[str], None] | None = None, callback: Callable[[Report], None] | None = None):
    """A ``torch.profiler.profile(on_trace_ready=…)`` handler: writes each cycle's trace into
    ``dir_name`` exactly as ``torch.profiler.tensorboard_trace_handler`` does (TensorBoard and
    ``trainscope analyze DIR`` both read it), then analyzes it and prints the verdict line.
    ``callback(report)`` gets each cycle's :class:`Report`; the handler's ``.reports`` keeps them.
    Analysis errors never stop training: they print one line instead."""
    import sys

    from torch.profiler import tensorboard_trace_handler

    dir_name = os.fspath(dir_name)
    write = tensorboard_trace_handler(dir_name, worker_name=worker_name, use_gzip=use_gzip)
    out = printer or (lambda line: print(line, file=sys.stderr, flush=True))

    def handler(prof) -> None:
        before = set(os.listdir(dir_name)) if os.path.isdir(dir_name) else set()
        write(prof)
        new = sorted((f for f in os.listdir(dir_name) if f not in before and ".pt.trace.json" in f),
                     key=lambda f: os.path.getmtime(os.path.join(dir_name, f)))
        if not new:
            return
        path = os.path.join(dir_name, new[-1])
        handler.paths.append(path)
        try:
            report = analyze(path, **dict(analyze_kwargs or {}))
        except Exception as e:  # noqa: BLE001 (the training loop must go on)
            message, _ = describe(e)
            out(f"trainscope: {message}")
            return
        handler.reports.append(report)
        if print_verdict:
            out(report.verdict_line())
        if callback is not None:
            callback(report)

    handler.reports = []  # type: ignore[attr-defined]
    handler.paths = []  # type: ignore[attr-defined]
    return handler
