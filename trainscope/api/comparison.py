"""``diff``: two runs analyzed the same way and compared, with an optional statistical gate.

A side is a trace (anything ``analyze`` reads) or a stored run of the history (``12``, ``latest``,
``baseline:resnet50``: :mod:`trainscope.api.store`). Two traces give the full comparison
(:class:`~trainscope.analyzers.compare.diff.RunDiff`: every kernel, every rank pair); as soon as one side is a
stored run, both are compared by their summaries (:class:`~trainscope.analyzers.compare.history.SummaryDiff`:
verdict, step times, shares, sinks, top kernels, fixes). Either way the gate tests every step
(:func:`trainscope.analyzers.compare.diff.gate_on`) and each of BEFORE's fixes is set against the gain the
change achieved (:class:`~trainscope.analyzers.compare.history.FixOutcome`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Union

from trainscope.analyzers.compare.diff import GATE_METRICS
from trainscope.analyzers.compare.diff import GateUnavailable
from trainscope.analyzers.compare.diff import check_gate
from trainscope.analyzers.compare.diff import diff_runs
from trainscope.analyzers.compare.diff import gate_blockers
from trainscope.analyzers.compare.diff import refuse_gate
from trainscope.analyzers.compare.diff import run_from_summaries
from trainscope.analyzers.compare.history import RunSummary
from trainscope.analyzers.compare.history import SummaryDiff
from trainscope.analyzers.compare.history import diff_summaries
from trainscope.analyzers.compare.history import fix_outcomes
from trainscope.analyzers.compare.history import summarize
from trainscope.analyzers.compare.history import summary_gate
from trainscope.analyzers.compare.tree_diff import NoSuchNode
from trainscope.analyzers.compare.tree_diff import node_gate as judge
from trainscope.analyzers.compare.tree_diff import parse_budget
from trainscope.analyzers.compare.tree_diff import refuse_node_gate
from trainscope.api.analysis import analyze
from trainscope.api.errors import EXIT_BAD_INPUT
from trainscope.api.errors import EXIT_OK
from trainscope.api.errors import EXIT_REGRESSION
from trainscope.api.errors import BadInput
from trainscope.api.errors import Progress
from trainscope.api.errors import Regression
from trainscope.api.errors import silent
from trainscope.api.inputs import InputDescription
from trainscope.api.inputs import describe_input
from trainscope.api.rendered import Rendered
from trainscope.api.report import shown
from trainscope.api.rules import resolve_rules
from trainscope.api.store import RunStore
from trainscope.api.store import StoredRun
from trainscope.reports.diff_document import build_diff_document
from trainscope.reports.diff_document import fixes_list
from trainscope.reports.diff_markdown import render_diff_markdown
from trainscope.reports.diff_text import render_diff_text
from trainscope.reports.history import build_summary_diff_document
from trainscope.reports.history import render_summary_diff_markdown
from trainscope.reports.history import render_summary_diff_text
from trainscope.reports.oneline import diff_line

if TYPE_CHECKING:
    from trainscope.analyzers.compare.diff import GateResult
    from trainscope.analyzers.compare.diff import Run
    from trainscope.analyzers.compare.diff import RunDiff
    from trainscope.analyzers.compare.history import FixOutcome
    from trainscope.analyzers.compare.history import RunSummary
    from trainscope.analyzers.compare.history import SummaryDiff
    from trainscope.analyzers.compare.tree_diff import NodeBudget
    from trainscope.analyzers.compare.tree_diff import NodeGateResult
    from trainscope.analyzers.rules import Rules
    from trainscope.api.store import RunStore
    from trainscope.api.store import StoredRun

Side = Union[str, "os.PathLike[str]", "StoredRun", "RunSummary"]
Comparison = Union["RunDiff", "SummaryDiff"]
"""What :attr:`DiffResult.diff` holds: two traces compared in full, or two runs by their summaries."""


@dataclass(repr=False)
class DiffResult(Rendered):
    """What a change did: ``diff`` (a :class:`RunDiff` of two traces, or a :class:`SummaryDiff` when a
    side is a stored run), each earlier fix's projected and achieved gain (``fixes``), and, when a
    gate was asked for, ``gate``; ``node_gates``: the node budgets checked (``diff --gate``, see
    :func:`node_gate`). ``before_run`` / ``after_run``: the stored runs compared, if any."""

    KIND = "diff"  # its kind in the output format table (reports/formats.py)

    diff: Comparison
    gate: GateResult | None = None
    fixes: list[FixOutcome] = field(default_factory=list)
    before_run: StoredRun | None = None
    after_run: StoredRun | None = None
    rules: Rules | None = None
    node_gates: list[NodeGateResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.fixes:
            self.fixes = _fixes(self.diff, self.rules)

    @property
    def from_summaries(self) -> bool:
        return isinstance(self.diff, SummaryDiff)

    @property
    def regressed(self) -> bool:
        return bool(self.gate is not None and self.gate.regressed) or any(g.regressed for g in self.node_gates)

    @property
    def refused(self) -> bool:
        """The gate was asked for but not run: the runs are not comparable (exit 2)."""
        return bool(self.gate is not None and self.gate.refused) or any(g.refused for g in self.node_gates)

    @property
    def exit_code(self) -> int:
        if self.refused:
            return EXIT_BAD_INPUT
        return EXIT_REGRESSION if self.regressed else EXIT_OK

    def gate_line(self) -> str:
        """The gate's one line (with the comparability caveat), as printed on stderr."""
        if self.gate is None:
            return ""
        d = self.diff
        caveat = ""
        if not d.comparable and not self.gate.refused:
            caveat = (
                " [runs not comparable: " + ", ".join(c.check for c in d.comparability if c.status == "differ") + "]"
            )
        return f"{self.gate.reason}{caveat}"

    def gate_lines(self) -> list[str]:
        """Every gate's line: the step-level gate's (:meth:`gate_line`), then each node budget's."""
        lines = [self.gate_line()] if self.gate is not None else []
        caveat = ""
        if self.node_gates and not self.diff.comparable:
            caveat = (
                " [runs not comparable: "
                + ", ".join(c.check for c in self.diff.comparability if c.status == "differ")
                + "]"
            )
        return lines + [g.reason + ("" if g.refused else caveat) for g in self.node_gates]

    def fix_lines(self) -> list[str]:
        """ "fix X: projected up to 1.66×, achieved 1.41×" for every addressed fix with a projection."""
        return [line for f in self.fixes if (line := f.line)]

    def check(self) -> DiffResult:
        """Raise :class:`Regression` when the gate failed, :class:`BadInput` when it was refused (the
        runs are not comparable); return self otherwise."""
        if self.refused:
            raise BadInput("; ".join(line for line in self.gate_lines() if "not run" in line) or self.gate_line())
        if self.regressed:
            lines = self.gate_lines()
            raise Regression("; ".join(line for line in lines if line.startswith("regression")) or lines[0], self)
        return self

    def to_dict(self) -> dict[str, Any]:
        d = self.diff
        if isinstance(d, SummaryDiff):  # from_summaries
            return build_summary_diff_document(d, self.gate, self.before_run, self.after_run, self.node_gates)

        doc = build_diff_document(d, self.gate, self.node_gates)
        doc["fixes_achieved"] = fixes_list(self.fixes)
        return doc

    def to_text(self, color: bool = False) -> str:
        if self.from_summaries:
            return render_summary_diff_text(shown(self.to_dict()), color=color)

        return render_diff_text(shown(self.to_dict()), color=color)

    def to_markdown(self) -> str:
        if self.from_summaries:
            return render_summary_diff_markdown(shown(self.to_dict()))

        return render_diff_markdown(shown(self.to_dict()))

    def __repr__(self) -> str:
        """One line: before → after, the headline number, the verdict change and the gate."""

        return diff_line(self.diff, self.gate, self.fixes)


def _fixes(d: Comparison, rules: Rules | None) -> list[FixOutcome]:
    if isinstance(d, SummaryDiff):
        return list(d.fixes)
    from dataclasses import replace

    # The full comparison's judgement wins (it judges fixed capture windows per unit of work) where
    # it agrees on whether the fix was addressed (an achieved speedup is measured only then).
    judged = {o.recommendation: o for o in d.recommendations}
    out = []
    for f in fix_outcomes(summarize(d.before), summarize(d.after), rules):
        o = judged.get(f.recommendation)
        if o is not None and o.addressed == f.addressed:
            f = replace(f, status=o.status, note=o.note)
        out.append(f)
    return out


def _check_metric(metric: str) -> None:
    if metric not in GATE_METRICS:
        raise BadInput(f"unknown metric {metric!r} (one of: {', '.join(GATE_METRICS)})")


def gate(
    result: DiffResult | RunDiff | SummaryDiff,
    metric: str = "step_p50",
    fail_if_slower: float = 0.0,
    *,
    rules: Rules | None = None,
    alpha: float | None = None,
    gate_anyway: bool = False,
) -> DiffResult:
    """Check (or re-check) the gate on an existing comparison: a regression when ``metric`` got worse
    by more than ``fail_if_slower`` (relative % for times and memory, percentage points for shares)
    *and* AFTER's steps are worse than BEFORE's by a one-sided Mann–Whitney test at level ``alpha``
    (default: the ``gate.alpha`` threshold, 0.05). Runs that are not comparable (another GPU, other
    ranks, batch shapes or step method; unequal step counts do not matter to the rank test) are not
    gated — the result's gate is refused, exit 2 — unless ``gate_anyway``. Raises :class:`BadInput` when the
    metric cannot be measured (or tested) in one of the runs."""

    _check_metric(metric)
    base = result if isinstance(result, DiffResult) else DiffResult(result, rules=rules)
    d = base.diff
    rules = resolve_rules(rules or base.rules, None)
    alpha = rules.value("gate.alpha") if alpha is None else float(alpha)
    if not 0 < alpha < 1:
        raise BadInput(f"gate.alpha must be between 0 and 1, got {alpha:g}")
    if gate_blockers(d.comparability) and not gate_anyway:
        g = refuse_gate(metric, fail_if_slower, d.comparability)
    else:
        try:
            g = (
                summary_gate(d, metric, fail_if_slower, alpha)
                if isinstance(d, SummaryDiff)
                else check_gate(d, metric, fail_if_slower, alpha)
            )
        except GateUnavailable as e:
            raise BadInput(str(e)) from None
    return DiffResult(d, g, base.fixes, base.before_run, base.after_run, rules, list(base.node_gates))


def node_budget(text: str) -> NodeBudget:
    """A node budget from its text (``'Qwen2DecoderLayer_*.Qwen2MLP_*:+5%'``: each matching node's GPU time
    per step may grow by at most 5 %; ``'…:-3pts'``: its share of peak, % of roof, may fall by at most 3
    points). Raises :class:`BadInput`."""

    try:
        return parse_budget(text)
    except ValueError as e:
        raise BadInput(str(e)) from None


def node_gate(
    result: DiffResult | RunDiff,
    budgets: list[str | NodeBudget],
    *,
    rules: Rules | None = None,
    gate_anyway: bool = False,
) -> DiffResult:
    """Check node budgets (``diff --gate``) on a comparison: a regression (exit 3) when a node matching a
    budget's pattern grew by more than it allows (analyzers/compare/tree_diff.py: nodes matched by path; the
    pattern's names match the end of a node's path, ``*`` for any name part). A stored run keeps the
    tree's top levels (analyzers/trace/module_tree.py ``top_levels``), so a side may be a stored run. Runs that
    are not comparable are not gated (exit 2) unless ``gate_anyway``, as for :func:`gate`. Raises
    :class:`BadInput` when a run has no module tree (its trace records no ranges or GPU work, or it was
    stored before runs kept the tree), or when no node matches a pattern."""

    base = result if isinstance(result, DiffResult) else DiffResult(result, rules=rules)
    d = base.diff
    parsed = [b if not isinstance(b, str) else node_budget(b) for b in budgets]
    tree = d.tree
    if tree is None:
        raise BadInput(_no_tree(base))
    blockers = gate_blockers(d.comparability)
    out = []
    for b in parsed:
        if blockers and not gate_anyway:
            why = "; ".join(f"{c.check} {c.before} → {c.after}" for c in blockers)
            out.append(
                refuse_node_gate(
                    b,
                    f"the runs are not comparable ({why}); compare like with like, or pass --gate-anyway",
                    ", ".join(c.check for c in blockers),
                )
            )
            continue
        try:
            out.append(judge(tree, b))
        except NoSuchNode as e:
            raise BadInput(str(e)) from None
    return DiffResult(d, base.gate, base.fixes, base.before_run, base.after_run, base.rules or rules, out)


def _summary_label(s: RunSummary) -> str:
    return os.path.basename(s.source.rstrip("/")) or s.source


def _stale_line(labels: list[str]) -> str:
    return (
        f"cannot check a node budget: {' and '.join(labels)} {'was' if len(labels) == 1 else 'were'} saved before "
        "stored runs kept the module tree's top levels (save it again from its trace, or compare two traces)"
    )


def _no_tree(result: DiffResult) -> str:
    """Why a comparison has no tree to gate nodes on, in one line: a side stored before runs kept the
    tree, or a side whose trace records no ranges or GPU work."""
    d = result.diff
    if isinstance(d, SummaryDiff):  # from_summaries
        sides = list(zip(d.labels, (d.before, d.after)))
        stale = [label for label, s in sides if s.tree is None and s.predates_tree]
        if stale:
            return _stale_line(stale)
        missing = [label for label, s in sides if s.tree is None]
    else:
        missing = [side for side, run in (("BEFORE", d.before), ("AFTER", d.after)) if run.analysis.tree is None]
    return (
        "cannot check a node budget: "
        + " and ".join(missing)
        + f" record{'s' if len(missing) == 1 else ''} no ranges or GPU work (no module tree)"
    )


def _analyzed(
    label: str,
    path: InputDescription,
    rules: Rules,
    progress: Progress,
    i: int,
    options: Mapping[str, Any] | None = None,
) -> Run:
    """One side: ``analyze(path)`` with the same options as every analysis (the same reader, rank
    map and reduce, so a side's sinks are ``analyze``'s), kept as a :class:`Run`."""

    def side(stage: str, fraction: float | None) -> None:
        progress(f"{label.lower()}: {stage}", None if fraction is None else (i + fraction) / 2)

    try:
        report = analyze(path, rules=rules, progress=side, **dict(options or {}))
    except BadInput as e:
        raise BadInput(f"{label}: {e}") from None
    return run_from_summaries(path.given, report.rank_summaries(), report.ranks, list(report.traces.warnings))


def _store(store: RunStore | str | os.PathLike[str] | None, read_only: bool = False) -> RunStore:
    return store if isinstance(store, RunStore) else RunStore(store, read_only=read_only)


def resolve_side(
    side: Side, store: RunStore | str | os.PathLike[str] | None = None
) -> StoredRun | RunSummary | InputDescription:
    """A stored run for a run reference (``12``, ``latest``, ``baseline:TAG``), the summary as given,
    or the input a path names (:func:`trainscope.api.inputs.describe_input`)."""

    if isinstance(side, (StoredRun, RunSummary)):
        return side
    described = describe_input(side, runs=True)
    if described.kind == "run":  # read-only: naming a run never creates or migrates a store
        return _store(store, read_only=True).get(described.given)
    return described


def diff(
    before: Side,
    after: Side,
    *,
    rules: Rules | None = None,
    thresholds: Mapping[str, float] | None = None,
    metric: str = "step_p50",
    fail_if_slower: float | None = None,
    progress: Progress | None = None,
    store: RunStore | str | os.PathLike[str] | None = None,
    gate_anyway: bool = False,
    step_range: str | None = None,
    peak_tflops: float | None = None,
    peak_bandwidth: float | None = None,
    jobs: int | None = None,
    dask: str | Any | None = None,
    node_budgets: list[str] | None = None,
    cache: bool = False,
) -> DiffResult:
    """Compare BEFORE and AFTER: traces (each analyzed by :func:`~trainscope.api.analyze` with the
    same options: ``step_range``, ``peak_tflops``, ``peak_bandwidth``, ``jobs``, ``dask``), stored
    runs (``12``, ``latest[:TAG]``, ``baseline[:TAG]`` in ``store``, or :class:`StoredRun` /
    :class:`RunSummary` objects), or one of each. With ``fail_if_slower`` the gate on ``metric`` is
    checked (see :func:`gate`, :attr:`DiffResult.regressed` and :meth:`DiffResult.check`); with
    ``node_budgets`` (``['Qwen2MLP_*:+5%']``) the node-level gate (:func:`node_gate`). ``cache``: read
    each trace file through the trace cache (:mod:`trainscope.api.trace_cache`). Raises
    :class:`BadInput`."""

    rules = resolve_rules(rules, thresholds)
    _check_metric(metric)
    budgets = [node_budget(b) for b in node_budgets or []]  # a malformed budget fails before any analysis
    progress = progress or silent
    sides = [resolve_side(before, store), resolve_side(after, store)]
    if budgets:  # a run stored before runs kept the tree cannot be gated by node: said before any analysis
        stale = [s.label for s in sides if isinstance(s, StoredRun) and s.summary.predates_tree]
        stale += [_summary_label(s) for s in sides if isinstance(s, RunSummary) and s.predates_tree]
        if stale:
            raise BadInput(_stale_line(stale))
    options: dict[str, Any] = {
        "step_range": step_range,
        "peak_tflops": peak_tflops,
        "peak_bandwidth": peak_bandwidth,
        "jobs": jobs,
        "dask": dask,
        "trace_cache": cache,
    }
    paths = [s for s in sides if isinstance(s, InputDescription)]
    if len(paths) == len(sides):
        runs = [
            _analyzed(label, s, rules, progress, i, options)
            for i, (label, s) in enumerate((("BEFORE", paths[0]), ("AFTER", paths[1])))
        ]
        result = DiffResult(diff_runs(runs[0], runs[1], rules), rules=rules)
    else:
        summaries: list[RunSummary] = []
        labels: list[str] = []
        for i, (label, s) in enumerate((("BEFORE", sides[0]), ("AFTER", sides[1]))):
            if isinstance(s, StoredRun):
                summaries.append(s.summary)
                labels.append(s.label)
            elif isinstance(s, RunSummary):
                summaries.append(s)
                labels.append(_summary_label(s))
            else:
                summaries.append(summarize(_analyzed(label, s, rules, progress, i, options)))
                labels.append(os.path.basename(s.given.rstrip("/")) or s.given)
        d = diff_summaries(summaries[0], summaries[1], rules, (labels[0], labels[1]))
        result = DiffResult(
            d,
            rules=rules,
            before_run=sides[0] if isinstance(sides[0], StoredRun) else None,
            after_run=sides[1] if isinstance(sides[1], StoredRun) else None,
        )
    if fail_if_slower is not None:
        result = gate(result, metric, fail_if_slower, rules=rules, gate_anyway=gate_anyway)
    if budgets:
        result = node_gate(result, list(budgets), rules=rules, gate_anyway=gate_anyway)
    return result


def save_diff(
    result: DiffResult,
    store: RunStore | str | os.PathLike[str] | None = None,
    *,
    tag: str | None = None,
    saved_by: str = "diff",
) -> tuple[StoredRun, StoredRun, int]:
    """``diff --save``: every side that was a trace is saved as a run (with ``tag``), and the
    projected and achieved gains of BEFORE's addressed fixes are recorded between the two runs.
    Returns (BEFORE's run, AFTER's run, outcomes recorded); ``result`` is left as it was
    (``dataclasses.replace(result, before_run=…, after_run=…)`` is the comparison of the saved runs)."""

    st = _store(store)
    d = result.diff
    runs: list[StoredRun] = []
    for side, stored in (("before", result.before_run), ("after", result.after_run)):
        if stored is not None:
            runs.append(stored)
            continue
        summary = getattr(d, side) if result.from_summaries else summarize(getattr(d, side))
        runs.append(st.save(summary, tag=tag, saved_by=saved_by))
    return runs[0], runs[1], st.record_outcomes(runs[0], runs[1], result.fixes)
