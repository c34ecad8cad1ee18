"""``trainscope diff BEFORE AFTER``: what a change did, and a CI gate on regressions."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from trainscope import api
from trainscope.analyzers.compare.diff import GATE_METRICS

# A regression found by the gate: distinct from bad input (2) and internal errors (1), so CI can
# tell "this change made training slower" from "the diff could not run" (trainscope.api.Regression).
from trainscope.api import EXIT_OK  # noqa: E402,F401
from trainscope.api import EXIT_REGRESSION  # noqa: E402,F401
from trainscope.api import BadInput  # noqa: E402,F401
from trainscope.api import DiffResult  # noqa: E402,F401
from trainscope.api.errors import EXIT_BAD_INPUT
from trainscope.argtypes import finite_non_negative
from trainscope.commands import analyze as analyze_command  # its use_tui through the module: tests replace it
from trainscope.commands.analyze import add_analysis_options
from trainscope.commands.analyze import analysis_options
from trainscope.common import add_color_quiet_args
from trainscope.common import add_document_args
from trainscope.common import add_input_limit_args
from trainscope.common import add_threshold_arg
from trainscope.common import emit_document
from trainscope.common import one_line_errors
from trainscope.common import progress_line
from trainscope.common import resolve_inputs
from trainscope.common import terminal_app
from trainscope.common import write_json_after_app
from trainscope.reports import formats

if TYPE_CHECKING:
    from trainscope.analyzers.compare.diff import GateResult
    from trainscope.analyzers.rules import Rules
    from trainscope.api.comparison import Comparison
    from trainscope.api.inputs import InputDescription

_METRIC_HELP = (
    "step_p50 (default), step_p95, step_mean, memory_peak: relative %% of BEFORE; "
    "gpu_busy (fails when it falls), data_wait, host_overhead: percentage points; every metric but "
    "memory_peak is also tested step by step"
)


def register(d: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope diff`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    d.description = (
        "Analyze BEFORE and AFTER (anything `trainscope analyze` reads, or a run saved in the history: "
        "12, latest[:TAG], baseline[:TAG]) and show what changed: the "
        "verdict, step time p50/p95 and the speedup, every breakdown share side by side, the kernels "
        "that appeared, disappeared, grew or shrank (matched across GPU architectures), peak memory, "
        "which of BEFORE's recommended fixes the change addressed, and the gain each achieved against "
        "the gain it projected. Warns when the runs are not comparable (another GPU, other step counts or "
        "batch shapes). A stored run is compared by its summary (the history keeps no traces)."
    )
    d.epilog = (
        "examples:\n"
        "  trainscope diff before.pt.trace.json.gz after.pt.trace.json.gz\n"
        "  trainscope diff main.json.gz pr.json.gz --report diff.md --format json > diff.json\n"
        "  trainscope diff main.json.gz pr.json.gz --fail-if-slower 5   # CI: significantly and > 5 % slower fails\n"
        "  trainscope diff main.json.gz pr.json.gz --fail-if-slower 3 --metric data_wait   # ≤ 3 points\n"
        "  trainscope diff main.json.gz pr.json.gz --gate 'Qwen2DecoderLayer_*.Qwen2MLP_*:+5%'   # a node budget\n"
        "  trainscope diff 12 14                                       # two stored runs (`trainscope runs`)\n"
        "  trainscope diff --against baseline --tag resnet50 pr.json.gz --fail-if-slower 5 --save\n\n"
        "The gate fails only when the metric got worse by more than PCT *and* AFTER's steps are worse than\n"
        "BEFORE's by a one-sided Mann-Whitney rank test at level gate.alpha (0.05; --threshold gate.alpha=…):\n"
        "the line on stderr gives the test, its p-value and the change with its 95 % bootstrap interval.\n"
        "Runs that are not comparable are not gated (exit 2, with the reason) unless --gate-anyway.\n"
        "--gate PATTERN:+N% (repeatable) is a budget per node of the module tree: every node whose path ends\n"
        "with PATTERN's names ('.' or '/' between them, * any text within a name, ** across names, a leading /\n"
        "anchors at the first level) may grow its GPU time per step by at most N %; PATTERN:-Npts: its share\n"
        "of peak (% of roof) may fall by at most N points. Nodes under 0.1 % of the GPU time are not judged (docs/diff.md).\n\n"
        "In a terminal, diff of two traces opens a side-by-side app (press ? in it for every key); --no-tui,\n"
        "--format, a stored run, or a stdout that is not a terminal prints instead. With --fail-if-slower the\n"
        "exit code after quitting the app is the gate's.\n\n"
        "exit codes:\n"
        "  0  compared (and, with --fail-if-slower, no regression)\n"
        "  3  regression: the gate's metric got significantly worse by more than allowed, or a node exceeded its\n"
        "     --gate budget (one line on stderr per gate)\n"
        "  2  bad input or usage (unreadable trace, unknown run, metric not measurable or testable in one run,\n"
        "     runs not comparable for the gate without --gate-anyway)\n"
        "  1  internal error\n"
        "  130 interrupted"
    )
    d.formatter_class = argparse.RawDescriptionHelpFormatter
    d.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="BEFORE and AFTER (with --against: AFTER only): a trace file, a directory of rank traces, or a "
        "stored run (12, run:12, latest[:TAG], baseline[:TAG])",
    )
    d.add_argument(
        "--against",
        metavar="RUN",
        help="compare the one RUN given against this stored run: baseline (the baseline of --tag, or the "
        "untagged one), baseline:TAG, latest[:TAG] or an id",
    )
    add_document_args(d, "diff")
    d.add_argument(
        "--report",
        metavar="FILE",
        help=f"also write the report to FILE in the format its name says: {formats.suffix_help('diff')}",
    )
    d.add_argument("--json", metavar="FILE", dest="json_out", help="also write the JSON document to FILE")
    d.add_argument(
        "--fail-if-slower",
        type=finite_non_negative,
        metavar="PCT",
        help="exit 3 when --metric got worse by more than PCT (relative %% for times and memory, "
        "percentage points for shares) and the steps' rank test says it is not noise",
    )
    d.add_argument(
        "--metric", choices=_metric_names(), default="step_p50", help=f"what --fail-if-slower watches: {_METRIC_HELP}"
    )
    d.add_argument(
        "--gate",
        action="append",
        default=[],
        type=_node_budget,
        metavar="PATTERN:BUDGET",
        dest="node_budgets",
        help="a node budget (repeatable): 'PATTERN:+N%%' — each node of the module tree whose path ends with "
        "PATTERN may grow its GPU time per step by at most N %%; 'PATTERN:-Npts' — its share of peak (%% of roof) "
        "may fall by at most N points; exit 3 otherwise. E.g. 'Qwen2DecoderLayer_*.Qwen2MLP_*:+5%%'",
    )
    d.add_argument(
        "--gate-anyway",
        action="store_true",
        help="gate even when the runs are not comparable (another GPU, other batch shapes, …): the change "
        "measured then includes those differences",
    )
    add_threshold_arg(
        d, "override a diagnostic threshold for both analyses (see `trainscope thresholds`), e.g. gate.alpha=0.01"
    )
    d.add_argument(
        "--store",
        metavar="PATH",
        help="the run history (default: $TRAINSCOPE_STORE, else "
        "$XDG_DATA_HOME/trainscope/runs.db, else ~/.local/share/trainscope/runs.db)",
    )
    d.add_argument(
        "--tag",
        metavar="TAG",
        help="the model or job: --against baseline takes this tag's baseline; --save saves the traces with it",
    )
    d.add_argument(
        "--save",
        action="store_true",
        help="save each side given as a trace in the run history, and record the projected and achieved "
        "gain of every fix the change addressed",
    )

    add_analysis_options(d)  # each side analyzed as `analyze` does: --step-range, --peak-*, --jobs, --dask
    add_color_quiet_args(d)
    d.add_argument(
        "--no-cache",
        action="store_true",
        help="parse each trace again instead of reading its columns from the analysis cache (`trainscope "
        "cache info`; TRAINSCOPE_NO_CACHE=1 turns it off everywhere)",
    )
    add_input_limit_args(d)
    d.set_defaults(run=run)


def _metric_names() -> list[str]:
    return list(GATE_METRICS)


def _node_budget(text: str) -> str:
    try:
        api.node_budget(text)
    except api.BadInput as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def load_diff(
    before: str,
    after: str,
    rules: Rules,
    progress: Callable[[str, float | None], None],
    metric: str = "step_p50",
    fail_if_slower: float | None = None,
) -> tuple[Comparison, GateResult | None]:
    """``(RunDiff, GateResult | None)`` from :func:`trainscope.api.diff` (kept for callers of the app)."""

    r = api.diff(before, after, rules=rules, metric=metric, fail_if_slower=fail_if_slower, progress=progress)
    return r.diff, r.gate


# An input could not be read or the gate cannot be measured: the api's BadInput (exit 2).
DiffInputError = BadInput


def gate_line(diff: Comparison, gate: GateResult | None) -> str:
    """The gate's one line for stderr, with the comparability caveat (CI logs show both together)."""

    return f"trainscope: {DiffResult(diff, gate).gate_line()}\n"


def _sides(args: argparse.Namespace) -> tuple[str, str]:
    """BEFORE and AFTER from the positionals and --against."""

    if args.against is not None:
        if len(args.runs) != 1:
            raise api.BadInput("with --against give one RUN (AFTER)")
        against = args.against
        if against in ("baseline", "latest") and args.tag:
            against = f"{against}:{args.tag}"
        return against, args.runs[0]
    if len(args.runs) != 2:
        raise api.BadInput(
            f"give BEFORE and AFTER (got {len(args.runs)} RUN{'s' if len(args.runs) != 1 else ''}), "
            "or one RUN with --against"
        )
    return args.runs[0], args.runs[1]


@one_line_errors
def run(args: argparse.Namespace) -> int:
    before, after = resolve_inputs(args, *_sides(args), runs=True)
    rules = api.rules_from(dict(args.threshold))
    if analyze_command.use_tui(args) and "run" not in (before.kind, after.kind):
        return _run_app(args, rules, before, after)
    with progress_line(args) as progress:
        result = api.diff(
            before,
            after,
            progress=progress,
            store=args.store,
            node_budgets=args.node_budgets,
            **_diff_options(args, rules),
        )
    if args.save:
        result = _save(result, args)

    code = emit_document(result.output(), args)
    if code:
        return code
    for line in result.gate_lines():
        sys.stderr.write(f"trainscope: {line}\n")
    return result.exit_code


def _diff_options(args: argparse.Namespace, rules: Rules) -> dict[str, Any]:
    """The keyword arguments of ``api.diff`` the command line gives: the printed diff and the app's
    loader make the same call (--gate-anyway included)."""
    return {
        "rules": rules,
        "metric": args.metric,
        "fail_if_slower": args.fail_if_slower,
        "gate_anyway": args.gate_anyway,
        **analysis_options(args),
        "cache": not args.no_cache,
    }


def _save(result: DiffResult, args: argparse.Namespace) -> DiffResult:
    """``--save``: both sides and the fix outcomes in the run history, said in one line → the
    comparison of the saved runs (what the document then names)."""
    b, a, n = api.save_diff(result, args.store, tag=args.tag)
    sys.stderr.write(f"trainscope: saved as {b.label} → {a.label}; {n} fix outcome{'s' if n != 1 else ''} recorded\n")
    return dataclasses.replace(result, before_run=b, after_run=a)


def _run_app(args: argparse.Namespace, rules: Rules, before: InputDescription, after: InputDescription) -> int:
    """The side-by-side app; after it closes, the same gate line and exit code as without it."""

    def loader(
        progress: Callable[[str, float | None], None],
    ) -> tuple[Comparison, GateResult | None]:  # the same api call as the printed diff, --gate-anyway included
        r = api.diff(before, after, progress=progress, **_diff_options(args, rules))
        return r.diff, r.gate

    app = terminal_app("diff")(
        before.given,
        after.given,
        rules=rules,
        metric=args.metric,
        fail_if_slower=args.fail_if_slower,
        report_path=args.report,
        loader=loader,
    )
    app.run()
    code = app.return_code if app.return_code is not None else EXIT_OK
    if app.error:  # bad input: the same line as without the app
        sys.stderr.write(app.error + "\n")
    if app.diff is None:  # bad input, or quit while loading
        return code
    result = DiffResult(app.diff, app.gate, rules=rules)
    if args.node_budgets:  # the node budgets: judged on the comparison the app showed
        try:
            result = api.node_gate(result, args.node_budgets, rules=rules, gate_anyway=args.gate_anyway)
        except api.BadInput as e:
            sys.stderr.write(f"trainscope: {e}\n")
            return EXIT_BAD_INPUT
    if args.json_out and write_json_after_app(args.json_out, result.to_dict()) != EXIT_OK:
        return EXIT_BAD_INPUT
    if args.save:
        result = _save(result, args)
    if app.gate is not None or result.node_gates:
        for line in result.gate_lines():
            sys.stderr.write(f"trainscope: {line}\n")
        return result.exit_code
    return code
