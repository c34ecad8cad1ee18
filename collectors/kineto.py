"""PyTorch profiler (Kineto) chrome-trace JSON → the normalized model.

Every format era in the shared corpus loads: bare JSON arrays (oldest), ``computeProperties``
instead of ``deviceProperties``, 2021 capitalized categories (``Kernel``, ``Runtime``,
``Operator``), 2023+ lower-case ones (``kernel``, ``cuda_runtime``, ``cpu_op``), 2024+ float
microsecond timestamps relative to ``baseTimeNanoseconds``, extra top-level keys, and ROCm traces
(hip* runtime calls). Unknown categories are counted and ignored, never fatal.
"""

from __future__ import annotations

import gc
import math
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import astuple
from typing import IO
from typing import Any
from typing import TypeVar

import msgspec
import numpy as np

from trainscope.collectors import readers
from trainscope.collectors.errors import TraceError
from trainscope.collectors.kineto_stream import _INFLATE_ERRORS
from trainscope.collectors.kineto_stream import Args
from trainscope.collectors.kineto_stream import Event
from trainscope.collectors.kineto_stream import Fallback
from trainscope.collectors.kineto_stream import _damaged
from trainscope.collectors.kineto_stream import _inflate
from trainscope.collectors.kineto_stream import split_point
from trainscope.collectors.kineto_stream import stream_events
from trainscope.collectors.readers import GZIP_MAGIC
from trainscope.collectors.readers import Progress
from trainscope.collectors.readers import check_expansion
from trainscope.collectors.readers import decompression_cap
from trainscope.collectors.readers import parse_json_events
from trainscope.collectors.readers import read_maybe_gzip
from trainscope.collectors.readers import text_repair_warning
from trainscope.traces.builder import ChunkedTableBuilder
from trainscope.traces.builder import StringTable
from trainscope.traces.builder import TableBuilder
from trainscope.traces.builder import skipped_warning
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS
from trainscope.traces.model import Annotations
from trainscope.traces.model import CollectiveArgs
from trainscope.traces.model import Copies
from trainscope.traces.model import Counters
from trainscope.traces.model import CpuOps
from trainscope.traces.model import Device
from trainscope.traces.model import Kernels
from trainscope.traces.model import MemoryEvents
from trainscope.traces.model import Memsets
from trainscope.traces.model import OpInputs
from trainscope.traces.model import PythonFrames
from trainscope.traces.model import RuntimeCalls
from trainscope.traces.model import Table
from trainscope.traces.model import Thread
from trainscope.traces.model import Trace

_INFLATE_OR_OS_ERRORS: tuple[type[Exception], ...] = (*_INFLATE_ERRORS, OSError)
_D = TypeVar("_D")  # _int's default when a value is no number

# Category (lower-cased) → table. Older traces capitalize; newer ones use snake case.
_KERNEL = {"kernel"}
_MEMCPY = {"gpu_memcpy", "memcpy"}
_MEMSET = {"gpu_memset", "memset"}
_RUNTIME = {"cuda_runtime", "runtime", "cuda_driver", "driver", "hip_runtime", "privateuse1_runtime"}
_CPU_OP = {"cpu_op", "operator"}
_ANNOTATION = {"user_annotation", "gpu_user_annotation"}
# Categories we know and deliberately do not keep (flows, python stacks, trace markers).
_KNOWN_IGNORED = {
    "ac2g",
    "async",
    "async_cpu_to_gpu",
    "fwdbwd",
    "trace",
    "overhead",
    "cpu_instant_event",
    "python",
    "flow",
    "kineto",
    "cuda_sync",
    "cuda_profiler_range",
    "mtia_runtime",
    "gpu_user_annotation_flow",
    # trainscope's own Perfetto export (reports/perfetto.py): its findings and the ranks' alignment,
    # derived from the events it kept — re-reading the export must not count them as unknown
    "trainscope_finding",
    "trainscope_alignment",
}

_COPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*(?:\((\w+)\s*->\s*(\w+)\))?", re.I)
_STREAM_TID = re.compile(r"(\d+)")
_KIND_CODE = {k.lower(): i for i, k in enumerate(COPY_KINDS)}
_MEM_CODE = {k: i for i, k in enumerate(MEMORY_KINDS)}
# Kineto prints memory kinds capitalized ("Pageable", "Pinned", "Device", "Managed", "Host").
_MEM_ALIASES = {"pageable": "pageable", "pinned": "pinned", "device": "device", "managed": "managed", "host": "host"}
# c10::DeviceType codes that are GPUs: CUDA=1, HIP=6 (ROCm builds usually report CUDA).
_GPU_DEVICE_TYPES = {1, 6}


PARALLEL_MIN_BYTES = 192 << 20  # plain files this large are read in two halves, one in another process
# What reading a plain file in two halves holds, in bytes per byte of the file, for the parent and
# its child together: 510 MiB summed PSS for the 1,007 MB benchmark JSON (docs/scale.md, "The second
# core and the memory it needs"; 382 MiB on one core). Read in halves only where that, with half
# again for a trace shaped unlike the benchmark's, fits in the room this process may still take.
HALVES_BYTES_PER_BYTE = 0.53
HALVES_MARGIN = 1.5


def halves_fit(size: int, available: int | None) -> bool:
    """Whether a ``size``-byte plain file's two-process read fits in ``available`` bytes (None: no
    limit known): one process reads it otherwise, the same trace in more time and less memory."""
    return available is None or size * HALVES_BYTES_PER_BYTE * HALVES_MARGIN <= available


def load_kineto(path: str, progress: Progress | None = None) -> Trace:
    """Read one Kineto trace file (.json or .json.gz) into a :class:`Trace`: streamed in typed
    slices (collectors/kineto_stream.py), or, for a file the stream cannot place, in memory."""
    if readers.usable_cores() >= 2 and _large_gzip(path):
        trace = _load_gzip_halves(path, progress)
        if trace is not None:
            return trace
    elif (
        os.path.getsize(path) >= PARALLEL_MIN_BYTES
        and readers.usable_cores() >= 2
        and halves_fit(os.path.getsize(path), readers.memory_room().available)
    ):
        trace = _load_halves(path, progress)
        if trace is not None:
            return trace
    parser = _StreamParser(path, progress)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of acyclic records: the cyclic collector would rescan them again and again
    try:
        top, warnings = stream_events(path, parser, progress)
        parser.top = top
        return parser.finish(warnings)
    except Fallback:
        del parser
    finally:
        if gc_was_enabled:
            gc.enable()
    return load_kineto_in_memory(path, progress)


def _load_halves(path: str, progress: Progress | None, pass_fds: tuple[int, ...] = ()) -> Trace | None:
    """A large plain file read as two parts at once: the second half in a worker process, the
    first here, then the second's tables appended with its names and threads renumbered into
    this parser's. None (read it serially) when the file gives no verified middle cut, or when
    anything in the parts is unusual (damage, off-schema slices are fine)."""
    import pickle
    import subprocess
    import sys

    found = split_point(path)
    if found is None:
        return None
    cut, head = found
    parser = _StreamParser(path, progress)
    # A child interpreter of its own (not multiprocessing: no fork of a process that may run
    # threads, no re-import of the caller's __main__); the request and the tables go by pipe.
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", "from trainscope.collectors.kineto import _part_main; _part_main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=pass_fds,  # an inflated copy in memory (/proc/self/fd/N): the same number there
        )
    except OSError:
        return None
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None  # both PIPE
    try:
        stdin.write(pickle.dumps((path, cut, head)))
        stdin.close()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            _, warnings = stream_events(path, parser, progress, 0, cut, head)
        finally:
            if gc_was_enabled:
                gc.enable()
        if warnings:
            return None  # damage in the first half: the serial reader says where reading stopped
        if progress:
            progress("joining the second half", None)
        out = stdout.read()
        if child.wait() != 0 or not out:
            return None
        part = pickle.loads(out)  # our own child's reply
    except (Fallback, TraceError, OSError, EOFError, pickle.UnpicklingError):
        return None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if part is None:
        return None
    before = parser.events_seen
    parser.merge_part(part)
    parser.top = part["top"]
    warnings = part["warnings"]
    if part["damage"]:  # the salvage message counts the events of both parts
        why, n, where = part["damage"]
        warnings = [_damaged(why, before + n, where) if w.startswith("JSON is truncated") else w for w in warnings]
    return parser.finish(warnings)


def _large_gzip(path: str) -> bool:
    """A gzip file whose JSON is large enough for the two-process read (the trailer's ISIZE says
    the inflated size modulo 2³²; where it is smaller than the file itself, the size is unknown)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC or size < 32:
            return False
        f.seek(size - 4)
        isize = int.from_bytes(f.read(4), "little")
    return isize >= PARALLEL_MIN_BYTES or (isize < size and size >= PARALLEL_MIN_BYTES // 8)


def _load_gzip_halves(path: str, progress: Progress | None) -> Trace | None:
    """A large .json.gz inflated (zlib-ng) into a temporary file, then read in two halves at once as
    a plain file is: a deflate stream decodes on one core only, and inflating is ≈ 10× faster than
    decoding the JSON, so the two-process read pays for the copy. None (the serial stream reads
    it, with its precise warnings) on anything unusual: damage, a second gzip member, a full disk."""
    import tempfile
    import zlib

    cap, check_ratio = decompression_cap()
    dec = _inflate.decompressobj(16 + zlib.MAX_WBITS)
    total = os.path.getsize(path) or 1
    memfd = _memory_file(_inflated_estimate(path))
    tmp: IO[bytes]
    try:
        if memfd is not None:  # the copy in memory: 1 GB written to ext4's page cache took 1.9 s, to memory 0.35 s
            tmp = os.fdopen(os.dup(memfd), "wb")
            tmp_path = f"/proc/self/fd/{memfd}"  # the child inherits the same descriptor number
        else:
            tmp = tempfile.NamedTemporaryFile(prefix="trainscope-", suffix=".json", delete=False)
            tmp_path = tmp.name
    except OSError:
        if memfd is not None:
            os.close(memfd)
        return None
    try:
        with tmp, open(path, "rb") as f:
            read_in = produced = 0
            while block := f.read(1 << 22):
                read_in += len(block)
                if progress:
                    progress("decompressing", min(1.0, read_in / total))
                pending = block
                while pending:
                    out = dec.decompress(pending, 1 << 24)
                    pending = dec.unconsumed_tail
                    produced += len(out)
                    check_expansion(path, produced, read_in - len(pending), cap, check_ratio)
                    tmp.write(out)
                    if dec.eof:
                        break
                if dec.eof:
                    break
            if not dec.eof or dec.unused_data.strip(b"\x00") or f.read(1):
                return None  # truncated, or more after the stream: the serial reader says so
            tmp.write(dec.flush())
        trace = _load_halves(tmp_path, progress, (memfd,) if memfd is not None else ())
        if trace is not None:
            trace.source = path
        return trace
    except _INFLATE_OR_OS_ERRORS:
        return None
    finally:
        if memfd is not None:
            os.close(memfd)  # the memory goes with the last descriptor
        else:
            try:
                os.unlink(tmp_path)
            except OSError:
                pass


def _inflated_estimate(path: str) -> int | None:
    """The gzip trailer's inflated size (ISIZE, modulo 2³²: None where it says less than the file)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(max(0, size - 4))
        isize = int.from_bytes(f.read(4), "little")
    return isize if isize >= size else None


def _memory_file(size: int | None) -> int | None:
    """A memory-backed file (Linux ``memfd_create``) for an inflated copy of ``size`` bytes where the
    machine has at least twice that available, else None (a temporary file in TMPDIR)."""
    if size is None or not hasattr(os, "memfd_create"):
        return None
    try:
        import psutil

        if psutil.virtual_memory().available < 2 * size:
            return None
        return os.memfd_create("trainscope-inflated", getattr(os, "MFD_CLOEXEC", 0))
    except (OSError, ImportError):
        return None


def _part_main() -> None:
    """The child of :func:`_load_halves`: (path, start, head) on stdin, the part on stdout."""
    import pickle
    import sys

    path, start, head = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps(_read_part(path, start, head), protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


def _read_part(path: str, start: int, head: bytes) -> dict[str, Any] | None:
    """In the worker: read ``path`` from ``start`` to the end and return the tables and what the
    merge needs (strings, thread keys, counts), or None when the part cannot be streamed."""
    parser = _StreamParser(path, None)
    gc.disable()
    try:
        top, warnings = stream_events(path, parser, None, start, None, head)
    except (Fallback, TraceError):
        return None
    parser.finalize_dims()
    tables: dict[str, Table] = {name: b.build() for name, b in parser.named_builders()}
    tables["python_frames"] = parser.python_frames.build()
    return {
        "kernel_external": parser.kernel_external,
        "cpu_external": parser.cpu_external,
        "cpu_signature": parser.cpu_signature,
        "cpu_sequence": parser.cpu_sequence,
        "cpu_fwd_thread": parser.cpu_fwd_thread,
        "signatures": parser.signatures,
        "hw_flops": parser.hw_flops,
        "hw_ranges": parser.hw_ranges,
        "collective_args": parser.collective_args,
        "tables": tables,
        "strings": parser.strings.strings,
        "threads": list(parser.threads),
        "thread_names": parser.thread_names,
        "input_dims": parser.input_dims,
        "gpu_ids": parser.gpu_ids,
        "hip": parser.hip,
        "malformed": parser.malformed,
        "negative": parser.negative,
        "nonfinite": parser.nonfinite,
        "text_repairs": parser.text_repairs,
        "unknown": parser.unknown_categories,
        "top": top,
        "warnings": warnings,
        "damage": parser.damage,
    }


def load_kineto_in_memory(path: str, progress: Progress | None = None) -> Trace:
    """The whole document decoded at once (the reader for files the stream cannot place)."""
    data, warnings = read_maybe_gzip(path, progress)
    if progress:
        progress("parsing JSON", None)
    # JSON decoding allocates one dict per event and creates no reference cycles; the cyclic
    # collector would otherwise rescan the growing heap again and again (3× slower on 35 MB).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        doc, more = parse_json_events(path, data)
        del data
        warnings += more
        return trace_from_document(doc, path, warnings, progress)
    finally:
        if gc_was_enabled:
            gc.enable()


def trace_from_document(
    doc: Any, path: str, warnings: list[str] | None = None, progress: Progress | None = None
) -> Trace:
    warnings = list(warnings or [])
    if isinstance(doc, list):
        events, top = doc, {}
    elif isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceError(path, 'JSON is not a PyTorch profiler trace (no "traceEvents" array)')
        events, top = doc["traceEvents"], doc
    else:
        raise TraceError(path, "JSON is not a PyTorch profiler trace (expected an object or an array of events)")
    if not isinstance(events, list):
        raise TraceError(path, '"traceEvents" is not an array')
    if not events:
        raise TraceError(path, "trace has no events")
    if not any(isinstance(e, dict) and "ph" in e for e in events[:1000]):
        if all(isinstance(e, list) for e in events[:1000]):  # export_memory_timeline writes arrays of arrays
            raise TraceError(
                path,
                "is a memory timeline (export_memory_timeline), not a profiler trace: "
                f"read it with `trainscope memory {path}`",
            )
        raise TraceError(path, 'JSON array holds no chrome-trace events (no "ph" fields)')
    return _Parser(path, top, progress).parse(events, warnings)


class _Parser:
    def __init__(self, path: str, top: dict[str, Any], progress: Progress | None) -> None:
        self.path = path
        self.top = top
        self.progress = progress
        self.strings = StringTable()
        self.threads: dict[tuple[str, str], int] = {}
        self.thread_names: dict[tuple[str, str], str] = {}
        self.kernels = TableBuilder(Kernels)
        self.copies = TableBuilder(Copies)
        self.memsets = TableBuilder(Memsets)
        self.runtime = TableBuilder(RuntimeCalls)
        self.cpu_ops = TableBuilder(CpuOps)
        self.annotations = TableBuilder(Annotations)
        self.python_frames = TableBuilder(PythonFrames)
        self.memory = TableBuilder(MemoryEvents)
        self.unknown_categories: Counter[str] = Counter()
        self.malformed = 0
        self.negative = 0
        self.nonfinite = 0
        self.gpu_ids: set[int] = set()
        self.hip = False
        self.input_dims: dict[str, dict[str, int]] = {}
        # Operator ↔ kernel links and operator input signatures, for the cost model.
        self.cpu_external: list[int] = []
        self.kernel_external: list[int] = []
        self.cpu_signature: list[int] = []
        self.cpu_sequence: list[int] = []  # "Sequence number" (-1: absent), for backward ↔ forward
        self.cpu_fwd_thread: list[int] = []  # "Fwd thread id" (-1: absent)
        self.signature_index: dict[tuple[str, Any, Any], int] = {}
        self.signatures: list[tuple[list[Any], list[Any], list[Any]]] = []
        self.hw_flops: dict[str, float] = {}
        self.hw_ranges: list[tuple[str, int, float, float, float]] = []
        self.collective_args: dict[int, CollectiveArgs] = {}  # by External id (record_param_comms, NCCL kernels)
        # Text repaired by the stream reader (lone-surrogate escapes, bytes that are not UTF-8); the
        # in-memory reader says its own (readers.parse_json_events).
        self.text_repairs: tuple[int, int] = (0, 0)

    # -- helpers -------------------------------------------------------------------------
    def thread(self, pid: Any, tid: Any) -> int:
        key = (str(pid), str(tid))
        i = self.threads.get(key)
        if i is None:
            i = self.threads[key] = len(self.threads)
        return i

    @staticmethod
    def ns(v: Any) -> int:
        # ints are exact µs; floats carry ns in their fraction (Kineto ≥ 2.4)
        if type(v) is int:
            return v * 1000
        return int(round(float(v) * 1000.0))

    # -- main loop -----------------------------------------------------------------------
    def parse(self, events: list[Any], warnings: list[str]) -> Trace:
        self.feed_dicts(events, self.progress)
        return self._finish(warnings)

    def feed_dicts(self, events: list[Any], progress: Progress | None = None) -> None:
        """Read events decoded as plain JSON values (dicts), tolerating any damage in them."""
        n = len(events)
        step = max(1, n // 50)
        intern = self.strings.intern
        for i, e in enumerate(events):
            if progress and i % step == 0:
                progress("parsing events", i / n)
            if type(e) is not dict:
                self.malformed += 1
                continue
            ph = e.get("ph")
            try:
                if ph == "X":
                    self._complete(e, intern)
                elif ph == "i" or ph == "I":
                    if e.get("name") == "[memory]":
                        self._memory(e)
                elif ph == "M":
                    self._metadata(e)
            except (KeyError, TypeError, ValueError, OverflowError, AttributeError):
                self.malformed += 1

    def _complete(self, e: dict[str, Any], intern: Callable[[str], int]) -> None:
        cat = e.get("cat")
        c = cat.lower() if type(cat) is str else ""
        name = e.get("name")
        if type(name) is not str:
            name = str(name)
        ts_raw, dur_raw = e["ts"], e["dur"]
        if isinstance(ts_raw, str) or isinstance(dur_raw, str):
            ts_raw, dur_raw = float(ts_raw), float(dur_raw)
        if (
            isinstance(ts_raw, float)
            and not math.isfinite(ts_raw)
            or isinstance(dur_raw, float)
            and not math.isfinite(dur_raw)
        ):
            self.nonfinite += 1
            return
        ts, dur = self.ns(ts_raw), self.ns(dur_raw)
        if dur < 0:
            self.negative += 1
            return
        args = e.get("args") or {}
        if type(args) is not dict:
            args = {}
        if c in _KERNEL:
            dev = _int(args.get("device", e.get("pid")), -1)
            self.gpu_ids.add(dev)
            self.kernels.add(ts, dur, dev, _stream(args, e), intern(name), _int(args.get("correlation"), -1))
            self.kernel_external.append(_int(args.get("External id", args.get("external id")), -1))
            if "Collective name" in args or "Seq" in args:
                self._collective(self.kernel_external[-1], args.get)
        elif c in _RUNTIME:
            if name.startswith("hip"):
                self.hip = True
            self.runtime.add(
                ts, dur, self.thread(e.get("pid"), e.get("tid")), intern(name), _int(args.get("correlation"), -1)
            )
        elif c in _CPU_OP:
            if name.startswith("ProfilerStep#"):  # 2021 traces record steps as operators
                self.annotations.add(ts, dur, self.thread(e.get("pid"), e.get("tid")), intern(name), -1)
            else:
                flops = args.get("flops")
                self.cpu_ops.add(
                    ts,
                    dur,
                    self.thread(e.get("pid"), e.get("tid")),
                    intern(name),
                    float(flops) if isinstance(flops, (int, float)) else math.nan,
                )
                self.cpu_external.append(_int(args.get("External id", args.get("external id")), -1))
                self.cpu_sequence.append(_int(args.get("Sequence number"), -1))
                self.cpu_fwd_thread.append(_int(args.get("Fwd thread id"), -1))
                if "Collective name" in args or "Seq" in args:
                    self._collective(self.cpu_external[-1], args.get)
                dims = args.get("Input Dims")
                if type(dims) is list:  # record_shapes=True: kept for comparing runs' batch shapes
                    per_op = self.input_dims.setdefault(name, {})
                    key = repr(dims)
                    per_op[key] = per_op.get(key, 0) + 1
                    self.cpu_signature.append(self._signature(key, dims, args))
                else:
                    self.cpu_signature.append(-1)
        elif c in _MEMCPY:
            dev = _int(args.get("device", e.get("pid")), -1)
            self.gpu_ids.add(dev)
            kind, src, dst = _copy_kind(name, args)
            self.copies.add(
                ts,
                dur,
                dev,
                _stream(args, e),
                kind,
                src,
                dst,
                _int(args.get("bytes"), 0),
                _int(args.get("correlation"), -1),
            )
        elif c in _MEMSET:
            dev = _int(args.get("device", e.get("pid")), -1)
            self.gpu_ids.add(dev)
            self.memsets.add(
                ts, dur, dev, _stream(args, e), _int(args.get("bytes"), 0), _int(args.get("correlation"), -1)
            )
        elif c in _ANNOTATION:
            on_gpu = c == "gpu_user_annotation"
            dev = _int(args.get("device", e.get("pid")), -1) if on_gpu else -1
            self.annotations.add(ts, dur, self.thread(e.get("pid"), e.get("tid")), intern(name), dev)
        elif c == "cuda_profiler_range":
            by_prec = _counter_flops_by_precision(args)  # CUPTI-profiler mode: FP instruction counts per kernel
            if by_prec is not None:
                self.hw_flops[name] = self.hw_flops.get(name, 0.0) + sum(by_prec)
                self.hw_ranges.append((name, ts, *by_prec))
        elif c == "python_function":
            self.python_frames.add(ts, dur, self.thread(e.get("pid"), e.get("tid")), intern(name))
        elif c not in _KNOWN_IGNORED:
            self.unknown_categories[str(cat)] += 1

    def _collective(self, ext: int, get: Callable[[str], Any]) -> None:
        """Keep one collective's metadata under its External id (``get``: the args' lookup by raw key)."""
        if ext < 0:
            return
        pg, name, dtype = get("Process Group Name"), get("Collective name"), get("dtype")
        new: tuple[Any, ...] = (
            None if pg is None else str(pg),
            _int(get("Seq"), None),
            None if name is None else str(name),
            _int(get("In msg nelems"), None),
            _int(get("Out msg nelems"), None),
            None if dtype is None else str(dtype),
        )
        old = self.collective_args.get(ext)  # the operator and its kernel: what either records
        if old is not None:
            new = tuple(x if x is not None else y for x, y in zip(astuple(old), new))
        self.collective_args[ext] = CollectiveArgs(*new)

    def _signature(self, dims_key: str, dims: list[Any], args: dict[str, Any]) -> int:
        types, concrete = args.get("Input type"), args.get("Concrete Inputs")
        types = types if type(types) is list else []
        concrete = concrete if type(concrete) is list else []
        key: tuple[str, Any, Any]
        try:
            key = (dims_key, tuple(types), tuple(concrete))  # strings: hashing beats another repr
            i = self.signature_index.get(key)
        except TypeError:  # an unhashable entry (a list among the concrete inputs)
            key = (dims_key, repr(types), repr(concrete))
            i = self.signature_index.get(key)
        if i is None:
            i = self.signature_index[key] = len(self.signatures)
            self.signatures.append((dims, types, concrete))
        return i

    def _memory(self, e: dict[str, Any]) -> None:
        args = e.get("args") or {}
        ts = e["ts"]
        if isinstance(ts, float) and not math.isfinite(ts):
            self.nonfinite += 1
            return
        dtype = _int(args.get("Device Type"), 0)
        self.memory.add(
            self.ns(ts),
            1 if dtype in _GPU_DEVICE_TYPES else 0,
            _int(args.get("Device Id"), -1),
            _int(args.get("Bytes"), 0),
            _int(args.get("Total Allocated"), -1),
            _int(args.get("Total Reserved"), -1),
        )

    def _metadata(self, e: dict[str, Any]) -> None:
        if e.get("name") == "thread_name":
            self.thread_names[(str(e.get("pid")), str(e.get("tid")))] = str((e.get("args") or {}).get("name", ""))

    # -- assembly ------------------------------------------------------------------------
    def _finish(self, warnings: list[str]) -> Trace:
        tables: dict[str, Any] = {  # Trace's keyword arguments, each a table of its own class
            "kernels": self.kernels.build(),
            "copies": self.copies.build(),
            "memsets": self.memsets.build(),
            "runtime": self.runtime.build(),
            "cpu_ops": self.cpu_ops.build(),
            "annotations": self.annotations.build(),
            "memory": self.memory.build(),
        }
        warnings += text_repair_warning(*self.text_repairs)
        warnings += skipped_warning(
            (self.kernels, self.copies, self.memsets, self.runtime, self.cpu_ops, self.annotations, self.memory)
        )
        starts = [int(t.ts.min()) for t in tables.values() if len(t)]
        if not starts:
            raise TraceError(
                self.path, "trace has no timed events trainscope can use (no kernels, operators or annotations)"
            )
        origin = min(starts)
        # Python frames (with_stack) share the origin but do not set it: thread bootstrap frames open
        # long before the profiled work.
        tables["python_frames"] = self.python_frames.build()
        for t in tables.values():
            t.ts -= origin
        base = self.top.get("baseTimeNanoseconds")
        origin_ns = origin + (int(base) if isinstance(base, (int, float)) and math.isfinite(base) else 0)

        if self.malformed:
            warnings.append(f"{self.malformed:,} malformed events skipped (missing or invalid ts/dur/fields)")
        if self.negative:
            warnings.append(f"{self.negative:,} events with negative duration skipped")
        if self.nonfinite:
            warnings.append(f"{self.nonfinite:,} events with NaN or infinite timestamps skipped")
        if self.unknown_categories:
            cats = ", ".join(f"{c!r} ({n:,})" for c, n in self.unknown_categories.most_common(5))
            warnings.append(f"events of unknown categories ignored: {cats}")

        threads = [Thread(pid, tid, self.thread_names.get((pid, tid), "")) for (pid, tid) in self.threads]
        info = self.top.get("distributedInfo")
        dist: dict[str, Any] = info if isinstance(info, dict) else {}
        meta: dict[str, object] = {
            k: v for k, v in self.top.items() if k != "traceEvents" and isinstance(v, (str, int, float, bool))
        }
        return Trace(
            source=self.path,
            format="kineto",
            origin_ns=origin_ns,
            strings=self.strings.strings,
            devices=self._devices(),
            threads=threads,
            counters=Counters.empty(),
            metadata=meta,
            rank=_int(dist.get("rank"), None),
            world_size=_int(dist.get("world_size"), None),
            warnings=warnings,
            input_dims=self.input_dims,
            op_inputs=self._op_inputs(tables),
            collective_args=self.collective_args,
            **tables,
        )

    def _op_inputs(self, tables: dict[str, Table]) -> OpInputs:
        n_ops, n_k = len(tables["cpu_ops"]), len(tables["kernels"])
        if len(self.cpu_external) != n_ops or len(self.kernel_external) != n_k:  # a row was half-added
            return OpInputs(hw_flops=self.hw_flops, hw_ranges=sorted(self.hw_ranges, key=lambda r: r[1]))
        seq, fwd = self.cpu_sequence, self.cpu_fwd_thread
        if len(seq) != n_ops or len(fwd) != n_ops:
            seq = fwd = []
        return OpInputs(
            _ids(self.cpu_external),
            _ids(self.kernel_external),
            np.array(self.cpu_signature, np.int32),
            self.signatures,
            self.hw_flops,
            sorted(self.hw_ranges, key=lambda r: r[1]),
            _ids(seq),
            _ids(fwd),
        )

    def _devices(self) -> list[Device]:
        props = self.top.get("deviceProperties")
        if not isinstance(props, list):
            props = self.top.get("computeProperties")  # oldest Kineto versions
        devices: dict[int, Device] = {}
        for p in props if isinstance(props, list) else []:
            if not isinstance(p, dict):
                continue
            did = _int(p.get("id"), None)
            if did is None:
                continue
            name = str(p.get("name", f"GPU {did}"))
            major, minor = p.get("computeMajor"), p.get("computeMinor")
            vendor = _vendor(name, p, self.hip)
            devices[did] = Device(
                id=did,
                name=name,
                vendor=vendor,
                total_memory=_int(p.get("totalGlobalMem"), None),
                sm_count=_int(p.get("numSms"), None),
                compute_capability=f"{major}.{minor}" if vendor == "nvidia" and major is not None else None,
            )
        for did in sorted(self.gpu_ids - set(devices)):
            if did >= 0:
                devices[did] = Device(id=did, name=f"GPU {did}", vendor="amd" if self.hip else "unknown")
        return [devices[k] for k in sorted(devices)]


class _StreamParser(_Parser):
    """:class:`_Parser` fed slice by slice: typed :class:`Event` records on the fast path, plain
    dicts (through the general path) for slices off the typed schema; columns frozen per slice."""

    def __init__(self, path: str, progress: Progress | None) -> None:
        super().__init__(path, {}, progress)
        self._builders: tuple[ChunkedTableBuilder[Any], ...] = (
            ChunkedTableBuilder(Kernels),
            ChunkedTableBuilder(Copies),
            ChunkedTableBuilder(Memsets),
            ChunkedTableBuilder(RuntimeCalls),
            ChunkedTableBuilder(CpuOps),
            ChunkedTableBuilder(Annotations),
            ChunkedTableBuilder(MemoryEvents),
        )
        # the base class's builders, chunked (frozen per slice, rolled back when a slice is undone)
        (self.kernels, self.copies, self.memsets, self.runtime, self.cpu_ops, self.annotations, self.memory) = (
            self._builders
        )
        self.seen_ph = False
        self._tcache: dict[tuple[Any, Any], int] = {}  # (pid, tid) as decoded → thread index
        self._raw_dims: dict[tuple[str, bytes], int] = {}  # (operator, raw "Input Dims" JSON) → calls
        self.events_seen = 0  # events fed (for the count in a salvage message of a later part)
        self.damage: tuple[str, int, int] | None = None  # (why, events before, byte) where reading stopped
        self._sig_raw: dict[tuple[bytes, bytes, bytes], int] = {}  # raw (dims, types, concrete) → signature

    def _signature_raw(self, dims: bytes, types: bytes, concrete: bytes) -> int:
        """The signature index of one distinct raw (Input Dims, Input type, Concrete Inputs): decoded
        once, then as the dict path does it (-1 when the dims are not a list)."""

        def decode(raw: bytes) -> Any:
            try:
                return msgspec.json.decode(raw) if raw else None
            except (msgspec.DecodeError, UnicodeDecodeError):
                return None

        d = decode(dims)
        if type(d) is not list:
            return -1
        return self._signature(repr(d), d, {"Input type": decode(types), "Concrete Inputs": decode(concrete)})

    def _lists(self) -> tuple[list[Any], ...]:
        return (
            self.kernel_external,
            self.cpu_external,
            self.cpu_signature,
            self.cpu_sequence,
            self.cpu_fwd_thread,
            *self.python_frames.columns,
        )

    def check_first(self) -> None:
        """After the first slice: a document whose events carry no "ph" is not one we stream."""
        if not self.seen_ph:
            raise Fallback

    def feed_dicts(self, events: list[Any], progress: Progress | None = None) -> None:
        if not self.seen_ph:
            self.seen_ph = any(type(e) is dict and "ph" in e for e in events[:1000])
        self.events_seen += len(events)
        super().feed_dicts(events, progress)
        self._flush()

    def _flush(self) -> None:
        for b in self._builders:
            b.flush()

    def feed_typed(self, events: list[Event]) -> bool:
        """Read one slice of typed events; False (nothing kept) when a value does not fit the model
        (an integer past int64), so the caller reads the slice through the general path."""
        if any(e.cat == "cuda_profiler_range" for e in events):
            return False  # CUPTI-profiler counters live in args the typed records do not keep
        marks = [b.mark() for b in self._builders]
        list_marks = [len(x) for x in self._lists()]
        state = (self.malformed, self.negative, self.hip, len(self.unknown_categories))
        raw_dims = dict(self._raw_dims)
        unknown = self.unknown_categories.copy()
        try:
            self._typed(events)
            self._flush()
        except (OverflowError, TypeError, ValueError, AttributeError):
            # A value off the typed schema (an int past int64, a list where a pid belongs, …): undo
            # the slice and let the caller read it through the general path, which salvages per event.
            for b, m in zip(self._builders, marks):
                b.rollback(m)
            for x, m in zip(self._lists(), list_marks):
                del x[m:]
            self._raw_dims, self.unknown_categories = raw_dims, unknown
            self.malformed, self.negative, self.hip = state[:3]
            return False
        if events:
            self.seen_ph = self.seen_ph or any(e.ph is not None for e in events[:1000])
        self.events_seen += len(events)
        return True

    def _typed(self, events: list[Event]) -> None:
        intern = self.strings.intern
        tcache = self._tcache
        thread = self.thread
        raw_dims = self._raw_dims
        kcols, rcols, ocols, acols = (b.columns for b in (self.kernels, self.runtime, self.cpu_ops, self.annotations))
        k_ts, k_dur, k_dev, k_stream, k_name, k_corr = (c.append for c in kcols)
        r_ts, r_dur, r_thread, r_name, r_corr = (c.append for c in rcols)
        o_ts, o_dur, o_thread, o_name, o_flops = (c.append for c in ocols)
        a_ts, a_dur, a_thread, a_name, a_dev = (c.append for c in acols)
        gpu_ids = self.gpu_ids
        k_ext, o_ext, o_sig = self.kernel_external.append, self.cpu_external.append, self.cpu_signature.append
        o_seq, o_fwd = self.cpu_sequence.append, self.cpu_fwd_thread.append
        p_add = self.python_frames.add
        sig_raw = self._sig_raw
        lower_of: dict[Any, str] = {}
        nan = math.nan
        for e in events:
            ph = e.ph
            if ph != "X":
                if ph == "i" or ph == "I":
                    if e.name == "[memory]":
                        self._memory_typed(e)
                elif ph == "M" and e.name == "thread_name":
                    a = e.args
                    self.thread_names[(str(e.pid), str(e.tid))] = str(
                        a.name if a is not None and a.name is not None else ""
                    )
                continue
            cat = e.cat
            c = lower_of.get(cat)
            if c is None:
                c = lower_of[cat] = cat.lower() if type(cat) is str else ""
            ts, dur = e.ts, e.dur
            if ts is None or dur is None:
                self.malformed += 1
                continue
            ts = ts * 1000 if type(ts) is int else int(round(ts * 1000.0))
            dur = dur * 1000 if type(dur) is int else int(round(dur * 1000.0))
            if dur < 0:
                self.negative += 1
                continue
            name = e.name
            if type(name) is not str:
                name = str(name)
            a = e.args
            if c == "cpu_op" or c == "operator":
                tk = (e.pid, e.tid)
                th = tcache.get(tk)
                if th is None:
                    th = tcache[tk] = thread(*tk)
                if name.startswith("ProfilerStep#"):
                    a_ts(ts)
                    a_dur(dur)
                    a_thread(th)
                    a_name(intern(name))
                    a_dev(-1)
                    continue
                o_ts(ts)
                o_dur(dur)
                o_thread(th)
                o_name(intern(name))
                if a is None:
                    o_flops(nan)
                    o_ext(-1)
                    o_sig(-1)
                    o_seq(-1)
                    o_fwd(-1)
                    continue
                flops = a.flops
                o_flops(float(flops) if isinstance(flops, (int, float)) else nan)
                o_ext(_external(a))
                x = a.seq_nr
                o_seq(x if type(x) is int else _int(x, -1))
                x = a.fwd_tid
                o_fwd(x if type(x) is int else _int(x, -1))
                if a.coll_name is not None or a.seq is not None:
                    self._collective(_external(a), _typed_collective(a))
                dims = a.input_dims
                if dims:  # raw JSON bytes: counted per (operator, text), decoded once per distinct text
                    raw = bytes(dims)
                    key = (name, raw)
                    raw_dims[key] = raw_dims.get(key, 0) + 1
                    skey = (raw, bytes(a.input_type), bytes(a.concrete))
                    sig = sig_raw.get(skey)
                    if sig is None:
                        sig = sig_raw[skey] = self._signature_raw(*skey)
                    o_sig(sig)
                else:
                    o_sig(-1)
            elif c in _RUNTIME:
                if name.startswith("hip"):
                    self.hip = True
                tk = (e.pid, e.tid)
                th = tcache.get(tk)
                if th is None:
                    th = tcache[tk] = thread(*tk)
                r_ts(ts)
                r_dur(dur)
                r_thread(th)
                r_name(intern(name))
                corr = a.correlation if a is not None else -1
                r_corr(corr if type(corr) is int else _int(corr, -1))
            elif c == "kernel":
                dev = a.device if a is not None and a.device is not None else e.pid
                dev = _int(dev, -1)
                gpu_ids.add(dev)
                k_ts(ts)
                k_dur(dur)
                k_dev(dev)
                k_stream(_stream_typed(a, e))
                k_name(intern(name))
                corr = a.correlation if a is not None else -1
                k_corr(corr if type(corr) is int else _int(corr, -1))
                k_ext(_external(a))
                if a is not None and (a.coll_name is not None or a.seq is not None):
                    self._collective(_external(a), _typed_collective(a))
            elif c == "python_function":
                p_add(ts, dur, thread(e.pid, e.tid), intern(name))
            elif c in _ANNOTATION:
                dev = -1
                if c == "gpu_user_annotation":
                    dev = _int(a.device if a is not None and a.device is not None else e.pid, -1)
                a_ts(ts)
                a_dur(dur)
                a_thread(thread(e.pid, e.tid))
                a_name(intern(name))
                a_dev(dev)
            elif c in _MEMCPY:
                dev = _int(a.device if a is not None and a.device is not None else e.pid, -1)
                gpu_ids.add(dev)
                kind, src, dst = _copy_kind(name, {"kind": a.kind} if a is not None else {})
                self.copies.add(
                    ts,
                    dur,
                    dev,
                    _stream_typed(a, e),
                    kind,
                    src,
                    dst,
                    _int(a.bytes, 0) if a is not None else 0,
                    _int(a.correlation, -1) if a is not None else -1,
                )
            elif c in _MEMSET:
                dev = _int(a.device if a is not None and a.device is not None else e.pid, -1)
                gpu_ids.add(dev)
                self.memsets.add(
                    ts,
                    dur,
                    dev,
                    _stream_typed(a, e),
                    _int(a.bytes, 0) if a is not None else 0,
                    _int(a.correlation, -1) if a is not None else -1,
                )
            elif c not in _KNOWN_IGNORED:
                self.unknown_categories[str(cat)] += 1

    def _memory_typed(self, e: Event) -> None:
        ts = e.ts
        if ts is None:
            self.malformed += 1
            return
        a = e.args
        if a is None:
            self.memory.add(self.ns(ts), 0, -1, 0, -1, -1)
            return
        dtype = _int(a.device_type, 0)
        self.memory.add(
            self.ns(ts),
            1 if dtype in _GPU_DEVICE_TYPES else 0,
            _int(a.device_id, -1),
            _int(a.mem_bytes, 0),
            _int(a.total_allocated, -1),
            _int(a.total_reserved, -1),
        )

    def named_builders(self) -> list[tuple[str, ChunkedTableBuilder[Any]]]:
        names = ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "memory")
        return list(zip(names, self._builders))

    def merge_part(self, part: dict[str, Any]) -> None:
        """Append a later part's rows (from :func:`_read_part`), names and threads renumbered."""
        self.finalize_dims()
        names = np.array([self.strings.intern(x) for x in part["strings"]], np.int32)
        threads = np.array([self.thread(pid, tid) for pid, tid in part["threads"]], np.int32)
        for name, b in self.named_builders():
            t = part["tables"][name]
            if not len(t):
                continue
            if hasattr(t, "name"):
                t.name = names[t.name] if len(names) else t.name
            if hasattr(t, "thread"):
                t.thread = threads[t.thread] if len(threads) else t.thread
            b.flush()
            b.parts.append(t)
        frames = part["tables"]["python_frames"]
        for i in range(len(frames)):  # few rows next to the kernels: appended one by one, renumbered
            self.python_frames.add(
                int(frames.ts[i]), int(frames.dur[i]), int(threads[frames.thread[i]]), int(names[frames.name[i]])
            )
        self.kernel_external += part["kernel_external"]
        for ext, c in part["collective_args"].items():  # CollectiveArgs fields, in order, under their raw keys
            self._collective(
                ext,
                dict(
                    zip(
                        ("Process Group Name", "Seq", "Collective name", "In msg nelems", "Out msg nelems", "dtype"),
                        astuple(c),
                    )
                ).get,
            )
        self.cpu_external += part["cpu_external"]
        self.cpu_sequence += part["cpu_sequence"]
        self.cpu_fwd_thread += part["cpu_fwd_thread"]
        resig = [self._signature(repr(d), d, {"Input type": t, "Concrete Inputs": c}) for d, t, c in part["signatures"]]
        self.cpu_signature += [resig[i] if i >= 0 else -1 for i in part["cpu_signature"]]
        for k, v in part["hw_flops"].items():
            self.hw_flops[k] = self.hw_flops.get(k, 0.0) + v
        self.hw_ranges += part.get("hw_ranges", [])
        self.thread_names.update(part["thread_names"])
        for op, shapes in part["input_dims"].items():
            mine = self.input_dims.setdefault(op, {})
            for k, n in shapes.items():
                mine[k] = mine.get(k, 0) + n
        self.gpu_ids |= part["gpu_ids"]
        self.hip = self.hip or part["hip"]
        self.malformed += part["malformed"]
        self.negative += part["negative"]
        self.nonfinite += part["nonfinite"]
        self.text_repairs = (
            self.text_repairs[0] + part["text_repairs"][0],
            self.text_repairs[1] + part["text_repairs"][1],
        )
        self.unknown_categories.update(part["unknown"])

    def finalize_dims(self) -> None:
        """Decode each distinct raw "Input Dims" text once and count it per operator."""
        for (name, raw), n in self._raw_dims.items():
            try:
                dims = msgspec.json.decode(raw)
            except (msgspec.DecodeError, UnicodeDecodeError):
                continue
            if type(dims) is list:
                per_op = self.input_dims.setdefault(name, {})
                key = repr(dims)
                per_op[key] = per_op.get(key, 0) + n
        self._raw_dims = {}

    def finish(self, warnings: list[str]) -> Trace:
        self.finalize_dims()
        return self._finish(warnings)


def _ids(xs: list[int]) -> np.ndarray:
    """External ids as int64; an id beyond int64 (a damaged file) links nothing (-1)."""
    try:
        return np.array(xs, np.int64)
    except OverflowError:
        return np.array([x if -(1 << 63) <= x < (1 << 63) else -1 for x in xs], np.int64)


def _external(a: Any) -> int:
    """The operator ↔ kernel link of a typed record ("External id", or its lower-case spelling).
    ``a``: the record's :class:`Args`, or None (no args), which raises AttributeError here: the
    caller then reads the slice through the general path."""
    x = a.external_id if a.external_id is not None else a.external_id_lc
    return x if type(x) is int else _int(x, -1)


_TYPED_KEYS = {
    "Process Group Name": "pg_name",
    "Collective name": "coll_name",
    "dtype": "dtype",
    "Seq": "seq",
    "In msg nelems": "in_nelems",
    "Out msg nelems": "out_nelems",
}


def _typed_collective(a: Args) -> Callable[[str], Any]:
    """A typed record's collective args looked up by their raw keys (as :meth:`_Parser._collective` reads them)."""
    return lambda key: getattr(a, _TYPED_KEYS[key])


def _stream_typed(a: Args | None, e: Event) -> int:
    s = a.stream if a is not None else None
    if type(s) is int:
        return s
    m = _STREAM_TID.search(str(s if s is not None else (e.tid if e.tid is not None else "")))
    return int(m.group(1)) if m else -1


def _int(v: Any, default: _D) -> int | _D:
    if v is None or isinstance(v, bool):
        return default
    if isinstance(v, int):
        return v
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return int(f) if math.isfinite(f) else default


_FP_COUNTERS = {"add": 1.0, "mul": 1.0, "fma": 2.0}
_COUNTER = re.compile(r"smsp__sass_thread_inst_executed_op_([dhf])(add|mul|fma)_pred_on\.sum")


def _counter_flops_by_precision(args: dict[str, Any]) -> tuple[float, float, float] | None:
    """(fp64, fp32, fp16) FLOPs from CUPTI's per-thread FP instruction counters
    ``smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}``: add + mul + 2·fma per precision.
    Tensor-core math (HMMA) is not counted by these counters."""
    out, seen = {"d": 0.0, "f": 0.0, "h": 0.0}, False
    for k, v in args.items():
        m = _COUNTER.match(k)
        if m and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0:
            out[m.group(1)] += _FP_COUNTERS[m.group(2)] * float(v)
            seen = True
    return (out["d"], out["f"], out["h"]) if seen else None


def _stream(args: dict[str, Any], e: dict[str, Any]) -> int:
    s = args.get("stream")
    if isinstance(s, int):
        return s
    m = _STREAM_TID.search(str(s if s is not None else e.get("tid", "")))
    return int(m.group(1)) if m else -1


def _copy_kind(name: str, args: dict[str, Any]) -> tuple[int, int, int]:
    m = _COPY_NAME.search(name)
    kind = src = dst = 0
    if m:
        kind = _KIND_CODE.get(m.group(1).lower(), 0)
        if m.group(2):
            src = _MEM_CODE.get(_MEM_ALIASES.get(m.group(2).lower(), "unknown"), 0)
            dst = _MEM_CODE.get(_MEM_ALIASES.get(m.group(3).lower(), "unknown"), 0)
    elif isinstance(args.get("kind"), str):
        kind = _KIND_CODE.get(args["kind"].lower(), 0)
    return kind, src, dst


def _vendor(name: str, props: dict[str, Any], hip: bool) -> str:
    n = name.lower()
    if hip or "amd" in n or "radeon" in n or "instinct" in n or props.get("warpSize") == 64:
        return "amd"
    if any(k in n for k in ("nvidia", "tesla", "geforce", "quadro", "rtx", "a100", "h100", "v100")):
        return "nvidia"
    return "nvidia" if "computeMajor" in props else "unknown"
