"""A run remembered: the summary of one analysis that the run history keeps (never the trace), and
the comparison of two such summaries — the profile → fix → re-profile loop closed across time.

:class:`RunSummary` holds what a later comparison needs: the verdict, every step's duration and
per-step shares (the statistical gate tests them), the sinks, the top kernels, the ranked fixes
with their projected gains, each finding's diff metric, and the facts the comparability checks
read. :func:`diff_summaries` compares two of them; :func:`fix_outcomes` sets each earlier fix's
projected gain against the gain achieved ("projected up to 1.66×, achieved 1.41×").

Pure functions; summaries come from an :class:`~trainscope.analyzers.compare.diff.Run` (a trace analyzed
now) or from a dict (a stored run, validated field by field: a store is an input like any other).
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from typing import Literal
from typing import TypeVar
from typing import overload

from trainscope.analyzers.compare.diff import FINDING_METRICS
from trainscope.analyzers.compare.diff import GATE_METRICS
from trainscope.analyzers.compare.diff import ComparabilityCheck
from trainscope.analyzers.compare.diff import Comparison
from trainscope.analyzers.compare.diff import GateResult
from trainscope.analyzers.compare.diff import GateSide
from trainscope.analyzers.compare.diff import Run
from trainscope.analyzers.compare.diff import ShareChange
from trainscope.analyzers.compare.diff import StepTimeChange
from trainscope.analyzers.compare.diff import VerdictChange
from trainscope.analyzers.compare.diff import comparability
from trainscope.analyzers.compare.diff import gate_on
from trainscope.analyzers.compare.diff import gate_side
from trainscope.analyzers.compare.diff import judge_outcome
from trainscope.analyzers.compare.tree_diff import TreeDiff
from trainscope.analyzers.compare.tree_diff import diff_trees
from trainscope.analyzers.kernel_match import KernelChange
from trainscope.analyzers.kernel_match import KernelTime
from trainscope.analyzers.kernel_match import match_kernels
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.shapes import ShapeSignature
from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.breakdown import CATEGORY_LABELS
from trainscope.analyzers.trace.module_tree import STORED_LEVELS
from trainscope.analyzers.trace.module_tree import STORED_NODES
from trainscope.analyzers.trace.module_tree import ModuleTree
from trainscope.analyzers.trace.module_tree import Node
from trainscope.analyzers.trace.module_tree import top_levels
from trainscope.analyzers.trace.sinks import SINK_LABELS
from trainscope.analyzers.trace.sinks import SINKS

SUMMARY_SCHEMA = "trainscope.run/1"
_V = TypeVar("_V", str, bool, int, float)  # what a stored summary's leaves are read as
_D = TypeVar("_D", int, None)  # an optional leaf's default


class BadSummary(ValueError):
    """A stored summary that is not what :meth:`RunSummary.to_dict` writes."""


@dataclass(frozen=True)
class Fix:
    """One ranked fix of the analysis, with its projection (an upper bound)."""

    id: str
    finding: str
    title: str
    projected_speedup: float | None
    projected_step_ms: float | None
    basis: str


@dataclass(frozen=True)
class RunSummary:
    source: str
    format: str
    rank: int | None
    ranks: int
    device: str | None  # the analyzed GPU's name
    devices: tuple[str, ...]  # every rank's analyzed GPU ("" where none)
    has_gpu: bool
    steps_method: str
    fixed_window: bool
    verdict_axis: str
    verdict_bottleneck: str | None
    verdict_confidence: float
    verdict_summary: str
    step_ms: tuple[float, ...]  # every analyzed step's duration, in order
    step_p50_ms: float
    step_p95_ms: float
    step_mean_ms: float
    shares: dict[str, float]  # gpu_busy, data_wait and every breakdown category, % of summed step time
    sinks: dict[str, tuple[float, float]]  # sink → (% of step time, ms per step)
    top_kernels: tuple[KernelTime, ...]  # the analysis's top kernels (in the steps, on the analyzed GPU)
    fixes: tuple[Fix, ...]
    findings: dict[str, float]  # finding id → stake (% of step time)
    measures: dict[str, float | None]  # finding id → its diff metric (FINDING_METRICS)
    gate: dict[str, GateSide]  # gate metric → its value and per-step values
    memory_peak_bytes: int | None
    shapes: ShapeSignature
    warnings: tuple[str, ...] = ()
    # Where in the model: the module tree's top levels (module_tree.top_levels); None where the trace
    # records no ranges or GPU work, or where the summary predates the tree (``predates_tree``).
    tree: ModuleTree | None = None
    predates_tree: bool = False  # read from a summary written before summaries kept the tree

    @property
    def steps(self) -> int:
        return len(self.step_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SUMMARY_SCHEMA,
            "source": self.source,
            "format": self.format,
            "rank": self.rank,
            "ranks": self.ranks,
            "device": self.device,
            "devices": list(self.devices),
            "has_gpu": self.has_gpu,
            "steps_method": self.steps_method,
            "fixed_window": self.fixed_window,
            "verdict": {
                "axis": self.verdict_axis,
                "bottleneck": self.verdict_bottleneck,
                "confidence": self.verdict_confidence,
                "summary": self.verdict_summary,
            },
            "step_ms": list(self.step_ms),
            "step_time_ms": {"p50": self.step_p50_ms, "p95": self.step_p95_ms, "mean": self.step_mean_ms},
            "shares": dict(self.shares),
            "sinks": {k: {"pct": p, "ms_per_step": ms} for k, (p, ms) in self.sinks.items()},
            "top_kernels": [
                {"name": k.name, "class": k.kernel_class, "count": k.count, "total_ns": k.total_ns}
                for k in self.top_kernels
            ],
            "fixes": [
                {
                    "id": f.id,
                    "finding": f.finding,
                    "title": f.title,
                    "projected_speedup": f.projected_speedup,
                    "projected_step_ms": f.projected_step_ms,
                    "basis": f.basis,
                }
                for f in self.fixes
            ],
            "findings": dict(self.findings),
            "measures": dict(self.measures),
            "gate": {k: {"value": g.value, "steps": g.steps} for k, g in self.gate.items()},
            "memory_peak_bytes": self.memory_peak_bytes,
            "shapes": {
                "recorded": self.shapes.recorded,
                "ops": {op: sorted(s) for op, s in sorted(self.shapes.shapes.items())},
                "batch_dims": [[d, n] for d, n in sorted(self.shapes.batch_dims.items())],
            },
            "warnings": list(self.warnings),
            "tree": None if self.tree is None else tree_to_dict(self.tree),
        }

    @classmethod
    def from_dict(cls, d: object) -> RunSummary:
        """Raises :class:`BadSummary` naming the first field that is not as written."""
        r = _Reader(d, "summary")
        if r.get("schema", str) != SUMMARY_SCHEMA:
            raise BadSummary(f"summary: schema {r.raw('schema')!r} is not {SUMMARY_SCHEMA}")
        v = r.sub("verdict")
        st = r.sub("step_time_ms")
        sh = r.sub("shapes")
        ops = sh.sub("ops")
        return cls(
            source=r.get("source", str),
            format=r.get("format", str),
            rank=r.get("rank", int, none=True),
            ranks=r.get("ranks", int),
            device=r.get("device", str, none=True),
            devices=tuple(r.list("devices", str)),
            has_gpu=r.get("has_gpu", bool),
            steps_method=r.get("steps_method", str),
            fixed_window=r.get("fixed_window", bool),
            verdict_axis=v.get("axis", str),
            verdict_bottleneck=v.get("bottleneck", str, none=True),
            verdict_confidence=v.get("confidence", float),
            verdict_summary=v.get("summary", str),
            step_ms=tuple(r.list("step_ms", float)),
            step_p50_ms=st.get("p50", float),
            step_p95_ms=st.get("p95", float),
            step_mean_ms=st.get("mean", float),
            shares={k: r.sub("shares").get(k, float) for k in r.sub("shares")},
            sinks={
                k: (r.sub("sinks").sub(k).get("pct", float), r.sub("sinks").sub(k).get("ms_per_step", float))
                for k in r.sub("sinks")
            },
            top_kernels=tuple(
                KernelTime(k.get("name", str), k.get("class", str), k.get("count", int), k.get("total_ns", int))
                for k in r.items("top_kernels")
            ),
            fixes=tuple(
                Fix(
                    f.get("id", str),
                    f.get("finding", str),
                    f.get("title", str),
                    f.get("projected_speedup", float, none=True),
                    f.get("projected_step_ms", float, none=True),
                    f.get("basis", str),
                )
                for f in r.items("fixes")
            ),
            findings={k: r.sub("findings").get(k, float) for k in r.sub("findings")},
            measures={k: r.sub("measures").get(k, float, none=True) for k in r.sub("measures")},
            gate={
                k: GateSide(
                    r.sub("gate").sub(k).get("value", float, none=True),
                    r.sub("gate").sub(k).list("steps", float, none=True),
                )
                for k in r.sub("gate")
            },
            memory_peak_bytes=r.get("memory_peak_bytes", int, none=True),
            shapes=ShapeSignature(
                sh.get("recorded", bool),
                {op: frozenset(ops.list(op, str)) for op in ops},
                {int(p[0]): int(p[1]) for p in sh.pairs("batch_dims")},
            ),
            warnings=tuple(r.list("warnings", str)),
            # a summary written before the tree was kept has no "tree" key: it loads, without one
            tree=tree_from_dict(r.sub("tree")) if r.raw("tree") is not None else None,
            predates_tree="tree" not in r.d,
        )


def _node_dict(n: Node) -> dict[str, Any]:
    """One stored node; the keys after ``bound`` only where they differ from their default (no % of
    roof, one instance, no kernel, no children left out, no children): a summary stays small."""
    d: dict[str, Any] = {
        "name": n.name,
        "kind": n.kind,
        "count": n.count,
        "host_ns": n.host_ns,
        "gpu_ns": n.gpu_ns_inclusive,
        "self_ns": n.gpu_ns_exclusive,
        "bound": n.bound,
    }
    if n.share_of_peak_pct is not None:
        d["roof_pct"] = n.share_of_peak_pct
    if n.instances != 1:
        d["instances"] = n.instances
    if n.top_kernels:
        d["kernel"] = list(n.top_kernels[0])
    if n.omitted:
        d["omitted"] = n.omitted
    if n.children:
        d["children"] = [_node_dict(c) for c in n.children]
    return d


def tree_to_dict(t: ModuleTree) -> dict[str, Any]:
    """A stored tree (:func:`module_tree.top_levels`) as the summary keeps it; :func:`tree_from_dict`
    reads it back."""
    return {
        "kept": f"the first {STORED_LEVELS} levels, then the heaviest nodes by GPU time; {STORED_NODES} nodes at most",
        "gpu_ns": t.gpu_ns,
        "windows": t.windows,
        "ranges": dict(t.ranges),
        "unlinked": t.unlinked,
        "omitted": t.omitted,
        "nodes": [_node_dict(n) for n in t.roots],
    }


def _node_from(r: _Reader, parent: tuple[str, ...]) -> Node:
    name = r.get("name", str)
    k = r.raw("kernel")
    opt = r.optional
    kernel: list[tuple[str, int, int]] = []
    if k is not None:
        if not isinstance(k, builtins.list) or len(k) != 3:
            raise BadSummary(f"{r.where}.kernel: expected [name, calls, ns] or null")
        kernel = [
            (
                r._cast(k[0], str, f"{r.where}.kernel[0]", False),
                r._cast(k[1], int, f"{r.where}.kernel[1]", False),
                r._cast(k[2], int, f"{r.where}.kernel[2]", False),
            )
        ]
    path = (*parent, name)
    return Node(
        path=path,
        name=name,
        kind=r.get("kind", str),
        count=r.get("count", int),
        host_ns=r.get("host_ns", int),
        gpu_ns_inclusive=r.get("gpu_ns", int),
        gpu_ns_exclusive=r.get("self_ns", int),
        flops=None,
        bytes=None,
        tflops=None,
        gbps=None,
        bound=r.get("bound", str),
        share_of_peak_pct=opt("roof_pct", float, None),
        top_kernels=kernel,
        instances=opt("instances", int, 1),
        children=[_node_from(c, path) for c in r.items("children")] if "children" in r.d else [],
        omitted=opt("omitted", int, 0),
    )


def tree_from_dict(r: _Reader) -> ModuleTree:
    """The (partial) module tree of a stored summary: the nodes it kept, each with the number of
    children it left out; raises :class:`BadSummary` naming the first field not as written."""
    ranges = r.sub("ranges")
    return ModuleTree(
        roots=[_node_from(n, ()) for n in r.items("nodes")],
        gpu_ns=r.get("gpu_ns", int),
        windows=r.get("windows", int),
        ranges={k: ranges.get(k, int) for k in ranges},
        unlinked=r.get("unlinked", int),
        notes=[],
        omitted=r.get("omitted", int),
    )


class _Reader:
    """Typed, bounded reads of a JSON-like dict; every miss is one :class:`BadSummary` line."""

    def __init__(self, d: object, where: str) -> None:
        if not isinstance(d, dict):
            raise BadSummary(f"{where}: not an object")
        self.d, self.where = d, where

    def raw(self, key: str) -> object:
        return self.d.get(key)

    def keys(self) -> list[str]:
        if not all(isinstance(k, str) for k in self.d):
            raise BadSummary(f"{self.where}: a key is not a string")
        return list(self.d)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def _cast(self, value: object, typ: type[_V], where: str, none: bool) -> _V:
        """``value`` as ``typ``: str, bool and int exactly (a bool is no int), float from any finite
        number; anything else is a :class:`BadSummary` (``none`` only words it)."""
        if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise BadSummary(f"{where}: not a finite number")
            value = float(value)
        if isinstance(value, typ) and (type(value) is typ if typ in (str, bool) else not isinstance(value, bool)):
            return value
        raise BadSummary(f"{where}: expected {typ.__name__}{' or null' if none else ''}, got {type(value).__name__}")

    @overload
    def get(self, key: str, typ: type[_V], none: Literal[False] = False) -> _V: ...
    @overload
    def get(self, key: str, typ: type[_V], none: Literal[True]) -> _V | None: ...

    def get(self, key: str, typ: type[_V], none: bool = False) -> _V | None:
        if key not in self.d:
            raise BadSummary(f"{self.where}.{key}: missing")
        value = self.d[key]
        if value is None and none:
            return None
        return self._cast(value, typ, f"{self.where}.{key}", none)

    def optional(self, key: str, typ: type[_V], default: _D) -> _V | _D:
        """``key`` as ``typ`` where present (null is not a value), else ``default``."""
        if key not in self.d:
            return default
        return self._cast(self.d[key], typ, f"{self.where}.{key}", False)

    def sub(self, key: str) -> _Reader:
        return _Reader(self.d.get(key), f"{self.where}.{key}")

    @overload
    def list(self, key: str, typ: type[_V], none: Literal[False] = False) -> builtins.list[_V]: ...
    @overload
    def list(self, key: str, typ: type[_V], none: Literal[True]) -> builtins.list[_V] | None: ...

    def list(self, key: str, typ: type[_V], none: bool = False) -> builtins.list[_V] | None:
        v = self.d.get(key)
        if v is None and none:
            return None
        if not isinstance(v, builtins.list):
            raise BadSummary(f"{self.where}.{key}: expected a list")
        return [self._cast(x, typ, f"{self.where}.{key}[]", False) for x in v]

    def items(self, key: str) -> builtins.list[_Reader]:
        v = self.d.get(key)
        if not isinstance(v, builtins.list):
            raise BadSummary(f"{self.where}.{key}: expected a list")
        return [_Reader(x, f"{self.where}.{key}[{i}]") for i, x in enumerate(v)]

    def pairs(self, key: str) -> builtins.list[tuple[int, int]]:
        v = self.d.get(key)
        if not isinstance(v, builtins.list) or not all(isinstance(p, builtins.list) and len(p) == 2 for p in v):
            raise BadSummary(f"{self.where}.{key}: expected a list of pairs")
        return [
            (self._cast(a, int, self.where + "." + key, False), self._cast(b, int, self.where + "." + key, False))
            for a, b in v
        ]


def summarize(run: Run) -> RunSummary:
    """The summary of a run analyzed now (a diff's side, or a report's main rank as a Run)."""
    a: Analysis = run.analysis
    bd = a.breakdown
    shares = {"gpu_busy": bd.gpu_busy_pct, "data_wait": bd.data_wait_pct}
    shares.update({c: bd.share_pct(c) for c in bd.ns})
    sinks = {}
    if a.sinks is not None:
        sinks = {k: (a.sinks.pct(k), a.sinks.ms_per_step(k)) for k in SINKS if k in a.sinks.by_key}
    mem = [m.peak_allocated for m in a.memory if m.device == a.device]
    gate = {}
    for name in GATE_METRICS:
        try:
            gate[name] = gate_side(run, name)
        except (ValueError, ZeroDivisionError):  # a metric this run cannot measure: stored as unmeasured
            gate[name] = GateSide(None, None)
    return RunSummary(
        source=run.path,
        format=a.source_format,
        rank=a.rank,
        ranks=run.ranks,
        device=a.device_name,
        devices=tuple(run.device_names),
        has_gpu=run.has_gpu,
        steps_method=a.segmentation.method,
        fixed_window=run.fixed_window,
        verdict_axis=a.verdict.axis,
        verdict_bottleneck=a.verdict.bottleneck,
        verdict_confidence=float(a.verdict.confidence),
        verdict_summary=a.verdict.summary,
        step_ms=tuple(s.duration_ns / 1e6 for s in bd.steps),
        step_p50_ms=bd.step_ms.p50,
        step_p95_ms=bd.step_ms.p95,
        step_mean_ms=bd.step_ms.mean,
        shares=shares,
        sinks=sinks,
        top_kernels=tuple(KernelTime(k.name, k.kernel_class, k.count, k.total_ns) for k in a.kernels.top),
        fixes=tuple(
            Fix(r.id, r.finding, r.title, r.projected_speedup, r.projected_step_ms, r.basis) for r in a.recommendations
        ),
        findings={f.id: float(f.stake_pct) for f in a.findings},
        measures={fid: _finite(fm.value(a)) for fid, fm in FINDING_METRICS.items()},
        gate=gate,
        memory_peak_bytes=int(mem[0]) if mem else None,
        shapes=run.shapes,
        warnings=tuple(run.warnings),
        tree=None if a.tree is None else top_levels(a.tree),
    )


def _finite(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


# -- two summaries compared --------------------------------------------------------------------


@dataclass(frozen=True)
class FixOutcome:
    """An earlier fix against what the change achieved."""

    recommendation: str
    finding: str
    title: str
    projected_speedup: float | None  # BEFORE's upper bound
    status: str  # "resolved" | "improved" | "unchanged" | "worse" | "unknown" (diff.judge_outcome)
    metric: str
    unit: str
    before: float | None
    after: float | None
    achieved_speedup: float | None  # BEFORE's mean step ÷ AFTER's, where the fix was addressed
    shared_with: tuple[str, ...]  # other fixes addressed by the same change (the speedup is theirs too)
    note: str

    @property
    def addressed(self) -> bool:
        return self.status in ("resolved", "improved")

    @property
    def line(self) -> str | None:
        """``fix X: projected up to 1.66×, achieved 1.41×`` for an addressed fix with a projection."""
        if not self.addressed or self.projected_speedup is None or self.achieved_speedup is None:
            return None
        shared = f" (together with {', '.join(self.shared_with)})" if self.shared_with else ""
        return (
            f"fix {self.recommendation}: projected up to {self.projected_speedup:.2f}×, "
            f"achieved {self.achieved_speedup:.2f}×{shared}"
        )


def fix_outcomes(before: RunSummary, after: RunSummary, rules: Rules | None = None) -> list[FixOutcome]:
    """Each of BEFORE's fixes: was its finding resolved or reduced in AFTER (the same rule as the
    diff's "earlier recommendations"), and where it was, the speedup achieved — BEFORE's mean step
    over AFTER's, the basis the projection is computed on — beside the speedup projected. No speedup
    is achieved-measured where a side is a fixed capture window (its length is the capture's)."""
    rules = rules or Rules()
    noise = rules.value("diff.noise_pts")
    unknown = (
        "AFTER has no GPU activity to judge by"
        if after.verdict_axis == "insufficient_evidence" and not after.has_gpu and before.has_gpu
        else None
    )
    judged = []
    for f in before.fixes:
        fm = FINDING_METRICS.get(f.finding)
        b, a = before.measures.get(f.finding), after.measures.get(f.finding)
        status, note = judge_outcome(f.finding, f.finding in after.findings, b, a, noise, before.step_mean_ms, unknown)
        judged.append((f, fm, b, a, status, note))
    addressed = [f.id for f, *_, status, _ in judged if status in ("resolved", "improved")]
    achieved = before.step_mean_ms / after.step_mean_ms if after.step_mean_ms > 0 else None
    if before.fixed_window or after.fixed_window:
        # A capture window without step markers lasts as long as the capture, not as the work: its
        # length measures no speedup (the diff compares the work per window instead).
        achieved = None
    out = []
    for f, fm, b, a, status, note in judged:
        ok = status in ("resolved", "improved")
        out.append(
            FixOutcome(
                f.id,
                f.finding,
                f.title,
                f.projected_speedup,
                status,
                fm.label if fm else "",
                fm.unit if fm else "",
                b,
                a,
                achieved if ok else None,
                tuple(x for x in addressed if x != f.id) if ok else (),
                note,
            )
        )
    return out


@dataclass(frozen=True)
class SummaryDiff(Comparison):
    """Two summaries compared: what ``diff`` shows when a side is a stored run."""

    before: RunSummary
    after: RunSummary
    verdict: VerdictChange
    step_time: list[StepTimeChange]
    shares: list[ShareChange]  # gpu_busy, data_wait, then the breakdown categories
    sinks: list[ShareChange]  # every sink either run has, % of step time and ms per step
    kernels: list[KernelChange]  # the top kernels of each run, matched
    fixes: list[FixOutcome]
    comparability: list[ComparabilityCheck]
    labels: tuple[str, str] = ("BEFORE", "AFTER")
    tree: TreeDiff | None = None  # the stored trees' top levels node by node (both runs keep one)


@dataclass(frozen=True)
class _Segmentation:
    method: str


@dataclass(frozen=True)
class _AnalysisFacts:
    device_name: str | None
    segmentation: _Segmentation


@dataclass(frozen=True)
class _Facts:
    """What :func:`analyzers.compare.diff.comparability` reads of a run, from a summary."""

    analysis: _AnalysisFacts
    has_gpu: bool
    device_names: tuple[str, ...]
    ranks: int
    steps: int
    fixed_window: bool
    shapes: ShapeSignature


def _facts(s: RunSummary) -> _Facts:
    return _Facts(
        _AnalysisFacts(s.device, _Segmentation(s.steps_method)),
        s.has_gpu,
        s.devices,
        s.ranks,
        s.steps,
        s.fixed_window,
        s.shapes,
    )


SHARE_LABELS = {"gpu_busy": "GPU busy (kernels, copies, memsets)", "data_wait": "host waiting on DataLoader __next__"}


def diff_summaries(
    before: RunSummary, after: RunSummary, rules: Rules | None = None, labels: tuple[str, str] = ("BEFORE", "AFTER")
) -> SummaryDiff:
    step_time = [
        StepTimeChange(s, getattr(before, f"step_{s}_ms"), getattr(after, f"step_{s}_ms"))
        for s in ("p50", "p95", "mean")
    ]
    verdict = VerdictChange(
        before.verdict_axis,
        after.verdict_axis,
        before.verdict_bottleneck,
        after.verdict_bottleneck,
        before.verdict_confidence,
        after.verdict_confidence,
        before.verdict_summary,
        after.verdict_summary,
    )
    names = [k for k in ("gpu_busy", "data_wait") if k in before.shares or k in after.shares]
    names += [k for k in CATEGORY_LABELS if k in before.shares or k in after.shares]
    shares = [
        ShareChange(k, SHARE_LABELS.get(k) or CATEGORY_LABELS[k], before.shares.get(k, 0.0), after.shares.get(k, 0.0))
        for k in names
    ]
    sinks = [
        ShareChange(
            k,
            SINK_LABELS[k],
            before.sinks.get(k, (0.0, 0.0))[0],
            after.sinks.get(k, (0.0, 0.0))[0],
            before.sinks.get(k, (0.0, 0.0))[1],
            after.sinks.get(k, (0.0, 0.0))[1],
        )
        for k in SINKS
        if k in before.sinks or k in after.sinks
    ]
    kernels = match_kernels(
        list(before.top_kernels), list(after.top_kernels), max(1, before.steps), max(1, after.steps)
    )
    # _Facts stands in for a Run with what comparability reads; the ignore goes when diff.comparability
    # takes a protocol of those facts (diff.py is typed after the merge of the issue 22/23/24/27 work).
    return SummaryDiff(
        before,
        after,
        verdict,
        step_time,
        shares,
        sinks,
        kernels,
        fix_outcomes(before, after, rules),
        # _Facts carries the fields comparability reads of a Run (a structural stand-in)
        comparability(_facts(before), _facts(after)),  # type: ignore[arg-type]
        labels,
        diff_trees(before.tree, after.tree) if before.tree is not None and after.tree is not None else None,
    )


def summary_gate(d: SummaryDiff, metric: str, threshold: float, alpha: float = 0.05) -> GateResult:
    """The gate (:func:`analyzers.compare.diff.gate_on`) on two summaries' stored values and steps."""
    none = GateSide(None, None)
    return gate_on(metric, d.before.gate.get(metric, none), d.after.gate.get(metric, none), threshold, alpha)
