"""``diff``: two runs analyzed the same way and compared, with an optional gate."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from trainscope.api.analysis import open_input
from trainscope.api.errors import EXIT_OK, EXIT_REGRESSION, BadInput, Progress, Regression, bad_input, silent
from trainscope.api.report import shown
from trainscope.api.rules import resolve_rules

if TYPE_CHECKING:
    from trainscope.analyzers.diff import GateResult, RunDiff
    from trainscope.analyzers.rules import Rules


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

        return render_diff_text(shown(self.to_dict()), color=color)

    def to_markdown(self) -> str:
        from trainscope.reports.diff_markdown import render_diff_markdown

        return render_diff_markdown(shown(self.to_dict()))

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

    rules = resolve_rules(rules, thresholds)
    if metric not in GATE_METRICS:
        raise BadInput(f"unknown metric {metric!r} (one of: {', '.join(GATE_METRICS)})")
    progress = progress or silent
    runs = []
    for i, (label, path) in enumerate((("BEFORE", os.fspath(before)), ("AFTER", os.fspath(after)))):
        def side(stage: str, fraction: float | None, i: int = i, label: str = label) -> None:
            progress(f"{label.lower()}: {stage}", None if fraction is None else (i + fraction) / 2)

        try:
            traces = open_input(path, side)
            side("analyzing", None)
            with bad_input(path):
                runs.append(summarize_run(path, traces, analyze_set(traces, rules)))
        except BadInput as e:
            raise BadInput(f"{label}: {e}") from None
    d = diff_runs(runs[0], runs[1], rules)
    return gate(d, metric, fail_if_slower) if fail_if_slower is not None else DiffResult(d)

