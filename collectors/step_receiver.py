"""The watcher's side of step-exact mode: the socket the job's hook reports to, and the helper that
prepares a child process's environment (the injected ``sitecustomize`` directory).

Messages are small JSON datagrams (see :mod:`trainscope.collectors.step_hook`); anything that does
not parse is ignored, so a stray or hostile sender cannot stop the watch.

Trust: the socket lives in a folder that is this user's and closed to everyone else (checked on
its descriptor, never through a link), beside an ``.owner`` file naming this watcher (pid and
start time) that the job's hook checks before it sends anything. A watcher's run folder
(:func:`make_run_folder`) carries a ``watch.owner`` file too, so that the folders of watchers that
were killed (``kill -9``) are recognized and removed at the next start (:func:`clean_stale`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainscope.collectors import step_hook
from trainscope.collectors.samples import PART_FIELDS
from trainscope.collectors.samples import StepSample

_SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_site")
HOOK_MODULE = "trainscope_step_hook"


@dataclass(frozen=True)
class HookStatus:
    mode: str  # "on" (DataLoader wrapped), "waiting" (hook in, no DataLoader yet), "off"
    detail: str
    pids: tuple[int, ...] = ()


class StepReceiver:
    """Binds ``path`` and totals what the job's hooks send, until :meth:`drain` takes it."""

    def __init__(self, path: str | None = None) -> None:
        self._own_dir = None
        if path is None:
            self._own_dir = tempfile.mkdtemp(prefix="trainscope-")
            path = os.path.join(self._own_dir, "steps.sock")
        self.path = path
        self._owner: str | None = None
        self._lock = threading.Lock()
        self._n = self._wait = self._step = self._max = 0
        self._parts_n = 0  # steps whose batches carried the step's parts (a hook that times them)
        self._parts = [0, 0, 0, 0, 0]  # fwd, bwd, opt, h2d, hook ns of those steps
        self._hello: set[int] = set()
        self._patched: set[int] = set()
        self._errors: list[str] = []
        self._addr: dict[int, str] = {}  # pid -> the job's bound end (two-way: capture requests)
        self._ranks: dict[int, dict[str, str | None]] = {}  # pid -> RANK, LOCAL_RANK, WORLD_SIZE from hello
        self._last_steps: dict[int, float] = {}  # pid -> monotonic time of its last step batch
        self._capture_msgs: list[dict[str, Any]] = []
        # pid -> [n, wait, step, max, parts n, fwd, bwd, opt, h2d, hook] since the last drain
        self._per_pid: dict[int, list[int]] = {}
        self._stop = threading.Event()
        folder, name = os.path.split(path)
        self._folder = folder = folder or "."
        # The folder, open for the receiver's life: replies are addressed through it.
        dfd = step_hook.open_folder(folder, step_hook.PRIVATE)  # PermissionError: not ours, or open to others
        try:
            _remove_stale_socket(path, dfd)  # only a socket of ours: never a file someone planted there
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                self._sock.bind(step_hook.socket_address(dfd, folder, name))
                if not step_hook.same_folder(dfd, folder):
                    raise PermissionError(1, "the folder was replaced while the socket was bound", folder)
                os.chmod(name, 0o600, dir_fd=dfd)
                owner = step_hook.owner_name(name)
                write_new_file(dfd, owner, step_hook.owner_record(), replace=True)
                self._owner = os.path.join(folder, owner)
            except BaseException:
                self._sock.close()
                raise
        except BaseException:
            os.close(dfd)
            raise
        self._dfd: int | None = dfd
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, name="trainscope-steps", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self._sock.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.handle(data, addr)

    def handle(self, data: bytes, addr: str | None = None) -> None:
        try:
            msg = json.loads(data)
            kind, pid = msg["type"], int(msg["pid"])
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            return
        with self._lock:
            # The sender's bound end: replies go to that name in this socket's own (private)
            # folder, and nowhere else.
            if isinstance(addr, str) and os.path.basename(addr) == f"job-{pid}.sock":
                self._addr[pid] = os.path.basename(addr)
            if kind == "hello":
                self._hello.add(pid)
                self._ranks[pid] = {
                    k: (str(msg[k])[:16] if msg.get(k) is not None else None)
                    for k in ("rank", "local_rank", "world_size")
                }
            elif kind in ("capture", "capture_cost"):
                if len(self._capture_msgs) < 1000 and isinstance(msg, dict):
                    self._capture_msgs.append(msg)
            elif kind == "patched":
                self._hello.add(pid)
                self._patched.add(pid)
            elif kind == "error" and len(self._errors) < 20:
                self._errors.append(str(msg.get("error", "?"))[:200])
            elif kind == "steps":
                try:
                    n, w, s, m = (int(msg[k]) for k in ("n", "wait_ns", "step_ns", "max_wait_ns"))
                except (KeyError, TypeError, ValueError, OverflowError):
                    return
                if n < 0 or w < 0 or s < 0 or w > s:
                    return
                parts = _parts(msg, w, s)  # None from an older hook (or a batch that does not add up)
                self._patched.add(pid)
                self._last_steps[pid] = time.monotonic()
                acc = self._per_pid.setdefault(pid, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
                acc[0] += n
                acc[1] += w
                acc[2] += s
                acc[3] = max(acc[3], m)
                if parts is not None:
                    acc[4] += n
                    self._parts_n += n
                    for i, v in enumerate(parts):
                        acc[5 + i] += v
                        self._parts[i] += v
                self._n += n
                self._wait += w
                self._step += s
                self._max = max(self._max, m)

    def drain(self) -> StepSample | None:
        """Totals received since the last call (None when no step completed)."""
        with self._lock:
            if not self._n:
                return None
            # The parts only when every step of the interval carried them: a mix would misstate the shares.
            parts: Sequence[int | None]
            if self._parts_n == self._n:
                parts = self._parts
            else:
                parts = [None] * len(PART_FIELDS)
            out = StepSample(self._n, self._wait, self._step, self._max, *parts)
            self._n = self._wait = self._step = self._max = self._parts_n = 0
            self._parts = [0, 0, 0, 0, 0]
            return out

    def drain_per_process(self) -> dict[int, tuple[int, int, int, int]]:
        """Per stepping process: (steps, wait ns, step ns, max wait ns) since the last call."""
        return {p: v[:4] for p, v in self.drain_per_process_parts().items()}

    def drain_per_process_parts(self) -> dict[int, tuple[int, int, int, int, tuple[int, ...] | None]]:
        """Per stepping process: (steps, wait ns, step ns, max wait ns, (fwd, bwd, opt, h2d, hook) ns or
        None) since the last call; the parts only when every step of the process carried them."""
        with self._lock:
            out = {
                p: (v[0], v[1], v[2], v[3], tuple(v[5:]) if v[4] == v[0] else None) for p, v in self._per_pid.items()
            }
            self._per_pid = {}
            return out

    def rank_pids(self) -> dict[int, str]:
        """pid -> RANK for the processes whose hook said hello with a rank (torchrun sets RANK)."""
        with self._lock:
            return {p: r for p, v in self._ranks.items() if (r := v.get("rank")) is not None}

    def drain_capture_messages(self) -> list[dict[str, Any]]:
        """The job's capture replies (started, done, refused, failed, aborted, capture_cost) since the last call."""
        with self._lock:
            out, self._capture_msgs = self._capture_msgs, []
            return out

    def capture_target(self) -> tuple[int | None, str]:
        """The process to capture: the stepping process (lowest rank, else lowest pid) that can
        hear requests; (None, why not) when there is none."""
        targets, why = self.capture_targets()
        return (targets[0][0], "") if targets else (None, why)

    def capture_targets(self) -> tuple[list[tuple[int, str | None]], str]:
        """Every stepping process that can hear requests, as (pid, rank or None), lowest rank first
        (then lowest pid); ([], why not) when there is none. Processes that have timed iterations
        are the ones asked: a launcher (torchrun) that imported torch but never iterates is not."""
        with self._lock:
            stepping = sorted(self._patched)
            reachable = [p for p in stepping if p in self._addr]
            iterating = [p for p in reachable if p in self._last_steps]
            reachable = iterating or reachable
            hello = bool(self._hello)

            def order(p: int) -> tuple[int, int, int]:
                r = (self._ranks.get(p) or {}).get("rank")
                # ASCII digits only: str.isdigit() also holds for "²", which int() refuses
                return (0, int(r), p) if r is not None and r.isascii() and r.isdigit() else (1, 0, p)

            targets = [(p, (self._ranks.get(p) or {}).get("rank")) for p in sorted(reachable, key=order)]
        if targets:
            return targets, ""
        if stepping:
            return [], "the job's hook cannot hear requests (its socket could not be bound)"
        if hello:
            return [], "the job has not iterated a torch DataLoader: there is no iteration boundary to capture at"
        return [], "no step hook reported in (not a Python job, or the hook could not install)"

    def send(self, pid: int, message: dict[str, Any]) -> bool:
        """Send ``message`` to the hook of process ``pid`` (never blocks); False when it cannot."""
        with self._lock:
            name = self._addr.get(pid)
        if name is None or self._dfd is None:
            return False
        try:
            addr = step_hook.socket_address(self._dfd, self._folder, name)
            self._sock.sendto(json.dumps(message, separators=(",", ":")).encode(), addr)
            return True
        except OSError:
            return False

    def ranks(self) -> dict[int, dict[str, str | None]]:
        with self._lock:
            return {p: dict(v) for p, v in self._ranks.items()}

    def status(self) -> HookStatus:
        with self._lock:
            if self._patched:
                return HookStatus("on", "DataLoader __next__ timed in the job", tuple(sorted(self._patched)))
            if self._errors:
                return HookStatus("off", f"hook failed: {self._errors[0]}", tuple(sorted(self._hello)))
            if self._hello:
                return HookStatus("waiting", "hook installed; no DataLoader iterated yet", tuple(sorted(self._hello)))
            return HookStatus("off", "no step hook reported in (not a Python job, or it could not install)")

    def close(self) -> None:
        self._stop.set()
        try:
            self._sock.close()
        finally:
            for p in (self.path, self._owner):
                try:
                    if p:
                        os.unlink(p)
                except OSError:
                    pass
            if self._dfd is not None:
                os.close(self._dfd)
                self._dfd = None
            if self._own_dir:
                shutil.rmtree(self._own_dir, ignore_errors=True)


def _parts(msg: dict[str, Any], wait: int, step: int) -> tuple[int, ...] | None:
    """A steps batch's (fwd, bwd, opt, h2d, hook) ns, when the hook timed them and they add up
    (disjoint parts of the batch's steps, beside its data wait); None otherwise."""
    if "fwd_ns" not in msg:
        return None
    try:
        vals = tuple(int(msg.get(k, 0)) for k in PART_FIELDS)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if any(v < 0 for v in vals) or wait + sum(vals) > step:
        return None
    return vals


def ensure_private_dir(path: str) -> str:
    """Create ``path`` 0700 if missing; refuse (PermissionError) one that is a link, not ours or
    open to others — someone else could then plant or replace sockets in it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    os.close(step_hook.open_folder(path, step_hook.PRIVATE))
    return path


def _remove_stale_socket(path: str, dir_fd: int) -> None:
    """Remove a socket a killed watcher left at ``path`` (in our private folder ``dir_fd``);
    anything else there is not ours to delete: FileExistsError."""
    name = os.path.basename(path)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.geteuid():
        os.unlink(name, dir_fd=dir_fd)
    else:
        raise FileExistsError(17, "exists and is not a socket of ours; left alone", path)


def write_new_file(dir_fd: int, name: str, data: bytes, replace: bool = False, mode: int = 0o600) -> None:
    """Write ``data`` as ``name`` in the folder ``dir_fd``: a new private temporary file
    (``O_EXCL``, never through a link) renamed into place — over an existing ``name`` only when
    ``replace``. OSError when it cannot be done."""
    tmp = f".{name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    fd = os.open(tmp, step_hook._NEW_FILE, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            fd = -1
            f.write(data)
        if replace:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            os.unlink(tmp, dir_fd=dir_fd)
    except BaseException:
        step_hook.discard_temp(fd, tmp, dir_fd)
        raise


RUN_PREFIX = "trainscope-watch-"
RUN_OWNER = "watch.owner"
STALE_S = 60.0  # a run folder without an owner file younger than this may be a watch that is starting


def make_run_folder() -> str:
    """The run's private folder in ``$TMPDIR`` (mkdtemp: 0700, a fresh name), with ``watch.owner``
    naming this watcher; the folders of dead watchers are removed first (:func:`clean_stale`)."""
    clean_stale()
    path = tempfile.mkdtemp(prefix=RUN_PREFIX)
    dfd = step_hook.open_folder(path, step_hook.PRIVATE)
    try:
        write_new_file(dfd, RUN_OWNER, step_hook.owner_record())
    finally:
        os.close(dfd)
    return path


def _listens(path: str) -> bool:
    """Someone is bound to the datagram socket ``path`` (a live watcher of an older version)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def clean_stale(folder: str | None = None, now: float | None = None) -> list[str]:
    """Remove what killed watchers of this user left in ``folder`` (default ``$TMPDIR``): run
    folders (``trainscope-watch-*``) whose ``watch.owner`` names a process that is gone (or,
    without one, older than a minute and with no one bound to its socket), and in the per-user
    socket folder the sockets and owner files of dead watchers and the job sockets of dead
    processes. Only this user's folders, never through a link. Returns what was removed."""
    now = time.time() if now is None else now
    removed: list[str] = []
    for name, path in step_hook.folder_entries(folder):
        if name.startswith(RUN_PREFIX):
            try:
                dfd = step_hook.open_folder(path, step_hook.PRIVATE)
            except OSError:
                continue
            try:
                gone = step_hook.owner_gone(dfd, RUN_OWNER)
                if gone is None:
                    gone = now - os.fstat(dfd).st_mtime > STALE_S and not _listens(os.path.join(path, "steps.sock"))
            finally:
                os.close(dfd)
            if gone:
                shutil.rmtree(path, ignore_errors=True)  # fd-based on Linux: never follows a link
                removed.append(path)
        elif name == f"trainscope-{os.geteuid()}":
            removed += _clean_socket_folder(path)
    return removed


def _clean_socket_folder(path: str) -> list[str]:
    removed: list[str] = []
    try:
        dfd = step_hook.open_folder(path, step_hook.PRIVATE)
    except OSError:
        return removed
    try:
        for name in os.listdir(dfd):
            gone, extra = False, []
            if name.startswith("steps-") and name.endswith(".sock"):
                gone = not step_hook.owner_alive(step_hook.read_own_file(dfd, step_hook.owner_name(name)) or b"")
                extra.append(step_hook.owner_name(name))
            elif name.startswith("job-") and name.endswith(".sock"):
                try:
                    gone = step_hook.process_start(int(name[4:-5])) == "-"
                except ValueError:
                    gone = False
            if not gone:
                continue
            for n in [name, *extra]:
                try:
                    st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
                    if st.st_uid == os.geteuid() and (stat.S_ISSOCK(st.st_mode) or stat.S_ISREG(st.st_mode)):
                        os.unlink(n, dir_fd=dfd)
                        removed.append(os.path.join(path, n))
                except OSError:
                    pass
    except OSError:
        pass
    finally:
        os.close(dfd)
    return removed


def child_environment(
    socket_path: str, base: dict[str, str] | None = None, folder: str | None = None
) -> tuple[dict[str, str], str]:
    """The environment for ``watch -- COMMAND`` and the temporary site directory it names
    (inside ``folder`` when given: the run's private folder, removed with it).

    The directory holds the injected ``sitecustomize.py`` and a copy of the hook module, so the
    child needs no trainscope installation of its own (it may run another Python)."""
    env = dict(os.environ if base is None else base)
    site = tempfile.mkdtemp(prefix="trainscope-site-", dir=folder)
    shutil.copy(os.path.join(_SITE_DIR, "sitecustomize.py"), os.path.join(site, "sitecustomize.py"))
    shutil.copy(step_hook.__file__, os.path.join(site, f"{HOOK_MODULE}.py"))
    env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[step_hook.ENV_SOCKET] = socket_path
    return env, site
