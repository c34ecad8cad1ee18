"""``analyze --deep``: a second opinion from Holistic Trace Analysis (PyPI ``traceinsight``, module ``hta``).

HTA is an optional runtime dependency (extra ``hta``), imported only here and only when asked.
For one step (default: the median step) it computes the critical path
(:mod:`trainscope.analyzers.deep.critical_path`), and over the trace the kernel-launch statistics and
CUDA-queue lengths (:mod:`trainscope.analyzers.deep.launch_stats`). Each part can fail on its own —
HTA cannot load some real traces, and its critical path asserts on others — and then it is
skipped with a one-line reason while the rest stands. Run time and the process's peak memory
are measured while HTA works; a watcher thread samples memory and drives the progress line, and
HTA itself runs in the calling thread so Ctrl-C interrupts it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from trainscope.analyzers.deep.critical_path import CriticalPath
from trainscope.analyzers.deep.critical_path import Reconciliation
from trainscope.analyzers.deep.critical_path import reconcile
from trainscope.analyzers.deep.critical_path import summarize_path
from trainscope.analyzers.deep.launch_stats import LaunchStats
from trainscope.analyzers.deep.launch_stats import summarize_launches
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.breakdown import CATEGORIES
from trainscope.analyzers.trace.steps import DATA_WAIT
from trainscope.analyzers.trace.steps import Step
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.traces.model import Trace

INSTALL_HINT = "pip install 'trainscope-dam[hta]'"
# HTA 0.6.1's critical path builds pandas query strings with a literal ``nan``, which pandas 3
# rejects ("name 'nan' is not defined"); the extra pins pandas<3.
SUPPORTED = "traceinsight 0.6.1 with pandas < 3"

ProgressFn = Callable[[str, "float | None"], None]


class HTAUnavailable(Exception):
    """HTA is not installed (or not importable): --deep cannot run at all."""


@dataclass(frozen=True)
class DeepAnalysis:
    """HTA's second opinion on one rank. ``status``: ``ok`` (every part ran), ``partial`` (some
    part failed: see the ``*_error`` fields) or ``skipped`` (nothing ran: see ``reason``)."""

    status: str
    reason: str | None
    source: str
    rank: int | None
    step: str | None
    critical_path: CriticalPath | None = None
    critical_path_error: str | None = None
    reconciliation: Reconciliation | None = None
    launch: LaunchStats | None = None
    launch_error: str | None = None
    elapsed_s: float = 0.0
    peak_rss_mb: float | None = None  # the process's peak resident memory while HTA ran
    rss_growth_mb: float | None = None  # that peak minus the resident memory before HTA started
    stage_s: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


def hta_versions() -> dict[str, str]:
    """Installed HTA and pandas versions; raises :class:`HTAUnavailable` when HTA cannot be imported."""
    try:
        import pandas
        from hta.version import __version__ as hta_version
    except ImportError as e:
        raise HTAUnavailable(
            f"--deep needs Holistic Trace Analysis ({e.name or 'hta'} is not installed): {INSTALL_HINT}"
        ) from None
    return {"traceinsight": hta_version, "pandas": pandas.__version__}


def choose_step(seg: StepSegmentation, wanted: str | None = None) -> Step:
    """The step to analyze: ``wanted`` (``ProfilerStep#N``, ``N``, or a position ``@i`` from 0), or
    the median step by duration (the lower median for an even count). Raises ValueError."""
    if seg.method != "profiler_step":
        raise ValueError(
            f"HTA's critical path is bounded by a ProfilerStep#N annotation and this trace has none ({seg.note})"
        )
    if not seg.steps:
        raise ValueError("the trace has no steps")
    if wanted is None:
        ordered = sorted(seg.steps, key=lambda s: (s.duration_ns, s.start_ns))
        return ordered[(len(ordered) - 1) // 2]
    if wanted.startswith("@") and wanted[1:].isdigit():
        i = int(wanted[1:])
        if i >= len(seg.steps):
            raise ValueError(f"step position {i} is past the last step (the trace has {len(seg.steps)})")
        return seg.steps[i]
    label = wanted if wanted.startswith("ProfilerStep#") else f"ProfilerStep#{wanted}"
    for s in seg.steps:
        if s.label == label:
            return s
    raise ValueError(f"no step {label} in the trace (it has {seg.steps[0].label} … {seg.steps[-1].label})")


def deep_analysis(
    trace: Trace,
    analysis: Analysis,
    rules: Rules | None = None,
    step: str | None = None,
    progress: ProgressFn | None = None,
) -> DeepAnalysis:
    """Run HTA on ``trace`` (already analyzed as ``analysis``). Raises :class:`HTAUnavailable`
    when HTA is not installed and KeyboardInterrupt when interrupted; every other failure is
    reported in the result."""
    rules = rules or Rules()
    versions = hta_versions()
    result = functools.partial(DeepAnalysis, source=trace.source, rank=trace.rank, versions=versions)
    if not trace.has_gpu_activity:
        return result(
            "skipped",
            "no GPU activity in the trace: HTA's critical path and launch statistics "
            "need GPU kernels (HTA cannot load CPU-only traces)",
            step=None,
        )
    try:
        chosen: Step | None = choose_step(analysis.segmentation, step)
        cp_skip = None
    except ValueError as e:
        if step is not None:  # the user asked for a step that does not exist: say so, run nothing
            return result("skipped", str(e), step=None)
        chosen, cp_skip = None, str(e)

    stages: dict[str, float] = {}
    with _Watch(progress) as watch:
        watch.stage("deep analysis: HTA loading the trace")
        t0 = time.perf_counter()
        try:
            with _quiet():
                ta = _load(trace.source)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # HTA fails on some real traces: skip deep, keep everything else
            stages["load"] = time.perf_counter() - t0
            return _finish(
                watch,
                result(
                    "skipped",
                    f"HTA could not load the trace: {_one_line(e)}",
                    step=chosen.label if chosen else None,
                    stage_s=stages,
                ),
            )
        stages["load"] = time.perf_counter() - t0

        cp = rec = None
        cp_error = cp_skip
        if chosen is not None and int(versions["pandas"].split(".")[0]) >= 3:
            cp_error = (
                f"pandas {versions['pandas']} breaks HTA's critical path (\"name 'nan' is not defined\"); "
                f"it needs {SUPPORTED}: {INSTALL_HINT}"
            )
        elif chosen is not None:
            watch.stage(f"deep analysis: HTA critical path of {chosen.label}")
            t1 = time.perf_counter()
            try:
                with _quiet():
                    cp = _critical_path(ta, chosen)
            except KeyboardInterrupt:
                raise
            except Exception as e:
                cp_error = f"HTA's critical path failed on {chosen.label}: {_one_line(e)}"
            stages["critical_path"] = time.perf_counter() - t1

        watch.stage("deep analysis: HTA launch statistics")
        t2 = time.perf_counter()
        launch = launch_error = None
        try:
            with _quiet():
                stats = ta.get_cuda_kernel_launch_stats(
                    ranks=[0],
                    runtime_cutoff=int(rules.value("launch.runtime_outlier_us")),
                    launch_delay_cutoff=int(rules.value("launch.delay_outlier_us")),
                    visualize=False,
                )[0]
                queues = ta.get_queue_length_summary(ranks=[0])
            launch = summarize_launches(stats, queues, rules)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            launch_error = f"HTA's launch statistics failed: {_one_line(e)}"
        stages["launch_stats"] = time.perf_counter() - t2

    if cp is not None:
        pct = {c: analysis.breakdown.share_pct(c) for c in CATEGORIES}
        q = launch.queues[0].mean if launch and launch.queues else None
        ahead = q if q is not None and q >= rules.value("launch.queue_starved") else None
        rec = reconcile(cp, analysis.verdict.bottleneck, pct, ahead)
    errors = [x for x in (cp_error, launch_error) if x]
    status = "ok" if not errors else ("partial" if cp or launch else "skipped")
    return _finish(
        watch,
        result(
            status,
            "; ".join(errors) or None,
            step=chosen.label if chosen else None,
            critical_path=cp,
            critical_path_error=cp_error,
            reconciliation=rec,
            launch=launch,
            launch_error=launch_error,
            stage_s=stages,
        ),
    )


def _load(path: str) -> Any:
    os.environ.setdefault("HTA_DISABLE_NS_ROUNDING", "1")
    from hta.configs.env_options import HTAEnvOptions
    from hta.trace_analysis import TraceAnalysis

    # Without this HTA rounds float µs timestamps to whole µs, shortening every event; sub-µs
    # events turn negative and its analyses fail (seen on the H100 trace).
    HTAEnvOptions.instance().set_disable_ns_rounding(True)
    return TraceAnalysis(trace_files={0: os.path.abspath(path)}, include_last_profiler_step=True)


def _critical_path(ta: Any, step: Step) -> CriticalPath:
    df = ta.t.get_trace(0)
    sym = ta.t.symbol_table.get_sym_id_map()
    # HTA picks annotations by substring over its symbol table, in dataframe order, and then the
    # instance_id-th of them. Find our step's host-lane row in exactly that list.
    ids = [v for k, v in sym.items() if step.label in k]
    ann = df[df["name"].isin(ids)]
    want = sym.get(step.label)
    pos = [i for i, (name, stream) in enumerate(zip(ann["name"], ann["stream"])) if name == want and stream == -1]
    if not pos:
        raise ValueError(f"HTA has no host-lane annotation {step.label}")
    result = ta.critical_path_analysis(
        rank=0, annotation=step.label, instance_id=pos[0], data_load_events=[DATA_WAIT.pattern]
    )
    if result is None:
        raise ValueError("HTA found no such annotation")
    graph, ok = result
    if not ok:
        raise ValueError("HTA could not compute the longest path (invalid dependency graph)")
    edges = graph.get_critical_path_breakdown()
    if edges is None or not len(edges):
        raise ValueError("empty critical path")
    nodes = [graph.node_list[i] for i in graph.critical_path_nodes]
    span_us = float(nodes[-1].ts - nodes[0].ts)
    return summarize_path(edges, step.label, step.duration_ns / 1e6, span_us, "cuda_sync" in sym)


def _one_line(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split()) or "(no message)"
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{type(e).__name__}: {text}"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """HTA logs warnings and prints summaries; keep the terminal to trainscope's own output."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


class _Watch:
    """A daemon thread that samples resident memory every 20 ms and ticks the progress line."""

    def __init__(self, progress: ProgressFn | None) -> None:
        self.progress = progress
        self.label = "deep analysis"
        self.t0 = time.perf_counter()
        self.elapsed = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.rss0: float | None  # resident memory before HTA started and the peak since (bytes)
        self.peak: float | None
        try:
            import psutil

            self._proc: Any = psutil.Process()
            self.rss0 = self.peak = float(self._proc.memory_info().rss)
        except Exception:  # no psutil / no /proc: report no memory figures rather than wrong ones
            self._proc, self.rss0, self.peak = None, None, None

    def stage(self, label: str) -> None:
        self.label = label
        if self.progress:
            self.progress(label, None)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            if self._proc is not None and self.peak is not None:
                try:
                    self.peak = max(self.peak, float(self._proc.memory_info().rss))
                except Exception:
                    pass
            if self.progress:
                self.progress(f"{self.label} ({time.perf_counter() - self.t0:.0f} s)", None)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.elapsed = time.perf_counter() - self.t0
        if self._proc is not None and self.peak is not None:
            try:
                self.peak = max(self.peak, float(self._proc.memory_info().rss))
            except Exception:
                pass


def _finish(watch: _Watch, d: DeepAnalysis) -> DeepAnalysis:
    if not watch._stop.is_set():
        watch.__exit__(None, None, None)
    growth = None if watch.peak is None or watch.rss0 is None else watch.peak - watch.rss0
    return dataclasses.replace(
        d, elapsed_s=round(watch.elapsed, 2), peak_rss_mb=_mb(watch.peak), rss_growth_mb=_mb(growth)
    )


def _mb(x: float | None) -> float | None:
    return None if x is None else round(x / 2**20, 1)
