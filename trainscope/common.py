"""What every command shares: exit codes, the progress line, argument types, atomic writes."""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
import zlib
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
    """The document as JSON: non-finite numbers written as null, lone surrogates as escapes
    (see reports/safe_text.py)."""
    return _dumps(doc, indent=2) + "\n"


def _dumps(obj, **kw) -> str:
    from trainscope.reports.safe_text import json_safe

    try:  # the common case, at the encoder's speed; the walk only when a value needs it
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, **kw)
        text.encode("utf-8")
        return text
    except (ValueError, UnicodeEncodeError):
        return json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False, **kw)


def to_json_line(obj: dict) -> str:
    """One JSON line (watch's JSON lines), with the same rules as :func:`to_json`."""
    return _dumps(obj)


def write_atomic(path: str, text: str) -> None:
    """Write a report so an interrupt never leaves half of one, and nothing else is harmed.

    - a regular file (or a new path): written to a private temporary file beside it, then renamed
      over it; an existing file keeps its mode (and owner, where allowed);
    - a symbolic link: the same, applied to the file it points to (the link stays a link);
    - a device, FIFO or socket (``/dev/stdout``, ``/dev/null``, ``>(cmd)``): written in place, as
      ``tee`` would. Renaming over it would replace a device node with a regular file, and
      refusing would break ``--json /dev/stdout``;
    - a directory: refused (IsADirectoryError) before anything is written.
    """
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", path)
    data = text.encode("utf-8", errors="backslashreplace")
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(target, "wb") as f:
            f.write(data)
        return
    folder, base = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                pass
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def add_input_limit_args(p: argparse.ArgumentParser) -> None:
    """``--max-decompressed``: the one flag for the decompression cap (collectors/readers.py)."""
    p.add_argument("--max-decompressed", metavar="SIZE", type=_size_arg,
                   help="largest decompressed size of a .gz input (default 4GiB, and at most 100× the compressed "
                        "size: a gzip bomb is refused); setting it lifts the 100× check. Also "
                        "TRAINSCOPE_MAX_DECOMPRESSED=SIZE")


def _size_arg(text: str) -> int:
    from trainscope.collectors.readers import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def apply_input_limits(args) -> None:
    from trainscope.collectors.readers import set_max_decompressed

    set_max_decompressed(getattr(args, "max_decompressed", None))


# What reading an input may raise that is the input's fault, not ours: every command maps these
# through input_problem() to one line and exit 2.
INPUT_ERRORS: tuple[type[BaseException], ...] = (OSError, RecursionError, MemoryError, EOFError, zlib.error)


def input_errors() -> tuple[type[BaseException], ...]:
    from trainscope.collectors.errors import TraceError

    return (TraceError, *INPUT_ERRORS)


def input_problem(e: BaseException, path: str) -> str:
    """The one line (after ``trainscope: ``) for an exception from reading ``path``."""
    from trainscope.collectors.errors import TraceError

    if isinstance(e, TraceError):
        return str(e)
    if isinstance(e, OSError):
        return f"{path}: cannot read: {e.strerror or e}"
    if isinstance(e, RecursionError):
        return f"{path}: nested too deeply to read"
    if isinstance(e, MemoryError):
        return f"{path}: too large to read in the memory available"
    if isinstance(e, (EOFError, zlib.error)):
        return f"{path}: damaged compressed data ({e})"
    return f"{path}: {type(e).__name__}: {e}"


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Print one line on stderr and return the exit code."""
    from trainscope.reports.safe_text import visible

    sys.stderr.write(f"trainscope: {visible(message)}\n")
    return code


def emit_document(doc: dict, args, render_text, render_markdown, render_report=None) -> int:
    """What every report command does with its document: write ``--report`` (Markdown, or what
    ``render_report(path)`` gives for an .html or .json path) and ``--json`` atomically, then print
    ``--format`` (text by default) on stdout. Text and Markdown show every trace-derived name made
    visible (control and escape bytes spelled out); HTML escapes its own."""
    from trainscope.reports.safe_text import safe_strings

    shown = safe_strings(doc)  # every trace-derived name made visible for terminals and Markdown

    def report_text(path: str) -> str:
        if render_report is not None and path.lower().endswith((".html", ".htm", ".json")):
            return render_report(path)
        return render_markdown(shown)

    for path, render in ((getattr(args, "report", None), report_text),
                         (getattr(args, "json_out", None), lambda _p: to_json(doc))):
        if path:
            try:
                write_atomic(path, render(path))
            except OSError as e:
                return fail(f"cannot write {path}: {e.strerror or e}")
    if args.format == "json":
        sys.stdout.write(to_json(doc))
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(shown))
    else:
        color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
        sys.stdout.write(render_text(shown, color=color))
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
