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

Two-line opt-in for a job started without ``trainscope watch --``::

    import trainscope.collectors.step_hook as step_hook
    step_hook.install()   # then: trainscope watch --pid <this process's pid>
"""

from __future__ import annotations

import atexit
import json
from collections import deque
import os
import socket
import stat
import sys
import tempfile
import time

ENV_SOCKET = "TRAINSCOPE_STEP_SOCKET"
TARGET_MODULE = "torch.utils.data.dataloader"
FLUSH_NS = 100_000_000  # send totals at most every 0.1 s
RETRY_NS = 2_000_000_000  # when no watcher listens, try again after 2 s
RECENT = 16  # step durations kept for the capture's "before" figure (a ring)
AFTER = 8  # steps timed after a capture for its "after" figure
KINETO_QUIET = (
    "6"  # KINETO_LOG_LEVEL above every level Kineto logs at: its start/stop lines stay out of the job's stderr
)

_state = None


def private_dir() -> str:
    """This user's folder for watcher sockets, ``$TMPDIR/trainscope-UID`` (as tmux does): created
    0700 by the watcher, which refuses it unless it is a real folder owned by this user and closed
    to others. Nothing at a predictable path in the shared temp folder itself is ever used."""
    return os.path.join(tempfile.gettempdir(), f"trainscope-{os.getuid()}")


def default_socket_path(pid: int) -> str:
    """Where ``trainscope watch --pid PID`` listens for the opt-in hook of process PID."""
    return os.path.join(private_dir(), f"steps-{pid}.sock")


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
    """The socket of a ``watch --pid`` of this process or of an ancestor (a rank whose launcher is
    watched, ``watch --pid <torchrun's pid>``); this process's own path when none listens yet."""
    for p in [pid, *_ancestors(pid)]:
        path = default_socket_path(p)
        if os.path.exists(path):
            return path
    return default_socket_path(pid)


class _Stream:
    """Per-process totals since the last flush, and the socket they go out on."""

    def __init__(self, path: str, auto: bool = False) -> None:
        self.path = path
        self.hello: dict | None = None  # sent before anything else to each watcher that listens
        self.greeted = False
        self.auto = auto  # no explicit socket: look for a watcher of this process or an ancestor on each retry
        self.pid = os.getpid()
        self.sock = None
        self.prev_start = 0  # start of the previous __next__ (0: none yet)
        self.prev_wait = 0
        self.n = self.wait = self.step = self.max_wait = 0
        self.last_flush = time.monotonic_ns()
        self.retry_at = 0
        self.reply_path: str | None = None  # where this process's end of the socket is bound
        self.capture_wanted = False  # a capture is pending or running: the wrapper calls boundary()
        self.pending: dict | None = None
        self.cap: _Capture | None = None
        self.recent: deque[int] = deque(maxlen=RECENT)  # the last step durations
        self.after: list[int] | None = None  # steps timed after the last capture
        self.after_id = 0
        self.after_skip = 0

    def _socket(self):
        if self.sock is None or self.pid != os.getpid():  # a forked child needs its own socket
            self.pid = os.getpid()
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.sock.setblocking(False)
            self.reply_path = self._bind(self.sock)
        return self.sock

    def _bind(self, sock) -> str | None:
        """Bind this end beside the watcher's socket (its private folder) so the watcher can ask
        for a capture; None (one-way, no capture) when that folder is not there or not ours."""
        path = os.path.join(os.path.dirname(self.path), f"job-{os.getpid()}.sock")
        try:
            try:
                st = os.lstat(path)
                if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid():
                    os.unlink(path)  # left by a process that had this pid before
            except FileNotFoundError:
                pass
            sock.bind(path)
            return path
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

    def send(self, message: dict) -> bool:
        now = time.monotonic_ns()
        if now < self.retry_at:
            return False
        try:
            message["pid"] = os.getpid()
            sock = self._socket()
            if self.hello is not None and message is not self.hello and not self.greeted:
                self.hello["pid"] = os.getpid()  # a watcher that came later still learns who this is (rank)
                sock.sendto(json.dumps(self.hello, separators=(",", ":")).encode(), self.path)
            sock.sendto(json.dumps(message, separators=(",", ":")).encode(), self.path)
            self.greeted = self.greeted or self.hello is not None
            return True
        except (BlockingIOError, InterruptedError):
            return False  # watcher busy: drop this batch, never block the loop
        except OSError:
            self.retry_at = now + RETRY_NS  # no watcher (yet): try again later
            if self.auto:
                path = find_watcher_socket(os.getpid())
                if path != self.path:
                    self.path = path
                    self.greeted = False
                    self._close_socket()
            if self.reply_path is None and self.sock is not None:  # rebind once the watcher's folder exists
                try:
                    self.sock.close()
                except OSError:
                    pass
                self.sock = None
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
        self.prev_start, self.prev_wait = start, end - start
        if end - self.last_flush >= FLUSH_NS:
            self.flush(end)
            if self.reply_path is not None:
                self.poll()

    # -- on-demand capture ---------------------------------------------------------------------

    def poll(self) -> None:
        """Read the watcher's requests, without blocking (a few per flush at most)."""
        for _ in range(4):
            try:
                data = self.sock.recv(65536)
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

    def request(self, msg: dict) -> None:
        try:
            cid, steps, max_s, path = int(msg["id"]), int(msg["steps"]), float(msg["max_s"]), str(msg["path"])
        except Exception:
            return
        if not (1 <= steps <= 10_000 and max_s > 0):
            return
        if self.cap is not None or self.pending is not None:
            self.send(
                {"type": "capture", "id": cid, "status": "refused", "why": "a capture is already running in the job"}
            )
            return
        self.pending = {
            "id": cid,
            "steps": steps,
            "max_ns": int(max_s * 1e9),
            "path": path,
            "stack": bool(msg.get("stack")),
            "memory": bool(msg.get("memory")),
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
        self.after.append(d)
        if len(self.after) >= AFTER:
            self.send({"type": "capture_cost", "id": self.after_id, "after_ns": self.after})
            self.after = None

    def exit_capture(self) -> None:
        """At exit: a capture still running ends without a trace, and says why."""
        cap, self.cap = self.cap, None
        if cap is not None:
            cap.abort(f"the job exited after {len(cap.marks) - 1} of {cap.steps} captured iterations")
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
        self.n = self.wait = self.step = self.max_wait = 0
        self.send(msg)


class _Capture:
    """One capture in the job: ``torch.profiler.profile`` over ``steps`` iterations."""

    def __init__(self, stream: _Stream, req: dict, before: list[int]) -> None:
        self.stream, self.id, self.steps = stream, req["id"], req["steps"]
        self.req, self.before = req, before
        self.prof = None
        self.marks: list[int] = []
        self.t_start = 0
        self.start_ns = 0
        self._set_env = False  # KINETO_LOG_LEVEL set by the capture, removed when it ends

    def _say(self, status: str, **kw) -> None:
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
            record = tp.ProfilerAction.RECORD
            self.prof = tp.profile(
                activities=acts,
                schedule=lambda step: record,
                record_shapes=True,
                with_stack=self.req["stack"],
                profile_memory=self.req["memory"],
            )
            t0 = time.monotonic_ns()
            self.prof.start()
            self.t_start = time.monotonic_ns()
            self.start_ns = self.t_start - t0
            self.marks = [self.t_start]
        except Exception as e:
            self._restore_env()
            self.prof = None
            self._say("failed", why=f"torch.profiler could not start: {type(e).__name__}: {e}"[:300])
            return False
        self._say("started", cuda=len(acts) > 1)
        return True

    def boundary(self, now: int) -> bool:
        """Mark an iteration boundary; True when the capture has ended."""
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
        try:
            self.prof.stop()
            t0 = time.monotonic_ns()
            self.prof.export_chrome_trace(path)
            export_ns = time.monotonic_ns() - t0
        except Exception as e:
            self._restore_env()
            self._say("failed", why=f"the trace could not be written: {type(e).__name__}: {e}"[:300])
            return
        finally:
            self.prof = None
        self._restore_env()
        during = [b - a for a, b in zip(self.marks, self.marks[1:])]
        self._say(
            "done",
            path=path,
            steps_ns=during,
            before_ns=self.before,
            start_ns=self.start_ns,
            export_ns=export_ns,
            time_limit=limit,
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


def _wrap_iterator_class(module) -> None:
    cls = module._BaseDataLoaderIter
    original = cls.__next__
    if getattr(original, "_trainscope_wrapped", False):
        return
    stream = _state
    clock = time.monotonic_ns

    def __next__(self):
        if stream.capture_wanted:  # one attribute read per iteration when no capture is asked for
            try:
                stream.boundary(clock())
            except Exception:
                pass
        start = clock()
        try:
            return original(self)
        finally:
            try:
                stream.on_next(start, clock())
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

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        try:
            _wrap_iterator_class(module)
        except Exception as e:
            _report_error(f"cannot wrap DataLoader iterators: {type(e).__name__}: {e}")

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImportFinder:
    """A meta-path finder that only notices ``torch.utils.data.dataloader`` being imported."""

    def find_spec(self, name, path=None, target=None):
        if name != TARGET_MODULE:
            return None
        try:
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return None
            spec.loader = _Loader(spec.loader)
            return spec
        except Exception as e:
            _report_error(f"post-import hook failed: {type(e).__name__}: {e}")
            return None
        finally:
            try:
                sys.meta_path.remove(self)  # one-shot: nothing else pays for the hook
            except ValueError:
                pass

    def invalidate_caches(self):
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
