"""``trainscope diff BEFORE AFTER``: what a change did, and a CI gate on regressions."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from trainscope.common import (EXIT_BAD_INPUT, Progress, add_input_limit_args, apply_input_limits, emit_document,
                               one_line_errors, threshold_arg)
from trainscope.reports.output import to_json, write_atomic

# A regression found by the gate: distinct from bad input (2) and internal errors (1), so CI can
# tell "this change made training slower" from "the diff could not run" (trainscope.api.Regression).
from trainscope.api import EXIT_OK, EXIT_REGRESSION, BadInput  # noqa: E402,F401

_METRIC_HELP = ("step_p50 (default), step_p95, step_mean, memory_peak: relative %% of BEFORE; "
                "gpu_busy (fails when it falls), data_wait, host_overhead: percentage points")


def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser(
        "diff", help="compare two runs: what a change did, and a CI gate on regressions",
        description="Analyze BEFORE and AFTER (anything `trainscope analyze` reads) and show what changed: the "
                    "verdict, step time p50/p95 and the speedup, every breakdown share side by side, the kernels "
                    "that appeared, disappeared, grew or shrank (matched across GPU architectures), peak memory, "
                    "and which of BEFORE's recommended fixes the change addressed. Warns when the runs are not "
                    "comparable (another GPU, other step counts or batch shapes).",
        epilog="examples:\n"
               "  trainscope diff before.pt.trace.json.gz after.pt.trace.json.gz\n"
               "  trainscope diff main.json.gz pr.json.gz --report diff.md --format json > diff.json\n"
               "  trainscope diff main.json.gz pr.json.gz --fail-if-slower 5            # CI: p50 may grow ≤ 5 %\n"
               "  trainscope diff main.json.gz pr.json.gz --fail-if-slower 3 --metric data_wait   # ≤ 3 points\n\n"
               "In a terminal, diff opens a side-by-side app (press ? in it for every key); --no-tui, --format,\n"
               "or a stdout that is not a terminal prints instead. With --fail-if-slower the exit code after\n"
               "quitting the app is the gate's.\n\n"
               "exit codes:\n"
               "  0  compared (and, with --fail-if-slower, no regression)\n"
               "  3  regression: the gate's metric got worse by more than allowed (one line on stderr says how much)\n"
               "  2  bad input or usage (unreadable trace, metric not measurable in one run)\n"
               "  1  internal error\n"
               "  130 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument("before", metavar="BEFORE", help="the run before the change: trace file or directory of rank traces")
    d.add_argument("after", metavar="AFTER", help="the run after the change")
    d.add_argument("--format", choices=("text", "json", "markdown"), default=None,
                   help="print this on stdout instead of opening the terminal app (default in a terminal: the app; "
                        "otherwise: text)")
    d.add_argument("--no-tui", action="store_true", help="print the text summary instead of opening the terminal app")
    d.add_argument("--report", metavar="FILE.md", help="also write the Markdown report to FILE.md")
    d.add_argument("--json", metavar="FILE", dest="json_out", help="also write the JSON document to FILE")
    d.add_argument("--fail-if-slower", type=_non_negative, metavar="PCT",
                   help="exit 3 when --metric got worse by more than PCT (relative %% for times and memory, "
                        "percentage points for shares)")
    d.add_argument("--metric", choices=_metric_names(), default="step_p50",
                   help=f"what --fail-if-slower watches: {_METRIC_HELP}")
    d.add_argument("--threshold", type=threshold_arg, action="append", default=[], metavar="NAME=VALUE",
                   help="override a diagnostic threshold for both analyses (see `trainscope thresholds`)")
    d.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="bold headings in text output")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress indicator")
    add_input_limit_args(d)
    d.set_defaults(run=run)


def _metric_names() -> list[str]:
    from trainscope.analyzers.diff import GATE_METRICS

    return list(GATE_METRICS)


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError("must be a finite number ≥ 0")
    return v


def load_diff(before: str, after: str, rules, progress: Callable[[str, "float | None"], None],
              metric: str = "step_p50", fail_if_slower: float | None = None):
    """``(RunDiff, GateResult | None)`` from :func:`trainscope.api.diff` (kept for callers of the app)."""
    from trainscope import api

    r = api.diff(before, after, rules=rules, metric=metric, fail_if_slower=fail_if_slower, progress=progress)
    return r.diff, r.gate


# An input could not be read or the gate cannot be measured: the api's BadInput (exit 2).
DiffInputError = BadInput


def gate_line(diff, gate) -> str:
    """The gate's one line for stderr, with the comparability caveat (CI logs show both together)."""
    from trainscope.api import DiffResult

    return f"trainscope: {DiffResult(diff, gate).gate_line()}\n"


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from trainscope import api
    from trainscope.commands.analyze import use_tui
    from trainscope.reports.diff_markdown import render_diff_markdown
    from trainscope.reports.diff_text import render_diff_text

    rules = api.rules_from(dict(args.threshold))
    apply_input_limits(args)
    if use_tui(args):
        return _run_app(args, rules)
    progress = Progress(enabled=not args.quiet and sys.stderr.isatty())
    try:
        result = api.diff(args.before, args.after, rules=rules, metric=args.metric,
                          fail_if_slower=args.fail_if_slower, progress=progress)
    finally:
        progress.done()

    code = emit_document(result.to_dict(), args, render_diff_text, render_diff_markdown)
    if code:
        return code
    if result.gate is not None:
        sys.stderr.write(f"trainscope: {result.gate_line()}\n")
    return result.exit_code


def _run_app(args: argparse.Namespace, rules) -> int:
    """The side-by-side app; after it closes, the same gate line and exit code as without it."""
    from trainscope.api import DiffResult
    from trainscope.tui.diff_app import DiffApp

    app = DiffApp(args.before, args.after, rules=rules, metric=args.metric, fail_if_slower=args.fail_if_slower,
                  report_path=args.report)
    app.run()
    code = app.return_code if app.return_code is not None else EXIT_OK
    if app.error:  # bad input: the same line as without the app
        sys.stderr.write(app.error + "\n")
    if app.diff is None:  # bad input, or quit while loading
        return code
    if args.json_out:
        try:
            write_atomic(args.json_out, to_json(DiffResult(app.diff, app.gate).to_dict()))
        except OSError as e:
            sys.stderr.write(f"trainscope: cannot write {args.json_out}: {e.strerror or e}\n")
            return EXIT_BAD_INPUT
    if app.gate is not None:
        sys.stderr.write(gate_line(app.diff, app.gate))
    return code
