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
import zlib
import os
import time
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
    "analyze", "Report", "run_deep", "check_deep_available", "model_ledger",
    # comparison, planning, memory, live
    "diff", "gate", "DiffResult", "plan", "plan_config", "resolve_device", "PlanResult", "memory", "MemoryReport",
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


# --- analyze --------------------------------------------------------------------------------------


@dataclass
class Report:
    """One analyzed run: a trace file, or a directory of per-rank traces.

    The typed parts are those of the *main* rank (the slowest one, which sets the pace of
    synchronous training): ``verdict``, ``findings``, ``breakdown``, ``kernels``, ``steps``,
    ``memory``, ``recommendations``. ``ranks`` holds every rank's analysis; ``stragglers`` and
    ``deep`` are the report's sections for rank directories and ``deep=True``.
    ``to_dict()`` is the versioned JSON document (``trainscope analyze --format json``)."""

    source: str
    rules: "Rules" = field(repr=False)
    traces: "TraceSet" = field(repr=False)
    ranks: "list[Analysis]" = field(repr=False)
    main_index: int = 0
    stragglers: dict | None = field(default=None, repr=False)
    deep: dict | None = field(default=None, repr=False)
    ledger: Any = field(default=None, repr=False)  # analyzers.ledger.Ledger, with model=…
    straggler_analysis: Any = field(default=None, repr=False)  # analyzers.stragglers result, several ranks

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
        return self.traces.traces[self.main_index]

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

        return render_text(self.to_dict(), color=color)

    def to_markdown(self) -> str:
        from trainscope.reports.markdown import render_markdown

        return render_markdown(self.to_dict())

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
            source: str | None = None) -> Report:
    """Diagnose a recorded run: a Kineto trace (.json/.json.gz), a directory of per-rank traces, an
    Nsight Systems export (.sqlite; .nsys-rep with nsys on PATH), a ``watch`` recording, or an
    already-read :class:`~trainscope.traces.model.TraceSet` / ``Trace``.

    ``step_range`` names the annotation range that marks a step; ``thresholds`` overrides
    diagnostic thresholds by name (``{"data_wait.high": 25}``) or ``rules`` gives a whole
    :class:`~trainscope.analyzers.rules.Rules`; ``peak_tflops`` and ``peak_bandwidth`` (GB/s) override the device table for MFU and the roofline;
    ``deep`` adds Holistic Trace Analysis (``deep_step``: which step); ``model`` (a spec such as
    ``"params=25.6M,optimizer=momentum,precision=fp32"`` or a ``PlanConfig``) adds the planned
    memory ledger beside the measured peak. ``progress(stage, fraction)`` is called while reading.
    Raises :class:`BadInput` (and :class:`DeepUnavailable`)."""
    from trainscope.analyzers.analysis import analyze_set, slowest
    from trainscope.traces.model import Trace, TraceSet

    rules = _rules(rules, thresholds)
    if deep_step is not None and not deep:
        raise BadInput("--deep-step needs --deep")
    if deep:
        check_deep_available()  # before the slow part
    planned = model_ledger(model) if model is not None else None
    if isinstance(path_or_traces, Trace):
        traces = TraceSet([path_or_traces])
        source = source or path_or_traces.source
    elif isinstance(path_or_traces, TraceSet):
        traces = path_or_traces
        source = source or (traces.traces[0].source if traces.traces else "traces")
    else:
        source = source or os.fspath(path_or_traces)
        traces = _open(os.fspath(path_or_traces), progress)
    if progress:
        progress("analyzing", None)
    with _bad_input(source):
        analyses = analyze_set(traces, rules, peak_tflops, step_range, peak_bandwidth)
    main = analyses.index(slowest(analyses)) if len(analyses) > 1 else 0
    report = Report(source, rules, traces, analyses, main, ledger=planned)
    if len(analyses) > 1:
        from trainscope.analyzers.stragglers import detect_stragglers
        from trainscope.reports.deep import stragglers_dict

        report.straggler_analysis = detect_stragglers(traces.traces, analyses, rules)
        report.stragglers = stragglers_dict(report.straggler_analysis)
        # Ranks aligned on the ends of their shared collectives, and the many-rank view.
        from trainscope.analyzers.ranks import align_ranks, ranks_view, summarize
        from trainscope.reports.deep import alignment_dict

        summaries = [summarize(t, a) for t, a in zip(traces.traces, analyses)]
        alignment = align_ranks(summaries, rules)
        if alignment is not None:
            report.stragglers["alignment"] = alignment_dict(alignment)
        report.stragglers["ranks_view"] = ranks_view(summaries, alignment)
    if deep:
        run_deep(report, deep_step, progress)
    return report


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

        return render_diff_text(self.to_dict(), color=color)

    def to_markdown(self) -> str:
        from trainscope.reports.diff_markdown import render_diff_markdown

        return render_diff_markdown(self.to_dict())

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

        return render_plan_text(self.to_dict())

    def to_markdown(self) -> str:
        from trainscope.reports.plan import render_plan_markdown

        return render_plan_markdown(self.to_dict())

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

    def to_dict(self) -> dict:
        return self.document

    def to_text(self) -> str:
        from trainscope.reports.memory import render_memory_text

        return render_memory_text(self.document)

    def to_markdown(self) -> str:
        from trainscope.reports.memory import render_memory_markdown

        return render_memory_markdown(self.document)

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
            return MemoryReport(path, "cuda_snapshot", doc, devices=devices, findings=found)
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
    Step timing needs ``trainscope watch -- COMMAND`` (it injects the DataLoader hook)."""

    def __init__(self, *, pid: int | None = None, replay: "str | os.PathLike | None" = None, interval: float = 1.0,
                 window: float = 30.0, duration: float | None = None, rules: "Rules | None" = None,
                 thresholds: Mapping[str, float] | None = None) -> None:
        if pid is not None and replay is not None:
            raise BadInput("choose one of: pid, replay")
        if interval < 0.25:
            raise BadInput("interval must be ≥ 0.25 s (faster sampling costs the job CPU)")
        self.analyzer = live_analyzer(rules, window, thresholds)
        self.pid, self.interval, self.duration = pid, interval, duration
        self.recording = open_recording(replay) if replay is not None else None
        if pid is not None:
            import psutil

            if not psutil.pid_exists(pid):
                raise BadInput(f"no process with pid {pid}")
        self._monitor = None
        self._queue = None
        self._gpu_pids: set[int] = set()
        self.last: LiveSample | None = None
        self.notes: list[str] = list(self.recording.warnings) if self.recording else []

    def add(self, snap: "Snapshot") -> LiveSample:
        """Feed one snapshot (from any sampler) to the analyzer."""
        s = LiveSample(self.analyzer.add(snap), snap)
        self.last = s
        self.notes.extend(n for n in snap.notes if n not in self.notes)
        return s

    def summary(self) -> "LiveStatus":
        return self.analyzer.summary()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._monitor is not None:
            self._monitor.stop(final_sample=False)
            self._monitor = None

    def _start(self) -> None:
        import queue

        from trainscope.collectors.host import HostSampler
        from trainscope.collectors.monitor import Monitor
        from trainscope.collectors.nvml import NvmlSampler

        self._queue = queue.Queue()
        roots: Any = (self.pid,) if self.pid is not None else (lambda: tuple(sorted(self._gpu_pids)))

        def on_snapshot(snap) -> None:
            if self.pid is None:
                self._gpu_pids.clear()
                self._gpu_pids.update(p.pid for g in snap.gpus for p in (g.processes or ()))
            self._queue.put(snap)

        self._gpu = NvmlSampler()
        self._monitor = Monitor(self.interval, on_snapshot, gpu=self._gpu, host=HostSampler(roots), steps=None)
        self._monitor.start()

    def _done(self) -> bool:
        if self.pid is None:
            return False
        import psutil

        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    def __iter__(self) -> Iterator[LiveSample]:
        if self.recording is not None:
            for snap in self.recording.snapshots:
                yield self.add(snap)
            return
        import queue

        self._start()
        deadline = time.monotonic() + self.duration if self.duration else None
        try:
            while True:
                try:
                    yield self.add(self._queue.get(timeout=0.1))
                except queue.Empty:
                    pass
                if self._done() or (deadline and time.monotonic() >= deadline):
                    break
        finally:
            self.close()


def watch(*, pid: int | None = None, replay: "str | os.PathLike | None" = None, interval: float = 1.0,
          window: float = 30.0, duration: float | None = None, rules: "Rules | None" = None,
          thresholds: Mapping[str, float] | None = None) -> Watch:
    """``with watch(pid=…) as w: for s in w: print(s.line())`` — see :class:`Watch`."""
    return Watch(pid=pid, replay=replay, interval=interval, window=window, duration=duration, rules=rules,
                 thresholds=thresholds)


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
