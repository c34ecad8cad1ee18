"""Command line: ``trainscope analyze TRACE``.

Exit codes: 0 analyzed, 2 bad input or usage, 1 internal error (with a one-line message;
``TRAINSCOPE_DEBUG=1`` shows the traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Sequence

from trainscope import __version__

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: exit 2 with one line
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class Progress:
    """A one-line progress indicator on stderr, only when stderr is a terminal and work is slow."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, stage: str, fraction: float | None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.t0 < 0.3 or now - self.last < 0.1:  # stay silent on small files
            return
        self.last = now
        pct = f" {fraction * 100:3.0f} %" if fraction is not None else ""
        sys.stderr.write(f"\r\033[K{stage}…{pct}")
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _threshold(text: str) -> tuple[str, float]:
    from trainscope.analyzers.rules import Rules

    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    if name not in Rules.names():
        raise argparse.ArgumentTypeError(f"unknown threshold {name!r} (see `trainscope thresholds`)")
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"threshold {name} needs a number, got {value!r}") from None


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="trainscope", description="Find out why a deep-learning training run is slow: "
                "data-bound, memory-bound or compute-bound (the D·A·M taxonomy), with the evidence and ranked fixes.")
    p.add_argument("--version", action="version", version=f"trainscope {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    a = sub.add_parser(
        "analyze", help="diagnose a recorded profiler trace",
        description="Read a PyTorch profiler (Kineto) trace — a .json or .json.gz file, or a directory of "
                    "per-rank traces — and report the D·A·M verdict with its evidence, where each step's time "
                    "goes, the top kernels, and fixes ranked by projected gain (upper bounds).",
        epilog="examples:\n  trainscope analyze run.pt.trace.json.gz\n"
               "  trainscope analyze traces/ --format json > verdict.json\n"
               "  trainscope analyze run.json.gz --report report.md --threshold data_wait.high=25\n\n"
               "exit codes: 0 analyzed, 2 bad input or usage, 1 internal error",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument("trace", metavar="TRACE", help="trace file (.json, .json.gz) or directory of rank traces")
    a.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                   help="what to print on stdout (default: text summary)")
    a.add_argument("--report", metavar="FILE.md", help="also write the Markdown report to FILE.md")
    a.add_argument("--json", metavar="FILE", dest="json_out", help="also write the JSON document to FILE")
    a.add_argument("--peak-tflops", type=_positive, metavar="TFLOPS",
                   help="peak FLOP/s of the device for MFU, overriding the built-in device table")
    a.add_argument("--threshold", type=_threshold, action="append", default=[], metavar="NAME=VALUE",
                   help="override a diagnostic threshold (repeatable; list them with `trainscope thresholds`)")
    a.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="bold headings in text output")
    a.add_argument("-q", "--quiet", action="store_true", help="no progress indicator")
    sub.add_parser("thresholds", help="list every diagnostic threshold with its default, unit and source")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        if args.command == "thresholds":
            return _thresholds()
        return _analyze(args)
    except KeyboardInterrupt:
        sys.stderr.write("\ntrainscope: interrupted\n")
        return 130
    except BrokenPipeError:
        # `trainscope analyze … | head`: the reader left; not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except MemoryError:
        sys.stderr.write("trainscope: out of memory while reading the trace\n")
        return EXIT_INTERNAL
    except Exception as e:  # a bug: one line, not a traceback, unless asked
        if os.environ.get("TRAINSCOPE_DEBUG"):
            raise
        sys.stderr.write(f"trainscope: internal error: {type(e).__name__}: {e} "
                         "(set TRAINSCOPE_DEBUG=1 for the traceback, and please report it)\n")
        return EXIT_INTERNAL


def _thresholds() -> int:
    from trainscope.analyzers.rules import Rules

    for t in Rules().all():
        print(f"{t.name:24s} {t.value:>6g} {t.unit:34s} {t.source}")
    return EXIT_OK


def _analyze(args: argparse.Namespace) -> int:
    from trainscope.analyzers.analysis import analyze_set
    from trainscope.analyzers.rules import Rules
    from trainscope.collectors import TraceError, open_traces
    from trainscope.reports.document import build_document
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text

    rules = Rules(dict(args.threshold))
    progress = Progress(enabled=not args.quiet and sys.stderr.isatty())
    try:
        traces = open_traces(args.trace, progress)
    except TraceError as e:
        progress.done()
        sys.stderr.write(f"trainscope: {e}\n")
        return EXIT_BAD_INPUT
    except (OSError, RecursionError) as e:
        progress.done()
        sys.stderr.write(f"trainscope: {args.trace}: cannot read: {getattr(e, 'strerror', None) or e}\n")
        return EXIT_BAD_INPUT
    progress("analyzing", None)
    analyses = analyze_set(traces, rules, args.peak_tflops)
    progress.done()
    doc = build_document(args.trace, analyses, rules, traces.warnings)

    for path, render in ((args.report, render_markdown), (args.json_out, _json)):
        if path:
            try:
                _write_atomic(path, render(doc))
            except OSError as e:
                sys.stderr.write(f"trainscope: cannot write {path}: {e.strerror or e}\n")
                return EXIT_BAD_INPUT
    if args.format == "json":
        sys.stdout.write(_json(doc))
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(doc))
    else:
        color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
        sys.stdout.write(render_text(doc, color=color))
    sys.stdout.flush()
    return EXIT_OK


def _json(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _write_atomic(path: str, text: str) -> None:
    """Write via a temporary file and rename, so an interrupt never leaves half a report."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
