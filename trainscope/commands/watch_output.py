"""The launched job's own output under ``trainscope watch -- COMMAND``: relayed whole and in order.

Headless, the job writes to pipes and :class:`OutputRelay` copies each chunk to the watch's stdout
(its stderr for ``--format json``) and stderr, cut at line ends and under the same lock as the
watch's own lines, so a status line never lands in the middle of one of the job's lines. A partial
line (a progress bar's ``\\r`` updates) is passed on after :data:`PARTIAL_S`.

With the dashboard, the job writes to a pseudo-terminal (so it line-buffers as on a terminal);
its lines are kept, shown in the dashboard's output pane, and written to the terminal's scrollback
after the dashboard closes: the training log is never lost.
"""
from __future__ import annotations

import os
import select
import sys
import threading
from typing import IO, Callable

WRITE_LOCK = threading.Lock()  # every headless write of the watch and of the relayed job goes under it
PARTIAL_S = 0.2  # a line without its end yet is passed on after this long
PANE_LINES = 5000  # lines the dashboard's output pane holds
MAX_KEPT_BYTES = 256 << 20  # dashboard: the job's output kept for the scrollback (beyond: the oldest half dropped, said)


def write_line(stream: IO[str], text: str) -> None:
    """One whole line of the watch's own output, never inside one of the job's lines."""
    with WRITE_LOCK:
        try:
            stream.write(text)
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass


class OutputRelay:
    """Reads the job's output fds on threads; ``sink(data: bytes, fd_index)`` gets whole lines."""

    def __init__(self, fds: list[int], sink: Callable[[bytes, int], None]) -> None:
        self._sink = sink
        self.fds = list(fds)
        self._threads = [threading.Thread(target=self._pump, args=(fd, i), daemon=True,
                                          name=f"trainscope-job-output-{i}") for i, fd in enumerate(fds)]
        for t in self._threads:
            t.start()

    def _pump(self, fd: int, index: int) -> None:
        pending = b""
        try:
            while True:
                ready, _, _ = select.select([fd], [], [], PARTIAL_S)
                if not ready:
                    if pending:
                        self._sink(pending, index)
                        pending = b""
                    continue
                try:
                    data = os.read(fd, 65536)
                except OSError:  # a pty's master reads EIO once the job's side is closed
                    data = b""
                if not data:
                    break
                pending += data
                cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
                if cut >= 0:
                    self._sink(pending[:cut + 1], index)
                    pending = pending[cut + 1:]
        finally:
            if pending:
                self._sink(pending, index)
            try:
                os.close(fd)
            except OSError:
                pass

    def join(self, timeout: float = 5.0) -> None:
        for t in self._threads:
            t.join(timeout)


def headless_sink(job_stdout_to_stderr: bool) -> Callable[[bytes, int], None]:
    """Copy the job's stdout (index 0) and stderr (index 1) to the watch's, under the write lock."""

    def sink(data: bytes, index: int) -> None:
        stream = sys.stderr if index == 1 or job_stdout_to_stderr else sys.stdout
        with WRITE_LOCK:
            try:
                stream.flush()
                stream.buffer.write(data)
                stream.buffer.flush()
            except (BrokenPipeError, ValueError, AttributeError):
                pass
    return sink


class KeptOutput:
    """The job's output under the dashboard: every byte, in order (bounded by MAX_KEPT_BYTES), and
    the text lines for the output pane."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.chunks: list[bytes] = []
        self.size = 0
        self.dropped = 0
        self._partial = ""
        self.lines: list[str] = []  # for the output pane: the last PANE_LINES lines
        self.first_line = 0  # number of the first line in self.lines

    def __call__(self, data: bytes, index: int) -> None:
        with self._lock:
            self.chunks.append(data)
            self.size += len(data)
            while self.size > MAX_KEPT_BYTES and len(self.chunks) > 1:
                old = self.chunks.pop(0)
                self.size -= len(old)
                self.dropped += len(old)
            text = self._partial + data.decode("utf-8", "replace").replace("\r\n", "\n")
            lines = text.split("\n")
            self._partial = lines.pop()
            self.lines.extend(line.rsplit("\r", 1)[-1] for line in lines)
            if len(self.lines) > PANE_LINES:
                cut = len(self.lines) - PANE_LINES
                del self.lines[:cut]
                self.first_line += cut

    def since(self, n: int) -> tuple[list[str], int]:
        """Lines numbered ``n`` on (those still kept for the pane), and the next number to ask for."""
        with self._lock:
            start = max(n, self.first_line)
            return self.lines[start - self.first_line:], self.first_line + len(self.lines)

    def dump(self, stream: IO[str]) -> None:
        """Write what is kept and not yet written to ``stream`` (the terminal's scrollback once the
        dashboard is gone); called again for what the job wrote after."""
        with self._lock:
            data = b"".join(self.chunks)
            self.chunks, self.size = [], 0
        try:
            if self.dropped:
                self.dropped = 0
                stream.write(f"trainscope: the job's first {self.dropped} bytes of output were not kept "
                             f"(more than {MAX_KEPT_BYTES >> 20} MiB)\n")
            stream.flush()
            stream.buffer.write(data.replace(b"\r\n", b"\n"))
            stream.buffer.flush()
        except (BrokenPipeError, ValueError, AttributeError):
            pass


def open_pty() -> tuple[int, int] | None:
    """(master, slave) of a new pseudo-terminal sized like ours, or None where there is none."""
    try:
        import pty

        master, slave = pty.openpty()
    except (OSError, ImportError):
        return None
    try:
        import fcntl
        import termios

        size = fcntl.ioctl(sys.stdout.fileno(), termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
    except (OSError, ImportError, ValueError, AttributeError):
        pass
    return master, slave


_DETACHED_RELAY = """
import os, sys
fd = int(sys.argv[1])
while True:
    try:
        data = os.read(fd, 65536)
    except OSError:
        break
    if not data:
        break
    try:
        os.write(1, data)
    except OSError:
        pass
"""


def relay_after_detach(master: int) -> None:
    """``d`` left the job running: a small process of its own goes on copying the job's
    pseudo-terminal to ours, so the job's writes never fail once watch is gone."""
    import subprocess

    try:
        subprocess.Popen([sys.executable, "-c", _DETACHED_RELAY, str(master)], pass_fds=(master,),
                         start_new_session=True, stdin=subprocess.DEVNULL)
    except OSError:
        pass
