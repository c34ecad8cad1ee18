"""Errors a collector raises for input it cannot use. The CLI turns them into one line and exit 2."""

from __future__ import annotations


class TraceError(Exception):
    """The input is missing, unreadable or not a trace trainscope can analyze.

    ``str(err)`` is a complete one-line message that names the file and the problem.
    """

    def __init__(self, path: str, problem: str) -> None:
        # Deferred: importing trainscope.traces loads numpy and the trace model (≈ 170 ms measured
        # with -X importtime), which a command that never fails this way should not pay for.
        from trainscope.traces.safe_text import visible

        # One line, whatever the file name or the library's message holds (newlines, escapes).
        path, problem = visible(str(path)), visible(str(problem))
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class UnsafePickleError(Exception):
    """The pickle asked for something other than plain data, or is malformed or too large."""


class ReadRefused(UnsafePickleError):
    """Refused before unpickling: too large, or gzip data damaged or inflating past the cap."""
