"""Errors a collector raises for input it cannot use. The CLI turns them into one line and exit 2."""

from __future__ import annotations


class TraceError(Exception):
    """The input is missing, unreadable or not a trace trainscope can analyze.

    ``str(err)`` is a complete one-line message that names the file and the problem.
    """

    def __init__(self, path: str, problem: str) -> None:
        from trainscope.traces.safe_text import visible

        # One line, whatever the file name or the library's message holds (newlines, escapes).
        path, problem = visible(str(path)), visible(str(problem))
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
