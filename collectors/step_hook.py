"""Step-exact timing inside the training process: how long each DataLoader ``__next__`` waits,
versus the rest of the loop iteration.

This module runs inside the *user's* job, so it uses the standard library only (it is copied
next to an injected ``sitecustomize`` and may run under another Python than trainscope's), never
imports torch itself, and never lets an error escape: if anything fails the job runs unchanged.

How it works: ``install()`` adds a post-import hook for ``torch.utils.data.dataloader`` (or patches
it at once if torch is already imported) that wraps ``_BaseDataLoaderIter.__next__``. Each call
costs two ``time.monotonic_ns()`` reads and a few additions; every ``FLUSH_NS`` the totals go to the
watcher as one JSON datagram on a UNIX socket (non-blocking: if the watcher is slow or absent the
batch is dropped, never waited on). CLOCK_MONOTONIC is system-wide on Linux, so the watcher can
place batches on its own timeline.

On-demand capture: the socket is two-way. The job's end is bound beside the watcher's
(``job-PID.sock`` in the same private folder), so the watcher can ask for a kernel-level trace of
the next N iterations: a ``{"type": "capture", …}`` datagram, read without blocking when the totals
are flushed. At the next iteration boundary (the start of a DataLoader ``__next__``) the hook starts
``torch.profiler.profile`` — imported only then, and only in a job that already imported torch —
marks each iteration with ``prof.step()`` (``ProfilerStep#N``), stops after N iterations or a time
limit, and writes the trace where the watcher said. A profiler already running, a job without
torch, or any error is answered with a refusal message; nothing is raised in the job.

Trust (docs/watch.md, "Safety"): every folder this module uses — the watcher's socket folder and
the capture folder — is opened without following a link and checked on the open descriptor: a
real folder, owned by this process's user, that nobody else can write into (the socket folder:
nobody else can enter). The watcher's socket must be a socket of this user, and the watcher that
owns it must still be alive (its pid and start time in ``<socket>.owner``); otherwise the hook
sends nothing and binds nothing. The job's end of the socket is *connected* to the watcher's, so
only that watcher can send it requests. A trace is written under a private temporary name created
with ``O_EXCL`` (never through a link) inside the checked folder, then renamed into place.

Two-line opt-in for a job started without ``trainscope watch --``::

    import trainscope.collectors.step_hook as step_hook
    step_hook.install()   # then: trainscope watch --pid <this process's pid>
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import cast

if TYPE_CHECKING:  # (standard library only, as all of this file)
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

ENV_SOCKET = "TRAINSCOPE_STEP_SOCKET"
TARGET_MODULE = "torch.utils.data.dataloader"
# The parts of a step the hook times (the ``open`` state of a stream): data (inside DataLoader
# __next__), forward, backward, optimizer step, host-to-device copy.
NONE, DATA, FWD, BWD, OPT, H2D = 0, 1, 2, 3, 4, 5
FLUSH_NS = 100_000_000  # send totals at most every 0.1 s
RETRY_NS = 2_000_000_000  # when no watcher listens, try again after 2 s
RECENT = 16  # step durations kept for the capture's "before" figure (a ring)
AFTER = 8  # steps timed after a capture for its "after" figure
KINETO_QUIET = (
    "6"  # KINETO_LOG_LEVEL above every level Kineto logs at: its start/stop lines stay out of the job's stderr
)

_state: _Stream | None = None


def private_dir() -> str:
    """This user's folder for watcher sockets, ``$TMPDIR/trainscope-UID`` (as tmux does): created
    0700 by the watcher, and used by both sides only when it is a real folder owned by this user
    and closed to others. Nothing at a predictable path in the shared temp folder itself is ever used."""
    return os.path.join(tempfile.gettempdir(), f"trainscope-{os.geteuid()}")


def default_socket_path(pid: int) -> str:
    """Where ``trainscope watch --pid PID`` listens for the opt-in hook of process PID."""
    return os.path.join(private_dir(), f"steps-{pid}.sock")


# -- trust: folders, files and the watcher's liveness, checked on what was opened ---------------------

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)  # a name that exists (a file, a planted link) is never opened: EEXIST
PRIVATE = 0o077  # the socket folder: nobody else may even enter
NO_OTHER_WRITE = 0o022  # a capture folder: others may read it, never write into it


def folder_problem(st: os.stat_result, closed: int = PRIVATE) -> str | None:
    """Why a folder (its ``lstat``/``fstat``) is not safe to use, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    if st.st_mode & closed:
        what = "open to group or others" if closed == PRIVATE else "writable by group or others"
        return f"is {what} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def existing_problem(path: str, judge: Callable[[os.stat_result], str | None]) -> str | None:
    """Why ``path`` (its ``lstat``: a link itself, not its target) may not be used, as ``judge``
    says of it; None where nothing is there yet, the error's words where it cannot be looked at."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return e.strerror or str(e)
    return judge(st)


def open_folder(path: str, closed: int = PRIVATE) -> int:
    """A descriptor of the folder ``path``, opened without following a link and checked on the
    descriptor (see :func:`folder_problem`); PermissionError (or the open's OSError) otherwise."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise PermissionError(errno.EPERM, "is a symbolic link: refused", path) from None
        raise
    try:
        problem = folder_problem(os.fstat(fd), closed)
        if problem:
            raise PermissionError(errno.EPERM, f"{problem}: refused", path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def same_folder(fd: int, path: str) -> bool:
    """``path`` still names the folder open as ``fd`` (nobody swapped it since it was checked)."""
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def fd_path(fd: int, name: str = "") -> str | None:
    """A path that reaches ``name`` inside the folder open as ``fd`` through that descriptor
    (``/proc/self/fd/N/name`` on Linux): no component another user could swap is resolved
    again. None where the system has no such path."""
    base = f"/proc/self/fd/{fd}"
    if not os.path.isdir(base):
        return None
    return os.path.join(base, name) if name else base


def process_start(pid: int) -> str:
    """The start time of process ``pid`` (Linux: clock ticks since boot; "" where unknown,
    "-" when there is no such process): a pid and its start time name one process for good."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except FileNotFoundError:
        return "-" if os.path.isdir("/proc/self") else ""
    except Exception:
        return ""


def owner_record() -> bytes:
    """What a watcher writes into its ``.owner`` file: its pid and start time."""
    return f"{os.getpid()} {process_start(os.getpid())}\n".encode()


def owner_alive(data: bytes) -> bool:
    """Whether the process an ``.owner`` record (:func:`owner_record`) names is still running (the
    same process: pid and start)."""
    try:
        fields = data.decode("ascii").split()
        pid, start = int(fields[0]), fields[1] if len(fields) > 1 else ""
    except (ValueError, IndexError, UnicodeDecodeError):
        return False
    return process_alive(pid, start)


def process_alive(pid: int, start: str = "") -> bool:
    """Whether process ``pid`` runs — the very process that started at ``start`` (:func:`process_start`)
    where both are known; the pid alone without /proc."""
    if pid <= 0:
        return False
    now = process_start(pid)
    if now == "-":
        return False
    if now and start:
        return now == start
    try:  # no /proc: the pid alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass
    return True


def owner_name(socket_name: str) -> str:
    """The ``.owner`` file beside a watcher's socket (``steps.sock`` → ``steps.owner``)."""
    return (socket_name[:-5] if socket_name.endswith(".sock") else socket_name) + ".owner"


def read_own_file(dir_fd: int, name: str, limit: int = 4096) -> bytes | None:
    """The first ``limit`` bytes of ``name`` in the folder ``dir_fd`` when it is a regular file
    of this user (never through a link); None otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def folder_entries(folder: str | None = None) -> list[tuple[str, str]]:
    """The name and path of each entry of ``folder`` (default ``$TMPDIR``); none where it cannot be
    listed. The stale-folder sweeps (the watch's run folders, the MCP server's) start from it."""
    folder = folder or tempfile.gettempdir()
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [(name, os.path.join(folder, name)) for name in names]


def owner_gone(dfd: int, owner_file: str) -> bool | None:
    """Whether the process that the ``owner_file`` (:func:`owner_record`) in the folder open at
    ``dfd`` names is gone; None where the folder has no such file (an older writer's: the caller
    judges it by its age)."""
    owner = read_own_file(dfd, owner_file)
    return None if owner is None else not owner_alive(owner)


def watcher_problem(path: str) -> str | None:
    """Why the watcher socket ``path`` is not to be used by this process, or None: its folder must
    be private to this user, the socket this user's, and the watcher that owns it alive."""
    folder, name = os.path.split(path)
    try:
        dfd = open_folder(folder or ".", PRIVATE)
    except OSError as e:
        return f"{folder}: {e.strerror or e}"
    try:
        return _watcher_problem_in(dfd, name)
    finally:
        os.close(dfd)


def _watcher_problem_in(dfd: int, name: str) -> str | None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return "no watcher socket"
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        return "the socket is not this user's"
    if not owner_alive(read_own_file(dfd, owner_name(name)) or b""):
        return "the watcher that made the socket is gone"
    return None


def socket_address(dfd: int, folder: str, name: str) -> str:
    """The address of the socket ``name`` in the folder open as ``dfd``: through the descriptor
    where the system allows (no path component is resolved again, and a long ``$TMPDIR`` does not
    overflow the 108 bytes of a socket address), else ``folder/name``."""
    return fd_path(dfd, name) or os.path.join(folder, name)


def watcher_listening() -> bool:
    """For the injected ``sitecustomize``: the watcher named by ``$TRAINSCOPE_STEP_SOCKET`` is alive
    and its folder safe. False after a ``kill -9`` of the watcher: the hook then stays out."""
    path = os.environ.get(ENV_SOCKET)
    if not path:
        return False
    return watcher_problem(path) is None


def _ancestors(pid: int, limit: int = 8) -> list[int]:
    """Parent, grandparent, … of ``pid`` (Linux /proc; empty elsewhere)."""
    out = []
    for _ in range(limit):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except Exception:
            break
        if pid <= 1:
            break
        out.append(pid)
    return out


def find_watcher_socket(pid: int) -> str:
    """The socket of a live ``watch --pid`` of this process or of an ancestor (a rank whose
    launcher is watched, ``watch --pid <torchrun's pid>``); this process's own path when none
    listens yet."""
    for p in [pid, *_ancestors(pid)]:
        path = default_socket_path(p)
        if os.path.exists(path) and watcher_problem(path) is None:
            return path
    return default_socket_path(pid)


def discard_temp(fd: int, tmp: str, dir_fd: int | None = None) -> None:
    """What a write cut short leaves, cleared: its descriptor closed (when ``fd`` >= 0: not yet
    handed to a file object) and its temporary file ``tmp`` removed (relative to ``dir_fd``)."""
    if fd >= 0:
        os.close(fd)
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except OSError:
        pass


def place_file(src: str, folder: str, name: str, folder_id: tuple[int, int] | None = None) -> None:
    """Copy the file ``src`` into ``folder`` as ``name``: the folder opened without following a
    link and checked (this user's, nobody else can write into it, and the very folder the watcher
    named when ``folder_id`` = (st_dev, st_ino) is given), the bytes written to a new private
    temporary name (``O_EXCL``, 0600: never through a link, never over a file), then renamed over
    ``name``. OSError (PermissionError: the folder is refused) when it cannot be done."""
    check_name(name)
    dfd = open_folder(folder, NO_OTHER_WRITE)
    try:
        if folder_id is not None:
            st = os.fstat(dfd)
            if (st.st_dev, st.st_ino) != tuple(folder_id):
                raise PermissionError(errno.EPERM, "is not the folder the watcher asked for: refused", folder)
        tmp = f".{name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
        out = os.open(tmp, _NEW_FILE, 0o600, dir_fd=dfd)
        try:
            with open(src, "rb") as f, os.fdopen(out, "wb") as o:
                out = -1
                shutil.copyfileobj(f, o, 1 << 20)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            discard_temp(out, tmp, dfd)
            raise
    finally:
        os.close(dfd)


def check_name(name: str) -> None:
    """A plain file name (no folder part, not hidden, no NUL): ValueError otherwise."""
    if not name or name.startswith(".") or os.sep in name or "\0" in name or (os.altsep and os.altsep in name):
        raise ValueError(f"not a plain file name: {name!r}")


class _Stream:
    """Per-process totals since the last flush, and the socket they go out on."""

    def __init__(self, path: str, auto: bool = False) -> None:
        self.path = path
        self.hello: dict[str, Any] | None = None  # sent before anything else to each watcher that listens
        self.greeted = False
        self.auto = auto  # no explicit socket: look for a watcher of this process or an ancestor on each retry
        self.pid = os.getpid()
        self.sock: socket.socket | None = None
        self.prev_start = 0  # start of the previous __next__ (0: none yet)
        self.prev_wait = 0
        self.n = self.wait = self.step = self.max_wait = 0
        self.last_flush = time.monotonic_ns()
        self.retry_at = 0
        self.reply_path: str | None = None  # where this process's end of the socket is bound
        self.capture_wanted = False  # a capture is pending or running: the wrapper calls boundary()
        self.pending: dict[str, Any] | None = None
        self.cap: _Capture | None = None
        self.recent: deque[int] = deque(maxlen=RECENT)  # the last step durations
        self.after: list[int] | None = None  # steps timed after the last capture
        self.after_id = 0
        self.after_skip = 0
        # Where in the step (forward, backward, optimizer, host-to-device): see _install_parts.
        self.parts = False  # the part hooks are in place (torch was loaded at the first __next__)
        self.parts_tried = False
        self.fwd = self.bwd = self.opt = self.h2d = 0  # totals of the counted iterations since the last flush
        self.c_fwd = self.c_bwd = self.c_opt = self.c_h2d = 0  # the running iteration's
        self.own = self.c_own = 0  # this hook's own time in the DataLoader call (its bookkeeping, its datagrams)
        self.open = NONE  # the part open at the top level (DATA while inside DataLoader __next__)
        self.depth = 0  # nested calls of the open part (a module inside a module)
        self.t_open = 0
        self.inner = NONE  # forward or backward inside an optimizer step (a closure: LBFGS, Lightning)
        self.idepth = 0
        self.t_inner = 0
        self.carve = 0  # time of those inner parts, taken out of the optimizer's

    def _socket(self) -> socket.socket:
        """The socket, opened when the watcher's checks pass (:func:`watcher_problem`, on the
        folder's descriptor), bound beside the watcher's and connected to it; OSError when there
        is no watcher to talk to."""
        if self.sock is not None and self.pid != os.getpid():  # a forked child needs its own socket
            self.sock, self.reply_path = None, None  # the parent's: neither closed nor unlinked here
        if self.sock is None:
            self.pid = os.getpid()
            folder, name = os.path.split(self.path)
            folder = folder or "."
            try:
                dfd = open_folder(folder, PRIVATE)
            except OSError as e:
                raise ConnectionRefusedError(errno.ECONNREFUSED, f"{folder}: {e.strerror or e}", self.path) from None
            try:
                problem = _watcher_problem_in(dfd, name)
                if problem:
                    raise ConnectionRefusedError(errno.ECONNREFUSED, problem, self.path)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                try:
                    sock.setblocking(False)
                    self.reply_path = self._bind(sock, dfd, folder)
                    # Connected: sends go to this very socket (a path swapped later changes
                    # nothing), and the kernel delivers to this end datagrams from it only.
                    sock.connect(socket_address(dfd, folder, name))
                except BaseException:
                    sock.close()
                    self.sock = sock  # so that _close_socket unlinks what _bind made
                    self._close_socket()
                    raise
                self.sock = sock
            finally:
                os.close(dfd)
        return self.sock

    def _bind(self, sock: socket.socket, dfd: int, folder: str) -> str | None:
        """Bind this end beside the watcher's socket, in its private folder (open and checked as
        ``dfd``), so the watcher can ask for a capture; None (one-way, no capture) when that
        cannot be done."""
        name = f"job-{os.getpid()}.sock"
        try:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.geteuid():
                    os.unlink(name, dir_fd=dfd)  # left by a process that had this pid before
            except FileNotFoundError:
                pass
            sock.bind(socket_address(dfd, folder, name))
            if fd_path(dfd) is None and not same_folder(dfd, folder):  # a path bind: swapped since the check
                try:
                    os.unlink(name, dir_fd=dfd)
                except OSError:
                    pass
                raise PermissionError(errno.EPERM, "the folder changed", folder)
            return os.path.join(folder, name)
        except OSError:
            return None

    def _close_socket(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
        self.close()
        self.reply_path = None

    def close(self) -> None:
        if self.reply_path and self.pid == os.getpid():
            try:
                os.unlink(self.reply_path)
            except OSError:
                pass

    def send(self, message: dict[str, Any]) -> bool:
        now = time.monotonic_ns()
        if now < self.retry_at:
            return False
        try:
            message["pid"] = os.getpid()
            sock = self._socket()
            if self.hello is not None and message is not self.hello and not self.greeted:
                self.hello["pid"] = os.getpid()  # a watcher that came later still learns who this is (rank)
                sock.send(json.dumps(self.hello, separators=(",", ":")).encode())
            sock.send(json.dumps(message, separators=(",", ":")).encode())
            self.greeted = self.greeted or self.hello is not None
            return True
        except (BlockingIOError, InterruptedError):
            return False  # watcher busy: drop this batch, never block the loop
        except OSError:
            # No watcher (yet), or it went away: nothing kept open; looked for again later.
            self.retry_at = now + RETRY_NS
            self._close_socket()
            self.greeted = False
            if self.auto:
                self.path = find_watcher_socket(os.getpid())
            return False
        except Exception:
            return False

    def on_next(self, start: int, end: int) -> None:
        # The iteration that started at the previous __next__ ends where this one starts.
        prev = self.prev_start
        if prev:
            d = start - prev
            self.n += 1
            self.wait += self.prev_wait
            self.step += d
            if self.prev_wait > self.max_wait:
                self.max_wait = self.prev_wait
            self.recent.append(d)
            if self.after is not None:
                self._time_after(d)
            if self.parts:
                self.fwd += self.c_fwd
                self.bwd += self.c_bwd
                self.opt += self.c_opt
                self.h2d += self.c_h2d
                self.own += self.c_own
        if self.parts:  # the next iteration starts clean: a part left open (an exception) is dropped
            self.c_fwd = self.c_bwd = self.c_opt = self.c_h2d = self.c_own = 0
            self.open = self.inner = NONE
            self.depth = self.idepth = 0
        self.prev_start, self.prev_wait = start, end - start
        if end - self.last_flush >= FLUSH_NS:
            self.flush(end)
            if self.reply_path is not None:
                self.poll()

    # -- on-demand capture ---------------------------------------------------------------------

    def poll(self) -> None:
        """Read the watcher's requests, without blocking (a few per flush at most)."""
        sock = self.sock
        if sock is None:  # no watcher reached yet
            return
        for _ in range(4):
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except Exception:
                return
            try:
                msg = json.loads(data)
            except Exception:
                continue
            if isinstance(msg, dict) and msg.get("type") == "capture":
                self.request(msg)

    def request(self, msg: dict[str, Any]) -> None:
        try:
            cid, steps, max_s, path = int(msg["id"]), int(msg["steps"]), float(msg["max_s"]), str(msg["path"])
            folder_id = msg.get("folder_id")
            folder_id = None if folder_id is None else (int(folder_id[0]), int(folder_id[1]))
        except Exception:
            return
        if not (1 <= steps <= 10_000 and max_s > 0):
            return
        if self.cap is not None or self.pending is not None:
            self.send(
                {"type": "capture", "id": cid, "status": "refused", "why": "a capture is already running in the job"}
            )
            return
        folder, name = os.path.split(path)
        try:  # checked now (a refusal comes at once) and again when the trace is written
            check_name(name)
            os.close(open_folder(folder, NO_OTHER_WRITE))
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) else str(e)
            self.send(
                {
                    "type": "capture",
                    "id": cid,
                    "status": "refused",
                    "why": f"the job writes traces only into a folder of its own user: {folder}: {why}"[:300],
                }
            )
            return
        self.pending = {
            "id": cid,
            "steps": steps,
            "max_ns": int(max_s * 1e9),
            "path": path,
            "folder_id": folder_id,
            "stack": bool(msg.get("stack")),
            "memory": bool(msg.get("memory")),
            "shapes": bool(msg.get("shapes")),
        }
        self.capture_wanted = True

    def boundary(self, now: int) -> None:
        """At the start of a DataLoader ``__next__``, while a capture is pending or running."""
        if self.cap is not None:
            if self.cap.boundary(now):
                self.cap = None
                self.capture_wanted = False
            return
        req, self.pending = self.pending, None
        self.capture_wanted = False
        if req is None:
            return
        before = list(self.recent)
        cap = _Capture(self, req, before)
        if cap.start():
            self.cap = cap
            self.capture_wanted = True

    def _time_after(self, d: int) -> None:
        if self.after_skip:  # the step that held the trace export is the capture's, not "after"
            self.after_skip -= 1
            return
        after = self.after
        if after is None:  # (called only while steps after a capture are timed)
            return
        after.append(d)
        if len(after) >= AFTER:
            self.send({"type": "capture_cost", "id": self.after_id, "after_ns": after})
            self.after = None

    def exit_capture(self) -> None:
        """At exit: a capture still running ends without a trace, and says why."""
        cap, self.cap = self.cap, None
        if cap is not None:
            cap.abort(f"the job exited after {max(0, len(cap.marks) - 1)} of {cap.steps} captured iterations")
        elif self.pending is not None:
            self.send(
                {
                    "type": "capture",
                    "id": self.pending["id"],
                    "status": "refused",
                    "why": "the job exited before its next iteration began",
                }
            )
            self.pending = None

    def flush(self, now: int | None = None) -> None:
        now = now or time.monotonic_ns()
        self.last_flush = now
        if not self.n:
            return
        msg = {
            "type": "steps",
            "t": now,
            "n": self.n,
            "wait_ns": self.wait,
            "step_ns": self.step,
            "max_wait_ns": self.max_wait,
        }
        if self.parts:  # where in the step: host wall time of each part, summed over the n iterations
            msg.update(fwd_ns=self.fwd, bwd_ns=self.bwd, opt_ns=self.opt, h2d_ns=self.h2d, hook_ns=self.own)
            self.fwd = self.bwd = self.opt = self.h2d = self.own = 0
        self.n = self.wait = self.step = self.max_wait = 0
        self.send(msg)


def _user_scopes_only(torch: Any) -> Callable[[], None] | None:
    """Make the profiler's next start observe only user scopes (``record_function`` ranges:
    ``ProfilerStep#N``, the DataLoader's ``__next__``, the optimizer's step) rather than every
    operator; returns the function that undoes it, or None where this torch has no such switch.
    Scoped to one call of ``prof.step()``, in this process only."""
    try:
        ap = sys.modules["torch.autograd.profiler"]
        orig = ap._enable_profiler
        user = {torch._C._profiler.RecordScope.USER_SCOPE}
    except Exception:
        return None

    def enable(config: Any, activities: Any, scopes: Any = None) -> Any:
        return orig(config, activities, user)

    setattr(ap, "_enable_profiler", enable)  # noqa: B010 - a private name of torch's, not in its types
    return lambda: setattr(ap, "_enable_profiler", orig)


class _Capture:
    """One capture in the job: ``torch.profiler.profile`` over ``steps`` iterations, after one
    warm-up iteration (profiled and discarded: the profiler's own start-up cost — CUPTI's set-up on
    a GPU — lands there, not in the captured steps), with the cheapest settings that still give a
    verdict: no stacks, no memory, no shapes, no FLOP or module records unless asked, and in a job
    that has initialized neither CUDA nor torch.distributed only the user scopes (``ProfilerStep#N``, the DataLoader's
    ``__next__``): a CPU-only trace is diagnosed by its input waits alone, and recording every
    operator costs a few µs each (+60-100 % per step on a job of small operators)."""

    def __init__(self, stream: _Stream, req: dict[str, Any], before: list[int]) -> None:
        self.stream, self.id, self.steps = stream, req["id"], req["steps"]
        self.req, self.before = req, before
        self.prof: Any = None  # the torch.profiler.profile while capturing (torch: the job's, never imported here)
        self.marks: list[int] = []
        self.t_start = 0
        self.start_ns = 0
        self.warmup_ns = 0
        self.warming = False  # the warm-up iteration is running
        self.ops = True  # every operator recorded (False: user scopes only)
        self._set_env = False  # KINETO_LOG_LEVEL set by the capture, removed when it ends

    def _say(self, status: str, **kw: Any) -> None:
        self.stream.send({"type": "capture", "id": self.id, "status": status, **kw})

    def start(self) -> bool:
        torch = sys.modules.get("torch")
        if torch is None:
            self._say("refused", why="the job has not imported torch: there is no torch.profiler to run")
            return False
        try:
            if torch.autograd._profiler_enabled():
                self._say("refused", why="the job's own torch.profiler is running; a second one was not started")
                return False
        except Exception:
            pass
        try:
            from torch import profiler as tp

            acts = [tp.ProfilerActivity.CPU]
            try:
                if torch.cuda.is_initialized():  # never initialize CUDA in a job that did not
                    acts.append(tp.ProfilerActivity.CUDA)
            except Exception:
                pass
            if "KINETO_LOG_LEVEL" not in os.environ:
                os.environ["KINETO_LOG_LEVEL"] = KINETO_QUIET
                self._set_env = True
            warmup, record = tp.ProfilerAction.WARMUP, tp.ProfilerAction.RECORD
            # Operators are recorded where the diagnosis reads them: a GPU job (they launch the
            # kernels), a distributed one (its collectives align the ranks), or when shapes,
            # stacks or memory were asked for.
            dist = False
            try:
                dist = "torch.distributed" in sys.modules and torch.distributed.is_initialized()
            except Exception:
                pass
            self.ops = len(acts) > 1 or dist or any(self.req.get(k) for k in ("shapes", "stack", "memory"))
            self.prof = tp.profile(
                activities=acts,
                schedule=lambda step: warmup if step == 0 else record,
                record_shapes=self.req.get("shapes", False),
                with_stack=self.req["stack"],
                profile_memory=self.req["memory"],
                with_flops=False,
                with_modules=False,
            )
            t0 = time.monotonic_ns()
            self.prof.start()
            self.t_start = time.monotonic_ns()
            self.start_ns = self.t_start - t0
            self.warming = True
        except Exception as e:
            self._restore_env()
            self.prof = None
            self._say("failed", why=f"torch.profiler could not start: {type(e).__name__}: {e}"[:300])
            return False
        self._say("started", cuda=len(acts) > 1)
        return True

    def boundary(self, now: int) -> bool:
        """Mark an iteration boundary; True when the capture has ended."""
        if self.warming:  # the warm-up iteration ends: recording starts with the next one
            self.warming = False
            restore = None if self.ops else _user_scopes_only(sys.modules["torch"])
            if restore is None:
                self.ops = True
            try:
                self.prof.step()
            except Exception as e:
                self.abort(f"torch.profiler failed at a step: {type(e).__name__}: {e}"[:300])
                return True
            finally:
                if restore is not None:
                    restore()
            self.warmup_ns = now - self.t_start
            self.t_start = time.monotonic_ns()
            self.marks = [self.t_start]
            return False
        self.marks.append(now)
        n = len(self.marks) - 1
        limit = now - self.t_start > self.req["max_ns"]
        if n < self.steps and not limit:
            try:
                self.prof.step()
            except Exception as e:
                self.abort(f"torch.profiler failed at a step: {type(e).__name__}: {e}"[:300])
                return True
            return False
        self.finish(limit)
        return True

    def finish(self, limit: bool) -> None:
        path = self.req["path"]
        folder, name = os.path.split(path)
        tmp = None
        try:
            self.prof.stop()
            t0 = time.monotonic_ns()
            # Exported into a private folder of the job's own (mkdtemp: 0700), then copied into
            # the checked capture folder under a new temporary name and renamed into place.
            tmp = tempfile.mkdtemp(prefix="trainscope-capture-")
            local = os.path.join(tmp, "trace.pt.trace.json")
            self.prof.export_chrome_trace(local)
            place_file(local, folder, name, self.req.get("folder_id"))
            export_ns = time.monotonic_ns() - t0
        except Exception as e:
            self._restore_env()
            why = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
            self._say("failed", why=f"the trace could not be written: {why}"[:300])
            return
        finally:
            self.prof = None
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        self._restore_env()
        during = [b - a for a, b in zip(self.marks, self.marks[1:])]
        self._say(
            "done",
            path=path,
            steps_ns=during,
            before_ns=self.before,
            start_ns=self.start_ns,
            warmup_ns=self.warmup_ns,
            export_ns=export_ns,
            time_limit=limit,
            settings={
                "ops": self.ops,
                "shapes": bool(self.req.get("shapes")),
                "stack": bool(self.req["stack"]),
                "memory": bool(self.req["memory"]),
                "warmup_steps": 1,
            },
        )
        s = self.stream
        s.after, s.after_id, s.after_skip = [], self.id, 1

    def abort(self, why: str) -> None:
        try:
            if self.prof is not None:
                self.prof.stop()
        except Exception:
            pass
        self.prof = None
        self._restore_env()
        self._say("aborted", why=why)

    def _restore_env(self) -> None:
        if self._set_env:
            os.environ.pop("KINETO_LOG_LEVEL", None)
            self._set_env = False


def _install_parts(stream: _Stream, h2d_attr: str | None = None) -> bool:
    """Time where each iteration goes, from global hooks torch already offers (no change to the
    job's code; a plain loop, Lightning and the HF Trainer all call these entry points):

    - forward: the outermost ``nn.Module`` call (global forward pre-hook to its matching forward
      hook, a depth count for the modules inside it);
    - backward: ``torch.autograd.backward`` (``Tensor.backward`` calls it), entry to return;
    - optimizer: ``Optimizer.step``, timed around torch's own step wrapper (:func:`_wrap_optimizer_steps`;
      the global step pre-/post-hooks of torch ≥ 2.0 where there is no such wrapper); a forward or
      backward run inside the step (a closure: LBFGS, Lightning's automatic optimization) is
      counted as itself and taken out of the step's time;
    - host-to-device: ``Tensor.to`` / ``Tensor.cuda`` calls outside those parts whose result is a
      CUDA tensor made from one that was not — wrapped only in a torch built with CUDA (a CPU build
      has no such copy: 0).

    The hook's own time in the DataLoader call (its bookkeeping, its datagrams) is sent as
    ``hook_ns``. Each part is host wall time (on a GPU, forward and backward are the time to launch their
    kernels, not the GPU's time); nothing is synchronized. Parts never overlap: a module called
    inside backward (activation checkpointing) is backward, one called while the DataLoader loads
    (a transform module) is data. Only a job that already imported torch is hooked (torch is never
    imported here); inside ``torch.compile``'s tracing every hook is a no-op. True when in place."""
    stream.parts_tried = True
    if stream.parts:
        return True
    torch = sys.modules.get("torch")
    nnm = sys.modules.get("torch.nn.modules.module")
    optm = sys.modules.get("torch.optim.optimizer")
    autograd = getattr(torch, "autograd", None)
    if torch is None or nnm is None or optm is None or autograd is None:
        return False
    s, clock = stream, time.monotonic_ns
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)

    def fwd_pre(module: Any, args: Any) -> None:
        if compiling():
            return
        o = s.open
        if o == NONE:
            s.open, s.depth, s.t_open = FWD, 1, clock()
        elif o == FWD:
            s.depth += 1
        elif o == OPT:
            i = s.inner
            if i == NONE:
                s.inner, s.idepth, s.t_inner = FWD, 1, clock()
            elif i == FWD:
                s.idepth += 1
        return

    def fwd_post(module: Any, args: Any, out: Any) -> None:
        if compiling():
            return
        o = s.open
        if o == FWD:
            s.depth -= 1
            if s.depth <= 0:
                s.c_fwd += clock() - s.t_open
                s.open = NONE
        elif o == OPT and s.inner == FWD:
            s.idepth -= 1
            if s.idepth <= 0:
                d = clock() - s.t_inner
                s.c_fwd += d
                s.carve += d
                s.inner = NONE
        return

    orig_backward = autograd.backward

    def backward(*args: Any, **kwargs: Any) -> Any:
        o = s.open
        if o == NONE:
            s.open = BWD
            t = clock()
            try:
                return orig_backward(*args, **kwargs)
            finally:
                if s.open == BWD:
                    s.c_bwd += clock() - t
                    s.open = NONE
        if o == OPT and s.inner == NONE:
            s.inner = BWD
            t = clock()
            try:
                return orig_backward(*args, **kwargs)
            finally:
                if s.open == OPT and s.inner == BWD:
                    d = clock() - t
                    s.c_bwd += d
                    s.carve += d
                    s.inner = NONE
        return orig_backward(*args, **kwargs)

    def opt_pre(optimizer: Any, args: Any, kwargs: Any) -> None:
        o = s.open
        if o == NONE:
            s.open, s.depth, s.carve, s.inner, s.t_open = OPT, 1, 0, NONE, clock()
        elif o == OPT and s.inner == NONE:
            s.depth += 1  # an optimizer wrapping another (accelerate's AcceleratedOptimizer)
        return

    def opt_post(optimizer: Any, args: Any, kwargs: Any) -> None:
        if s.open == OPT and s.inner == NONE:
            s.depth -= 1
            if s.depth <= 0:
                s.c_opt += max(0, clock() - s.t_open - s.carve)
                s.open = NONE
        return

    handles = []
    try:
        handles.append(nnm.register_module_forward_pre_hook(fwd_pre))
        try:  # always_call (torch ≥ 2.1): the depth count closes even when a forward raises
            handles.append(nnm.register_module_forward_hook(fwd_post, always_call=True))
        except TypeError:
            handles.append(nnm.register_module_forward_hook(fwd_post))
        if not _wrap_optimizer_steps(optm, opt_pre, opt_post, compiling):
            handles.append(optm.register_optimizer_step_pre_hook(opt_pre))
            handles.append(optm.register_optimizer_step_post_hook(opt_post))
    except Exception:
        for h in handles:
            try:
                h.remove()
            except Exception:
                pass
        raise
    backward.__wrapped__ = orig_backward  # type: ignore[attr-defined]
    backward.__doc__ = getattr(orig_backward, "__doc__", None)
    backward.__name__ = getattr(orig_backward, "__name__", "backward")
    backward._trainscope_wrapped = True  # type: ignore[attr-defined]
    autograd.backward = backward
    try:  # torch warns that global module hooks fire once more for torch.compile's wrapper module (the
        # depth count absorbs it); the warning is the hook's doing, not the job's: under -W error it would raise
        import warnings

        warnings.filterwarnings("ignore", message=r"Using `torch\.compile\(module\)` when there are global hooks")
    except Exception:
        pass
    attr = h2d_attr or ("is_cuda" if getattr(getattr(torch, "version", None), "cuda", None) else None)
    if attr is not None:
        _wrap_copies(torch, s, attr, compiling)
    s.parts = True
    return True


def _wrap_optimizer_steps(
    optm: Any,
    pre: Callable[[Any, Any, Any], None],
    post: Callable[[Any, Any, Any], None],
    compiling: Callable[[], bool],
) -> bool:
    """Time ``Optimizer.step`` from outside torch's own step wrapper (``profile_hook_step``: the
    profiler range and the step hooks, 0.1–0.7 ms per call measured here, which the global step
    hooks would leave in "other"): each optimizer class's wrapped ``step`` — the classes already
    wrapped, and those torch wraps later (``profile_hook_step`` itself) — calls ``pre`` and ``post``
    around it. False where this torch has no such wrapper (the caller then uses the global step hooks)."""
    Optimizer = getattr(optm, "Optimizer", None)
    phs = getattr(Optimizer, "profile_hook_step", None) if Optimizer is not None else None
    if Optimizer is None or phs is None:
        return False

    def timed(step: Any) -> Any:
        if getattr(step, "_trainscope_wrapped", False):
            return step

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if compiling():
                return step(*args, **kwargs)
            opt = args[0] if args else None
            pre(opt, args, kwargs)
            try:
                return step(*args, **kwargs)
            finally:
                post(opt, args, kwargs)

        for k in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                setattr(wrapper, k, getattr(step, k))
            except Exception:
                pass
        wrapper.__dict__.update(getattr(step, "__dict__", {}))  # hooked = True: torch does not wrap it again
        wrapper.__wrapped__ = step  # type: ignore[attr-defined]
        wrapper._trainscope_wrapped = True  # type: ignore[attr-defined]
        return wrapper

    def profile_hook_step(func: Any) -> Any:
        return timed(phs(func))

    seen: set[Any] = set()
    todo = [Optimizer]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub in seen:
                continue
            seen.add(sub)
            todo.append(sub)
            step = sub.__dict__.get("step")
            if step is not None and getattr(step, "hooked", False):
                sub.step = timed(step)
    Optimizer.profile_hook_step = staticmethod(profile_hook_step)
    return True


def _wrap_copies(torch: Any, s: _Stream, attr: str, compiling: Callable[[], bool]) -> None:
    """Host-to-device time: ``Tensor.to`` and ``Tensor.cuda`` at the top level of an iteration whose
    result is on the device (``attr``: ``is_cuda``) and whose source was not. No synchronization:
    a ``non_blocking`` copy costs what its launch costs."""
    clock = time.monotonic_ns
    cls = torch.Tensor

    def wrap(orig: Any) -> Any:
        def copy(self: Any, *args: Any, **kwargs: Any) -> Any:
            if s.open != NONE or compiling() or getattr(self, attr, True):
                return orig(self, *args, **kwargs)
            t = clock()
            out = orig(self, *args, **kwargs)
            if s.open == NONE and getattr(out, attr, False):
                s.c_h2d += clock() - t
            return out

        copy.__wrapped__ = orig  # type: ignore[attr-defined]
        copy.__doc__ = getattr(orig, "__doc__", None)
        copy.__name__ = getattr(orig, "__name__", "to")
        return copy

    for name in ("to", "cuda"):
        orig = getattr(cls, name, None)
        if orig is not None and not getattr(orig, "_trainscope_wrapped", False):
            w = wrap(orig)
            w._trainscope_wrapped = True
            setattr(cls, name, w)


def _wrap_iterator_class(module: Any) -> None:
    cls = module._BaseDataLoaderIter
    original = cls.__next__
    if getattr(original, "_trainscope_wrapped", False):
        return
    stream = _state
    if stream is None:  # (install() makes it before it wraps anything)
        return
    clock = time.monotonic_ns

    def __next__(self: Any) -> Any:
        t_in = clock()
        if stream.capture_wanted:  # one attribute read per iteration when no capture is asked for
            try:
                stream.boundary(clock())
            except Exception:
                pass
        if not stream.parts_tried:  # once: torch is fully imported by the first iteration
            stream.parts_tried = True
            try:
                _install_parts(stream)
            except Exception as e:
                _report_error(f"cannot time the step's parts: {type(e).__name__}: {e}")
        stream.open = DATA  # a module called while loading (a transform) is data time, not forward
        start = clock()
        stream.c_own += start - t_in  # the hook's own time before the call ends the previous iteration
        try:
            return original(self)
        finally:
            try:
                end = clock()
                stream.on_next(start, end)
                stream.c_own += clock() - end  # its bookkeeping and datagrams after: the new iteration's
            except Exception:
                pass

    __next__._trainscope_wrapped = True  # type: ignore[attr-defined]
    __next__.__wrapped__ = original  # type: ignore[attr-defined]
    __next__.__doc__ = original.__doc__
    __next__.__qualname__ = getattr(original, "__qualname__", "__next__")
    cls.__next__ = __next__
    stream.send({"type": "patched", "module": TARGET_MODULE})


class _Loader:
    """Delegates to the real loader, then patches the module once it has executed."""

    def __init__(self, loader: Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        try:
            _wrap_iterator_class(module)
        except Exception as e:
            _report_error(f"cannot wrap DataLoader iterators: {type(e).__name__}: {e}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _PostImportFinder:
    """A meta-path finder that only notices ``torch.utils.data.dataloader`` being imported."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != TARGET_MODULE:
            return None
        try:
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return None
            spec.loader = cast("Loader", _Loader(spec.loader))  # duck-typed: delegates to the real loader
            return spec
        except Exception as e:
            _report_error(f"post-import hook failed: {type(e).__name__}: {e}")
            return None
        finally:
            try:
                sys.meta_path.remove(self)  # one-shot: nothing else pays for the hook
            except ValueError:
                pass

    def invalidate_caches(self) -> None:
        pass


def _report_error(text: str) -> None:
    if _state is not None:
        _state.send({"type": "error", "error": text})


def install(path: str | None = None) -> bool:
    """Start measuring DataLoader waits in this process; True if the hook is in place.

    ``path`` is the watcher's socket; default: ``$TRAINSCOPE_STEP_SOCKET``, else the path
    ``trainscope watch --pid`` listens on for this process or for an ancestor (a launcher such as
    torchrun watched with ``--pid``), looked for again while none listens. Safe to call more than once.
    """
    global _state
    try:
        if _state is not None:
            return True
        auto = not (path or os.environ.get(ENV_SOCKET))
        path = path or os.environ.get(ENV_SOCKET) or find_watcher_socket(os.getpid())
        _state = _Stream(path, auto=auto)
        env = os.environ
        _state.hello = {
            "type": "hello",
            "python": sys.version.split()[0],
            "rank": env.get("RANK"),
            "local_rank": env.get("LOCAL_RANK"),
            "world_size": env.get("WORLD_SIZE"),
        }
        _state.send(_state.hello)
        atexit.register(_at_exit)
        module = sys.modules.get(TARGET_MODULE)
        if module is not None and hasattr(module, "_BaseDataLoaderIter"):
            _wrap_iterator_class(module)
        else:
            sys.meta_path.insert(0, _PostImportFinder())
        return True
    except Exception as e:
        try:
            _report_error(f"install failed: {type(e).__name__}: {e}")
        except Exception:
            pass
        return False


def _at_exit() -> None:
    try:
        if _state is not None:
            _state.exit_capture()
            _state.flush()
            _state.send({"type": "bye"})
            _state.close()
    except Exception:
        pass
