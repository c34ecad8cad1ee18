"""``analyze``: open the traces → one analysis per rank (mapped by :mod:`trainscope.api.executor` for
rank directories) → the reduce over ranks (stragglers, alignment) → optional HTA deep analysis → a
:class:`~trainscope.api.report.Report`; and the what-if projections the apps ask of an analysis."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from trainscope.analyzers.deep.second_opinion import HTAUnavailable
from trainscope.analyzers.deep.second_opinion import deep_analysis
from trainscope.analyzers.deep.second_opinion import hta_versions
from trainscope.analyzers.plan.ledger import Ledger
from trainscope.analyzers.plan.ledger import PlanConfig
from trainscope.analyzers.plan.ledger import ledger
from trainscope.analyzers.ranks.alignment import RankSummary
from trainscope.analyzers.ranks.alignment import ranks_view
from trainscope.analyzers.ranks.alignment import summarize
from trainscope.analyzers.ranks.alignment import with_aligned_imbalance
from trainscope.analyzers.ranks.story import RankStory
from trainscope.analyzers.ranks.story import rank_story
from trainscope.analyzers.trace.analysis import analyze_set
from trainscope.analyzers.trace.analysis import with_rank_imbalance
from trainscope.analyzers.trace.whatif import Lever
from trainscope.analyzers.trace.whatif import Projection
from trainscope.analyzers.trace.whatif import levers
from trainscope.analyzers.trace.whatif import project
from trainscope.api import trace_cache as columns  # one module object: tests replace its open_cached
from trainscope.api.cache import cached_analysis
from trainscope.api.cache import enabled
from trainscope.api.cache import peek
from trainscope.api.errors import BadInput
from trainscope.api.errors import DeepUnavailable
from trainscope.api.errors import Progress
from trainscope.api.errors import bad_input
from trainscope.api.errors import silent
from trainscope.api.executor import MapOptions
from trainscope.api.executor import run_rank_set
from trainscope.api.inputs import InputDescription
from trainscope.api.inputs import describe_input
from trainscope.api.jobs import default_jobs
from trainscope.api.report import Report
from trainscope.api.rules import resolve_rules
from trainscope.collectors import open_traces
from trainscope.collectors.readers import max_decompressed_override
from trainscope.modelspec import parse_model_spec
from trainscope.reports.deep import deep_dict
from trainscope.reports.deep import stragglers_dict
from trainscope.traces.model import Trace
from trainscope.traces.model import TraceSet

if TYPE_CHECKING:
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.analysis import Analysis
    from trainscope.api.cache import CachedReport


def whatif_levers(analysis: Analysis) -> dict[str, Lever]:
    """Every recommendation of an analysis that has a projection, by id: the time its fix removes
    (``analyzers.trace.whatif.Lever``)."""

    return levers(analysis)


def whatif(analysis: Analysis, chosen: list[str] | tuple[str, ...]) -> Projection:
    """The projected mean step time with the fixes ``chosen`` (recommendation ids) all applied
    (``analyzers.trace.whatif.Projection``; upper bounds, as the report's)."""

    return project(analysis, chosen)


def open_input(path: str, progress: Progress | None, cache: bool = False) -> TraceSet:
    """The traces ``path`` holds; with ``cache`` (and the cache not turned off) through the trace
    cache (:mod:`trainscope.api.trace_cache`): the columns of an earlier read of the same input."""

    with bad_input(path):
        if cache and enabled():
            return columns.open_cached(path, lambda: open_traces(path, progress or silent), progress)
        return open_traces(path, progress or silent)


def check_deep_available() -> dict[str, str]:
    """HTA's and pandas' versions; raises :class:`DeepUnavailable` with the install line when missing."""

    try:
        return hta_versions()
    except HTAUnavailable as e:
        raise DeepUnavailable(str(e)) from None


def check_options(deep: bool = False, deep_step: str | None = None, jobs: int | None = None) -> dict[str, str] | None:
    """The one check of the analysis options' dependencies, before anything slow: ``deep_step``
    needs ``deep``, ``jobs`` is at least 1, and ``deep`` needs HTA installed. :func:`analyze` calls
    it, and ``trainscope analyze`` before it opens its app. Returns HTA's versions with ``deep``.
    Raises :class:`BadInput` (:class:`DeepUnavailable`)."""

    if deep_step is not None and not deep:
        raise BadInput("--deep-step needs --deep")
    if jobs is not None and jobs < 1:
        raise BadInput(f"jobs must be at least 1, got {jobs}")
    return check_deep_available() if deep else None


def run_deep(report: Report, step: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Holistic Trace Analysis on the report's main rank (critical path of one step, launch
    statistics): the report's ``deep`` section, returned (``report.with_deep(…)`` is the report with
    it; ``analyze(deep=True)`` builds that). Needs the ``hta`` extra."""

    try:
        return deep_dict(deep_analysis(report.main_trace, report.main, report.rules, step, progress))
    except HTAUnavailable as e:
        raise DeepUnavailable(str(e)) from None


def cache_options(
    step_range: str | None,
    peak_tflops: float | None,
    peak_bandwidth: float | None,
    deep: bool,
    deep_step: str | None,
    hta: dict[str, str] | None,
    model: str | None,
) -> dict[str, Any]:
    """The options besides the rules that key an analysis's document in the cache
    (:mod:`trainscope.api.cache`): what :func:`analyze` stores under and :func:`cached_document` looks up."""
    return {
        "step_range": step_range,
        "peak_tflops": peak_tflops,
        "peak_bandwidth": peak_bandwidth,
        "deep": deep,
        "deep_step": deep_step,
        "hta": hta,
        "model": model,
    }


def cached_document(
    path: str | os.PathLike[str],
    *,
    step_range: str | None = None,
    rules: Rules | None = None,
    thresholds: Mapping[str, float] | None = None,
    peak_tflops: float | None = None,
    peak_bandwidth: float | None = None,
    deep: bool = False,
    deep_step: str | None = None,
    model: str | None = None,
    source: str | None = None,
) -> dict[str, Any] | None:
    """The document ``analyze(path, cache=True, …)`` with these options would read from the
    analysis cache, without analyzing: None when it is not there (or the cache is off:
    ``TRAINSCOPE_NO_CACHE``). The terminal app shows its first screen from it."""

    if not enabled():
        return None
    rules = resolve_rules(rules, thresholds)
    hta = check_deep_available() if deep else None
    path = os.fspath(path)
    options = cache_options(step_range, peak_tflops, peak_bandwidth, deep, deep_step, hta, model)
    return peek(path, source or path, rules, options)


def analyze(
    path_or_traces: str | os.PathLike[str] | TraceSet | Trace,
    *,
    step_range: str | None = None,
    rules: Rules | None = None,
    thresholds: Mapping[str, float] | None = None,
    peak_tflops: float | None = None,
    peak_bandwidth: float | None = None,
    deep: bool = False,
    deep_step: str | None = None,
    model: str | Any | None = None,
    progress: Progress | None = None,
    source: str | None = None,
    jobs: int | None = None,
    dask: str | Any | None = None,
    cache: bool = False,
    trace_cache: bool | None = None,
) -> Report | CachedReport:
    """Diagnose a recorded run: a Kineto trace (.json/.json.gz), a directory (or glob) of per-rank
    traces, an Nsight Systems export (.sqlite; .nsys-rep with nsys on PATH), a ``watch`` recording,
    or an already-read :class:`~trainscope.traces.model.TraceSet` / ``Trace``.

    ``step_range`` names the annotation range that marks a step; ``thresholds`` overrides
    diagnostic thresholds by name (``{"data_wait.high": 25}``) or ``rules`` gives a whole
    :class:`~trainscope.analyzers.rules.Rules`; ``peak_tflops`` and ``peak_bandwidth`` (GB/s) override the device table for MFU and the roofline;
    ``deep`` adds Holistic Trace Analysis (``deep_step``: which step); ``model`` (a spec such as
    ``"params=25.6M,optimizer=momentum,precision=fp32"`` or a ``PlanConfig``) adds the planned
    memory ledger beside the measured peak. ``progress(stage, fraction)`` is called while reading.

    A directory or glob of rank traces is mapped rank by rank (:mod:`trainscope.api.executor`): in
    ``jobs`` worker processes (default: the cores this process may use; 1: serially), or on the
    Dask cluster whose scheduler is at ``dask`` (an address or a ``distributed.Client``). Only
    per-rank summaries come back; a rank's trace is read again when the report needs it
    (:meth:`Report.trace`: HTML, ``deep``, the app's timeline). A large single trace (≥ 1 M host
    rows and kernels) with ``jobs`` ≥ 2 runs its host-side attribution on a second core beside the
    kernel stages: the same result, sooner, with both stages' temporaries held at once; by default
    only where that memory fits in what the process may still take (:mod:`trainscope.api.jobs`).
    ``cache=True`` looks in the analysis cache first (:mod:`trainscope.api.cache`: a file or
    directory path as input; off with ``TRAINSCOPE_NO_CACHE=1``): the document comes back without
    reading the trace, in a :class:`~trainscope.api.cache.CachedReport` that analyzes in full only
    when asked for more than the document. ``trace_cache`` (default: as ``cache``) reads the trace
    through the trace cache (:mod:`trainscope.api.trace_cache`: its columns, without parsing it),
    the full analysis after a document hit included.
    Raises :class:`BadInput` (and :class:`DeepUnavailable`)."""

    rules = resolve_rules(rules, thresholds)
    trace_cache = cache if trace_cache is None else trace_cache
    hta = check_options(deep=deep, deep_step=deep_step, jobs=jobs)  # before the slow part
    planned = model_ledger(model) if model is not None else None
    if isinstance(path_or_traces, (str, os.PathLike)):
        path_or_traces = describe_input(path_or_traces)  # what the path names, decided once

    def pipeline(what: str | os.PathLike[str] | TraceSet | Trace) -> Report:
        return _analyzed(
            what,
            rules,
            step_range,
            peak_tflops,
            peak_bandwidth,
            deep,
            deep_step,
            planned,
            progress,
            source,
            jobs,
            dask,
            trace_cache,
        )

    if cache and isinstance(path_or_traces, (str, os.PathLike)) and isinstance(model, (str, type(None))) and enabled():
        path = os.fspath(path_or_traces)
        options = cache_options(step_range, peak_tflops, peak_bandwidth, deep, deep_step, hta, model)
        return cached_analysis(path, source or path, rules, options, lambda: pipeline(path))
    return pipeline(path_or_traces)


def _analyzed(
    path_or_traces: str | os.PathLike[str] | TraceSet | Trace,
    rules: Rules,
    step_range: str | None,
    peak_tflops: float | None,
    peak_bandwidth: float | None,
    deep: bool,
    deep_step: str | None,
    planned: Ledger | None,
    progress: Progress | None,
    source: str | None,
    jobs: int | None,
    dask: Any,
    trace_cache: bool,
) -> Report:
    """:func:`analyze` once its options are checked, without the analysis cache: the pipeline."""
    summaries: list[RankSummary] | None = None
    if isinstance(path_or_traces, Trace):
        traces = TraceSet(path_or_traces.source, [path_or_traces])
        source = source or path_or_traces.source
    elif isinstance(path_or_traces, TraceSet):
        traces = path_or_traces
        source = source or (traces.traces[0].source if traces.traces else "traces")
    else:
        described = describe_input(path_or_traces)
        path = described.given
        source = source or path
        if described.is_rank_set:
            summaries, warnings = _map_ranks(
                described,
                rules,
                peak_tflops,
                peak_bandwidth,
                step_range,
                jobs,
                dask,
                progress,
                trace_cache and dask is None,
            )
            traces = TraceSet(path, [], warnings)
        else:
            traces = open_input(path, progress, cache=trace_cache)
    if summaries is not None:
        analyses = [s.analysis for s in summaries]
    else:
        if progress:
            progress("analyzing", None)
        with bad_input(source):
            analyses = analyze_set(traces, rules, peak_tflops, step_range, peak_bandwidth, jobs or default_jobs(traces))
    main, story, stragglers = 0, None, None
    if len(analyses) > 1:
        if summaries is None:  # the ranks were read here, not mapped: their summaries, as the map makes them
            summaries = [summarize(t, a) for t, a in zip(traces.traces, analyses)]
        analyses, main, story, stragglers = _reduce_ranks(summaries, analyses, rules)
    report = Report(
        source,
        rules,
        traces,
        analyses,
        main,
        stragglers=stragglers,
        ledger=planned,
        straggler_analysis=story,
        story=story,
        summaries=summaries,
    )
    return report.with_deep(run_deep(report, deep_step, progress)) if deep else report


def _map_ranks(
    ranks: InputDescription,
    rules: Rules,
    peak_tflops: float | None,
    peak_bandwidth: float | None,
    step_range: str | None,
    jobs: int | None,
    dask: Any,
    progress: Progress | None,
    cache: bool = False,
) -> tuple[list[RankSummary], list[str]]:
    """The map: every rank file of ``ranks`` summarized by :mod:`trainscope.api.executor` → (summaries
    in rank order, one warning per file that could not be read)."""
    # What a worker runs is imported with this module, before any pool forks: a child forked while
    # another thread (the app's UI) held the import lock would wait on it forever.
    options = MapOptions(
        peak_tflops=peak_tflops,
        step_range=step_range,
        peak_bandwidth=peak_bandwidth,
        rules=rules,
        max_decompressed=max_decompressed_override(),
        cache=cache,
    )
    tick = (lambda done, n: progress(f"ranks {done}/{n}", done / n)) if progress else None
    try:
        rs = run_rank_set(ranks, options, jobs=jobs, dask=dask, progress=tick)
    except (ValueError, RuntimeError) as e:  # no trace files, a bad --step-range, no Dask, a dead worker
        raise BadInput(f"{ranks.given}: {e}") from None
    return rs.summaries, rs.warnings


def _reduce_ranks(
    summaries: list[RankSummary], analyses: list[Analysis], rules: Rules
) -> tuple[list[Analysis], int, RankStory, dict[str, Any]]:
    """The reduce over several ranks: the one rank story (analyzers/ranks/story.py: arrival order,
    cold starts, straggler, headline rank, lateness), each rank re-judged with the wait it measured,
    and the many-rank view → (the re-judged ranks, the story's headline rank, the story, the
    stragglers as the document holds them), all before the :class:`Report` is built."""

    story = rank_story(summaries, rules)
    alignment = story.alignment
    # Rank imbalance is decided here, once: each rank re-judged with the wait the alignment measured
    # inside its collectives where they match, else with the estimate from compute-time differences.
    if alignment is not None and alignment.instances:
        ranks = with_aligned_imbalance(summaries, alignment, rules)
    else:
        ranks = with_rank_imbalance(list(analyses), rules)
    stragglers = {**stragglers_dict(story, ranks, rules), "ranks_view": ranks_view(summaries, alignment)}
    return ranks, story.headline_index, story, stragglers


def model_ledger(model: str | PlanConfig) -> Ledger:
    """The planned memory ledger for ``analyze(model=…)``: a spec string or a ``PlanConfig``."""

    try:
        return ledger(model if isinstance(model, PlanConfig) else parse_model_spec(str(model)))
    except ValueError as e:
        msg = str(e)
        raise BadInput(msg if msg.startswith("--model") else f"--model: {msg}") from None
