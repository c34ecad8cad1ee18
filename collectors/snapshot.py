"""Read a PyTorch CUDA memory snapshot (``torch.cuda.memory._dump_snapshot``) safely: through the
streaming reader (``collectors/_pickle_stream.c``), or the restricted unpickler where it declines.

The snapshot is a dict: ``segments`` (the caching allocator's state when it was dumped: each
segment's reserved size and its blocks, ``active_allocated`` / ``inactive`` / ``active_pending_free``),
``device_traces`` (one list per device: the recorded ``alloc`` / ``free_requested`` /
``free_completed`` / ``segment_alloc`` / ``segment_free`` / ``oom`` events with sizes, times and
stacks; older releases write ``free`` for ``free_requested``), ``external_annotations``
(profiler ranges such as ``Optimizer.step#AdamW.step``) and ``allocator_settings``. The oldest
releases wrote a bare list of segments. Only what the analysis reads is kept, in checked types.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
from collections import Counter
from collections.abc import Iterator
from gc import is_tracked
from itertools import chain
from itertools import compress
from itertools import repeat
from operator import eq
from operator import floordiv
from operator import getitem
from operator import itemgetter
from operator import not_
from typing import Any

import numpy as np

from trainscope.collectors.errors import TraceError
from trainscope.collectors.isolated import ChildError
from trainscope.collectors.isolated import can_isolate
from trainscope.collectors.isolated import run_limited
from trainscope.collectors.safe_pickle import DEFAULT_MAX_BYTES
from trainscope.collectors.safe_pickle import EXPLAIN_MAX
from trainscope.collectors.safe_pickle import ReadRefused
from trainscope.collectors.safe_pickle import UnsafePickleError
from trainscope.collectors.safe_pickle import check_plain
from trainscope.collectors.safe_pickle import explain
from trainscope.collectors.safe_pickle import load_restricted_file
from trainscope.collectors.safe_pickle import read_bounded
from trainscope.collectors.snapshot_gzip import GunzipStream

# The model lives with the trace model (analyzers read it); re-exported here.
from trainscope.traces.memory_snapshot import ACTIONS
from trainscope.traces.memory_snapshot import Annotation
from trainscope.traces.memory_snapshot import Block
from trainscope.traces.memory_snapshot import DeviceTrace
from trainscope.traces.memory_snapshot import Segment  # noqa: F401
from trainscope.traces.memory_snapshot import Snapshot

try:  # the streaming reader (collectors/_pickle_stream.c), built by `pip install` where a C compiler is
    from trainscope.collectors import _pickle_stream
except ImportError as e:  # pragma: no cover - no compiler at install time
    # _pickle_stream is then unbound: every use below is behind STREAMING_MISSING
    STREAMING_MISSING = f"the streaming reader was not built ({e})"
else:
    STREAMING_MISSING = ""

READER_ENV = "TRAINSCOPE_SNAPSHOT_READER"  # "unpickler": read every snapshot through the fallback

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


# The child that unpickles may grow its address space by this multiple of the (inflated) file size,
# plus HEADROOM for numpy and the parse. A real snapshot's objects take about 3–4× its bytes (event
# dicts and frame lists; frames and strings are memoized); a file that needs more than 8× is refused
# as a memory bomb (a memo index far ahead, a declared length, a list of millions of references).
MEMORY_FACTOR = 8
HEADROOM = 512 << 20
# Above the unpickler's 1 GiB only the streaming reader reads a snapshot: its child holds the columns,
# the memoized frames and one batch (0.71× the file at 1 GB, measured), so it may grow by 3× the
# file before a refusal, and files up to 16 GiB are read (PyTorch's own viewer fails from ≈ 1 GB).
STREAMING_MAX_BYTES = 16 << 30
STREAMING_MEMORY_FACTOR = 3


def _inflated_size(path: str, size: int, max_bytes: int) -> int:
    """The bytes the reader will unpickle: the file's size, or a gzip file's ISIZE trailer (its
    inflated size mod 2³²; a file that lies about it runs out of its limit and is refused)."""
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b" or size < 18:
            return size
        f.seek(-4, os.SEEK_END)
        isize = int.from_bytes(f.read(4), "little")
    return min(max_bytes, max(size, isize if isize >= size else isize + (1 << 32)))


def load_snapshot(path: str, max_bytes: int | None = None) -> Snapshot:
    """Load and check a snapshot; any problem is a one-line :class:`TraceError`.

    The read and the parse run in a forked child under ``RLIMIT_AS`` (the parent's address space +
    ``MEMORY_FACTOR`` × the file's size + ``HEADROOM``): the streaming reader (plain-data opcodes
    only, the big lists handed to the parse in batches, never the whole tree: :func:`_read_streaming`)
    or, for what it declines or where it is not built, the C unpickler with a ``find_class`` that
    admits no global (so no code can run either way); the plain-data checks made where the parse
    reads each field, and the parsed model sent back (:mod:`trainscope.collectors.isolated`).
    ``max_bytes`` (of pickle, inflated): by default :data:`STREAMING_MAX_BYTES` where the streaming
    reader is built, else the unpickler's ``DEFAULT_MAX_BYTES``, which it keeps in any case."""
    if max_bytes is None:
        max_bytes = STREAMING_MAX_BYTES if streaming_available() else DEFAULT_MAX_BYTES
    if not os.path.exists(path):
        raise TraceError(path, "no such file or directory")
    if os.path.isdir(path):
        raise TraceError(path, "is a directory, not a memory snapshot")
    try:
        size = os.path.getsize(path)
        if size == 0:
            raise TraceError(path, "file is empty")
        inflated = _inflated_size(path, size, max_bytes)
        factor = MEMORY_FACTOR if inflated <= DEFAULT_MAX_BYTES else STREAMING_MEMORY_FACTOR
        limit = HEADROOM + factor * inflated
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    try:
        snap: Snapshot = run_limited(_read, (path, max_bytes, not can_isolate()), limit)
        return snap
    except ChildError as e:
        raise TraceError(path, str(e)) from None


def _read(path: str, max_bytes: int, prescan: bool = False) -> Snapshot:
    """Read, unpickle and parse ``path`` (in the child); a refusal is a :class:`ChildError` with
    its one-line problem. In the child, what the C unpickler prints itself goes nowhere: refusing a
    BYTEARRAY8 length bomb, CPython's prints "SystemError: deallocated bytearray object has exported
    buffers" before the one-line refusal (measured on 3.11, the message twice on the terminal)."""
    try:
        if prescan:  # in-process (no fork): the opcode scan refuses such a file before the unpickler
            return _read_checked(path, max_bytes, prescan)
        with contextlib.redirect_stderr(io.StringIO()):
            return _read_checked(path, max_bytes, prescan)
    except TraceError as e:
        raise ChildError(e.problem) from None
    except MemoryError:
        if not prescan:
            raise  # the child's limit: run_limited says so
        raise ChildError("needs more memory than this machine has free to read") from None


def _read_checked(path: str, max_bytes: int, prescan: bool = False) -> Snapshot:
    declined: BaseException | None = None
    if streaming_available():
        try:
            return _read_streaming(path, max_bytes)
        except _STREAM_DECLINED as e:
            declined = e  # not the plain layout it streams, or refused: the unpickler's path says why
    try:
        return _read_unpickled(path, min(max_bytes, DEFAULT_MAX_BYTES), prescan)
    except TraceError as e:
        too_large = "limit for a memory snapshot" in e.problem or "the cap on decompressed input" in e.problem
        if declined is not None and max_bytes > DEFAULT_MAX_BYTES and too_large:
            # larger than the unpickler reads: only the streaming reader could, and it declined
            why = str(declined) or type(declined).__name__
            raise TraceError(
                path,
                f"the streaming reader declined it ({why[:160]}); the restricted unpickler reads "
                f"snapshots up to {DEFAULT_MAX_BYTES / 2**20:,.0f} MiB only",
            ) from None
        raise


def streaming_available() -> bool:
    """Whether snapshots are read by the streaming reader first (built, and not turned off by
    ``TRAINSCOPE_SNAPSHOT_READER=unpickler``)."""
    return not STREAMING_MISSING and os.environ.get(READER_ENV, "") != "unpickler"


def _is_stream(x: object) -> bool:
    return not STREAMING_MISSING and type(x) is _pickle_stream.Stream


# What makes the streaming reader give the file to the unpickler's path: its own Decline (an opcode
# outside plain data, a layout it does not stream, damage), gzip refusals, and the parse's refusals
# (the fallback says them in its words and order: the same one-line messages as before).
_STREAM_DECLINED: tuple[type[BaseException], ...] = (
    UnsafePickleError,
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
    OverflowError,
    RecursionError,
    OSError,
) + ((_pickle_stream.Decline,) if not STREAMING_MISSING else ())


def _read_streaming(path: str, max_bytes: int) -> Snapshot:
    """Read ``path`` with the streaming reader, in two passes over its bytes (a ``.pickle.gz`` is
    inflated twice, 1 MiB at a time, never whole): ``scan`` checks the opcodes (plain data only:
    no opcode that names a global or calls anything) and notes which memo indices are read again;
    ``build`` builds the objects, memoizing only those, and hands the ``segments`` and each
    ``device_traces[i]`` list to the parse in batches of ``CHUNK`` items instead of building them.
    What stays in memory is the memoized frames and strings, one batch and the columns."""
    with open(path, "rb") as head:
        gz = head.read(2) == b"\x1f\x8b"
    if not gz and os.path.getsize(path) > max_bytes:
        raise ReadRefused(f"larger than the {max_bytes / 2**20:,.0f} MiB limit for a memory snapshot")

    def source(f: io.FileIO) -> GunzipStream | io.FileIO:
        return GunzipStream(f, path, max_bytes) if gz else f

    with open(path, "rb", buffering=0) as f:
        src = source(f)
        plan = _pickle_stream.scan(src.readinto)
        if isinstance(src, GunzipStream):
            src.drain()  # damage past the pickle's STOP is refused too
    parse = _Parse()
    with open(path, "rb", buffering=0) as f:
        raw = _pickle_stream.build(source(f).readinto, plan, parse.batch, CHUNK, "segments", "device_traces")
    return parse.finish(path, raw)


def _read_unpickled(path: str, max_bytes: int, prescan: bool = False) -> Snapshot:
    """The fallback: the restricted C unpickler builds the whole tree, then the parse consumes it."""

    def accept(head: bytes) -> None:
        if not is_pickle(head):
            raise TraceError(
                path,
                "not a pickle: expected a CUDA memory snapshot written by "
                'torch.cuda.memory._dump_snapshot("snapshot.pickle")',
            )

    try:
        raw = load_restricted_file(path, max_bytes, accept, prescan)
    except ReadRefused as e:  # too large, gzip damaged: said as they are
        raise TraceError(path, str(e)) from None
    except UnsafePickleError as e:
        raise TraceError(path, f"rejected: {e}") from None
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    try:
        return _parse(path, raw)
    except UnsafePickleError as e:
        raise TraceError(path, f"rejected: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as e:
        del raw
        # a refused file is opcode-scanned for a structural reason (DUP bombs and the like)
        with open(path, "rb") as f:
            head = f.read(2)
        if head == b"\x1f\x8b":
            why = explain(read_bounded(path, max_bytes)).args[0]
        else:
            with open(path, "rb") as f:
                why = explain(f.read(EXPLAIN_MAX + 1)).args[0]
        if why:
            raise TraceError(path, f"rejected: {why}") from None
        raise TraceError(path, f"not a CUDA memory snapshot ({type(e).__name__}: {e})") from None


def load_snapshot_in_process(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Snapshot:
    """The same read without the child (no memory limit, collector paused as in the child): for
    measuring what the child costs."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _read_checked(path, max_bytes)
    finally:
        if was:
            gc.enable()


_SCALARS = frozenset((str, int, float, bool, type(None)))


# No device's memory comes near this (the largest GPUs hold ≈ 0.3 TB; a whole unified-memory node a
# few TB): a block, segment or event size outside [0, 1 PiB] is damage, not data. Such a record is
# left out and counted (a warning per kind) rather than summed into peaks of exabytes, or into a
# number beyond int64 that no column can hold.
MAX_SIZE = 1 << 50


class _Checked:
    """The plain-data check, made where the parse hands a subtree on (frames, settings) instead of
    a walk of the whole object graph first.

    Frames are checked in C-speed passes over all of a column's frame lists at once: every entry
    must be a dict that CPython's collector does not track. CPython tracks a dict only once it
    holds a container (a list, dict, set, tuple), so an untracked dict holds only strings, numbers,
    None and bytes; the unpickler can build no other object without a global, and those it refuses.
    A frame that fails the fast test gets the full :func:`check_plain` walk (once per object)."""

    def __init__(self) -> None:
        self.slow: set[int] = set()  # ids of frames that passed the full walk
        self.absurd: Counter[str] = Counter()  # records left out for an impossible size, by kind

    def sane(self, size: int, kind: str) -> bool:
        """Whether a record's size can be real; one that cannot is counted under ``kind``."""
        if 0 <= size <= MAX_SIZE:
            return True
        self.absurd[kind] += 1
        return False

    def frame_lists(self, fl: list[Any]) -> list[Any]:
        """``fl`` (each item one record's ``frames`` value) with non-lists as ``[]``, all checked."""
        if not set(map(type, fl)) <= _LIST:
            fl = [f if type(f) is list else [] for f in fl]
        if set(map(type, chain.from_iterable(fl))) <= _DICT and not any(map(is_tracked, chain.from_iterable(fl))):
            return fl
        for f in fl:
            for fr in f:
                if (type(fr) is dict and not is_tracked(fr)) or id(fr) in self.slow:
                    continue
                check_plain(fr)
                self.slow.add(id(fr))
        return fl


class SharedStacks:
    """Equal frame lists replaced by one list object (a training loop records the same few stacks
    millions of times, each a new list of memoized frames): what the child sends back and the
    parent holds is then a reference per event, not a list. Fed chunk by chunk (:meth:`share`), so
    a parse can free each chunk's records as it goes; a list seen in an earlier chunk keeps
    standing for its equals in later ones. In C-speed passes: a list's key is the ids of its first,
    middle and last frames and its length; the first list seen with a key stands for the others
    when equal to them (``==`` on lists of the same objects compares identities); the few that are
    not (another stack with the same key) are matched on all their frames' ids."""

    def __init__(self) -> None:
        self.first: dict[tuple[int, int, int, int], list[Any]] = {}
        self.exact: dict[tuple[int, ...], list[Any]] = {}
        self.no_frames: list[Any] = []  # one empty list for every event without a stack

    def share(self, fl: list[Any]) -> list[Any]:
        """``fl`` (frame lists) with each list replaced by the one standing for its equals."""
        out: list[Any] = []
        step = 1 << 18
        for lo in range(0, len(fl), step):
            chunk = fl[lo : lo + step]
            empty = not all(chunk)
            if empty:  # an event without a stack: a stand-in with a first and last item, put back below
                chunk = [f or _NO_STACK for f in chunk]
            lens = list(map(len, chunk))
            mids = map(getitem, chunk, map(floordiv, lens, repeat(2)))
            keys = list(zip(map(id, map(_first, chunk)), map(id, mids), map(id, map(_last, chunk)), lens))
            new = dict(zip(reversed(keys), reversed(chunk)))
            new.update(self.first)  # an earlier chunk's list keeps standing for its key
            self.first = new
            cand = list(map(new.__getitem__, keys))
            for i in compress(range(len(chunk)), map(not_, map(eq, cand, chunk))):
                f = chunk[i]
                cand[i] = self.exact.setdefault(tuple(map(id, f)), f)
            out.extend([c if c is not _NO_STACK else self.no_frames for c in cand] if empty else cand)
        return out


def shared_stacks(fl: list[Any]) -> list[Any]:
    """``fl`` with equal frame lists replaced by one list object (:class:`SharedStacks`)."""
    return SharedStacks().share(fl)


_first, _last = itemgetter(0), itemgetter(-1)
_NO_STACK = [None]
_LIST = frozenset((list,))
_DICT = frozenset((dict,))


def _scalar(x: Any, what: str) -> Any:
    if type(x) not in _SCALARS:
        raise TypeError(f"{what} is {type(x).__name__}, expected a string or number")
    return x


def _int(x: object, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{what} is {type(x).__name__}, expected an integer")
    return x


def _str(x: object, what: str) -> str:
    if not isinstance(x, str):
        raise TypeError(f"{what} is {type(x).__name__}, expected a string")
    return x


def _list(x: object, what: str) -> list[Any]:
    if not isinstance(x, list):
        raise TypeError(f"{what} is {type(x).__name__}, expected a list")
    return x


def _parse(path: str, raw: Any) -> Snapshot:
    """The model of the unpickled ``raw``, which it consumes (its segments and events are dropped
    as they are converted)."""
    return _Parse().finish(path, raw)


class _Parse:
    """The parse: segments and each device's events converted a batch at a time, in the order they
    come. The streaming reader hands them over as it reads them (:meth:`batch`), so the object tree
    is never whole; the unpickler's path feeds its tree in ``CHUNK`` slices and drops each once
    converted (the tree takes ≈ 3.8× the file's bytes: a dict, three ints and a frame list per
    event). Both paths build the model with the same code, so they build the same model."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.checked = _Checked()
        self.segments: list[Segment] = []
        self.devices: dict[int, _DeviceColumns] = {}

    def batch(self, stream: _pickle_stream.Stream, items: list[Any]) -> None:
        """The streaming reader's callback: ``items`` of the root's ``segments`` list (or of the
        root list itself, the oldest format: ``stream.index`` -1) or of ``device_traces[index]``."""
        if stream.index < 0:
            self.add_segments(items)
        else:
            self.device(stream.index).add(items, self.checked)

    def device(self, index: int) -> _DeviceColumns:
        d = self.devices.get(index)
        if d is None:
            d = self.devices[index] = _DeviceColumns(index)
        return d

    def add_segments(self, batch: list[Any]) -> None:
        for i, s in enumerate(batch):
            batch[i] = None
            if not isinstance(s, dict):
                raise TypeError("a segment is not a dict")
            blocks = _blocks(s, self.checked)
            total = _int(s["total_size"], "total_size")
            allocated = _int(
                s.get("allocated_size", sum(b.size for b in blocks if b.state == "active_allocated")),
                "allocated_size",
            )
            if not (self.checked.sane(total, "segments") and self.checked.sane(allocated, "segments")):
                continue
            self.segments.append(
                Segment(
                    _int(s.get("device", 0), "device"),
                    _int(s.get("address", 0), "segment address"),
                    total,
                    allocated,
                    str(_scalar(s.get("segment_type", ""), "segment_type")),
                    blocks,
                )
            )

    def finish(self, path: str, raw: Any) -> Snapshot:
        """The model, from what was streamed and the rest of ``raw`` (the root object, in which a
        :class:`Stream` stands for each list already handed over)."""
        if _is_stream(raw) or isinstance(raw, list):  # the oldest format: segments only
            raw = {"segments": raw}
        if not isinstance(raw, dict) or "segments" not in raw:
            raise ValueError("no 'segments' key")
        raw_segments = raw.pop("segments")
        if not _is_stream(raw_segments):
            for chunk in _consumed(_list(raw_segments, "segments")):
                self.add_segments(chunk)
        del raw_segments
        blocks = [b for seg in self.segments for b in seg.blocks]
        for b, frames in zip(blocks, shared_stacks([b.frames for b in blocks])):
            b.frames = frames
        traces = []
        raw_traces = _list(raw.pop("device_traces", []), "device_traces")
        for device, events in enumerate(raw_traces):
            raw_traces[device] = None
            if _is_stream(events):
                if events.index != device:
                    raise ValueError(f"device trace {events.index} streamed as {device}")
                columns = self.devices.pop(device, None) or _DeviceColumns(device)
            else:
                columns = _DeviceColumns(device)
                for chunk in _consumed(_list(events, "device trace")):
                    columns.add(chunk, self.checked)
            del events
            traces.append(columns.finish(self.warnings))
        if self.devices:
            raise ValueError("a streamed device trace is not in device_traces")
        annotations = []
        for a in raw.get("external_annotations", []) if isinstance(raw.get("external_annotations"), list) else []:
            if isinstance(a, dict) and isinstance(a.get("time_us"), int) and isinstance(a.get("name"), str):
                annotations.append(
                    Annotation(
                        str(_scalar(a.get("stage", ""), "annotation stage")),
                        a["name"],
                        int(_scalar(a.get("device", 0), "annotation device")),
                        a["time_us"],
                    )
                )
        found = raw.get("allocator_settings")
        settings: dict[str, Any] = found if isinstance(found, dict) else {}
        check_plain(settings)
        for kind, n in sorted(self.checked.absurd.items()):
            self.warnings.append(
                f"left out {n:,} {kind if n != 1 else kind[:-1]} with an impossible size (negative or above {MAX_SIZE >> 50} PiB): "
                "the file is damaged there; peaks and sites are of the rest"
            )
        if not self.segments and not any(len(t) for t in traces):
            raise ValueError("no segments and no recorded events: nothing was allocated")
        return Snapshot(path, self.segments, traces, annotations, settings, self.warnings)


def _consumed(items: list[Any]) -> Iterator[list[Any]]:
    """``items`` in ``CHUNK`` slices, each emptied from ``items`` (set to None) as it is handed out."""
    for lo in range(0, len(items), CHUNK):
        hi = min(lo + CHUNK, len(items))
        chunk = items[lo:hi]
        items[lo:hi] = repeat(None, hi - lo)
        yield chunk
        del chunk


def _blocks(s: dict[str, Any], checked: _Checked) -> list[Block]:
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
        history = b.get("history")
        hist = [h for h in history if isinstance(h, dict)] if isinstance(history, list) else []
        if "address" in b:
            addr = _int(b["address"], "block address")
        elif hist and isinstance(hist[0].get("addr"), int) and not isinstance(hist[0].get("addr"), bool):
            addr = hist[0]["addr"]
        else:
            addr = offset
        frames = b.get("frames")
        if not isinstance(frames, list):
            latest = hist[-1].get("frames") if hist else None
            frames = latest if isinstance(latest, list) else []
        requested = _int(b.get("requested_size", size), "requested_size")
        state = _str(b["state"], "block state")
        if not (checked.sane(size, "blocks") and checked.sane(requested, "blocks")):
            continue
        out.append(Block(addr, size, requested, state, frames))
        offset = addr + size
    for blk, frames in zip(out, checked.frame_lists([blk.frames for blk in out])):
        blk.frames = frames  # (shared across all segments' blocks by _parse)
    return out


def _ints(col: list[Any], what: str) -> np.ndarray:
    """``col`` as int64, refusing what is not an int (bools included) in one line."""
    kinds = set(map(type, col))
    if not kinds <= _INT:
        bad = next(k for k in kinds if k is not int)
        raise TypeError(f"{what} is {bad.__name__}, expected an integer")
    return np.array(col, dtype=np.int64) if col else np.empty(0, np.int64)


_INT = frozenset((int,))


CHUNK = 1 << 16  # events converted at a time, then dropped (the streaming reader's batch too)


class _DeviceColumns:
    """One device's events as columns, built ``CHUNK`` events at a time: each field gathered by a
    comprehension and checked by type for the whole chunk at once (C-speed ``set(map(type, …))``),
    not per event; each chunk's event dicts are dropped once converted."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.cols: dict[str, list[np.ndarray]] = {"action": [], "addr": [], "size": [], "time_us": []}
        self.frames: list[Any] = []
        self.stacks = SharedStacks()
        self.unknown: set[str] = set()

    def add(self, events: list[Any], checked: _Checked) -> None:
        action, addr, size, t, fl, odd = _event_columns(events, checked)
        for k, v in zip(self.cols, (action, addr, size, t)):
            self.cols[k].append(v)
        self.frames.extend(self.stacks.share(fl))
        self.unknown |= odd

    def finish(self, warnings: list[str]) -> DeviceTrace:
        if self.unknown:
            warnings.append(f"device {self.device}: ignored unknown trace actions: {', '.join(sorted(self.unknown))}")
        action, addr, size, t = (
            np.concatenate(c) if c else np.empty(0, np.int8 if k == "action" else np.int64)
            for k, c in self.cols.items()
        )
        return DeviceTrace(self.device, action, addr, size, t, self.frames)


def _event_columns(
    events: list[Any], checked: _Checked
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[Any], set[str]]:
    """The columns of a chunk of events (action codes, addr, size, time_us, checked frame lists)
    and the unknown actions among them, named."""
    if not set(map(type, events)) <= _DICT:
        raise TypeError("a trace event is not a dict")
    other = _ACTION_CODE["other"]
    acts = [e.get("action") for e in events]
    code = _ACTION_CODE.get
    if set(map(type, acts)) <= _STR:
        action = np.array([code(a, other) for a in acts], dtype=np.int8)
        names = set(acts)
    else:  # hostile or damaged: a non-string action is "other", named by its value or its type
        action = np.array([code(a, other) if type(a) is str else other for a in acts], dtype=np.int8)
        names = {a if type(a) in _SCALARS else f"<{type(a).__name__}>" for a in acts}
    unknown = {str(a)[:40] for a in names if type(a) is not str or code(a, other) == other}
    # an ``oom`` event keeps the device's free bytes (cudaMemGetInfo) where others keep an address
    addr = _ints([e["addr"] if "addr" in e else e.get("device_free", 0) for e in events], "event addr")
    sizes = [e.get("size", 0) for e in events]
    try:
        size = _ints(sizes, "event size")
    except OverflowError:  # an int beyond int64: marked impossible here, left out below
        size = np.array([x if -MAX_SIZE <= x <= MAX_SIZE else -1 for x in sizes], dtype=np.int64)
    t = _ints([e.get("time_us", 0) for e in events], "event time_us")
    frames = checked.frame_lists([e.get("frames") for e in events])
    bad = (size < 0) | (size > MAX_SIZE)
    if bad.any():
        keep = ~bad
        checked.absurd["trace events"] += int(bad.sum())
        action, addr, size, t = action[keep], addr[keep], size[keep], t[keep]
        frames = [f for f, k in zip(frames, keep.tolist()) if k]
    return action, addr, size, t, frames, unknown


_STR = frozenset((str,))
