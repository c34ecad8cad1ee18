"""A real terminal for the app tests: tmux runs a shell line on a pseudo-terminal of a given size, the
test reads the screen, presses keys and reads the exit code the line wrote. Used by the tests that
run `trainscope analyze`, `diff` and `watch` as a user would (test_tui_tmux*.py, test_tree_app.py,
test_diff_app.py, test_watch_output.py)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

needs_tmux = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it; apt-get install tmux)"
)


class Tmux:
    """One tmux server (its own socket) holding one session, ``t``."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        self("send-keys", "-t", "t", *keys)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "t")

    def wait_for(self, text: str, timeout: float = 90.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared; screen:\n{self.screen()}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def trainscope_line(args: list[str | Path], exit_file: Path, before: str = "") -> str:
    """The pane's shell line: ``before``, then ``python -m trainscope ARGS`` (each quoted), its exit code
    written to ``exit_file``, then 30 s more so that the screen stays to be read."""
    argv = " ".join(shlex.quote(str(a)) for a in [sys.executable, "-m", "trainscope", *args])
    return f"{before}{argv}; echo $? > {shlex.quote(str(exit_file))}; sleep 30"


@contextmanager
def terminal(socket: str, line: str, size: tuple[int, int], cwd: Path | None = None) -> Iterator[Tmux]:
    """A session of ``size`` (columns, rows) running ``line`` (in ``cwd``); its server killed after."""
    tmux = Tmux(socket)
    start = ["new-session", "-d", "-s", "t", "-x", str(size[0]), "-y", str(size[1])]
    tmux(*start, *(["-c", str(cwd)] if cwd is not None else []), line)
    try:
        yield tmux
    finally:
        tmux.kill()
