"""Before and after: what a change did to a training run (the textbook's profile → fix →
re-profile loop, Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Pipeline Optimizations › Systematic Optimization Framework). Pure functions from two analyzed inputs to dataclasses.

Like is compared with like: BEFORE's pace-setting rank (the slowest median step, as in
``analyze``) against the *same* rank of AFTER when both have as many ranks, and every rank pair
side by side; GPUs by model, never by index. Kernel times are compared per step, so runs that
profiled different numbers of steps still compare; fixed capture windows without step markers
are compared by the work done per window (kernel time, kernel count, FLOPs), not by the window's
length. Comparability problems (another GPU, other step counts, other batch shapes) are
reported as checks, never hidden.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import TYPE_CHECKING

from trainscope.analyzers import findings as registry
from trainscope.analyzers.compare.stats import bootstrap_change
from trainscope.analyzers.compare.stats import mann_whitney
from trainscope.analyzers.compare.tree_diff import TreeDiff
from trainscope.analyzers.compare.tree_diff import diff_trees
from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.kernel_match import KernelChange
from trainscope.analyzers.kernel_match import KernelTime
from trainscope.analyzers.kernel_match import match_kernels
from trainscope.analyzers.ranks.alignment import summarize
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.shapes import ShapeSignature
from trainscope.analyzers.shapes import compare_shapes
from trainscope.analyzers.trace.allocator_peak import DeviceMemory
from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.analysis import slowest
from trainscope.analyzers.trace.breakdown import CATEGORIES
from trainscope.analyzers.trace.breakdown import CATEGORY_LABELS
from trainscope.analyzers.trace.breakdown import Breakdown
from trainscope.analyzers.trace.breakdown import StepBreakdown
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.recommendations import Recommendation
from trainscope.traces.model import TraceSet

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.ranks.alignment import RankSummary


# -- one side ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankWork:
    """The work one rank did in its analyzed windows."""

    rank: int | None
    device_name: str | None
    windows: int  # steps, or 1 for a fixed capture window
    window_ms: float  # summed window (step) time
    kernels: int  # kernels started in the windows on the analyzed GPU
    kernel_ms: float
    flops: float | None  # recorded FLOPs in the windows (with_flops), else None
    step_p50_ms: float

    @property
    def kernel_ms_per_window(self) -> float:
        return self.kernel_ms / max(1, self.windows)

    @property
    def kernels_per_window(self) -> float:
        return self.kernels / max(1, self.windows)


def rank_work(a: Analysis) -> RankWork:
    n = len(a.segmentation.steps)
    flops = a.mfu.flops_per_step * n if a.mfu.flops_per_step else None
    return RankWork(
        a.rank,
        a.device_name,
        n,
        a.breakdown.total_ns / 1e6,
        a.kernels.count,
        a.kernels.total_ns / 1e6,
        flops,
        a.breakdown.step_ms.p50,
    )


@dataclass(frozen=True)
class RankSide:
    """What a diff needs of one rank: its analysis and the kernel times in its windows."""

    analysis: Analysis
    kernels: list[KernelTime]
    work: RankWork


@dataclass(frozen=True)
class Run:
    """One input of a diff: the analysis of the compared rank and what a diff needs beyond it."""

    path: str
    analysis: Analysis
    ranks: int
    kernels: list[KernelTime]  # every kernel name in the analyzed steps on the analyzed GPU
    shapes: ShapeSignature
    device_names: tuple[str, ...]  # the analyzed GPU of every rank ("" where a rank has none)
    warnings: list[str] = field(default_factory=list)
    per_rank: tuple[RankSide, ...] = ()  # every rank, in rank order
    index: int = 0  # which of per_rank is the compared one
    chosen: str = "slowest"  # why it was chosen: "slowest" | "same rank as BEFORE" | "only"

    @property
    def steps(self) -> int:
        return len(self.analysis.segmentation.steps)

    @property
    def has_gpu(self) -> bool:
        return self.analysis.device is not None

    @property
    def fixed_window(self) -> bool:
        """Analyzed as one capture window without step markers."""
        return self.analysis.segmentation.method == "whole_trace"


def summarize_run(path: str, traces: TraceSet, analyses: list[Analysis]) -> Run:
    """``analyses`` is one analysis per trace of ``traces``, in the same order (each rank's own
    judgement, as ``analyze_set`` gives it)."""

    return run_from_summaries(
        path, [summarize(t, a) for t, a in zip(traces.traces, analyses)], analyses, list(traces.warnings)
    )


def run_from_summaries(path: str, summaries: list[RankSummary], analyses: list[Analysis], warnings: list[str]) -> Run:
    """One side of a diff from what ``analyze`` made of it: the ranks' summaries
    (:class:`~trainscope.analyzers.ranks.alignment.RankSummary`, with every kernel time and the shapes) and
    the ranks' final analyses (after the reduce over ranks), in rank order."""
    main = slowest(analyses) if len(analyses) > 1 else analyses[0]
    index = next(i for i, a in enumerate(analyses) if a is main)
    sides = tuple(RankSide(a, list(s.kernel_times), rank_work(a)) for s, a in zip(summaries, analyses))
    recorded = summaries[index].shapes
    shapes = recorded if recorded is not None else ShapeSignature(False, {}, {})
    return Run(
        path=path,
        analysis=main,
        ranks=len(analyses),
        kernels=sides[index].kernels,
        shapes=shapes,
        device_names=tuple(a.device_name or "" for a in analyses),
        warnings=list(warnings) + list(main.warnings),
        per_rank=sides,
        index=index,
        chosen="slowest" if len(analyses) > 1 else "only",
    )


def with_rank(run: Run, index: int, why: str) -> Run:
    """``run`` comparing rank ``index`` instead of its own choice."""
    side = run.per_rank[index]
    return replace(
        run,
        analysis=side.analysis,
        kernels=side.kernels,
        index=index,
        chosen=why,
        warnings=[w for w in run.warnings if w not in run.analysis.warnings] + list(side.analysis.warnings),
    )


_PLACEHOLDER = re.compile(r"^GPU \d+$")  # what collectors name a GPU whose model the trace does not record


def gpu_model(name: str | None) -> str | None:
    """The GPU model a device name gives, or None where the trace records only an index."""
    if not name or _PLACEHOLDER.match(name.strip()):
        return None
    return name.strip()


# -- what changed --------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTimeChange:
    statistic: str  # "p50" | "p95" | "mean"
    before_ms: float
    after_ms: float

    @property
    def speedup(self) -> float | None:
        """Before ÷ after: above 1 the change made steps faster."""
        return self.before_ms / self.after_ms if self.after_ms > 0 else None

    @property
    def change_pct(self) -> float | None:
        return 100.0 * (self.after_ms - self.before_ms) / self.before_ms if self.before_ms > 0 else None


@dataclass(frozen=True)
class ShareChange:
    """One breakdown category (or a headline share) before and after, in % of step time."""

    name: str
    label: str
    before_pct: float
    after_pct: float
    before_ms_per_step: float | None = None
    after_ms_per_step: float | None = None

    @property
    def change_pts(self) -> float:
        return self.after_pct - self.before_pct


@dataclass(frozen=True)
class VerdictChange:
    before_axis: str
    after_axis: str
    before_bottleneck: str | None
    after_bottleneck: str | None
    before_confidence: float
    after_confidence: float
    before_summary: str
    after_summary: str

    @property
    def changed(self) -> bool:
        return (self.before_axis, self.before_bottleneck) != (self.after_axis, self.after_bottleneck)


@dataclass(frozen=True)
class MemoryChange:
    before_bytes: int
    after_bytes: int
    before_basis: str
    after_basis: str
    capacity_before: int | None
    capacity_after: int | None

    @property
    def change_bytes(self) -> int:
        return self.after_bytes - self.before_bytes

    @property
    def change_pct(self) -> float | None:
        return 100.0 * self.change_bytes / self.before_bytes if self.before_bytes else None


@dataclass(frozen=True)
class RecommendationOutcome:
    """Did the change address a fix the BEFORE analysis recommended?"""

    recommendation: str
    finding: str
    title: str
    projected_speedup: float | None  # upper bound from the BEFORE analysis
    status: str  # "resolved" | "improved" | "unchanged" | "worse" | "unknown"
    metric: str
    unit: str
    before: float | None
    after: float | None
    note: str

    @property
    def addressed(self) -> bool:
        return self.status in ("resolved", "improved")


@dataclass(frozen=True)
class ComparabilityCheck:
    check: str  # "gpu" | "gpu_activity" | "ranks" | "steps" | "step_method" | "batch_shapes"
    status: str  # "same" | "differ" | "unknown"
    before: str
    after: str
    note: str


class Comparison:
    """What every two-run comparison answers: a run diff (:class:`RunDiff`) and a diff against a
    stored run (history's ``SummaryDiff``)."""

    step_time: list[StepTimeChange]
    comparability: list[ComparabilityCheck]

    @property
    def comparable(self) -> bool:
        return not any(c.status == "differ" for c in self.comparability)

    @property
    def p50(self) -> StepTimeChange:
        return self.step_time[0]


@dataclass(frozen=True)
class RunDiff(Comparison):
    before: Run
    after: Run
    verdict: VerdictChange
    step_time: list[StepTimeChange]
    gpu_busy: ShareChange
    data_wait: ShareChange
    categories: list[ShareChange]
    kernel_classes: list[ShareChange]  # % of kernel time and ms per step, by kernel class
    kernels: list[KernelChange]
    memory: MemoryChange | None
    recommendations: list[RecommendationOutcome]
    comparability: list[ComparabilityCheck]
    work: WorkChange | None = None  # work per window, every rank summed
    rank_pairs: list[RankPair] = field(default_factory=list)  # rank r before ↔ rank r after
    tree: TreeDiff | None = None  # where in the model: the module trees node by node (both runs have one)

    def kernels_by(self, kind: str, n: int | None = None) -> list[KernelChange]:
        """``grew``/``shrank`` (matched kernels, largest change per step first), ``appeared``,
        ``disappeared`` (largest time first)."""
        if kind == "grew":
            out = [k for k in self.kernels if k.match in ("exact", "arch", "family") and k.delta_ms_per_step > 0]
        elif kind == "shrank":
            out = [k for k in self.kernels if k.match in ("exact", "arch", "family") and k.delta_ms_per_step < 0]
        else:
            out = [k for k in self.kernels if k.match == kind]
        return out[:n] if n is not None else out

    def match_counts(self) -> dict[str, int]:
        """How many kernel names of BEFORE were matched by each pass (appeared: names of AFTER)."""
        counts = dict.fromkeys(("exact", "arch", "family", "appeared", "disappeared"), 0)
        for k in self.kernels:
            counts[k.match] += len(k.after_names) if k.match == "appeared" else len(k.before_names)
        return counts


# What each finding's fix should move, so "addressed" is measured, not assumed: declared with each
# finding in the registry (FindingSpec.diff_measure).
FINDING_METRICS: dict[str, DiffMeasure] = {
    s.id: s.diff_measure for s in registry.REGISTRY.values() if s.diff_measure is not None
}


def judge_outcome(
    finding: str,
    still_raised: bool,
    before_value: float | None,
    after_value: float | None,
    noise_pts: float,
    before_mean_ms: float,
    unknown: str | None = None,
) -> tuple[str, str]:
    """(status, note) of a fix for ``finding``: resolved when AFTER no longer raises the finding;
    improved / worse / unchanged by its metric (FINDING_METRICS) against the noise floor; unknown
    (with ``unknown`` as the reason, or when the metric is not measured in both)."""
    fm = FINDING_METRICS.get(finding)
    if unknown:
        return "unknown", unknown
    if not still_raised:
        return "resolved", "the finding is no longer raised"
    if fm is None or before_value is None or after_value is None:
        return "unknown", "still raised; the metric is not measurable in both runs"
    # The noise floor is in points of step time: for times, that share of BEFORE's mean step.
    noise = noise_pts / 100 * before_mean_ms if fm.per_step else noise_pts
    gain = (before_value - after_value) if fm.lower_is_better else (after_value - before_value)
    return ("improved" if gain > noise else "worse" if gain < -noise else "unchanged"), "still raised"


# Findings whose measure is GPU idle time (their fix removes GPU idle: ``Fix.projection == "idle"``).
IDLE_MEASURES = frozenset(
    s.id
    for s in registry.REGISTRY.values()
    if s.diff_measure is not None and s.fix is not None and s.fix.projection == "idle"
)


def busy_ms_per_window(a: Analysis) -> float:
    """GPU busy time (kernels, copies, memsets; overlap counted once) per step or capture window."""
    bd = a.breakdown
    return bd.gpu_busy_pct / 100 * bd.total_ns / 1e6 / max(1, len(bd.steps))


def _outcome(
    rec: Recommendation,
    before: Analysis,
    after: Analysis,
    noise_pts: float,
    speedup: float | None,
    fixed_windows: bool = False,
) -> RecommendationOutcome:
    """A fix's outcome. For fixed capture windows (no step markers) the fix is judged per unit of
    work, not per window: a window's length is the capture's, so GPU time the change freed shows up
    as GPU idle in a window of the same length. An idle measure is judged on what grew beyond that
    freed time, and no step-time speedup is quoted (the windows' lengths say nothing of the work)."""
    fm = FINDING_METRICS.get(rec.finding)
    b = fm.value(before) if fm else None
    a = fm.value(after) if fm else None
    judged_after = a
    freed_note = ""
    if fixed_windows and fm is not None and fm.per_step and rec.finding in IDLE_MEASURES and a is not None:
        freed = max(0.0, busy_ms_per_window(before) - busy_ms_per_window(after))
        if freed > 0:
            judged_after = max(0.0, a - freed)
            freed_note = (
                f"; judged per unit of work: {freed:.2f} ms of GPU time per window freed by the change "
                f"shows up as idle in a fixed capture window; beyond it, {b:.2f} → {judged_after:.2f} ms"
                if b is not None
                else ""
            )
    still = any(f.id == rec.finding for f in after.findings)
    unknown = (
        "AFTER has no GPU activity to judge by"
        if after.verdict.axis == "insufficient_evidence" and after.device is None and before.device is not None
        else None
    )
    status, note = judge_outcome(rec.finding, still, b, judged_after, noise_pts, before.breakdown.step_ms.mean, unknown)
    if status not in ("resolved", "unknown"):
        note += freed_note
    if fixed_windows:
        pass  # the windows' lengths are the capture's: a step-time speedup would say nothing of the change
    elif status in ("resolved", "improved") and rec.projected_speedup and speedup:
        note += (
            f"; step p50 {speedup:.2f}× faster (this fix's projected bound: {rec.projected_speedup:.2f}×)"
            if speedup >= 1
            else f"; but step p50 is {1 / speedup:.2f}× slower overall"
        )
    unit = fm.unit if fm else ""
    if fixed_windows and unit == "ms per step":
        unit = "ms per window"
    return RecommendationOutcome(
        rec.id, rec.finding, rec.title, rec.projected_speedup, status, fm.label if fm else "", unit, b, a, note
    )


def _memory(before: Analysis, after: Analysis) -> MemoryChange | None:
    def main(a: Analysis) -> DeviceMemory | None:
        if not a.memory:
            return None
        on = [m for m in a.memory if m.device == a.device]
        return on[0] if on else max(a.memory, key=lambda m: m.peak_allocated)

    mb, ma = main(before), main(after)
    if mb is None or ma is None:
        return None
    return MemoryChange(mb.peak_allocated, ma.peak_allocated, mb.basis, ma.basis, mb.capacity, ma.capacity)


def _classes(before: Analysis, after: Analysis) -> list[ShareChange]:
    """Kernel time by class: what survives renaming across GPUs (a GEMM is a GEMM on any of them)."""
    kb, ka = before.kernels, after.kernels
    nb, na = max(1, len(before.segmentation.steps)), max(1, len(after.segmentation.steps))
    out = [
        ShareChange(
            c,
            c,
            kb.class_share_pct(c),
            ka.class_share_pct(c),
            kb.by_class_ns.get(c, 0) / 1e6 / nb,
            ka.by_class_ns.get(c, 0) / 1e6 / na,
        )
        for c in ALL_CLASSES
        if kb.by_class_ns.get(c, 0) or ka.by_class_ns.get(c, 0)
    ]
    out.sort(key=lambda x: -abs((x.after_ms_per_step or 0) - (x.before_ms_per_step or 0)))
    return out


@dataclass(frozen=True)
class WorkChange:
    """Work done per window, summed over every rank: what a fixed capture window measures."""

    before_kernel_ms: float
    after_kernel_ms: float
    before_kernels: float
    after_kernels: float
    before_flops: float | None
    after_flops: float | None
    before_window_ms: float
    after_window_ms: float
    fixed_windows: bool  # both sides are capture windows without step markers

    @property
    def kernel_time_ratio(self) -> float | None:
        """Before ÷ after kernel time per window: above 1 the same window holds less GPU work time."""
        return self.before_kernel_ms / self.after_kernel_ms if self.after_kernel_ms > 0 else None


@dataclass(frozen=True)
class RankPair:
    rank: int | None
    before: RankWork
    after: RankWork


def _work(run: Run) -> tuple[float, float, float | None, float]:
    ranks = [s.work for s in run.per_rank] or [rank_work(run.analysis)]
    flops = [w.flops for w in ranks]
    known = [f for f in flops if f is not None]  # every rank's, or the sum is unknown
    return (
        sum(w.kernel_ms_per_window for w in ranks),
        sum(w.kernels_per_window for w in ranks),
        None if len(known) != len(flops) else sum(f / max(1, w.windows) for f, w in zip(known, ranks)),
        max(w.window_ms / max(1, w.windows) for w in ranks),
    )


def work_change(before: Run, after: Run) -> WorkChange:
    kb, nb, fb, wb = _work(before)
    ka, na, fa, wa = _work(after)
    return WorkChange(kb, ka, nb, na, fb, fa, wb, wa, before.fixed_window and after.fixed_window)


def rank_pairs(before: Run, after: Run) -> list[RankPair]:
    """Rank r of BEFORE beside rank r of AFTER, for every rank both have."""
    if len(before.per_rank) < 2 or len(before.per_rank) != len(after.per_rank):
        return []
    return [
        RankPair(b.work.rank if b.work.rank is not None else i, b.work, a.work)
        for i, (b, a) in enumerate(zip(before.per_rank, after.per_rank))
    ]


def comparability(before: Run, after: Run) -> list[ComparabilityCheck]:
    checks: list[ComparabilityCheck] = []
    gb, ga = before.analysis.device_name, after.analysis.device_name
    mb_, ma_ = gpu_model(gb), gpu_model(ga)
    if before.has_gpu != after.has_gpu:
        checks.append(
            ComparabilityCheck(
                "gpu_activity",
                "differ",
                "GPU" if before.has_gpu else "no GPU activity",
                "GPU" if after.has_gpu else "no GPU activity",
                "one run used a GPU and the other did not",
            )
        )
    elif mb_ and ma_:
        models_b = sorted(filter(None, map(gpu_model, before.device_names)))
        models_a = sorted(filter(None, map(gpu_model, after.device_names)))
        same = mb_ == ma_ and models_b == models_a
        checks.append(
            ComparabilityCheck(
                "gpu",
                "same" if same else "differ",
                mb_,
                ma_,
                "the same GPU model"
                if same
                else "different GPUs (models): the change measured includes the hardware, not only the code",
            )
        )
    elif gb and ga:
        checks.append(
            ComparabilityCheck(
                "gpu",
                "unknown",
                gb,
                ga,
                "the traces record device indexes but not GPU models: the hardware cannot be "
                "compared (an index says nothing about the model)",
            )
        )
    else:
        checks.append(
            ComparabilityCheck(
                "gpu",
                "unknown",
                gb or "—",
                ga or "—",
                "no GPU activity in either run" if not before.has_gpu else "a GPU is unnamed",
            )
        )
    if before.ranks != after.ranks:
        checks.append(
            ComparabilityCheck(
                "ranks",
                "differ",
                str(before.ranks),
                str(after.ranks),
                "different numbers of rank traces: the job may be scaled differently",
            )
        )
    sb, sa = before.steps, after.steps
    if before.fixed_window and after.fixed_window:
        checks.append(
            ComparabilityCheck(
                "steps",
                "same",
                "capture window",
                "capture window",
                "fixed capture windows without step markers: compared by the work done per window (kernel time, kernel "
                "count, FLOPs), not by the window's length",
            )
        )
    else:
        checks.append(
            ComparabilityCheck(
                "steps",
                "same" if sb == sa else "differ",
                str(sb),
                str(sa),
                f"{sb} steps in both"
                if sb == sa
                else "different numbers of profiled steps: percentiles rest on different samples (kernel times are compared per step)",
            )
        )
    mb, ma = before.analysis.segmentation.method, after.analysis.segmentation.method
    if mb != ma:
        checks.append(
            ComparabilityCheck(
                "step_method", "differ", mb, ma, "steps were found differently, so a 'step' may not mean the same span"
            )
        )
    sc = compare_shapes(before.shapes, after.shapes)

    def show(d: int | None) -> str:
        return "unknown" if d is None else f"leading dim {d}"

    note = sc.note + (f"; {sc.example}" if sc.example else "")
    shown_b, shown_a = show(sc.before_batch), show(sc.after_batch)
    if sc.status == "differ" and shown_b == shown_a:
        # The batch is the same: what differs is other operators' shapes, so show that, not a
        # no-op "leading dim 1024 → leading dim 1024".
        n = len(sc.ops_with_other_shapes)
        shown_a = f"{shown_a}; {n} of {sc.common_ops} operators on other input shapes"
    checks.append(ComparabilityCheck("batch_shapes", sc.status, shown_b, shown_a, note))
    return checks


def diff_runs(before: Run, after: Run, rules: Rules | None = None) -> RunDiff:
    rules = rules or Rules()
    # The same rank on both sides: BEFORE's pace-setter, and AFTER's rank of the same index.
    if len(before.per_rank) > 1 and len(before.per_rank) == len(after.per_rank) and after.index != before.index:
        after = with_rank(after, before.index, "same rank as BEFORE")
    elif len(before.per_rank) > 1 and len(before.per_rank) == len(after.per_rank):
        after = replace(after, chosen="same rank as BEFORE")
    b, a = before.analysis, after.analysis
    bb, ab = b.breakdown, a.breakdown
    step_time = [StepTimeChange(s, getattr(bb.step_ms, s), getattr(ab.step_ms, s)) for s in ("p50", "p95", "mean")]

    def per_step(bd: Breakdown, c: str) -> float:
        return bd.ns[c] / 1e6 / max(1, len(bd.steps))

    cats = [
        ShareChange(c, CATEGORY_LABELS[c], bb.share_pct(c), ab.share_pct(c), per_step(bb, c), per_step(ab, c))
        for c in CATEGORIES
    ]
    verdict = VerdictChange(
        b.verdict.axis,
        a.verdict.axis,
        b.verdict.bottleneck,
        a.verdict.bottleneck,
        b.verdict.confidence,
        a.verdict.confidence,
        b.verdict.summary,
        a.verdict.summary,
    )
    noise = rules.value("diff.noise_pts")
    fixed = before.fixed_window and after.fixed_window
    recs = [_outcome(r, b, a, noise, step_time[0].speedup, fixed) for r in b.recommendations]
    return RunDiff(
        before=before,
        after=after,
        verdict=verdict,
        step_time=step_time,
        gpu_busy=ShareChange("gpu_busy", "GPU busy (kernels, copies, memsets)", bb.gpu_busy_pct, ab.gpu_busy_pct),
        data_wait=ShareChange("data_wait", "host waiting on DataLoader __next__", bb.data_wait_pct, ab.data_wait_pct),
        categories=cats,
        kernel_classes=_classes(b, a),
        kernels=match_kernels(before.kernels, after.kernels, before.steps, after.steps),
        memory=_memory(b, a),
        recommendations=recs,
        comparability=comparability(before, after),
        work=work_change(before, after),
        rank_pairs=rank_pairs(before, after),
        tree=diff_trees(b.tree, a.tree) if b.tree is not None and a.tree is not None else None,
    )


# -- the CI gate ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GateMetric:
    name: str
    label: str
    unit: str  # unit of the value itself
    relative: bool  # threshold in % of the BEFORE value (times) or in percentage points (shares)
    higher_is_worse: bool
    value: Callable[[Run], float | None]
    # Every step's value, for the rank test (None: one value per run, no test), and the statistic of
    # them the gate's value is ("p50", "p95", "mean"; None for a share of summed time).
    per_step: Callable[[Run], list[float] | None] | None = None
    statistic: str | None = None


def _busy(r: Run) -> float | None:
    return r.analysis.breakdown.gpu_busy_pct if r.has_gpu else None


def _mem(r: Run) -> float | None:
    m = [x.peak_allocated for x in r.analysis.memory if x.device == r.analysis.device]
    return m[0] / 2**20 if m else None


def _step_ms(r: Run) -> list[float]:
    return [s.duration_ns / 1e6 for s in r.analysis.breakdown.steps]


def _step_share(share: Callable[[StepBreakdown], float]) -> Callable[[Run], list[float] | None]:
    return lambda r: [share(s) for s in r.analysis.breakdown.steps]


def _step_busy(r: Run) -> list[float] | None:
    return (
        [100.0 * s.gpu_busy_ns / s.duration_ns if s.duration_ns else 0.0 for s in r.analysis.breakdown.steps]
        if r.has_gpu
        else None
    )


GATE_METRICS: dict[str, GateMetric] = {
    m.name: m
    for m in (
        GateMetric(
            "step_p50", "step time p50", "ms", True, True, lambda r: r.analysis.breakdown.step_ms.p50, _step_ms, "p50"
        ),
        GateMetric(
            "step_p95", "step time p95", "ms", True, True, lambda r: r.analysis.breakdown.step_ms.p95, _step_ms, "p95"
        ),
        GateMetric(
            "step_mean",
            "mean step time",
            "ms",
            True,
            True,
            lambda r: r.analysis.breakdown.step_ms.mean,
            _step_ms,
            "mean",
        ),
        GateMetric("gpu_busy", "GPU busy", "%", False, False, _busy, _step_busy),
        GateMetric(
            "data_wait",
            "data-wait share",
            "%",
            False,
            True,
            lambda r: r.analysis.breakdown.data_wait_pct,
            _step_share(lambda s: 100.0 * s.host_data_wait_ns / s.duration_ns if s.duration_ns else 0.0),
        ),
        GateMetric(
            "host_overhead",
            "GPU idle on launch/CPU overhead",
            "%",
            False,
            True,
            lambda r: r.analysis.breakdown.share_pct("idle_host_overhead") if r.has_gpu else None,
            lambda r: [s.share_pct("idle_host_overhead") for s in r.analysis.breakdown.steps] if r.has_gpu else None,
        ),
        GateMetric("memory_peak", "peak GPU memory allocated", "MiB", True, True, _mem),
    )
}


@dataclass(frozen=True)
class StepTest:
    """The statistical half of the gate: a one-sided rank test over the steps (AFTER worse than
    BEFORE) and, for step times, the change of the gated statistic with its bootstrap interval."""

    test: str
    p_value: float
    alpha: float
    u: float
    n_before: int
    n_after: int
    z: float | None
    ties: int
    min_p: float
    significant: bool
    effect: str  # "change of step time p50" …
    change: float  # in the gate's unit (% or points), positive = worse
    low: float | None  # the interval, same unit and sign
    high: float | None
    confidence: float | None
    resamples: int | None
    seed: int | None
    probability_worse: float  # U / (m·n): chance a step of AFTER is worse than one of BEFORE


@dataclass(frozen=True)
class GateResult:
    metric: str
    threshold: float
    threshold_unit: str  # "%" (relative) or "points"
    before: float | None
    after: float | None
    change: float | None  # in threshold_unit, positive = worse
    regressed: bool
    reason: str  # one line
    test: StepTest | None = None  # None: one value per run (memory), nothing to test
    refused: str | None = None  # the gate did not judge (runs not comparable): why; exit 2


class GateUnavailable(ValueError):
    """The chosen metric cannot be measured on one of the runs."""


@dataclass(frozen=True)
class GateSide:
    """What the gate reads of one run: the metric's value and, where the metric has them, every step's."""

    value: float | None
    steps: list[float] | None


def gate_side(run: Run, metric: str) -> GateSide:
    m = GATE_METRICS[metric]
    steps = m.per_step(run) if m.per_step is not None else None
    return GateSide(m.value(run), None if steps is None else [float(x) for x in steps])


def _step_test(m: GateMetric, b: GateSide, a: GateSide, alpha: float) -> StepTest | None:
    if m.per_step is None:
        return None
    if not b.steps or not a.steps:
        which = " and ".join(n for n, s in (("BEFORE", b), ("AFTER", a)) if not s.steps)
        raise GateUnavailable(f"cannot gate on {m.name}: {which} has no steps to test")
    sign = 1.0 if m.higher_is_worse else -1.0
    x, y = [sign * v for v in b.steps], [sign * v for v in a.steps]
    t = mann_whitney(x, y)
    if t.min_p >= alpha:
        raise GateUnavailable(
            f"cannot gate on {m.name}: with {t.n_x} and {t.n_y} steps the rank test cannot reach significance "
            f"(smallest possible p {t.min_p:.3g} ≥ α {alpha:g}); record more steps (profiler schedule active=…)"
        )
    change = low = high = conf = None
    resamples = seed = None
    if m.statistic is not None:  # a relative change of a statistic of the steps, with its interval
        c = bootstrap_change(b.steps, a.steps, m.statistic)
        change, low, high = sign * c.change_pct, sign * c.low_pct, sign * c.high_pct
        if sign < 0:
            low, high = high, low
        conf, resamples, seed = c.confidence, c.resamples, c.seed
    what = f"change of {m.label}" if m.statistic else f"change of {m.label} (points)"
    return StepTest(
        t.test,
        t.p_value,
        alpha,
        t.u,
        t.n_x,
        t.n_y,
        t.z,
        t.ties,
        t.min_p,
        t.p_value < alpha,
        what,
        change if change is not None else 0.0,
        low,
        high,
        conf,
        resamples,
        seed,
        t.effect_size,
    )


def gate_on(metric: str, before: GateSide, after: GateSide, threshold: float, alpha: float = 0.05) -> GateResult:
    """The gate on plain values (a trace's run or a stored summary): a regression when the metric got
    worse by more than ``threshold`` (relative % for times and memory, percentage points for shares)
    and — for metrics measured per step — AFTER's steps are worse than BEFORE's by a one-sided
    Mann–Whitney rank test at level ``alpha``. Raises :class:`GateUnavailable`."""
    m = GATE_METRICS[metric]
    b, a = before.value, after.value
    if b is None or a is None:
        missing = [n for n, v in (("BEFORE", b), ("AFTER", a)) if v is None]
        raise GateUnavailable(f"cannot gate on {metric}: {m.label} is not measured in {' and '.join(missing)}")
    unit = "%" if m.relative else "points"
    if m.relative:
        if b <= 0:
            raise GateUnavailable(f"cannot gate on {metric}: {m.label} is 0 in BEFORE")
        change = 100.0 * (a - b) / b
    else:
        change = a - b
    worse = change if m.higher_is_worse else -change
    test = _step_test(m, before, after, alpha)
    big = worse > threshold
    regressed = big and (test is None or test.significant)
    direction = ("rose" if change > 0 else "fell") if change != 0 else "did not change"
    amount = f" {abs(change):.1f} {'%' if m.relative else 'points'}" if change != 0 else ""
    values = f"({b:.1f} → {a:.1f} {m.unit})"
    allowed = f"{threshold:g} {'%' if m.relative else 'points'}"
    stat = ""
    if test is not None:
        interval = (
            f", {100 * test.confidence:.0f} % interval {test.low:+.1f} … {test.high:+.1f} %"
            if test.low is not None and test.confidence is not None
            else ""
        )
        stat = f"; {test.test.split(' (')[0]} p = {test.p_value:.3g} (α {alpha:g}{interval})"
    if regressed:
        reason = f"regression: {m.label} {direction}{amount} {values}, more than the {allowed} allowed{stat}"
    elif big:  # large enough, but not told apart from noise
        reason = (
            f"gate passed: {m.label} {direction}{amount} {values}, more than the {allowed} allowed but not "
            f"significant{stat}"
        )
    else:
        reason = f"gate passed: {m.label} {direction}{amount} {values}, within the {allowed} allowed{stat}"
    return GateResult(metric, threshold, unit, b, a, worse, regressed, reason, test)


def check_gate(diff: RunDiff, metric: str, threshold: float, alpha: float = 0.05) -> GateResult:
    """:func:`gate_on` the two runs of ``diff``."""
    return gate_on(metric, gate_side(diff.before, metric), gate_side(diff.after, metric), threshold, alpha)


# Comparability checks that do not confound the gate: the rank test compares every step of each run,
# so unequal numbers of steps are two samples of different sizes, not a different measurement.
GATE_TOLERATES = ("steps",)


def gate_blockers(checks: list[ComparabilityCheck]) -> list[ComparabilityCheck]:
    """The failed comparability checks that keep the gate from judging (all but GATE_TOLERATES)."""
    return [c for c in checks if c.status == "differ" and c.check not in GATE_TOLERATES]


def refuse_gate(metric: str, threshold: float, checks: list[ComparabilityCheck]) -> GateResult:
    """The gate not run on runs that are not comparable: a regression there would measure more than
    the change under test. Exit 2 with the reason (``--gate-anyway`` gates regardless)."""
    m = GATE_METRICS[metric]
    differ = gate_blockers(checks)
    why = "; ".join(f"{c.check} {c.before} → {c.after}" for c in differ)
    reason = (
        f"gate not run: the runs are not comparable ({why}), so a change of {m.label} would measure more than "
        "the change under test; compare like with like, or pass --gate-anyway to gate regardless"
    )
    return GateResult(
        metric,
        threshold,
        "%" if m.relative else "points",
        None,
        None,
        None,
        False,
        reason,
        refused=", ".join(c.check for c in differ),
    )
