"""Run a reader in a forked child under an address-space limit and take back its result.

A hostile pickle cannot run code through the restricted unpickler (no global is admitted), but it
can still ask the C unpickler for memory: a memo index far ahead, a huge declared length, a
"billion references" list. Reading it in a child whose ``RLIMIT_AS`` is the parent's address space
plus a stated multiple of the file's size turns such a file into a ``MemoryError`` in the child —
a one-line refusal — instead of a machine out of memory. The child sends back the parsed model
(small columnar arrays and the shared frame lists) as a pickle; the parent reads that pickle with
an unpickler that admits only the model's dataclasses and numpy's array reconstruction.

Where ``fork`` is unavailable (Windows), the reader runs in-process.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any

_OK, _ERR, _BUG = b"O", b"E", b"X"


class ChildError(Exception):
    """The child refused the input (its message), ran out of its memory limit, or died."""


def _address_space() -> int:
    """This process's virtual size in bytes (Linux /proc), 0 when unknown."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# What the child's result may name: the model's dataclasses and what numpy arrays pickle through.
_ALLOWED = {
    ("trainscope.traces.memory_snapshot", "Block"),
    ("trainscope.traces.memory_snapshot", "Segment"),
    ("trainscope.traces.memory_snapshot", "DeviceTrace"),
    ("trainscope.traces.memory_snapshot", "Annotation"),
    ("trainscope.traces.memory_snapshot", "Snapshot"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


class _ResultUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"the reader's result names {module}.{name}, which it never holds")


def can_isolate() -> bool:
    """Whether :func:`run_limited` runs its function in a limited child (POSIX ``fork``)."""
    try:
        import resource  # noqa: F401
    except ImportError:  # pragma: no cover - Windows
        return False
    return hasattr(os, "fork")


def run_limited(fn: Callable[..., Any], args: tuple[Any, ...], limit_bytes: int) -> Any:
    """``fn(*args)`` in a forked child whose address space may grow by ``limit_bytes``. A
    :class:`ChildError` carries the child's one-line refusal; the result comes back through a pipe.
    An unexpected exception in the child is raised here as a ``RuntimeError`` naming it (a bug,
    not a refusal). The child is killed if the caller is interrupted."""
    if not can_isolate():  # pragma: no cover - Windows
        return fn(*args)
    import resource

    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        try:
            gc.disable()  # the child only builds and hands back an acyclic tree, then exits
            os.close(r)
            base = _address_space()
            if base:
                _, hard = resource.getrlimit(resource.RLIMIT_AS)
                soft = base + limit_bytes if hard == resource.RLIM_INFINITY else min(base + limit_bytes, hard)
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
            with os.fdopen(w, "wb", buffering=1 << 20) as out:
                try:
                    result = fn(*args)
                except ChildError as e:
                    out.write(_ERR + str(e).encode("utf-8", "backslashreplace"))
                except MemoryError:
                    out.write(
                        _ERR
                        + f"needs more than its memory limit ({limit_bytes / 2**20:,.0f} MiB) to read: "
                        "a memory bomb, not a snapshot".encode()
                    )
                except BaseException as e:  # noqa: BLE001 - a bug: reported to the parent as one
                    out.write(_BUG + f"{type(e).__name__}: {e}"[:2000].encode("utf-8", "backslashreplace"))
                else:
                    out.write(_OK)
                    pickle.dump(result, out, protocol=5)
                    del result
        finally:
            os._exit(0)
    os.close(w)
    tag = b""
    try:
        with os.fdopen(r, "rb", buffering=1 << 20) as inp:
            tag = inp.read(1)
            if tag == _OK:
                # millions of new containers: the cyclic collector would scan them again and again
                # (4.3 s against 0.4 s for a 55 MB snapshot's model); none of them form a cycle
                was = gc.isenabled()
                gc.disable()
                try:
                    result = _ResultUnpickler(inp).load()
                except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
                    raise ChildError(
                        f"the reader's result could not be read back ({type(e).__name__}: {str(e)[:200]})"
                    ) from None
                finally:
                    if was:
                        gc.enable()
            elif tag == _ERR:
                raise ChildError(inp.read(4096).decode("utf-8", "backslashreplace"))
            elif tag == _BUG:
                raise RuntimeError(
                    f"the snapshot reader failed in its child: {inp.read(4096).decode('utf-8', 'replace')}"
                )
    except BaseException:  # refused, interrupted or cut short: the child has nothing more to say
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        raise
    finally:
        _, status = os.waitpid(pid, 0)
    if tag != _OK:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        raise ChildError(
            f"the reader stopped{f' (signal {sig})' if sig else ''} within its memory limit of "
            f"{limit_bytes / 2**20:,.0f} MiB: a memory bomb, not a snapshot"
        )
    return result
