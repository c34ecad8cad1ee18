"""``watch --record FILE``: a crash-safe recording of live snapshots, and its reader.

Format ``trainscope.recording/1``: JSON lines. The first line is a header
``{"schema": "trainscope.recording/1", "started": <unix s>, "interval_s": …, "command": […], …}``;
each further line is one snapshot ``{"type": "sample", …}`` (see :class:`Snapshot`), and a clean
end writes ``{"type": "end", …}``. Every line is flushed and fsync'd as it is written, so a
``kill -9`` of the watcher loses at most the interval being sampled; the reader accepts a truncated
or damaged last line (and says so), and stops at the first damaged line before it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import IO, Any

from trainscope.collectors.errors import TraceError
from trainscope.collectors.samples import Snapshot, counter_rows

SCHEMA = "trainscope.recording/1"
_MAX_LINE = 16 << 20  # a sample line is a few KB; anything this long is not ours


@dataclass
class Recording:
    path: str
    header: dict[str, Any]
    snapshots: list[Snapshot]
    end: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


class RecordingWriter:
    def __init__(self, path: str, header: dict[str, Any]) -> None:
        self.path = path
        self._f: IO[str] | None = open(path, "w", encoding="utf-8")
        self._write({"schema": SCHEMA, **header})

    def _write(self, obj: dict) -> None:
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


def _jsonable(o):
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
