"""The trace cache: a trace read once is read again as its columns, without parsing it.

Beside the analysis documents (:mod:`trainscope.api.cache`) the same folder keeps, per input, the
normalized :class:`~trainscope.traces.model.TraceSet` a reader made of it: every table's numpy
columns, the string table, devices, threads, metadata, operator inputs, collective arguments and
warnings. Every consumer that reads a file input goes through :func:`open_cached`
(``api.analysis.open_input``): the full analysis after a document hit (the HTML page, ``--perfetto``,
``--save``, the MCP server's other tools), the terminal app, ``diff``. The key is a SHA-256 over

- the input's identity (:func:`trainscope.api.cache.input_identity`: size, mtime and a hash);
- the readers' version: this format, trainscope's version and a hash of the source of the readers
  and the trace model (not of the analyzers: one entry serves every look at the trace, whatever the
  thresholds, and survives a change to an analyzer);
- what else changes what a reader makes of the bytes: the decompression cap, the snapshot reader's
  switch, for an ``.nsys-rep`` the ``nsys`` that exports it, the byte order;
- the path as given when it is relative (the trace names it); an absolute path is stored as a
  placeholder and filled in by the look that reads the entry, as the documents are.

An entry is data, never code (no pickle): a magic line, the SHA-256 of the rest, then the rest: a
JSON header (ASCII; the tables' shapes, the small fields, tuples and numpy scalars tagged so they come
back as they were) and the columns' raw bytes, each 64-byte aligned, read into one numpy buffer
and viewed as arrays of the dtypes the model declares (any other dtype is damage). An entry is
checked on every read — magic, checksum, its key, every array inside the buffer, a size bound — and
a damaged one is removed, the trace read again, the entry rebuilt and the damage said in one line
on stderr and counted, as a document's. Writing, the folder's bound and least-recently-used
eviction are the document cache's (:func:`trainscope.api.cache.store`, ``sweep``). A trace whose
columns would take more than a quarter of the bound is not kept (said once, in one line): one trace
never evicts every other entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from trainscope.api import cache
from trainscope.collectors.snapshot import READER_ENV
from trainscope.traces import model as m
from trainscope.traces.model import CollectiveArgs
from trainscope.traces.model import Device
from trainscope.traces.model import OpInputs
from trainscope.traces.model import Thread
from trainscope.traces.model import Trace
from trainscope.traces.model import TraceSet

if TYPE_CHECKING:
    from trainscope.api.errors import Progress
    from trainscope.traces.model import TraceSet

TRACE_FORMAT = 1
MAGIC = b"trainscope-trace-cache 1\n"
SUFFIX = ".trace"
ENV_PAUSE = "TRAINSCOPE_TRACE_CACHE_PAUSE_WRITE"  # tests only: as cache.ENV_PAUSE, for a trace entry
ALIGN = 64
SHARE = 4  # an entry may take at most 1/SHARE of the folder's bound
MAX_HEADER = 1 << 30

_READER_PACKAGES = ("trainscope.collectors", "trainscope.traces")
_READER_FILES = ("api/trace_cache.py",)
_TAG = "\ue000"  # a dict whose one key starts with this is a tagged value (tuple, numpy scalar, …)
_PH = cache._PLACEHOLDER
_DTYPES = {"|i1", "<i2", "<i4", "<i8", "<f8", "|u1"}
_TABLES = (
    "kernels",
    "copies",
    "memsets",
    "runtime",
    "cpu_ops",
    "annotations",
    "memory",
    "counters",
    "os_runtime",
    "python_frames",
)
_OP_ARRAYS = ("cpu_external", "kernel_external", "cpu_signature", "cpu_sequence", "cpu_fwd_thread")
_OP_VALUES = ("signatures", "hw_flops", "hw_ranges")
_warned_large = False


def _classes() -> dict[str, type[m.Table]]:
    return {
        "kernels": m.Kernels,
        "copies": m.Copies,
        "memsets": m.Memsets,
        "runtime": m.RuntimeCalls,
        "cpu_ops": m.CpuOps,
        "annotations": m.Annotations,
        "memory": m.MemoryEvents,
        "counters": m.Counters,
        "os_runtime": m.RuntimeCalls,
        "python_frames": m.PythonFrames,
    }


_reader: str | None = None


def reader_version() -> str:
    """A hash of the source of the readers and the trace model (once per process)."""
    global _reader
    if _reader is None:
        _reader = cache.source_hash(_READER_PACKAGES, _READER_FILES)
    return _reader


def _nsys_identity(path: str) -> list[object] | None:
    """For an ``.nsys-rep`` (exported by ``nsys`` on each read): which ``nsys`` exports it."""
    if not path.lower().endswith((".nsys-rep", ".qdrep")):
        return None
    import shutil

    exe = shutil.which("nsys")
    if exe is None:
        return None
    try:
        st = os.stat(exe)
    except OSError:
        return [exe]
    return [os.path.realpath(exe), st.st_size, st.st_mtime_ns]


def key_for(path: str) -> tuple[str, bool] | None:
    """(key, whether the entry is stored relocated) for reading ``path``; None when the input cannot
    be identified (it is read without the cache)."""

    own = {
        "entry": TRACE_FORMAT,
        "code": reader_version(),
        "snapshot_reader": os.environ.get(READER_ENV, ""),
        "nsys": _nsys_identity(path),
        "byteorder": sys.byteorder,
    }
    return cache.entry_key(path, os.path.isabs(path), own)


# -- values: exact round trips through JSON ------------------------------------------------------------


class Uncacheable(Exception):
    """The trace holds something the entry would not give back exactly (it is not stored)."""


def _enc(v: Any, old: str | None) -> Any:
    """``v`` as JSON values, tuples, non-string keys and numpy scalars tagged; ``old`` (an absolute
    path) replaced by the placeholder in every string; :class:`Uncacheable` for anything else."""
    t = type(v)
    if t is str:
        if _PH in v:
            raise Uncacheable("a string holds the placeholder")
        return v.replace(old, _PH) if old and old in v else v
    if v is None or t is bool or t is int or t is float:
        return v
    if t is list:
        return [_enc(x, old) for x in v]
    if t is tuple:
        return {_TAG + "t": [_enc(x, old) for x in v]}
    if t is dict:
        if all(type(k) is str for k in v):
            if len(v) == 1 and next(iter(v)).startswith(_TAG):
                raise Uncacheable("a key like a tag")
            return {_enc(k, old): _enc(x, old) for k, x in v.items()}
        return {_TAG + "d": [[_enc(k, old), _enc(x, old)] for k, x in v.items()]}
    import numpy as np

    if isinstance(v, (np.bool_, np.integer, np.floating)) and v.dtype.str in (
        "|b1",
        *_DTYPES,
        "<f4",
        "<u2",
        "<u4",
        "<u8",
    ):
        return {_TAG + "n": [v.dtype.str, v.item()]}
    raise Uncacheable(f"a value of type {t.__name__}")


def _dec(v: Any, new: str | None) -> Any:
    t = type(v)
    if t is str:
        return v.replace(_PH, new) if new is not None and _PH in v else v
    if t is list:
        return [_dec(x, new) for x in v]
    if t is dict:
        if len(v) == 1:
            ((k, x),) = v.items()
            if k == _TAG + "t":
                return tuple(_dec(y, new) for y in x)
            if k == _TAG + "d":
                return {_dec(a, new): _dec(b, new) for a, b in x}
            if k == _TAG + "n":
                import numpy as np

                if x[0] not in ("|b1", *_DTYPES, "<f4", "<u2", "<u4", "<u8"):
                    raise cache.Damaged("a scalar of an unknown dtype")
                return np.dtype(x[0]).type(x[1])
        return {_dec(k, new): _dec(x, new) for k, x in v.items()}
    return v


# -- the entry -------------------------------------------------------------------------------------


class _Arrays:
    """The columns of an entry as it is written: (offset, dtype, rows) refs and the buffers."""

    def __init__(self) -> None:
        self.buffers: list[Any] = []
        self.size = 0

    def add(self, a: Any, dtype: Any) -> list[object]:
        import numpy as np

        if type(a) is not np.ndarray:
            raise Uncacheable(f"a column of type {type(a).__name__}")
        a = np.ascontiguousarray(a)
        if type(a) is not np.ndarray or a.ndim != 1 or a.dtype != dtype or a.dtype.str not in _DTYPES:
            raise Uncacheable(f"a column of dtype {a.dtype} and shape {a.shape}")
        pad = -self.size % ALIGN
        if pad:
            self.buffers.append(b"\0" * pad)
            self.size += pad
        ref = [self.size, a.dtype.str, len(a)]
        if a.nbytes:
            self.buffers.append(a.data.cast("B"))
            self.size += a.nbytes
        return ref


def _check_plain(obj: Any, fields: set[str], what: str) -> None:
    extra = set(vars(obj)) - fields
    if extra:
        raise Uncacheable(f"{what} has attributes the model does not declare: {sorted(extra)}")


def _strings(strings: list[str], arrays: _Arrays, old: str | None) -> dict[str, Any]:
    """The string table as one UTF-8 blob (lone surrogates kept), names split by NUL; where a name
    holds a NUL itself, the names' lengths say where each ends."""
    import numpy as np

    if type(strings) is not list or any(type(s) is not str for s in strings):
        raise Uncacheable("a string table entry that is not a str")
    text = "\0".join(strings)
    if _PH in text:
        raise Uncacheable("a string holds the placeholder")
    if old and old in text:  # the path inside a name: relocated with it
        strings = [s.replace(old, _PH) if old in s else s for s in strings]
        text = "\0".join(strings)
    blob = np.frombuffer(text.encode("utf-8", "surrogatepass"), np.uint8)
    out: dict[str, Any] = {"count": len(strings), "blob": arrays.add(blob, np.uint8)}
    if text.count("\0") != max(len(strings) - 1, 0):
        out["lengths"] = arrays.add(np.fromiter((len(s) for s in strings), np.int64, len(strings)), np.int64)
    return out


def _op_array(a: Any, arrays: _Arrays) -> list[object]:
    import numpy as np

    if type(a) is not np.ndarray:
        raise Uncacheable(f"an operator column of type {type(a).__name__}")
    return arrays.add(a, a.dtype)


def _trace_header(t: Any, arrays: _Arrays, old: str | None) -> dict[str, Any]:
    from dataclasses import fields

    if type(t) is not Trace:
        raise Uncacheable(f"a trace of type {type(t).__name__}")
    _check_plain(t, {f.name for f in fields(Trace)}, "the trace")
    classes = _classes()
    tables: dict[str, Any] = {}
    for name in _TABLES:
        table = getattr(t, name)
        cls = classes[name]
        if type(table) is not cls:
            raise Uncacheable(f"{name} of type {type(table).__name__}")
        _check_plain(table, set(cls.FIELDS) | {"_n"}, name)
        tables[name] = {"n": len(table), "cols": {c: arrays.add(getattr(table, c), d) for c, d in cls.FIELDS.items()}}
    op = t.op_inputs
    if type(op) is not OpInputs:
        raise Uncacheable("op_inputs of another type")
    _check_plain(op, {f.name for f in fields(OpInputs)}, "op_inputs")
    for d in t.devices:
        if type(d) is not Device:
            raise Uncacheable("a device of another type")
    for th in t.threads:
        if type(th) is not Thread:
            raise Uncacheable("a thread of another type")
    for c in t.collective_args.values():
        if type(c) is not CollectiveArgs:
            raise Uncacheable("collective arguments of another type")
    return {
        "small": _enc(
            {
                "source": t.source,
                "format": t.format,
                "origin_ns": t.origin_ns,
                "rank": t.rank,
                "world_size": t.world_size,
                "metadata": t.metadata,
                "warnings": t.warnings,
                "input_dims": t.input_dims,
                "devices": [[getattr(d, f.name) for f in fields(Device)] for d in t.devices],
                "threads": [[th.pid, th.tid, th.name] for th in t.threads],
                "collective_args": [
                    [k, *(getattr(c, f.name) for f in fields(CollectiveArgs))] for k, c in t.collective_args.items()
                ],
                **{name: getattr(op, name) for name in _OP_VALUES},
            },
            old,
        ),
        "strings": _strings(t.strings, arrays, old),
        "tables": tables,
        "op_arrays": {name: _op_array(getattr(op, name), arrays) for name in _OP_ARRAYS},
    }


def encode(key: str, ts: TraceSet, relocated: bool) -> list[bytes | memoryview]:
    """The pieces of an entry, in order (written one after the other, never joined)."""

    if type(ts) is not TraceSet:
        raise Uncacheable("a trace set of another type")
    old = ts.path if relocated else None
    arrays = _Arrays()
    header = {
        "format": TRACE_FORMAT,
        "key": key,
        "relocated": relocated,
        "set": _enc({"path": ts.path, "warnings": ts.warnings}, old),
        "traces": [_trace_header(t, arrays, old) for t in ts.traces],
        "data": arrays.size,
    }
    head = json.dumps(header, ensure_ascii=True, allow_nan=True, separators=(",", ":")).encode("ascii")
    head += b" " * (-(8 + len(head)) % ALIGN)
    pieces = [struct.pack("<Q", len(head)), head, *arrays.buffers]
    h = hashlib.sha256()
    for p in pieces:
        h.update(p)
    return [MAGIC + h.hexdigest().encode("ascii") + b"\n", *pieces]


def entry_size(pieces: list[bytes | memoryview]) -> int:
    return sum(memoryview(p).nbytes for p in pieces)


def _view(buf: Any, ref: Any, dtype: Any = None) -> Any:
    import numpy as np

    if not (isinstance(ref, list) and len(ref) == 3 and type(ref[0]) is int and type(ref[2]) is int):
        raise cache.Damaged("a column reference of another shape")
    off, dt, n = ref
    if dt not in _DTYPES or (dtype is not None and np.dtype(dt) != dtype):
        raise cache.Damaged(f"a column of dtype {dt!r}")
    d = np.dtype(dt)
    if off < 0 or n < 0 or off % d.itemsize or off + n * d.itemsize > len(buf):
        raise cache.Damaged("a column outside the entry")
    return buf[off : off + n * d.itemsize].view(d)


def _decode_strings(buf: Any, s: dict[str, Any], new: str | None) -> list[str]:
    text = _view(buf, s["blob"]).tobytes().decode("utf-8", "surrogatepass")
    count = s["count"]
    if type(count) is not int:
        raise cache.Damaged("a string table without its count")
    if "lengths" not in s:
        out = text.split("\0") if count else []
    else:
        out, at = [], 0
        for n in _view(buf, s["lengths"]).tolist():
            out.append(text[at : at + n])
            at += n + 1
    if len(out) != count:
        raise cache.Damaged("a string table of another length")
    if new is not None and _PH in text:
        out = [x.replace(_PH, new) if _PH in x else x for x in out]
    return out


def decode(head: bytes, buf: Any, key: str, path: str) -> TraceSet:
    try:
        header = json.loads(head)
    except (ValueError, RecursionError):
        raise cache.Damaged("not JSON") from None
    if not isinstance(header, dict) or header.get("format") != TRACE_FORMAT or header.get("key") != key:
        raise cache.Damaged("another entry's content")
    if header.get("data") != len(buf):
        raise cache.Damaged("columns of another size")
    new = path if header.get("relocated") is True else None
    try:
        classes = _classes()
        traces = []
        for th in header["traces"]:
            small = _dec(th["small"], new)
            tables: dict[str, Any] = {}  # each table of its own class, by name
            for name in _TABLES:
                spec = th["tables"][name]
                cls = classes[name]
                cols = {c: _view(buf, spec["cols"][c], d) for c, d in cls.FIELDS.items()}
                if any(len(c) != spec["n"] for c in cols.values()):
                    raise cache.Damaged(f"{name}: columns of another length")
                tables[name] = cls(**cols)
            op = OpInputs(
                **{name: _view(buf, th["op_arrays"][name]) for name in _OP_ARRAYS},
                **{name: small[name] for name in _OP_VALUES},
            )
            traces.append(
                Trace(
                    source=small["source"],
                    format=small["format"],
                    origin_ns=small["origin_ns"],
                    strings=_decode_strings(buf, th["strings"], new),
                    devices=[Device(*d) for d in small["devices"]],
                    threads=[Thread(*x) for x in small["threads"]],
                    rank=small["rank"],
                    world_size=small["world_size"],
                    metadata=small["metadata"],
                    warnings=small["warnings"],
                    input_dims=small["input_dims"],
                    op_inputs=op,
                    collective_args={c[0]: CollectiveArgs(*c[1:]) for c in small["collective_args"]},
                    **tables,
                )
            )
        s = _dec(header["set"], new)
        return TraceSet(s["path"], traces, s["warnings"])
    except cache.Damaged:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, UnicodeError) as e:
        raise cache.Damaged(f"not a trace ({type(e).__name__})") from None


def load(dfd: int, key: str, bound: int, path: str) -> TraceSet | None:
    """The entry ``key`` as a trace set named by ``path``, touched as used; None when there is none.
    A damaged entry is removed, said and counted, and reads as none."""
    import numpy as np

    name = key + SUFFIX
    fd = cache.open_entry(dfd, name)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000 or st.st_size > bound:
            raise cache.Damaged("not a regular file of a sane size")
        first = os.pread(fd, len(MAGIC) + 65 + 8, 0)
        if not first.startswith(MAGIC):
            raise cache.Damaged("not a cache entry of this format")
        if len(first) < len(MAGIC) + 65 + 8 or first[len(MAGIC) + 64 : len(MAGIC) + 65] != b"\n":
            raise cache.Damaged("truncated")
        digest = first[len(MAGIC) : len(MAGIC) + 64]
        start = len(MAGIC) + 65
        (n_head,) = struct.unpack("<Q", first[start : start + 8])
        if n_head > MAX_HEADER or start + 8 + n_head > st.st_size:
            raise cache.Damaged("truncated")
        head = _read_all(fd, start + 8, n_head)
        data_at = start + 8 + n_head
        buf = np.empty(st.st_size - data_at, np.uint8)
        if _readinto(fd, data_at, buf) != len(buf):
            raise cache.Damaged("truncated")
        h = hashlib.sha256(first[start : start + 8])
        h.update(head)
        h.update(buf.data)
        if h.hexdigest().encode("ascii") != digest:
            raise cache.Damaged("checksum mismatch (truncated or corrupt)")
        result = decode(head, buf, key, path)
    except cache.Damaged as e:
        cache._damaged(dfd, name, str(e))
        return None
    except OSError as e:
        cache._damaged(dfd, name, f"unreadable: {e.strerror or e}")
        return None
    finally:
        os.close(fd)
    try:
        os.utime(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        pass
    return result


def _read_all(fd: int, at: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, min(n - got, 1 << 24), at + got)
        if not chunk:
            raise cache.Damaged("truncated")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _readinto(fd: int, at: int, buf: Any) -> int:
    view, got = memoryview(buf).cast("B"), 0
    with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
        f.seek(at)
        while got < len(view):
            n = f.readinto(view[got : got + (1 << 26)])
            if not n:
                break
            got += n
    return got


# -- the one entry point ----------------------------------------------------------------------------


def open_cached(path: str, read: Callable[[], TraceSet], progress: Progress | None = None) -> TraceSet:
    """``read()`` (the reader of ``path``) through the trace cache: the columns of an earlier read of
    the same input when there is an entry, else read, stored, returned."""
    keyed = key_for(path)
    dfd = None
    if keyed is not None:
        try:
            dfd = cache.open_dir(create=True)
        except OSError as e:
            if not cache._warned_folder:
                cache._warned_folder = True
                cache._problem(f"not used: {cache.cache_dir()}: {e.strerror or e}")
    if keyed is None or dfd is None:
        return read()
    key, relocated = keyed
    bound = cache.max_bytes()
    try:
        if progress:
            progress("reading cached columns", None)
        hit = load(dfd, key, bound, path)
        if hit is not None:
            cache.STATS.trace_hits += 1
            return hit
        cache.STATS.trace_misses += 1
        traces = read()
        _keep(dfd, key, relocated, traces, bound, path)
        return traces
    finally:
        os.close(dfd)


def _keep(dfd: int, key: str, relocated: bool, traces: TraceSet, bound: int, path: str) -> None:
    global _warned_large
    import errno

    try:
        pieces = encode(key, traces, relocated)
    except (Uncacheable, RecursionError, ValueError, TypeError):
        cache.STATS.uncacheable += 1
        return
    size = entry_size(pieces)
    if size > bound // SHARE:
        cache.STATS.too_large += 1
        if not _warned_large:
            _warned_large = True
            cache._problem(
                f"the columns of {os.path.basename(path.rstrip('/'))} ({size / 2**20:,.0f} MiB) are not kept: more than "
                f"1/{SHARE} of the cache's bound ({bound / 2**20:,.0f} MiB; {cache.ENV_MAX} raises it)"
            )
        return
    if key_for(path) != (key, relocated):
        return  # the input changed while it was read
    try:
        cache.store(dfd, key, pieces, bound, suffix=SUFFIX, pause_env=ENV_PAUSE)
        cache.STATS.trace_stores += 1
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            raise
        cache._problem(f"entry not written: {e.strerror or e}")
