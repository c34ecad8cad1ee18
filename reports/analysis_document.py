"""The analysis document (``trainscope.analysis/2``) as a typed model: one dataclass per section,
fields in the JSON's key order, read by attribute by every renderer, pane and MCP tool.

JSON is its serialization: :meth:`Section.to_dict` gives exactly the dict that
:func:`trainscope.reports.document.build_document` builds (same keys, same order, same values, None
where the JSON holds null), so ``--format json`` is byte-identical; :meth:`Section.from_dict` reads
that dict back (the analysis cache stores the JSON text) and round-trips it exactly
(tests/test_typed_document.py checks every golden document).

Conventions of the mapping, declared once in :class:`Section`:

- a JSON key that is not a Python name (``class``) is a field with ``key=`` in its metadata
  (``kernel_class``);
- a key that only some documents carry (``ranks``, ``stragglers``, ``deep``, ``ledger``, and
  ``schema``/``tool``/``input``/``thresholds`` of a rank's own document in the app) is a field with
  ``optional=True``: None there means the key is absent, and to_dict leaves it out;
- a key the model does not know (a section a caller added) is kept in ``extra`` and written back
  after the known ones, so nothing is lost on a round trip;
- a key a partial document lacks (a hand-made one: a test's, a caller's) reads as None and is left
  out again by to_dict.

Open sections, kept as plain JSON values (``dict``) inside the typed document, and why:

- ``deep`` (reports/deep.py: the optional TraceInsight cross-check, its sub-sections null when a
  stage is skipped) and ``ledger`` (reports/plan.py, the ``trainscope.plan/1`` ledger): each is
  built whole as a dict by its own module and rendered by that module's own functions; in the
  typed ``stragglers`` likewise its ``alignment`` (the matching, the straggler test and the
  imbalance, built whole by reports/deep.py's ``alignment_dict``), ``ranks_view`` (the app's heat
  map) and ``cold_start`` (lines of words);
- free-form evidence values: ``context.evidence`` and ``host_idle.evidence`` (lists of lines),
  ``hw_counters.by_precision`` / ``by_class`` and the name-keyed maps (``categories``,
  ``class_pct``, ``by_sink`` …) are ``dict[str, …]`` keyed by the trace's own names.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import ClassVar
from typing import TypeVar

S = TypeVar("S", bound="Section")

JSON = Any  # a JSON value (dict, list, str, int, float, bool, None)


def key(name: str) -> Any:
    """A field whose JSON key is ``name`` (a key that is not a Python name, e.g. ``class``)."""
    return field(metadata={"key": name})


def optional(default: Any = None) -> Any:
    """A field whose key only some documents carry: None (the default) leaves the key out."""
    return field(default=default, metadata={"optional": True})


# How each field of a section is read and written: (attribute, JSON key, optional, converter kind).
_Plan = tuple[tuple[str, str, bool, Any], ...]


def _kind(tp: Any) -> Any:
    """A converter for a resolved type: a Section class, ("list", kind), ("dict", kind), or None (as is)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _kind(inner[0]) if len(inner) == 1 else None
    if origin is list:
        k = _kind(typing.get_args(tp)[0])
        return None if k is None else ("list", k)
    if origin is dict:
        k = _kind(typing.get_args(tp)[1])
        return None if k is None else ("dict", k)
    if isinstance(tp, type) and issubclass(tp, Section):
        return tp
    return None


def _load(kind: Any, v: JSON) -> Any:
    if v is None or kind is None:
        return copy.deepcopy(v) if isinstance(v, dict | list) else v
    if isinstance(kind, tuple):
        if kind[0] == "list":
            return [_load(kind[1], x) for x in v]
        return {k: _load(kind[1], x) for k, x in v.items()}
    section: type[Section] = kind
    return section.from_dict(v)


def _dump(v: Any) -> JSON:
    if isinstance(v, Section):
        return v.to_dict()
    if isinstance(v, list):
        return [_dump(x) for x in v]
    if isinstance(v, dict):
        return {k: _dump(x) for k, x in v.items()}
    return v


@dataclass
class Section:
    """A section of the document: to_dict/from_dict by the fields' declared keys and types."""

    _plans: ClassVar[dict[type, _Plan]] = {}
    # keys a partial document (a test's, a caller's hand-made one) did not have: null here, absent in to_dict
    _missing: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def _plan(cls) -> _Plan:
        plan = Section._plans.get(cls)
        if plan is None:
            hints = typing.get_type_hints(cls)
            plan = tuple(
                (f.name, f.metadata.get("key", f.name), bool(f.metadata.get("optional")), _kind(hints[f.name]))
                for f in dataclasses.fields(cls)
                if f.name != "extra"
            )
            Section._plans[cls] = plan
        return plan

    @classmethod
    def from_dict(cls: type[S], d: dict[str, JSON]) -> S:
        plan = cls._plan()
        kw: dict[str, Any] = {}
        missing = []
        for attr, k, opt, kind in plan:
            if k in d:
                kw[attr] = _load(kind, d[k])
            elif not opt:  # a hand-made or partial document: read as null, and left out again by to_dict
                kw[attr] = None
                missing.append(k)
        out = cls(**kw)
        if missing:
            object.__setattr__(out, "_missing", frozenset(missing))
        known = {k for _, k, _, _ in plan}
        extra = {k: copy.deepcopy(v) for k, v in d.items() if k not in known}
        if extra:
            if not hasattr(out, "extra"):
                raise KeyError(f"{cls.__name__}: unknown keys {sorted(extra)}")
            out.extra = extra
        return out

    @classmethod
    def of(cls: type[S], x: S | dict[str, JSON]) -> S:
        """The typed section of ``x`` (itself when typed already; a dict is read with from_dict)."""
        return x if isinstance(x, cls) else cls.from_dict(x)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {}
        missing = self._missing
        for attr, k, opt, _ in self._plan():
            v = getattr(self, attr)
            if (opt and v is None) or k in missing:
                continue
            out[k] = _dump(v)
        out.update(copy.deepcopy(getattr(self, "extra", None) or {}))
        return out


# -- the sections, in the document's order ---------------------------------------------------------


@dataclass
class Tool(Section):
    name: str
    version: str


@dataclass
class Input(Section):
    path: str
    format: str
    traces: int


@dataclass
class Device(Section):
    id: int | None
    name: str | None
    spec: str | None
    peak_tensor_tflops: float | None
    spec_source: str | None
    peak_bandwidth_gbps: float | None
    peaks_tflops: dict[str, float] | None
    tensor_core_precisions: list[str] | None


@dataclass
class Evidence(Section):
    metric: str
    value: Any  # a number, a string or null: what the evidence line quotes
    unit: str
    threshold: str
    source: str
    meets: bool | None


@dataclass
class Verdict(Section):
    axis: str
    confidence: float
    bottleneck: str | None
    summary: str
    evidence: list[Evidence]
    runner_up: str | None


@dataclass
class Finding(Section):
    id: str
    axis: str
    severity: str
    title: str
    stake_pct: float | None
    detail: str
    evidence: list[Evidence]


@dataclass
class Category(Section):
    label: str
    pct: float | None
    ms: float | None
    p50_ms: float | None
    p95_ms: float | None


@dataclass
class SplitPart(Section):
    key: str
    sink: str
    label: str
    pct: float | None
    ms_per_step: float | None


@dataclass
class CommunicationSplit(Section):
    label: str
    pct: float | None
    ms_per_step: float | None
    parts: list[SplitPart]


@dataclass
class StepTime(Section):
    p50: float | None
    p95: float | None
    mean: float | None


@dataclass
class Breakdown(Section):
    basis: str
    total_ms: float | None
    gpu_busy_pct: float | None
    data_wait_pct: float | None
    step_time_ms: StepTime
    categories: dict[str, Category]
    communication_split: CommunicationSplit | None


@dataclass
class Step(Section):
    label: str
    start_ms: float | None
    duration_ms: float | None
    gpu_busy_pct: float | None
    data_wait_pct: float | None
    outlier: bool
    ms: dict[str, float | None]


@dataclass
class TopKernel(Section):
    name: str
    kernel_class: str = key("class")
    tensor_core: bool = field(default=False)
    count: int = 0
    total_ms: float | None = None
    mean_us: float | None = None
    share_pct: float | None = None
    # the roofline's columns (null where the kernel has no roofline row)
    intensity: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    pct_of_roof: float | None = None
    bound: str | None = None
    precision: str | None = None
    cost_source: str | None = None


@dataclass
class Kernels(Section):
    count: int
    total_ms: float | None
    median_us: float | None
    class_pct: dict[str, float | None]
    tensor_core_pct_of_matmul: float | None
    top: list[TopKernel]


@dataclass
class DeviceMemory(Section):
    device: int | None
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    capacity_bytes: int | None
    peak_pct_of_capacity: float | None
    basis: str


@dataclass
class IronLaw(Section):
    formula: str
    step_ms: float | None
    flops_per_step: float | None
    flops_source: str
    gpus: int
    gpus_source: str
    peak_tflops: float | None
    peak_source: str
    efficiency_pct: float | None
    pipeline_efficiency_pct: float | None
    gap_pct: dict[str, Any]


@dataclass
class Mfu(Section):
    value_pct: float | None
    reason: str
    flops_per_step: float | None
    peak_tflops: float | None
    peak_source: str | None
    basis: str | None
    recorded_pct: float | None
    shapes_pct: float | None
    shapes_reason: str | None
    iron_law: IronLaw | None


@dataclass
class RoofKernel(Section):
    name: str
    count: int
    total_ms: float | None
    share_pct: float | None
    flops: float | None
    bytes: float | None
    tensor_cores: bool | None
    roof_tflops: float | None
    intensity: float | None
    tflops: float | None
    gbps: float | None
    pct_of_roof: float | None
    bound: str | None
    precision: str | None
    cost_source: str | None


@dataclass
class Roofline(Section):
    basis: str
    device: str | None
    bandwidth_gbps: float | None
    ridge_flop_per_byte: dict[str, float | None] | None
    bound_ms: dict[str, float | None]
    bound_pct: dict[str, float | None]
    communication_ms: float | None
    total_ms: float | None
    source_ms: dict[str, float | None]
    tensor_core_pct_of_matrix: float | None
    evidence: dict[str, Any]
    notes: list[str]
    kernels: list[RoofKernel]


@dataclass
class FusionCandidate(Section):
    label: str
    kernels: list[str]
    classes: list[str]
    shapes: list[Any]
    device: int | None
    stream: int | None
    occurrences: int
    total_ms: float | None
    ms_per_step: float | None
    memory_ms_per_step: float | None
    intermediate_bytes: int | None
    saved_ms_per_step: float | None
    summary: str


@dataclass
class Fusion(Section):
    basis: str
    found: int
    steps: int
    bandwidth_gbps: float | None
    candidates: list[FusionCandidate]


@dataclass
class Recommendation(Section):
    rank: int
    id: str
    finding: str
    title: str
    change: str
    projected_speedup: float | None
    projected_step_ms: float | None
    bound: str
    basis: str
    once_per_process_s: float | None


@dataclass
class OneOffCost(Section):
    kind: str
    phase: str
    what: str
    where: str
    ms: float | None
    count: int
    in_window_ms: float | None
    rule: str


@dataclass
class PhaseRange(Section):
    name: str
    kind: str
    count: int
    ms: float | None
    gpu_busy_ms: float | None
    one_off: bool
    judged: bool


@dataclass
class SteadyState(Section):
    basis: str
    judged: str
    representative: bool
    reason: str
    phases: list[str]
    left_out: list[str]
    steady_range: str | None
    offered_ranges: list[str]
    window_ms: float | None
    one_off_in_window_ms: float | None
    one_off_in_window_pct: float | None
    total_ms: float | None
    ledger: list[OneOffCost]
    ranges: list[PhaseRange]


@dataclass
class Phase(Section):
    name: str
    ranges: int
    host_ms: float | None
    host_pct: float | None
    kernels: int
    kernel_ms: float | None
    gpu_busy_ms: float | None
    kernel_class_ms: dict[str, float | None]


@dataclass
class Phases(Section):
    basis: str
    unassigned_ms: float | None
    phases: list[Phase]


@dataclass
class GpuMetrics(Section):
    device: int | None
    samples: int
    sm_active_pct: float | None
    tensor_active_pct: float | None
    dram_bandwidth_pct: float | None


@dataclass
class Agreement(Section):
    kernel_class: str = key("class")
    kernels: int = 0
    counted_flops: float | None = None
    model_flops: float | None = None
    ratio: float | None = None


@dataclass
class CounterKernel(Section):
    name: str
    kernel_class: str = key("class")
    operator: str | None = None
    ranges: int = 0
    flops: float | None = None
    by_precision: dict[str, Any] = field(default_factory=dict)
    share_pct: float | None = None
    model_flops: float | None = None


@dataclass
class HwCounters(Section):
    total_flops: float | None
    ranges: int
    linked_ranges: int
    by_precision: dict[str, Any]
    by_class: dict[str, Any]
    cannot_give: str
    agreement_note: str
    agreement: list[Agreement]
    kernels: list[CounterKernel]


@dataclass
class Context(Section):
    mode: str
    graphs: bool
    compiled: bool
    framework: str
    collectives_ms: dict[str, float]
    evidence: list[str]


@dataclass
class Sink(Section):
    pct: float | None
    ms_per_step: float | None
    can_be_primary: bool
    source: str


@dataclass
class Sinks(Section):
    basis: str
    saturated: bool
    by_sink: dict[str, Sink]


@dataclass
class IdleFrame(Section):
    name: str
    file: str | None
    line: int | None
    function: str | None
    count: int
    idle_ms: float | None
    share_pct: float | None
    cls: str = key("class")


@dataclass
class IdleCall(Section):
    name: str
    cls: str = key("class")
    count: int = 0
    idle_ms: float | None = None
    longest_ms: float | None = None


@dataclass
class ColdStart(Section):
    count: int
    idle_ms: float | None
    longest_ms: float | None


@dataclass
class HostIdle(Section):
    idle_ms: float | None
    ms: dict[str, float | None]
    share_pct: dict[str, float | None]
    primary: str | None
    source: str
    thread: Any
    frames: list[IdleFrame]
    calls: list[IdleCall]
    cold_start: ColdStart | None
    evidence: list[Any]


@dataclass
class TreeKernel(Section):
    name: str
    count: int
    ms: float | None


@dataclass
class Spread(Section):
    min: float | None
    median: float | None
    max: float | None


@dataclass
class TreeNode(Section):
    parent: int | None
    depth: int
    path: list[str]
    name: str
    kind: str
    count: int
    host_ms: float | None
    gpu_ms: float | None
    gpu_exclusive_ms: float | None
    gpu_pct: float | None
    flops: float | None
    bytes: float | None
    tflops: float | None
    gbps: float | None
    bound: str
    pct_of_roof: float | None
    top_kernels: list[TreeKernel]
    instances: int
    spread_ms: Spread | None
    slowest: Any


@dataclass
class Tree(Section):
    basis: str
    gpu_ms: float | None
    windows: int
    ranges: dict[str, int]
    unlinked: int
    nodes_total: int
    nodes: list[TreeNode]
    notes: list[str]


@dataclass
class Repair(Section):
    reason: str
    action: str
    count: int
    gpu_ms: float | None
    example: str


@dataclass
class RankRow(Section):
    """One rank of a rank set (``ranks[]``): its own verdict and the rank story's figures for it
    (absent where the document has no story)."""

    rank: int | None
    source: str
    axis: str
    bottleneck: str | None
    confidence: float
    step_p50_ms: float | None
    step_p95_ms: float | None
    gpu_busy_pct: float | None
    data_wait_pct: float | None
    mean_late_ms: float | None = optional()
    max_late_ms: float | None = optional()
    last_in: int | None = optional()
    considered: int | None = optional()
    straggler: bool | None = optional()
    headline: bool | None = optional()


@dataclass
class LatestCollective(Section):
    index: int
    kind: str
    step: Any
    late_ms: float | None


@dataclass
class StoryRank(Section):
    """One rank of the rank story (``stragglers.ranks[]``)."""

    rank: int | None
    source: str
    step_p50_ms: float | None
    collective_pct: float | None
    mean_late_ms: float
    max_late_ms: float
    late_in: int
    considered: int
    wait_ms_per_step: float | None
    transfer_ms_per_step: float | None
    late: bool
    slow: bool
    headline: bool
    latest_collective: LatestCollective | None
    axis: str | None
    bottleneck: str | None


@dataclass
class SlowCollective(Section):
    step: Any
    name: str
    index: int
    spread_ms: float | None
    last_rank: int | None


@dataclass
class Stragglers(Section):
    """The rank story (reports/deep.py ``stragglers_dict``; analyzers/ranks/story.py). Kept as JSON
    inside it: ``cold_start`` (three lines of words), ``alignment`` (analyzers/ranks/alignment.py's
    matching, test and imbalance, built whole by ``alignment_dict``) and ``ranks_view`` (the app's
    heat map, added by the api)."""

    basis: str
    method: str
    collective_source: str
    matched_collectives: int
    considered: int
    median_step_ms: float | None
    summary: str
    stragglers: list[Any]
    straggler: int | None
    headline_rank: int | None
    headline_index: int | None
    headline_reason: str | None
    headline: str | None
    tie_us: float | None
    cold_start: dict[str, Any]
    ranks: list[StoryRank]
    slow_collectives: list[SlowCollective]
    alignment: dict[str, Any] | None = optional()
    ranks_view: dict[str, Any] | None = optional()
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Threshold(Section):
    name: str
    value: Any
    unit: str
    source: str


@dataclass
class AnalysisDocument(Section):
    """The whole ``trainscope.analysis/2`` document (docs/json-schema.md)."""

    schema: str | None = optional()
    tool: Tool | None = optional()
    input: Input | None = optional()
    source: str = ""
    rank: int | None = None
    device: Device = field(default_factory=lambda: Device(None, None, None, None, None, None, None, None))
    steps_method: str = ""
    steps_note: str = ""
    verdict: Verdict = field(default_factory=lambda: Verdict("insufficient_evidence", 0.0, None, "", [], None))
    findings: list[Finding] = field(default_factory=list)
    breakdown: Breakdown | None = None
    steps: list[Step] = field(default_factory=list)
    kernels: Kernels | None = None
    memory: list[DeviceMemory] = field(default_factory=list)
    mfu: Mfu | None = None
    roofline: Roofline | None = None
    fusion_candidates: Fusion | None = None
    recommendations: list[Recommendation] = field(default_factory=list)
    steady_state: SteadyState | None = None
    phases: Phases | None = None
    gpu_metrics: GpuMetrics | None = None
    hw_counters: HwCounters | None = None
    context: Context | None = None
    sinks: Sinks | None = None
    host_idle: HostIdle | None = None
    tree: Tree | None = None
    warnings: list[str] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)
    ranks: list[RankRow] | None = optional()
    stragglers: Stragglers | None = optional()
    deep: dict[str, Any] | None = optional()  # open: reports/deep.py's dict
    thresholds: list[Threshold] | None = optional()
    ledger: dict[str, Any] | None = optional()  # open: reports/plan.py's ledger_vs_measured
    extra: dict[str, Any] = field(default_factory=dict)  # keys a caller added that the model does not know

    @classmethod
    def from_json(cls, text: str) -> AnalysisDocument:
        return cls.from_dict(json.loads(text))

    def finding(self, finding_id: str | None) -> Finding | None:
        """The finding ``finding_id`` (a recommendation's, the verdict's bottleneck), or None."""
        return next((f for f in self.findings if f.id == finding_id), None)
