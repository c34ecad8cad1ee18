"""``trainscope analyze TRACE``: the offline diagnosis."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from trainscope import api
from trainscope.api.errors import EXIT_BAD_INPUT
from trainscope.api.errors import EXIT_OK
from trainscope.argtypes import positive_float
from trainscope.commands.analyze_ranks import add_arguments
from trainscope.commands.runs import add_save_args
from trainscope.commands.runs import save_report
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
from trainscope.tui.state import Session
from trainscope.tui.state import build_session
from trainscope.tui.state import cached_document

if TYPE_CHECKING:
    from trainscope.analyzers.plan.ledger import Ledger
    from trainscope.analyzers.rules import Rules
    from trainscope.api.cache import CachedReport
    from trainscope.api.errors import Progress as ProgressFn
    from trainscope.api.report import Report


def register(a: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope analyze`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    a.description = (
        "Read a PyTorch profiler (Kineto) trace — a .json or .json.gz file, or a directory of "
        "per-rank traces — or an Nsight Systems export (.sqlite from `nsys export --type sqlite`; "
        ".nsys-rep when nsys is on PATH) and report the D·A·M verdict with its evidence, where each step's time "
        "goes, the top kernels, and fixes ranked by projected gain (upper bounds)."
    )
    a.epilog = (
        "examples:\n  trainscope analyze run.pt.trace.json.gz\n"
        "  trainscope analyze traces/ --format json > verdict.json\n"
        "  trainscope analyze run.json.gz --report report.md --threshold data_wait.high=25\n"
        "  trainscope analyze run.json.gz --report run.html       # self-contained HTML with charts\n"
        "  trainscope analyze report.sqlite --step-range train_step   # NVTX ranges mark the steps\n"
        "  trainscope analyze run.json.gz --deep                  # + HTA critical path of the median step\n"
        "  trainscope analyze run.json.gz --deep --deep-step 1010 # … of ProfilerStep#1010\n\n"
        "A second look at the same input with the same options reads the document from the analysis\n"
        "cache instead of the trace (text, JSON, Markdown); anything else (HTML, --perfetto, --save, the\n"
        "app) reads the trace's columns from the cache instead of parsing it (--no-cache reads and\n"
        "analyzes again; `trainscope cache`).\n\n"
        "--deep needs Holistic Trace Analysis: pip install 'trainscope-dam[hta]'. It runs HTA on the\n"
        "trace (the slowest rank of a directory): seconds to minutes, interruptible with Ctrl-C.\n"
        "Where HTA cannot load the trace or its critical path fails, the deep part is skipped with\n"
        "a one-line reason and the rest of the report stands.\n\n"
        "In a terminal, analyze opens an interactive app (press ? in it for every key); --no-tui, --format,\n"
        "or a stdout that is not a terminal prints instead.\n\n"
        "exit codes: 0 analyzed, 2 bad input or usage, 1 internal error"
    )
    a.formatter_class = argparse.RawDescriptionHelpFormatter
    a.add_argument(
        "trace",
        metavar="TRACE",
        help="trace file (.json, .json.gz, Nsight .sqlite/.nsys-rep) or directory of rank traces",
    )
    add_analysis_options(a)
    add_document_args(a, "analysis")
    a.add_argument(
        "--report",
        metavar="FILE",
        help=f"also write the report to FILE in the format its name says: {formats.suffix_help('analysis')} "
        "(HTML is self-contained, with charts)",
    )
    a.add_argument("--json", metavar="FILE", dest="json_out", help="also write the JSON document to FILE")
    a.add_argument(
        "--perfetto",
        metavar="OUT.json",
        help="also write the trace with the findings as their own tracks, for ui.perfetto.dev or "
        "chrome://tracing (JSON trace-event format; a directory: every rank as its own process, with the "
        "collectives' alignment; the same file as the app's x)",
    )
    add_threshold_arg(a, "override a diagnostic threshold (repeatable; list them with `trainscope thresholds`)")
    a.add_argument(
        "--model",
        metavar="SPEC",
        help="the trained model and setup, to show the memory ledger next to the measured peak: the "
        '`trainscope plan` flags as KEY=VALUE, e.g. "params=25.6M,optimizer=momentum,precision=fp32"',
    )
    a.add_argument(
        "--deep",
        action="store_true",
        help="add Holistic Trace Analysis's critical path, launch statistics and queue lengths "
        "(needs the hta extra; exits 2 with the install line when it is missing)",
    )
    a.add_argument(
        "--deep-step",
        metavar="STEP",
        help="step for --deep: ProfilerStep number (1010), label (ProfilerStep#1010) or position (@1); "
        "default: the median step",
    )
    add_color_quiet_args(a)
    a.add_argument(
        "--no-cache",
        action="store_true",
        help="read and analyze the trace again instead of reading the document of an earlier analysis of the "
        "same input with the same options, or the trace's columns, from the analysis cache (`trainscope cache "
        "info`; TRAINSCOPE_NO_CACHE=1 turns it off everywhere)",
    )

    add_save_args(a)
    add_input_limit_args(a)
    a.set_defaults(run=run)


@one_line_errors
def run(args: argparse.Namespace) -> int:
    (trace,) = resolve_inputs(args, args.trace)
    rules = _rules(args)
    api.check_options(deep=args.deep, deep_step=args.deep_step, jobs=args.jobs)  # before the slow part and the app
    ledger = api.model_ledger(args.model) if args.model else None
    if use_tui(args):
        return _run_app(args, rules, ledger)
    with progress_line(
        args
    ) as progress:  # a directory or glob of ranks: mapped in worker processes (--jobs) or on Dask (--dask)
        report = api.analyze(
            trace,
            rules=rules,
            deep=args.deep,
            deep_step=args.deep_step,
            model=args.model,
            progress=progress,
            cache=not args.no_cache,
            **analysis_options(args),
        )
    if args.perfetto and _write_perfetto(args.perfetto, report) != EXIT_OK:
        return EXIT_BAD_INPUT
    code = emit_document(report.output(), args)

    return save_report(report, args) if code == EXIT_OK else code


def _rules(args: argparse.Namespace) -> Rules:
    return api.rules_from(dict(args.threshold))


def _write_perfetto(path: str, report: Report | CachedReport) -> int:
    """The Perfetto export (trainscope.api.export_perfetto: the app's ``x`` calls the same function,
    so the two write the same file): one trace with its findings, or every rank of a directory."""

    try:
        api.export_perfetto(report, path)
    except OSError as e:
        sys.stderr.write(f"trainscope: cannot write {path}: {e.strerror or e}\n")
        return EXIT_BAD_INPUT
    return EXIT_OK


def use_tui(args: argparse.Namespace) -> bool:
    """The app opens only for a person at a terminal (stdin, stdout and stderr) who asked for nothing else."""
    # Textual draws on stderr: `… 2> log` at a terminal would send the app into the file.
    return (
        args.format is None
        and not args.no_tui
        and sys.stdout.isatty()
        and sys.stdin.isatty()
        and sys.stderr.isatty()
        and os.environ.get("TERM") != "dumb"
    )


def _ledger_hook(spec: str | None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``--model``: a function that adds the planned ledger next to the measured peak to a document
    (kept for callers of the app; the CLI passes the ledger to trainscope.api)."""
    if not spec:
        return lambda doc: doc

    model_ledger = api.model_ledger(spec)  # BadInput: a bad spec, said in one line
    return lambda doc: api.with_ledger(doc, model_ledger)


def analyze_app(args: argparse.Namespace, rules: Rules, ledger: Ledger | None) -> Any:
    """The app ``trainscope analyze`` opens in a terminal (not yet run): the session loads behind
    the Overview of the cached document when the cache holds it (benchmarks/bench_tui.py times it)."""

    cache = not args.no_cache
    options = {"peak_tflops": args.peak_tflops, "step_range": args.step_range, "peak_bandwidth": args.peak_bandwidth}

    def loader(
        progress: ProgressFn | None,
    ) -> Session:  # the same api call as the printed report: --jobs, --dask, --peak-bandwidth
        return build_session(
            args.trace,
            None,
            rules,
            progress=progress,
            ledger=ledger,
            jobs=args.jobs,
            dask=args.dask,
            cache=cache,
            model=args.model,
            **options,
        )

    # The document of the session the loader makes, when an earlier look stored it: the first screen.
    document = cached_document(args.trace, rules, model=args.model, cache=cache, **options)
    return terminal_app("analyze")(
        args.trace,
        loader=loader,
        report_path=args.report,
        rules=rules,
        peak_tflops=args.peak_tflops,
        ledger=ledger,
        step_range=args.step_range,
        deep=args.deep,
        deep_step=args.deep_step,
        document=document,
    )


def _run_app(args: argparse.Namespace, rules: Rules, ledger: Ledger | None) -> int:
    app = analyze_app(args, rules, ledger)
    code = app.run()
    if args.perfetto and app.session is not None and _write_perfetto(args.perfetto, app.session.report) != EXIT_OK:
        return EXIT_BAD_INPUT
    if (
        args.json_out
        and app.session is not None
        and write_json_after_app(args.json_out, app.session.document()) != EXIT_OK
    ):
        return EXIT_BAD_INPUT
    code = app.return_code if app.return_code is not None else (code or EXIT_OK)
    if code == EXIT_OK and app.session is not None:
        return save_report(app.session.report, args)
    return code


def add_analysis_options(a: argparse.ArgumentParser) -> None:
    """The options of the analysis itself, shared by ``analyze`` and each side of ``diff``: how steps
    are marked, the device's peaks, and how a rank directory is mapped (--jobs, --dask)."""

    a.add_argument(
        "--step-range",
        metavar="NAME",
        help="the annotation (NVTX / record_function) range that marks one step, e.g. train_step "
        "(default: ProfilerStep#N, then ranges named like steps)",
    )
    a.add_argument(
        "--peak-tflops",
        type=positive_float,
        metavar="TFLOPS",
        help="dense FP16/BF16 tensor peak of the device in TFLOP/s for MFU and the roofline, overriding the "
        "built-in device table (the other precisions scale with it)",
    )
    a.add_argument(
        "--peak-bandwidth",
        type=positive_float,
        metavar="GB/S",
        help="memory bandwidth of the device in GB/s for the roofline, overriding the device table",
    )
    add_arguments(a)  # --jobs, --dask (rank directories)


def analysis_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``trainscope.api.analyze`` (and ``api.diff``) the options above give."""
    return {
        "step_range": args.step_range,
        "peak_tflops": args.peak_tflops,
        "peak_bandwidth": args.peak_bandwidth,
        "jobs": args.jobs,
        "dask": args.dask,
    }
