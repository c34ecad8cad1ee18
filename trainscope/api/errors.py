"""The one error hierarchy of trainscope and the one place an exception becomes a message and an exit
code (:func:`describe`); what reading an input may raise, mapped to one line (:func:`input_problem`)."""

from __future__ import annotations

import contextlib
import sys
import zlib
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

Progress = Callable[[str, "float | None"], None]


def silent(stage: str, fraction: float | None) -> None:
    """A progress callback that shows nothing."""


class TrainscopeError(Exception):
    """Every error trainscope raises on purpose. ``str(e)`` is one line; ``exit_code`` is what the
    command line exits with."""

    exit_code = EXIT_INTERNAL


class BadInput(TrainscopeError, ValueError):
    """The input cannot be used: unreadable or malformed trace, unknown threshold or GPU, a
    ``step_range`` that names no range, a gate metric one run cannot measure. Exit 2."""

    exit_code = EXIT_BAD_INPUT


class DeepUnavailable(BadInput):
    """``deep=True`` needs Holistic Trace Analysis, which is not installed. Exit 2."""


class Regression(TrainscopeError):
    """``diff(..., fail_if_slower=…)``: the gate's metric got worse by more than allowed. Exit 3.
    Raised only by :meth:`DiffResult.check`; ``diff`` itself returns the result."""

    exit_code = EXIT_REGRESSION

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        # The DiffResult that failed the gate. Not imported for its type: every module of the api
        # layer imports this one, so this one imports none of them (no import circle).
        self.result = result


def _raised(exc: BaseException, module: str, name: str) -> bool:
    """Whether ``exc`` is a ``module.name`` (a reader's or analyzer's error class), without importing
    ``module``: an exception of a class exists only once the class's module has run. This module is
    the first one every front end imports (the CLI, ``ts.BadInput``); importing the collectors here
    would load numpy and msgspec with it (measured: ``import trainscope.api.errors`` 5 ms → 0.1 s)."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(exc, getattr(loaded, name))


def _trace_error(exc: BaseException) -> bool:
    return _raised(exc, "trainscope.collectors.errors", "TraceError")


def describe(exc: BaseException) -> tuple[str, int]:
    """The one-line message (without the ``trainscope: `` prefix) and exit code for any exception."""

    if isinstance(exc, TrainscopeError):
        return str(exc), exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", EXIT_INTERRUPTED
    if _trace_error(exc):
        return str(exc), EXIT_BAD_INPUT
    if isinstance(exc, MemoryError):
        return "out of memory", EXIT_INTERNAL
    return (
        f"internal error: {type(exc).__name__}: {exc} (set TRAINSCOPE_DEBUG=1 for the traceback, and please report it)"
    ), EXIT_INTERNAL


@contextlib.contextmanager
def bad_input(path: str | None = None, what: str | None = None) -> Iterator[None]:
    """Turn the readers' and analyzers' input errors into :class:`BadInput` (one line each)."""

    prefix = f"{path}: " if path else ""
    try:
        yield
    except TrainscopeError:
        raise
    except Exception as e:
        if _raised(e, "trainscope.analyzers.trace.range_steps", "StepRangeError"):
            raise BadInput(f"{prefix}--step-range: {e}") from None
        if _trace_error(e) or isinstance(e, INPUT_ERRORS):  # the readers' one mapping: input_problem()
            raise BadInput(input_problem(e, path or "input")) from None
        if isinstance(e, ValueError) and what is not None:
            raise BadInput(f"{what}: {e}") from None
        raise


# What reading an input may raise that is the input's fault, not ours: every command maps these
# through input_problem() to one line and exit 2.
INPUT_ERRORS: tuple[type[BaseException], ...] = (OSError, RecursionError, MemoryError, EOFError, zlib.error)


def input_problem(e: BaseException, path: str) -> str:
    """The one line (after ``trainscope: ``) for an exception from reading ``path``."""

    if _trace_error(e):
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
