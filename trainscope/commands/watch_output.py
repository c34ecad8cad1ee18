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
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO
from typing import TextIO

WRITE_LOCK = threading.Lock()  # every headless write of the watch and of the relayed job goes under it
PARTIAL_S = 0.2  # a line without its end yet is passed on after this long
PANE_LINES = 5000  # lines the dashboard's output pane holds
MAX_KEPT_BYTES = (
    256 << 20
)  # dashboard: the job's output kept for the scrollback (beyond: the oldest half dropped, said)


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
        self._threads = [
            threading.Thread(target=self._pump, args=(fd, i), daemon=True, name=f"trainscope-job-output-{i}")
            for i, fd in enumerate(fds)
        ]
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
                    self._sink(pending[: cut + 1], index)
                    pending = pending[cut + 1 :]
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
            return self.lines[start - self.first_line :], self.first_line + len(self.lines)

    def dump(self, stream: TextIO) -> None:
        """Write what is kept and not yet written to ``stream`` (the terminal's scrollback once the
        dashboard is gone); called again for what the job wrote after."""
        with self._lock:
            data = b"".join(self.chunks)
            self.chunks, self.size = [], 0
        try:
            if self.dropped:
                self.dropped = 0
                stream.write(
                    f"trainscope: the job's first {self.dropped} bytes of output were not kept "
                    f"(more than {MAX_KEPT_BYTES >> 20} MiB)\n"
                )
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


# The relay process: a few lines of standard library, in a session of its own, so that the job's
# output outlives the watcher (kill -9, a crash, `d` in the dashboard): a job must never die of a
# write to a closed pipe or terminal because watch went away.
# argv: FALLBACK_FD IN:OUT ...  Each IN is copied to OUT cut at line ends (a partial line after
# PARTIAL_S); when OUT fails (the watcher's pipe, once the watcher is gone) FALLBACK_FD takes over.
_RELAY = """
import os, select, sys
PARTIAL = @PARTIAL@
fallback = int(sys.argv[1])
route = {}
for a in sys.argv[2:]:
    i, o = a.split(":")
    route[int(i)] = int(o)
pending = dict.fromkeys(route, b"")
def emit(fd, data):
    while data:
        try:
            n = os.write(route[fd], data)
            data = data[n:]
        except InterruptedError:
            continue
        except OSError:
            if route[fd] == fallback:
                return
            route[fd] = fallback
open_fds = set(route)
while open_fds:
    try:
        ready = select.select(list(open_fds), [], [], PARTIAL)[0]
    except InterruptedError:
        continue
    if not ready:
        for fd in open_fds:
            if pending[fd]:
                emit(fd, pending[fd])
                pending[fd] = b""
        continue
    for fd in ready:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            open_fds.discard(fd)
            if pending[fd]:
                emit(fd, pending[fd])
            continue
        buf = pending[fd] + data
        cut = max(buf.rfind(b"\\n"), buf.rfind(b"\\r"))
        if cut >= 0:
            emit(fd, buf[:cut + 1])
            buf = buf[cut + 1:]
        pending[fd] = buf
""".replace("@PARTIAL@", repr(PARTIAL_S))


def start_relay(routes: list[tuple[int, int]], fallback: int = 1) -> subprocess.Popen[bytes] | None:
    """Start the relay process copying each (in fd, out fd) of ``routes``; None when it cannot start
    (the caller then relays in-process)."""
    fds = tuple(sorted({fd for pair in routes for fd in pair} | {fallback}))
    try:
        return subprocess.Popen(
            [sys.executable, "-c", _RELAY, str(fallback), *(f"{i}:{o}" for i, o in routes)],
            pass_fds=tuple(fd for fd in fds if fd > 2),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        return None


class JobOutput:
    """Where a launched job's output goes, for its whole life.

    Headless: the job writes to pipes; the relay process copies its lines and the watch's own
    (``sys.stdout``/``sys.stderr`` are pointed at pipes to it for the watch) to the terminal, so
    they never cut into each other, and the job's go on if the watcher dies. Dashboard: the job
    writes to a pseudo-terminal; the relay process forwards it to the watcher (the Output tab, the
    scrollback after exit) and to the terminal itself once the watcher is gone (``d``, a crash).
    Without a relay process (it could not start), the watcher relays in-process."""

    def __init__(self, headless: bool, stdout_to_stderr: bool) -> None:
        self.headless, self.to_stderr = headless, stdout_to_stderr
        self.kept: KeptOutput | None = None
        self.proc: subprocess.Popen[bytes] | None = None  # the relay process
        self.relay: OutputRelay | None = None
        self._saved: tuple[TextIO, TextIO] | None = None
        self._parent: list[int] = []
        tty = None if headless else open_pty()
        if tty is not None:
            self.child_fds = (tty[1], tty[1])
            self._parent = [tty[0]]
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            self.child_fds = (out_w, err_w)
            self._parent = [out_r, err_r]
        self.tty = tty is not None

    def launched(self) -> None:
        """The job has started: the parent's copies of its ends close; the relaying begins."""
        for fd in set(self.child_fds):
            os.close(fd)
        if self.tty:
            self.kept = KeptOutput()
            r, w = os.pipe()
            self.proc = start_relay([(self._parent[0], w)], fallback=1)
            if self.proc is not None:
                os.close(w)
                os.close(self._parent[0])
                self.relay = OutputRelay([r], self.kept)
            else:
                os.close(r)
                os.close(w)
                self.relay = OutputRelay(self._parent, self.kept)
            return
        wout_r, wout_w = os.pipe()
        werr_r, werr_w = os.pipe()
        out_r, err_r = self._parent
        self.proc = start_relay([(out_r, 2 if self.to_stderr else 1), (err_r, 2), (wout_r, 1), (werr_r, 2)])
        for fd in (out_r, err_r, wout_r, werr_r) if self.proc is not None else (wout_r, werr_r):
            os.close(fd)
        if self.proc is None:
            os.close(wout_w)
            os.close(werr_w)
            self.relay = OutputRelay(self._parent, headless_sink(self.to_stderr))
            return
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        enc = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout = open(wout_w, "w", buffering=1, encoding=enc, errors="replace")
        sys.stderr = open(werr_w, "w", buffering=1, encoding=enc, errors="replace")

    def abandon(self) -> None:
        """The job could not start: close what was opened for it."""
        for fd in set(self.child_fds) | set(self._parent):
            try:
                os.close(fd)
            except OSError:
                pass

    def drain(self, timeout: float = 5.0) -> None:
        """Dashboard: the job's output so far (all of it once the job has ended) to the scrollback."""
        if self.relay is not None and self.kept is not None:
            self.relay.join(timeout)
        if self.kept is not None:
            self.kept.dump(sys.stdout)

    def close(self, wait_s: float = 10.0) -> None:
        """The watch ends: its own output is flushed through the relay, which ends with the job's
        output (or goes on relaying a job that outlives the watch)."""
        if self._saved is not None:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.close()
                except OSError:
                    pass
            sys.stdout, sys.stderr = self._saved
            self._saved = None
        if self.relay is not None and self.kept is None:
            self.relay.join(wait_s)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=wait_s)
            except Exception:
                pass  # a job's child still holds its output open: the relay goes on for it
