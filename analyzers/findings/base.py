"""The vocabulary every rule speaks: evidence lines, findings, verdicts, and the declaration of a
finding (:class:`FindingSpec`) that every consumer reads — the verdict, recommendations, what-if,
diff, ``--deep``, the live engine, reports, apps and the labeled benchmark.

A finding is declared once, in the module of its family (``data``, ``host``, ``comm``, ``memory``,
``kernels``, ``ranks``, ``live``); :mod:`trainscope.analyzers.findings` collects them into
:data:`REGISTRY` and :func:`validate` checks that every declaration carries what each consumer needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import TypedDict

from trainscope.analyzers.trace.context import TRAINING

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from trainscope.analyzers.findings.observations import DiagnosisInput
    from trainscope.analyzers.live.window_stats import WindowStats
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.analysis import Analysis
    from trainscope.analyzers.trace.context import Context
    from trainscope.analyzers.trace.one_off import SteadyWindow
    from trainscope.traces.samples import Snapshot

# "not_representative": the window holds no steady state (start-up, compilation, capture): one-off
# costs, judged apart from the D·A·M axes (analyzers/trace/one_off.py).
AXES = ("data", "algorithm", "machine", "balanced", "insufficient_evidence", "not_representative")
GRADES = ("high", "moderate", "info")


@dataclass(frozen=True)
class Evidence:
    metric: str
    value: float | None
    unit: str
    threshold: str  # e.g. "≥ 20", "< 50"; "" for context lines
    source: str
    meets: bool | None = None  # whether the value crosses the threshold; None for context


@dataclass(frozen=True)
class Finding:
    id: str  # "data/input-wait", "host/launch-overhead", ...
    axis: str
    severity: str  # "high" | "moderate" | "info"
    title: str
    stake_pct: float  # share of step time this cause accounts for
    evidence: list[Evidence]
    detail: str = ""


@dataclass(frozen=True)
class Verdict:
    axis: str
    confidence: float
    bottleneck: str | None  # the primary finding's id
    summary: str
    evidence: list[Evidence] = field(default_factory=list)
    runner_up: str | None = None  # the second-largest sink that can be primary (its finding id)


# --- severity ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Severity:
    """How a finding is graded. ``by_stake``: by its share of step time against two thresholds of the
    rule table (so a 32 µs stake is never [high]); ``fixed``: a grade the evidence sets by itself
    (memory at capacity is high whatever its share of step time)."""

    moderate: str | None = None  # rule names (analyzers/rules.py)
    high: str | None = None
    fixed: str | None = None

    def grade(self, stake_pct: float, rules: Rules) -> str:
        if self.fixed:
            return self.fixed
        if self.high and stake_pct >= rules.value(self.high):
            return "high"
        if self.moderate and stake_pct >= rules.value(self.moderate):
            return "moderate"
        return "info"

    @property
    def rule_names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.moderate, self.high) if n)


def by_stake(moderate: str, high: str | None = None) -> Severity:
    return Severity(moderate=moderate, high=high)


def fixed(grade: str) -> Severity:
    return Severity(fixed=grade)


# --- fix ---------------------------------------------------------------------------------------------


def always(_ctx: Context | None) -> bool:
    return True


def in_context(ctx: Context | None) -> Context:
    """The run's context, or the one assumed when none was detected (a PyTorch training job)."""

    return ctx if ctx is not None else TRAINING


@dataclass(frozen=True)
class FixText:
    """A fix in the run's words (what a :attr:`Fix.text` returns)."""

    rec_id: str  # the recommendation's id
    title: str
    change: str  # the concrete code or flag


_SHELL = re.compile(
    r"^(\$ |nvidia-smi|rocm-smi|nsys |ncu |export |sudo |python -m |trainscope |"
    r"[A-Z_][A-Z0-9_]*=\S+ )",
    re.M,
)
_CPP_STATEMENT = re.compile(r";\s*(//.*)?$")


def code_language(change: str) -> str:
    """The language of a fix's code, for a code fence: ``cpp`` for CUDA/HIP runtime code (``//``
    comments), ``shell`` for commands (``nvidia-smi``, ``nsys``), else ``python``."""
    lines = [x for x in change.splitlines() if x.strip()]
    if lines and all(x.lstrip().startswith(("//", "...")) or _CPP_STATEMENT.search(x) for x in lines):
        return "cpp"
    if (
        lines
        and all(_SHELL.search(x) or x.lstrip().startswith("#") for x in lines)
        and any(_SHELL.search(x) for x in lines)
    ):
        return "shell"
    return "python"


# A fix's wording for the run: (context, single-process loader, bf16 tensor cores) -> its words.
FixWords = Callable[["Context", bool, bool], FixText]
# A finding's headline or one-line detail for the run: (context, the default wording) -> the wording.
Words = Callable[["Context", str], str]
# A fix worded from the judged window's one-off costs, with the time it removes once per process
# (seconds; None: it removes none, e.g. recording advice): (context, window) -> (words, seconds).
Situated = Callable[["Context", "SteadyWindow"], "tuple[FixText, float | None]"]


# How a fix's gain is projected from the measured breakdown (analyzers/trace/recommendations.py):
#   idle      – removes the finding's stake of GPU-idle time (the GPU's busy time stays a floor)
#   busy      – removes the finding's stake of GPU-busy time (hidden behind compute, or a score matrix never written)
#   roofline  – removes what the roofline allows of the stake's memory-bound kernel time: matrix kernels
#               down to bytes / peak bandwidth, fusable runs by their intermediate traffic (busy_bound.py)
#   data-wait – removes the host's measured DataLoader wait (idle time; the textbook's max(data, compute))
#   amdahl    – speeds the stake up by the device's tensor/fp32 peak ratio: 1 / ((1 − g) + g / s)
#   none      – no projection; ``basis`` says why (a one-off cost's fix states its gain in seconds once
#               per process instead: ``situated``)
PROJECTIONS = ("idle", "busy", "roofline", "data-wait", "amdahl", "none")


@dataclass(frozen=True)
class Fix:
    rec_id: str  # the recommendation id ("dataloader-workers")
    title: str
    pytorch: str  # the change in a PyTorch training or inference script
    native: str  # the equivalent for a CUDA/HIP application without PyTorch
    projection: str = "idle"
    basis: str = ""  # what the projection assumes ("removing the {stake} % data wait"), or why none
    applies: Callable[[Context | None], bool] = always  # over the trace's Context (None when unknown)
    superseded_by: tuple[str, ...] = ()  # finding ids whose fix, when raised, replaces this one
    whatif_label: str = ""  # the assumption, as a what-if toggle reads it
    # The wording for the run's context, declared beside the finding: (ctx, single_loader, bf16) -> FixText.
    text: FixWords | None = None
    # The wording when the stake is first-call loading (a cold start), not steady-state work.
    cold_start: Callable[[Context], FixText] | None = None
    # The wording from the judged window's one-off costs and the seconds it removes once per process.
    situated: Situated | None = None

    def render(self, ctx: Context | None = None, *, single_loader: bool = False, bf16: bool = True) -> tuple[str, str]:
        """(title, change) in the run's words: the context-aware text where declared, else the PyTorch
        change, or the native one for a CUDA/HIP application."""
        if self.text is not None:
            ft = self.text(in_context(ctx), single_loader, bf16)
            return ft.title, ft.change
        native = getattr(ctx, "framework", None) == "native"
        return self.title, self.native if native else self.pytorch


# --- diff --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffMeasure:
    """What a finding's fix should move, so `diff` measures "addressed" instead of assuming it.
    Time lost to a cause is compared in ms per step, not as a share: a share also falls when
    everything else grows."""

    label: str
    unit: str
    value: Callable[[Analysis], float | None]
    lower_is_better: bool = True

    @property
    def per_step(self) -> bool:
        return self.unit == "ms per step"


def ms_per_step(category: str) -> Callable[[Analysis], float | None]:
    """A breakdown category of the analysis, in ms per step."""
    return lambda a: a.breakdown.ns[category] / 1e6 / max(1, len(a.breakdown.steps))


def stake_ms(finding: str) -> Callable[[Analysis], float | None]:
    """The time a finding says its cause costs, in ms per step (0 when it is not raised)."""

    def value(a: Analysis) -> float | None:
        stake = next((f.stake_pct for f in a.findings if f.id == finding), 0.0)
        return stake / 100 * a.breakdown.step_ms.mean

    return value


def stake_pct(finding: str) -> Callable[[Analysis], float | None]:
    """A finding's stake as a share (for inputs without steps: sampled counters)."""
    return lambda a: next((f.stake_pct for f in a.findings if f.id == finding), 0.0)


# --- the declaration ---------------------------------------------------------------------------------

# What a trace rule runs: the observations and the rule table -> the finding(s) they support.
Measure = Callable[["DiagnosisInput", "Rules"], "Finding | list[Finding] | None"]

# --- live measures --------------------------------------------------------------------------------

# The live flowchart's steps, in evaluation order (docs/watch.md): the input pipeline while the GPU is
# starved, memory capacity, what the busy time is spent on, utilization patterns, clocks, and trends
# over the window's samples. The live verdict reads the findings by step.
LIVE_STEPS = ("data", "capacity", "busy", "utilization", "clocks", "trend")

# What a live rule runs: the window's statistics, its snapshots and the rule table -> the finding.
LiveRule = Callable[["WindowStats", "Sequence[Snapshot]", "Rules"], "Finding | None"]


@dataclass(frozen=True)
class LiveMeasure:
    """How the live engine (``trainscope watch``, counters-only inputs) raises a finding from a window
    of sampled counters: declared on the finding's spec, evaluated in :data:`LIVE_STEPS` order."""

    step: str  # LIVE_STEPS
    reads: str  # what it reads, in words
    rule: LiveRule
    thresholds: tuple[str, ...]  # the rule-table entries it reads (analyzers/rules.py)
    gpu: bool = True  # reads GPU counters: its fix is GPU advice, left out for a job with no GPU sampled
    # A trend over the window's samples rather than a window average: raised while the verdict still
    # warms up, and kept in the run's summary once a window showed it (the run's start-up and tail
    # flatten a whole-run fit).
    trend: bool = False


# How `--deep` files a finding against HTA's critical path (analyzers/deep/critical_path.py).
CRITICAL_PATH_FAMILIES = ("data", "host", "gpu-compute", "communication", "none")  # none: no time on the path
# The labeled benchmark's classes (benchmarks/bench_diagnosis.py).
LABEL_CLASSES = (
    "input",
    "launch",
    "sync",
    "allocator",
    "comm",
    "imbalance",
    "copies",
    "memory-bound",
    "compute-bound",
    "capacity",
    "host-work",
    "gpu-bound",
    "not-representative",
    "none",
    "insufficient-gpu-evidence",
)


class VerdictClass(TypedDict):
    """What a verdict naming a finding says and claims: its headline, the benchmark class
    (:data:`LABEL_CLASSES`), the step-time sink the finding's stake is measured from
    (analyzers/trace/sinks.py) and where ``--deep`` files it (:data:`CRITICAL_PATH_FAMILIES`).
    Declared once a class in :data:`VERDICT_CLASSES`; a spec takes its fields with
    ``**verdict_class(...)``."""

    headline: str
    label_class: str | None
    sink: str | None
    critical_path: str | None


def _verdict(headline: str, label: str, sink: str | None, critical_path: str) -> VerdictClass:
    return {"headline": headline, "label_class": label, "sink": sink, "critical_path": critical_path}


# The verdict classes, by benchmark class.
VERDICT_CLASSES: dict[str, VerdictClass] = {
    "input": _verdict("DATA-BOUND", "input", "input", "data"),
    "copies": _verdict("COPY-BOUND", "copies", "copies", "data"),
    "launch": _verdict("HOST-BOUND (launch/CPU overhead)", "launch", "launch", "host"),
    "sync": _verdict("SYNC-BOUND", "sync", "sync", "host"),
    "allocator": _verdict("ALLOCATOR CHURN", "allocator", "allocator", "host"),
    "host-work": _verdict("HOST-BOUND (named host work)", "host-work", "host-ranges", "host"),
    "comm": _verdict("COMMUNICATION-BOUND", "comm", "comm", "communication"),
    "imbalance": _verdict("RANK-IMBALANCE-BOUND", "imbalance", "imbalance", "communication"),
    "memory-bound": _verdict("MEMORY-BANDWIDTH-BOUND", "memory-bound", "memory-bound", "gpu-compute"),
    "compute-bound": _verdict("COMPUTE-BOUND", "compute-bound", "compute-bound", "gpu-compute"),
    "gpu-bound": _verdict("GPU-BOUND (bound unknown)", "gpu-bound", "busy-unknown", "gpu-compute"),
    "capacity": _verdict("MEMORY-CAPACITY-BOUND", "capacity", None, "none"),
    "not-representative": _verdict("NOT REPRESENTATIVE", "not-representative", None, "host"),
}


def verdict_class(label: str, note: str = "") -> VerdictClass:
    """The verdict class of benchmark class ``label``; ``note`` names the finding more precisely in
    its headline ("DATA-BOUND (I/O wait)")."""
    c = VERDICT_CLASSES[label]
    return {**c, "headline": f"{c['headline']} ({note})"} if note else c


@dataclass(frozen=True)
class FindingSpec:
    id: str
    axis: str  # D·A·M: data | algorithm | machine
    title: str
    measure: Measure | None  # None for live-only findings
    can_be_primary: bool
    severity: Severity
    fix: Fix | None
    diff_measure: DiffMeasure | None
    # A finding that claims a benchmark class takes these four from its VerdictClass.
    critical_path: str | None  # CRITICAL_PATH_FAMILIES
    headline: str
    label_class: str | None = None  # LABEL_CLASSES; the class a verdict naming this finding claims
    sink: str | None = None  # the step-time sink (analyzers/trace/sinks.py) this finding's stake is measured from
    whatif_pool: str | None = None  # the time a fix draws on; fixes sharing a pool cannot remove more than it holds
    breakdown: tuple[str, ...] = ()  # breakdown categories its stake lies in (for --deep's reconciliation)
    describes: str = ""  # what it measures, in words
    live: LiveMeasure | None = None  # raised by the live engine (watch, counter-only inputs)
    snapshot: bool = False  # raised by the memory-snapshot rules (`trainscope memory`, findings/memory.py)
    # The rule-table entries (analyzers/rules.py: default, unit, source) its trace and snapshot rules
    # read beyond its severity grades; the live measure declares its own.
    thresholds: tuple[str, ...] = ()
    alternatives: tuple[Fix, ...] = ()  # fixes for particular contexts, tried before ``fix`` (their ``applies``)
    refines: str | None = None  # the broader finding of the same sink this one names more precisely
    title_words: Words | None = None  # the headline in the run's words (else ``title`` / the rule's)
    # (title, headline): a finding its measure raises under that title (a variant of ``title`` that
    # says the finding is something else than its name suggests) gives the verdict that headline.
    headline_variants: tuple[tuple[str, str], ...] = ()
    detail_words: Words | None = None  # the one-line detail in the run's words (else the rule's)

    @property
    def offline(self) -> bool:
        """Raised by the trace rules (analyze): it has a ``measure``; else live or snapshot rules raise it."""
        return self.measure is not None

    def title_for(self, ctx: Context | None, default: str | None = None) -> str:
        """The finding's headline in the run's words (``default``, else ``title``, where it fits any run)."""
        d = self.title if default is None else default
        return self.title_words(in_context(ctx), d) if self.title_words is not None else d

    def detail_for(self, ctx: Context | None, default: str) -> str:
        """The finding's one-line explanation in the run's words."""
        return self.detail_words(in_context(ctx), default) if self.detail_words is not None else default

    def fix_words(
        self, ctx: Context | None, *, single_loader: bool = False, bf16: bool = True, cold_start: bool = False
    ) -> FixText | None:
        """The fix in the run's context, or None when it has no context-aware wording. ``cold_start``:
        the stake is first-call code loading, not steady-state work."""
        f = self.fix
        if f is None:
            return None
        if cold_start and f.cold_start is not None:
            return f.cold_start(in_context(ctx))
        return f.text(in_context(ctx), single_loader, bf16) if f.text is not None else None

    @property
    def threshold_names(self) -> tuple[str, ...]:
        """Every rule-table entry a rule raising this finding reads: severity grades, trace and
        snapshot rules, the live measure."""
        names = (*self.severity.rule_names, *self.thresholds, *(self.live.thresholds if self.live else ()))
        return tuple(dict.fromkeys(names))

    def fix_for(self, ctx: Context | None) -> Fix | None:
        """The fix that fits the run's context."""
        for f in self.alternatives:
            if f.applies(ctx):
                return f
        return self.fix if self.fix is not None and self.fix.applies(ctx) else None

    def finding(
        self,
        stake_pct: float,
        evidence: list[Evidence],
        detail: str,
        rules: Rules,
        title: str | None = None,
        severity: str | None = None,
    ) -> Finding:
        """A finding of this kind: axis from the declaration, severity graded by its stake."""
        return Finding(
            self.id,
            self.axis,
            severity or self.severity.grade(stake_pct, rules),
            title or self.title,
            stake_pct,
            evidence,
            detail,
        )
