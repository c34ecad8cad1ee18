"""What every command shares: exit codes, the progress line, argument types, atomic writes."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from trainscope.api import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK  # noqa: F401 (the codes live with the errors)


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


def threshold_arg(text: str) -> tuple[str, float]:
    """argparse type for ``--threshold NAME=VALUE``."""
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


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v


def to_json(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write via a temporary file and rename, so an interrupt never leaves half a report."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Print one line on stderr and return the exit code."""
    sys.stderr.write(f"trainscope: {message}\n")
    return code


def emit_document(doc: dict, args, render_text, render_markdown, render_report=None) -> int:
    """What every report command does with its document: write ``--report`` (Markdown, or what
    ``render_report(path)`` gives for that suffix) and ``--json`` atomically, then print
    ``--format`` (text by default) on stdout."""
    report = getattr(args, "report", None)
    if report:
        try:
            write_atomic(report, render_report(report) if render_report else render_markdown(doc))
        except OSError as e:
            return fail(f"cannot write {report}: {e.strerror or e}")
    path = getattr(args, "json_out", None)
    if path:
        try:
            write_atomic(path, to_json(doc))
        except OSError as e:
            return fail(f"cannot write {path}: {e.strerror or e}")
    if args.format == "json":
        sys.stdout.write(to_json(doc))
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(doc))
    else:
        color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
        sys.stdout.write(render_text(doc, color=color))
    sys.stdout.flush()
    return EXIT_OK


def fail_on(exc: BaseException) -> int:
    """Print the one line :func:`trainscope.api.describe` gives for ``exc``; return its exit code."""
    from trainscope.api import describe

    message, code = describe(exc)
    return fail(message, code)


def one_line_errors(run):
    """Decorate a command's ``run(args)``: a :class:`trainscope.api.TrainscopeError` becomes its one
    line on stderr and its exit code (the same as through ``trainscope.cli.main``)."""
    import functools

    @functools.wraps(run)
    def wrapper(args) -> int:
        from trainscope.api import TrainscopeError

        try:
            return run(args)
        except TrainscopeError as e:
            return fail_on(e)

    return wrapper
