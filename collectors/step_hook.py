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

Two-line opt-in for a job started without ``trainscope watch --``::

    import trainscope.collectors.step_hook as step_hook
    step_hook.install()   # then: trainscope watch --pid <this process's pid>
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import tempfile
import time

ENV_SOCKET = "TRAINSCOPE_STEP_SOCKET"
TARGET_MODULE = "torch.utils.data.dataloader"
FLUSH_NS = 100_000_000  # send totals at most every 0.1 s
RETRY_NS = 2_000_000_000  # when no watcher listens, try again after 2 s

_state = None


def private_dir() -> str:
    """This user's folder for watcher sockets, ``$TMPDIR/trainscope-UID`` (as tmux does): created
    0700 by the watcher, which refuses it unless it is a real folder owned by this user and closed
    to others. Nothing at a predictable path in the shared temp folder itself is ever used."""
    return os.path.join(tempfile.gettempdir(), f"trainscope-{os.getuid()}")


def default_socket_path(pid: int) -> str:
    """Where ``trainscope watch --pid PID`` listens for the opt-in hook of process PID."""
    return os.path.join(private_dir(), f"steps-{pid}.sock")


class _Stream:
    """Per-process totals since the last flush, and the socket they go out on."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pid = os.getpid()
        self.sock = None
        self.prev_start = 0  # start of the previous __next__ (0: none yet)
        self.prev_wait = 0
        self.n = self.wait = self.step = self.max_wait = 0
        self.last_flush = time.monotonic_ns()
        self.retry_at = 0

    def _socket(self):
        if self.sock is None or self.pid != os.getpid():  # a forked child needs its own socket
            self.pid = os.getpid()
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.sock.setblocking(False)
        return self.sock

    def send(self, message: dict) -> bool:
        now = time.monotonic_ns()
        if now < self.retry_at:
            return False
        try:
            message["pid"] = os.getpid()
            self._socket().sendto(json.dumps(message, separators=(",", ":")).encode(), self.path)
            return True
        except (BlockingIOError, InterruptedError):
            return False  # watcher busy: drop this batch, never block the loop
        except OSError:
            self.retry_at = now + RETRY_NS  # no watcher (yet): try again later
            return False
        except Exception:
            return False

    def on_next(self, start: int, end: int) -> None:
        # The iteration that started at the previous __next__ ends where this one starts.
        prev = self.prev_start
        if prev:
            self.n += 1
            self.wait += self.prev_wait
            self.step += start - prev
            if self.prev_wait > self.max_wait:
                self.max_wait = self.prev_wait
        self.prev_start, self.prev_wait = start, end - start
        if end - self.last_flush >= FLUSH_NS:
            self.flush(end)

    def flush(self, now: int | None = None) -> None:
        now = now or time.monotonic_ns()
        self.last_flush = now
        if not self.n:
            return
        msg = {"type": "steps", "t": now, "n": self.n, "wait_ns": self.wait, "step_ns": self.step,
               "max_wait_ns": self.max_wait}
        self.n = self.wait = self.step = self.max_wait = 0
        self.send(msg)


def _wrap_iterator_class(module) -> None:
    cls = module._BaseDataLoaderIter
    original = cls.__next__
    if getattr(original, "_trainscope_wrapped", False):
        return
    stream = _state
    clock = time.monotonic_ns

    def __next__(self):
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
    ``trainscope watch --pid`` listens on for this process. Safe to call more than once.
    """
    global _state
    try:
        if _state is not None:
            return True
        path = path or os.environ.get(ENV_SOCKET) or default_socket_path(os.getpid())
        _state = _Stream(path)
        _state.send({"type": "hello", "python": sys.version.split()[0]})
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
            _state.flush()
            _state.send({"type": "bye"})
    except Exception:
        pass
