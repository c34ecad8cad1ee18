"""What every command shares: the progress line, argument types, the one-line failure and the
document's output (atomic writes and JSON live in :mod:`trainscope.reports.output`, errors and
exit codes in :mod:`trainscope.api.errors`)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trainscope.analyzers.rules import Rules
from trainscope.api.errors import EXIT_BAD_INPUT
from trainscope.api.errors import EXIT_OK
from trainscope.api.errors import BadInput
from trainscope.api.errors import TrainscopeError
from trainscope.api.errors import describe
from trainscope.api.inputs import InputDescription
from trainscope.api.inputs import describe_input
from trainscope.collectors.readers import parse_size
from trainscope.collectors.readers import set_max_decompressed
from trainscope.reports import formats
from trainscope.reports.formats import Output
from trainscope.reports.output import to_json
from trainscope.reports.output import write_atomic
from trainscope.traces.safe_text import visible

# The terminal apps, by command: the one deferral of the commands, imported only when an app opens.
# Each loads Textual: +0.38 s of CPU on top of the 0.70 s a printed analysis loads (measured), which
# `analyze … --format json`, a CI `diff` and a piped `memory` would pay for an app they never show.
APPS = {
    "analyze": ("trainscope.tui.app", "AnalyzeApp"),
    "diff": ("trainscope.tui.diff_app", "DiffApp"),
    "memory": ("trainscope.tui.memory_app", "MemoryApp"),
    "plan": ("trainscope.tui.plan_app", "PlanApp"),
    "watch": ("trainscope.tui.watch_app", "WatchApp"),
}


def terminal_app(command: str) -> Any:
    """The app class of ``command`` (:data:`APPS`), imported now."""
    module, name = APPS[command]
    return getattr(importlib.import_module(module), name)


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
        sys.stderr.write(f"\r\033[K{visible(stage)}…{pct}")  # a stage may name a rank's file
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


@contextmanager
def progress_line(args: argparse.Namespace) -> Iterator[Progress]:
    """The progress line of a command's slow part (none with ``-q`` or when stderr is no terminal),
    cleared when the part ends, however it ends."""
    progress = Progress(enabled=not args.quiet and sys.stderr.isatty())
    try:
        yield progress
    finally:
        progress.done()


def threshold_arg(text: str) -> tuple[str, float]:
    """argparse type for ``--threshold NAME=VALUE``."""

    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    if name not in Rules.names():
        raise argparse.ArgumentTypeError(f"unknown threshold {name!r} (see `trainscope thresholds`)")
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"threshold {name} needs a number, got {value!r}") from None


def add_threshold_arg(p: argparse.ArgumentParser, help: str) -> None:
    """``--threshold NAME=VALUE`` (repeatable): a diagnostic threshold overridden by name
    (analyzers/rules.py; ``trainscope thresholds`` lists them). ``help``: what it does in this command."""
    p.add_argument("--threshold", type=threshold_arg, action="append", default=[], metavar="NAME=VALUE", help=help)


def add_document_args(p: argparse.ArgumentParser, kind: str, app: str = "the app", printed: str = "summary") -> None:
    """``--format`` and ``--no-tui`` of a command that prints a document of ``kind`` (a kind of
    reports/formats.py) or opens its terminal app: ``app``, when that opens in a terminal; ``printed``,
    what ``--no-tui`` prints instead."""
    p.add_argument(
        "--format",
        choices=formats.names(kind),
        type=formats.canonical,
        default=None,
        help=f"print this on stdout instead of opening the terminal app (default in a terminal: {app}; "
        "otherwise: text)",
    )
    p.add_argument(
        "--no-tui", action="store_true", help=f"print the text {printed} instead of opening the terminal app"
    )


def add_color_quiet_args(p: argparse.ArgumentParser) -> None:
    """``--color`` (bold headings in the text output) and ``-q``/``--quiet`` (no progress line), as
    the commands that read traces and print a report take them."""
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto", help="bold headings in text output")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress indicator")


def add_input_limit_args(p: argparse.ArgumentParser) -> None:
    """``--max-decompressed``: the one flag for the decompression cap (collectors/readers.py)."""
    p.add_argument(
        "--max-decompressed",
        metavar="SIZE",
        type=_size_arg,
        help="largest decompressed size of a .gz input (default 4GiB, and at most 100× the compressed "
        "size: a gzip bomb is refused); setting it lifts the 100× check. Also "
        "TRAINSCOPE_MAX_DECOMPRESSED=SIZE",
    )


def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def apply_input_limits(args: argparse.Namespace) -> None:
    set_max_decompressed(getattr(args, "max_decompressed", None))


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Print one line on stderr and return the exit code."""

    sys.stderr.write(f"trainscope: {visible(message)}\n")
    return code


def output_problem(path: str) -> str | None:
    """Why ``path`` cannot be written, or None; checked without creating anything."""
    import stat as st_

    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        folder = os.path.dirname(target) or "."
        if not os.path.isdir(folder):
            return "its folder does not exist"
        return None if os.access(folder, os.W_OK | os.X_OK) else "its folder is not writable"
    except OSError as e:
        return e.strerror or str(e)
    if st_.S_ISDIR(st.st_mode):
        return "is a directory"
    return None if os.access(target, os.W_OK) else "not writable"


OUTPUT_FLAGS = (("--report", "report"), ("--json", "json_out"), ("--perfetto", "perfetto"))


def check_outputs(args: argparse.Namespace, inputs: tuple[str, ...] = ()) -> None:
    """Before any trace is read: BadInput (one line, exit 2) when a file the command was asked to
    write (``--report``, ``--json``, ``--perfetto``) cannot be, so a typo does not cost the
    analysis of a large trace first (``watch`` checks its own before the job starts), or when it
    is one of the ``inputs`` (``--report run.json.gz`` on ``analyze run.json.gz`` replaced the
    trace by the report)."""

    for flag, dest in OUTPUT_FLAGS:
        path = getattr(args, dest, None)
        problem = output_problem(path) if path else None
        if problem:
            raise BadInput(f"{flag} {path}: {problem}")
        if path and any(same_file(path, i) for i in inputs):
            raise BadInput(f"{flag} {path}: is the input: writing the report there would overwrite it")


def resolve_inputs(args: argparse.Namespace, *given: str, runs: bool = False) -> tuple[InputDescription, ...]:
    """The one step of every command from its arguments to its inputs, before any is read: the files
    it was asked to write checked against them (:func:`check_outputs`), the decompression cap of
    ``--max-decompressed`` set, and each input described once
    (:func:`trainscope.api.inputs.describe_input`: a file, an export, a set of ranks with its rank
    files, or with ``runs`` a stored run of the history). The api takes the descriptions as paths."""
    check_outputs(args, given)
    apply_input_limits(args)
    return tuple(describe_input(g, runs=runs) for g in given)


def same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are one existing regular file (any spelling, links followed)."""
    try:
        return os.path.isfile(a) and os.path.isfile(b) and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def write_report(path: str, out: Output) -> None:
    """``--report FILE``: ``out`` written atomically in the format the name says (the table in
    reports/formats.py); a suffix no format claims gets Markdown, said once on stderr. OSError
    when the file cannot be written."""

    w, named = formats.for_path(path, out.document)
    if not named:  # the default under another name: say so
        sys.stderr.write(
            f"trainscope: {visible(path)}: written as {w.label} (--report writes {formats.suffix_help(out.document)})\n"
        )
    write_atomic(path, formats.render(w, out))


def write_json_after_app(path: str, doc: dict[str, Any]) -> int:
    """``--json FILE`` once a terminal app has closed: ``doc`` written atomically; exit 2 with one
    line on stderr when it cannot be."""
    try:
        write_atomic(path, to_json(doc))
    except OSError as e:
        sys.stderr.write(f"trainscope: cannot write {path}: {e.strerror or e}\n")
        return EXIT_BAD_INPUT
    return EXIT_OK


def emit_document(out: Output, args: argparse.Namespace) -> int:
    """What every report command does with its document (``out``: a
    :class:`trainscope.reports.formats.Output`, from the api object's ``output()``): write
    ``--report`` in the format its suffix names (the table in reports/formats.py; a suffix no format
    claims gets Markdown, said on stderr) and ``--json`` atomically, then print ``--format`` (text
    by default) on stdout."""
    from dataclasses import replace

    report = getattr(args, "report", None)
    if report:
        try:
            write_report(report, out)
        except OSError as e:
            return fail(f"cannot write {report}: {e.strerror or e}")
    json_out = getattr(args, "json_out", None)
    if json_out:
        try:
            write_atomic(json_out, formats.render("json", out))
        except OSError as e:
            return fail(f"cannot write {json_out}: {e.strerror or e}")
    fmt = args.format or "text"
    mode = getattr(args, "color", "never")
    color = mode == "always" or (mode == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    data = formats.render(fmt, replace(out, color=color))
    if isinstance(data, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
    else:
        sys.stdout.write(data)
    sys.stdout.flush()
    return EXIT_OK


def fail_on(exc: BaseException) -> int:
    """Print the one line :func:`trainscope.api.describe` gives for ``exc``; return its exit code."""

    message, code = describe(exc)
    return fail(message, code)


def one_line_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Decorate a command's ``run(args)``: a :class:`trainscope.api.TrainscopeError` becomes its one
    line on stderr and its exit code (the same as through ``trainscope.cli.main``)."""
    import functools

    @functools.wraps(run)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except TrainscopeError as e:
            return fail_on(e)

    return wrapper
