"""Read a PyTorch CUDA memory snapshot (``torch.cuda.memory._dump_snapshot``) through the safe unpickler.

The snapshot is a dict: ``segments`` (the caching allocator's state when it was dumped: each
segment's reserved size and its blocks, ``active_allocated`` / ``inactive`` / ``active_pending_free``),
``device_traces`` (one list per device: the recorded ``alloc`` / ``free_requested`` /
``free_completed`` / ``segment_alloc`` / ``segment_free`` / ``oom`` events with sizes, times and
stacks; older releases write ``free`` for ``free_requested``), ``external_annotations``
(profiler ranges such as ``Optimizer.step#AdamW.step``) and ``allocator_settings``. The oldest
releases wrote a bare list of segments. Only what the analysis reads is kept, in checked types.
"""

from __future__ import annotations

import os

import numpy as np

from trainscope.collectors.errors import TraceError
from trainscope.collectors.safe_pickle import DEFAULT_MAX_BYTES, UnsafePickleError, loads_plain, read_bounded

# The model lives with the trace model (analyzers read it); re-exported here.
from trainscope.traces.memory_snapshot import (
    ACTIONS,
    Annotation,
    Block,
    DeviceTrace,
    Segment,  # noqa: F401
    Snapshot,
)

PICKLE_MAGIC = b"\x80"  # PROTO opcode: every pickle of protocol ≥ 2 starts with it

_ACTION_CODE = {a: i for i, a in enumerate(ACTIONS)}
_ACTION_CODE["free"] = _ACTION_CODE["free_requested"]  # before PyTorch 2.1


def is_pickle(head: bytes) -> bool:
    """The first bytes of a pickle: PROTO (protocols 2–5), or what protocols 0 and 1 start a dict
    or list with (MARK, EMPTY_DICT, EMPTY_LIST), or a GLOBAL (refused later, by name). No JSON,
    CSV or SQLite file starts like this."""
    if head[:1] == PICKLE_MAGIC:
        return len(head) > 1 and 2 <= head[1] <= 5
    if head[:1] in (b"(", b"}", b"]"):
        return len(head) > 1 and head[1:2] in b"dlt}]q(\x85\x86\x87)NIJKLMFGSUVXh" and not head[1:2].isspace()
    if head[:1] == b"c":
        line = head[1:].split(b"\n", 1)
        return len(line) == 2 and line[0].replace(b".", b"").replace(b"_", b"").isalnum()
    return False


def load_snapshot(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Snapshot:
    """Load and check a snapshot; any problem is a one-line :class:`TraceError`."""
    if not os.path.exists(path):
        raise TraceError(path, "no such file or directory")
    if os.path.isdir(path):
        raise TraceError(path, "is a directory, not a memory snapshot")
    try:
        if os.path.getsize(path) == 0:
            raise TraceError(path, "file is empty")
        data = read_bounded(path, max_bytes)
    except UnsafePickleError as e:
        raise TraceError(path, str(e)) from None
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    if not is_pickle(data[:16]):
        raise TraceError(
            path,
            "not a pickle: expected a CUDA memory snapshot written by "
            'torch.cuda.memory._dump_snapshot("snapshot.pickle")',
        )
    try:
        raw = loads_plain(data)
    except UnsafePickleError as e:
        raise TraceError(path, f"rejected: {e}") from None
    del data
    try:
        return _parse(path, raw)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise TraceError(path, f"not a CUDA memory snapshot ({type(e).__name__}: {e})") from None


def _int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{what} is {type(x).__name__}, expected an integer")
    return x


def _str(x, what: str) -> str:
    if not isinstance(x, str):
        raise TypeError(f"{what} is {type(x).__name__}, expected a string")
    return x


def _list(x, what: str) -> list:
    if not isinstance(x, list):
        raise TypeError(f"{what} is {type(x).__name__}, expected a list")
    return x


def _parse(path: str, raw) -> Snapshot:
    warnings: list[str] = []
    if isinstance(raw, list):  # the oldest format: segments only
        raw = {"segments": raw}
    if not isinstance(raw, dict) or "segments" not in raw:
        raise ValueError("no 'segments' key")
    segments = []
    for s in _list(raw["segments"], "segments"):
        if not isinstance(s, dict):
            raise TypeError("a segment is not a dict")
        blocks = _blocks(s)
        segments.append(
            Segment(
                _int(s.get("device", 0), "device"),
                _int(s.get("address", 0), "segment address"),
                _int(s["total_size"], "total_size"),
                _int(
                    s.get("allocated_size", sum(b.size for b in blocks if b.state == "active_allocated")),
                    "allocated_size",
                ),
                str(s.get("segment_type", "")),
                blocks,
            )
        )
    traces = []
    for device, events in enumerate(_list(raw.get("device_traces", []), "device_traces")):
        traces.append(_device_trace(device, _list(events, "device trace"), warnings))
    annotations = []
    for a in raw.get("external_annotations", []) if isinstance(raw.get("external_annotations"), list) else []:
        if isinstance(a, dict) and isinstance(a.get("time_us"), int) and isinstance(a.get("name"), str):
            annotations.append(Annotation(str(a.get("stage", "")), a["name"], int(a.get("device", 0)), a["time_us"]))
    settings = raw.get("allocator_settings") if isinstance(raw.get("allocator_settings"), dict) else {}
    if not segments and not any(len(t) for t in traces):
        raise ValueError("no segments and no recorded events: nothing was allocated")
    return Snapshot(path, segments, traces, annotations, settings, warnings)


def _blocks(s: dict) -> list[Block]:
    """A segment's blocks in address order. Blocks carry no ``address`` before PyTorch 2.1 (then
    the first ``history`` entry's ``addr`` has it, where history was recorded): a block starts where
    the previous one ends, from the segment's address. Their stacks are under ``frames`` (2.1+) or
    in the latest ``history`` entry (2.0)."""
    out = []
    offset = _int(s.get("address", 0), "segment address")
    for b in _list(s.get("blocks", []), "blocks"):
        if not isinstance(b, dict):
            raise TypeError("a block is not a dict")
        size = _int(b["size"], "block size")
        hist = b.get("history") if isinstance(b.get("history"), list) else []
        hist = [h for h in hist if isinstance(h, dict)]
        if "address" in b:
            addr = _int(b["address"], "block address")
        elif hist and isinstance(hist[0].get("addr"), int) and not isinstance(hist[0].get("addr"), bool):
            addr = hist[0]["addr"]
        else:
            addr = offset
        frames = b.get("frames")
        if not isinstance(frames, list):
            frames = hist[-1].get("frames") if hist and isinstance(hist[-1].get("frames"), list) else []
        out.append(
            Block(
                addr,
                size,
                _int(b.get("requested_size", size), "requested_size"),
                _str(b["state"], "block state"),
                frames,
            )
        )
        offset = addr + size
    return out


def _device_trace(device: int, events: list, warnings: list[str]) -> DeviceTrace:
    n = len(events)
    action = np.empty(n, np.int8)
    addr = np.empty(n, np.int64)
    size = np.empty(n, np.int64)
    t = np.empty(n, np.int64)
    frames: list = [None] * n
    other = _ACTION_CODE["other"]
    unknown: set[str] = set()
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise TypeError("a trace event is not a dict")
        a = e.get("action")
        code = _ACTION_CODE.get(a, other) if isinstance(a, str) else other
        if code == other:
            unknown.add(str(a)[:40])
        action[i] = code
        # an ``oom`` event keeps the device's free bytes (cudaMemGetInfo) where others keep an address
        addr[i] = _int(e.get("addr", e.get("device_free", 0)), "event addr")
        size[i] = _int(e.get("size", 0), "event size")
        t[i] = _int(e.get("time_us", 0), "event time_us")
        f = e.get("frames")
        frames[i] = f if isinstance(f, list) else []
    if unknown:
        warnings.append(f"device {device}: ignored unknown trace actions: {', '.join(sorted(unknown))}")
    return DeviceTrace(device, action, addr, size, t, frames)
