"""``watch --record FILE``: a crash-safe recording of live snapshots, and its reader.

Format ``trainscope.recording/1``: JSON lines. The first line is a header
``{"schema": "trainscope.recording/1", "started": <unix s>, "interval_s": …, "command": […], …}``;
each further line is one snapshot ``{"type": "sample", …}`` (see :class:`Snapshot`), and a clean
end writes ``{"type": "end", …}``. Every line is flushed and fsync'd as it is written, so a
``kill -9`` of the watcher loses at most the interval being sampled; the reader accepts a truncated
or damaged last line (and says so), and stops at the first damaged line before it.

Where a file is written (the recording, and ``watch --report`` through :func:`write_output`):
never through a symbolic link the watch did not create, and never over another user's file. A new
file — or one of ours being replaced — is written under a private temporary name (``O_EXCL``:
never through a link) beside it, then renamed over the name, which replaces whatever is there
without following it (a link planted after the check included). A device or FIFO named directly
(``/dev/null``), or through a link in a folder only its owner can write (``/dev/stdout``), is
written in place, as ``tee`` would. See :func:`output_refusal`.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from dataclasses import dataclass
from dataclasses import field
from typing import IO
from typing import Any

from trainscope.collectors.errors import TraceError
from trainscope.collectors.samples import Snapshot
from trainscope.collectors.samples import counter_rows
from trainscope.collectors.step_hook import discard_temp
from trainscope.collectors.step_hook import existing_problem

SCHEMA = "trainscope.recording/1"
_MAX_LINE = 16 << 20  # a sample line is a few KB; anything this long is not ours


@dataclass
class Recording:
    path: str
    header: dict[str, Any]
    snapshots: list[Snapshot]
    end: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def output_refusal(path: str) -> str | None:
    """Why the watch refuses to write ``path`` (a file it was asked to write: ``--record``,
    ``--report``), or None:

    - a symbolic link, unless it sits in a folder that only its owner (this user or root) can
      write and leads to a device or FIFO (``/dev/stdout``, ``/proc/self/fd/1``): a link in a
      shared folder is how another user makes a watch overwrite a file of their choosing;
    - a regular file, FIFO or socket of another user (replacing or feeding it is not ours to do).
    """
    return existing_problem(path, lambda st: _refusal(path, st))


def _refusal(path: str, st: os.stat_result) -> str | None:
    """:func:`output_refusal` of the existing ``path`` (``st``: its ``lstat``)."""
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        folder: os.stat_result | None
        target: os.stat_result | None
        try:
            folder, target = os.stat(os.path.dirname(path) or "."), os.stat(path)
        except OSError:
            folder = target = None
        if (
            folder is None
            or target is None
            or folder.st_uid not in (0, me)
            or folder.st_mode & 0o022
            or st.st_uid not in (0, me)
            or not (stat.S_ISCHR(target.st_mode) or stat.S_ISFIFO(target.st_mode))
        ):
            return "is a symbolic link: refused (watch writes only files it creates or regular files of yours; name the file itself)"
        return None
    if (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)) and st.st_uid != me:
        return f"belongs to uid {st.st_uid}, not to this user: refused (remove it, or name another file)"
    return None


def _umask() -> int:
    """The process's umask, read without changing it (Linux: /proc; elsewhere set and put back)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o077)
    os.umask(umask)
    return umask


def _open_in_place(path: str, st: os.stat_result) -> int | None:
    """A descriptor on the device or FIFO at ``path`` (``st``: its ``lstat``), checked on the open
    descriptor; None when what was opened is a regular file (a link swapped in since the check:
    the caller then replaces the name instead of writing through it). Opening for writing without
    ``O_TRUNC`` changes nothing in a file."""
    nofollow = 0 if stat.S_ISLNK(st.st_mode) else getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, os.O_WRONLY | nofollow | getattr(os, "O_CLOEXEC", 0))
    got = os.fstat(fd)
    if stat.S_ISCHR(got.st_mode) or stat.S_ISFIFO(got.st_mode) or stat.S_ISSOCK(got.st_mode):
        return fd
    os.close(fd)
    return None


def _writable_target(path: str) -> os.stat_result | None:
    """``path``'s own status (not a link's target; None where nothing is there yet), once
    :func:`output_refusal` lets it be written (PermissionError otherwise)."""
    problem = output_refusal(path)
    if problem:
        raise PermissionError(1, problem, path)
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _temp_beside(path: str) -> tuple[str, int]:
    """A new private (0600) temporary file beside ``path``, never opened through a link: its name
    and a descriptor to write it."""
    folder, base = os.path.split(path)
    tmp = os.path.join(folder, f".{base}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    cloexec = getattr(os, "O_CLOEXEC", 0)
    return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | cloexec, 0o600)


def open_output(path: str) -> int:
    """A descriptor to write ``path`` through, as the module docstring says: in place for a device
    or FIFO; otherwise a new private temporary file beside ``path``, given the mode ``path`` had
    (a new file: 0666 less the umask) and renamed over it at once. OSError (PermissionError for
    what :func:`output_refusal` refuses) when it cannot be done."""
    st = _writable_target(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", path)
    if st is not None and not stat.S_ISREG(st.st_mode):  # a device or FIFO (a checked link to one): in place
        fd = _open_in_place(path, st)
        if fd is not None:
            return fd
    tmp, fd = _temp_beside(path)
    try:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
        os.replace(tmp, path)  # replaces the name itself: a link put there since is not followed
    except BaseException:
        discard_temp(fd, tmp)
        raise
    return fd


def write_output(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole: to a private temporary file beside it, renamed over it
    only once written (an interrupt leaves the old file, never half of the new one); in place for
    a device or FIFO. As :func:`open_output` for what is refused."""
    st = _writable_target(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        fd = _open_in_place(path, st)
        if fd is not None:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return
    tmp, fd = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            fd = -1
            f.write(data)
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        discard_temp(fd, tmp)
        raise


class RecordingWriter:
    def __init__(self, path: str, header: dict[str, Any]) -> None:
        self.path = path
        self._f: IO[str] | None = open(open_output(path), "w", encoding="utf-8")
        self._write({"schema": SCHEMA, **header})

    def _write(self, obj: dict[str, Any]) -> None:
        if self._f is None:
            return
        self._f.write(json.dumps(obj, separators=(",", ":"), allow_nan=False, default=_jsonable) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def write(self, snap: Snapshot) -> None:
        self._write({"type": "sample", **snap.to_dict()})

    def close(self, end: dict[str, Any] | None = None) -> None:
        if self._f is None:
            return
        try:
            self._write({"type": "end", **(end or {})})
        finally:
            self._f.close()
            self._f = None


def _jsonable(o: object) -> list[Any]:
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def first_line(path: str, limit: int = 65536) -> bytes:
    with open(path, "rb") as f:
        return f.readline(limit)


def is_recording(path: str) -> bool:
    try:
        head = json.loads(first_line(path))
    except (ValueError, OSError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(head, dict) and str(head.get("schema", "")).startswith("trainscope.recording/")


def _checked(snap: Snapshot) -> Snapshot:
    """A sample every consumer can use: finite times, an integer GPU index, numeric metrics.
    Raises ValueError (a damaged line) otherwise, here rather than deep inside the analysis."""
    if not (math.isfinite(snap.t) and math.isfinite(snap.dt) and math.isfinite(snap.wall)):
        raise ValueError("non-finite time")
    # Seconds since the recording started (t, dt) or since 1970 (wall): beyond 30 years / the year
    # 2200 is damage, and would overflow int64 nanoseconds in the trace model.
    if not (abs(snap.t) < 1e9 and abs(snap.dt) < 1e9 and abs(snap.wall) < 7.3e9):
        raise ValueError("time out of range")
    for g in snap.gpus:
        if not isinstance(g.index, int) or isinstance(g.index, bool) or not 0 <= g.index < 1 << 15:
            raise ValueError(f"GPU index {g.index!r}")
    for _, _, v in counter_rows(snap):  # float() of every metric: strings and huge ints fail here
        if not math.isfinite(v):
            raise ValueError("non-finite metric")
    return snap


def read_recording(path: str) -> Recording:
    """Read a recording; damage after the header yields the samples before it, with a warning."""
    warnings: list[str] = []
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    with f:
        line = f.readline(_MAX_LINE)
        try:
            header = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise TraceError(path, "not a trainscope recording (first line is not a JSON header)") from None
        if not isinstance(header, dict) or not str(header.get("schema", "")).startswith("trainscope.recording/"):
            raise TraceError(path, "not a trainscope recording (no trainscope.recording schema in the header)")
        if header["schema"] != SCHEMA:
            raise TraceError(
                path, f"recording version {header['schema']!r} is not supported (this trainscope reads {SCHEMA})"
            )
        snaps: list[Snapshot] = []
        end = None
        lineno = 1
        while True:
            line = f.readline(_MAX_LINE)
            if not line:
                break
            lineno += 1
            last = not line.endswith(b"\n")
            try:
                obj = json.loads(line)
                kind = obj.get("type")
                if kind == "sample":
                    snaps.append(_checked(Snapshot.from_dict(obj)))
                elif kind == "end":
                    end = obj
                # other types: from a newer writer; skipped
            except (
                ValueError,
                TypeError,
                KeyError,
                AttributeError,
                OverflowError,
                UnicodeDecodeError,
                RecursionError,
            ) as e:  # RecursionError: a deeply nested line
                rest = f.read(1)
                if last or not rest:
                    warnings.append(
                        f"line {lineno} is truncated (the recorder was stopped mid-write): "
                        f"read the {len(snaps)} complete samples before it"
                    )
                else:
                    warnings.append(
                        f"line {lineno} is damaged ({type(e).__name__}): read the {len(snaps)} "
                        "samples before it and ignored the rest"
                    )
                break
    if end is None and not any("truncated" in w or "damaged" in w for w in warnings):
        warnings.append("the recording has no end marker (the watcher was killed): read every complete sample")
    return Recording(path, header, snaps, end, warnings)
