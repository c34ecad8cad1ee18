"""Load a pickle that may be hostile, accepting only plain data.

A CUDA memory snapshot (``torch.cuda.memory._dump_snapshot``) is a pickle of dicts, lists,
tuples, strings, ints, floats, bools and None — nothing that needs a class. Plain
``pickle.load`` would import and call whatever a crafted file names (``os.system`` via
``__reduce__``), so this unpickler refuses every global: ``find_class`` is the only way a pickle
reaches code (GLOBAL, STACK_GLOBAL, INST, OBJ, NEWOBJ, REDUCE and the copyreg extension codes all
go through it, or operate on what it returned), and persistent ids are refused by the base class.

Resources are bounded too: the file size is checked before reading (a snapshot's Python objects
take ~5× its bytes), gzip input is decompressed with the same cap, and the object graph is
checked to be acyclic and at most ``MAX_DEPTH`` deep before anyone walks it.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any
from typing import NoReturn

from trainscope.collectors.errors import ReadRefused as ReadRefused  # (defined with the other errors:
from trainscope.collectors.errors import TraceError
from trainscope.collectors.errors import UnsafePickleError as UnsafePickleError  # snapshot_gzip raises them too)
from trainscope.collectors.readers import gunzip_limited
from trainscope.collectors.snapshot_gzip import open_gunzipped

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB of pickle → ~5 GiB of Python objects: larger is refused
MAX_DEPTH = 64  # snapshots nest 5 deep (segments → blocks → frames → dict)
_PLAIN = (dict, list, tuple, str, int, float, bool, type(None), bytes)
# vets a file's first 16 bytes, raising to refuse it
Accept = Callable[[bytes], object]


class PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> NoReturn:  # noqa: D401 - pickle API
        raise UnsafePickleError(
            f"refuses to load {module}.{name}: a memory snapshot holds only plain data "
            "(a pickle naming a class or function may run code)"
        )

    def persistent_load(self, pid: Any) -> NoReturn:
        raise UnsafePickleError("refuses a persistent reference: a memory snapshot holds only plain data")


def read_bounded(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The file's bytes, gunzipped when gzip-compressed, refusing more than ``max_bytes``."""
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head == b"\x1f\x8b":
            try:
                data, damaged, _ = gunzip_limited(f, path, 0, max_bytes=max_bytes + 1)
            except TraceError as e:
                raise ReadRefused(e.problem) from None
            if damaged:
                raise ReadRefused(f"gzip data is damaged: {damaged}")
        else:
            # no buffer of max_bytes up front (the reader's child has a memory limit): the file's size
            size = os.fstat(f.fileno()).st_size
            data = f.read(min(max_bytes, size) + 1) if size else f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ReadRefused(f"larger than the {max_bytes / 2**20:.0f} MiB limit for a memory snapshot")
    return data


def _opcode_table() -> list[tuple[int, int]]:
    """byte → (how its argument is laid out, fixed size); kinds below."""
    import pickletools

    table = [(_BAD, 0)] * 256
    for op in pickletools.opcodes:
        a = op.arg
        code = op.code.encode("latin-1")[0]
        if op.name in ("GLOBAL", "INST"):
            table[code] = (_TWO_LINES, 0)
        elif op.name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            table[code] = (_PUT, {"PUT": -1, "BINPUT": 1, "LONG_BINPUT": 4, "MEMOIZE": 0}[op.name])
        elif op.name == "DUP":
            table[code] = (_DUP, 0)
        elif op.name == "FRAME":
            table[code] = (_FRAME, 8)
        elif a is None:
            table[code] = (_FIXED, 0)
        elif a.n >= 0:
            table[code] = (_FIXED, a.n)
        elif a.n == pickletools.UP_TO_NEWLINE:
            table[code] = (_LINE, 0)
        else:
            table[code] = (
                _COUNTED,
                {
                    pickletools.TAKEN_FROM_ARGUMENT1: 1,
                    pickletools.TAKEN_FROM_ARGUMENT4: 4,
                    pickletools.TAKEN_FROM_ARGUMENT4U: 4,
                    pickletools.TAKEN_FROM_ARGUMENT8U: 8,
                }[a.n],
            )
    return table


_BAD, _FIXED, _LINE, _COUNTED, _TWO_LINES, _PUT, _DUP, _FRAME = range(8)
_TABLE: list[tuple[int, int]] | None = None
MAX_DUPS = 1 << 20  # pickle and torch never write DUP; a million of them is a bomb (a stack of references)
MAX_LINE = 1 << 16  # the text argument of a protocol-0 opcode (a number, a string) in a snapshot


def scan_opcodes(data: bytes) -> None:
    """Walk the opcode stream before unpickling and refuse, in one line, what would make the
    unpickler allocate from a declared size: a length (BINBYTES8, BYTEARRAY8, BINUNICODE8, FRAME …)
    beyond the bytes that remain, a memo index beyond the objects memoized so far (the memo is an
    array the unpickler would grow to that index), DUP bombs, and text arguments without a newline."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _opcode_table()
    table = _TABLE
    n = len(data)
    i = 0
    memo = 0
    dups = 0
    from_bytes = int.from_bytes
    while i < n:
        code = data[i]
        kind, size = table[code]
        i += 1
        if kind == _FIXED:
            i += size
        elif kind == _COUNTED:
            length = from_bytes(data[i : i + size], "little", signed=size == 4 and code in _SIGNED4)
            i += size
            if length < 0 or length > n - i:
                raise UnsafePickleError(
                    f"declares {length:,} bytes at offset {i - size - 1:,} but only "
                    f"{max(0, n - i):,} remain: damaged or hostile"
                )
            i += length
        elif kind == _PUT:
            if size == 0:
                idx = memo
            elif size == -1:
                end = data.find(b"\n", i, i + 32)
                if end < 0:
                    raise UnsafePickleError(f"PUT without its index at offset {i - 1:,}")
                try:
                    idx = int(data[i:end])
                except ValueError:
                    raise UnsafePickleError(f"PUT with a bad index at offset {i - 1:,}") from None
                i = end + 1
            else:
                idx = from_bytes(data[i : i + size], "little")
                i += size
            if idx > memo:
                raise UnsafePickleError(
                    f"memo index {idx:,} at offset {i:,} skips ahead of the {memo:,} objects "
                    "stored so far: damaged or hostile"
                )
            memo = max(memo, idx + 1)
        elif kind in (_LINE, _TWO_LINES):
            for _ in range(2 if kind == _TWO_LINES else 1):
                end = data.find(b"\n", i, i + MAX_LINE)
                if end < 0:
                    raise UnsafePickleError(
                        f"text argument at offset {i - 1:,} has no end within {MAX_LINE:,} bytes: damaged or hostile"
                    )
                i = end + 1
        elif kind == _DUP:
            dups += 1
            if dups > MAX_DUPS:
                raise UnsafePickleError(f"more than {MAX_DUPS:,} DUP opcodes: a memory bomb, not a snapshot")
        elif kind == _FRAME:
            length = from_bytes(data[i : i + 8], "little")
            i += 8
            if length > n - i:
                raise UnsafePickleError(
                    f"frame of {length:,} bytes at offset {i - 9:,} but only {max(0, n - i):,} "
                    "remain: damaged or hostile"
                )
        else:
            raise UnsafePickleError(f"unknown opcode 0x{code:02x} at offset {i - 1:,}: not a pickle")
        if code == 0x2E:  # STOP
            return
    raise UnsafePickleError("ends before its STOP opcode: truncated")


_SIGNED4 = frozenset(b"T")  # BINSTRING's length is a signed int4


EXPLAIN_MAX = 64 << 20  # a refused file up to this size is opcode-scanned to say precisely why


def _unpickle_error(e: BaseException) -> UnsafePickleError:
    msg = " ".join(str(e).split())
    return UnsafePickleError(f"not a readable pickle ({type(e).__name__}: {msg[:120]})")


_LOAD_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,
    OverflowError,
    UnicodeDecodeError,
    RecursionError,
    SystemError,
)


def loads_restricted(data: bytes) -> Any:
    """The C unpickler alone, with :class:`PlainDataUnpickler`'s ``find_class`` refusing every
    global: no opcode pre-scan and no plain-data walk. The caller bounds its memory (a child under
    ``RLIMIT_AS``, :mod:`trainscope.collectors.isolated`) and checks types where it reads fields.
    A ``MemoryError`` propagates, for the caller to refuse."""
    try:
        # buffered: the unpickler peeks ahead instead of a read() call per opcode (5× faster on
        # protocol 2, which has no frames); a declared size beyond the bytes is a MemoryError here,
        # bounded by the caller's limit or refused by the scan before
        return PlainDataUnpickler(io.BufferedReader(io.BytesIO(data), 1 << 20)).load()
    except UnsafePickleError:
        raise
    except _LOAD_ERRORS as e:
        raise explain(data, e) from None


def load_restricted_file(
    path: str, max_bytes: int = DEFAULT_MAX_BYTES, accept: Accept | None = None, prescan: bool = False
) -> Any:
    """:func:`loads_restricted` of a file, streamed from disk when it is not gzip-compressed (the
    unpickler reads it frame by frame: the bytes are never all in memory beside the objects).
    ``prescan``: read it whole and run the opcode scan first, for a caller with no memory limit.
    ``accept(head)`` vets the first 16 bytes (raise to refuse). A ``MemoryError`` is explained by
    the opcode scan when it finds why, else it propagates."""
    with open(path, "rb") as f:
        head = f.read(16)
    if prescan:  # no memory limit around this process: the opcode scan bounds what the unpickler allocates
        data = read_bounded(path, max_bytes)
        if accept is not None:
            accept(data[:16])
        try:
            scan_opcodes(data)
        except UnsafePickleError as e:
            raise UnsafePickleError(f"not a readable pickle ({e})") from None
        return loads_restricted(data)
    if head[:2] == b"\x1f\x8b":
        return _load_gzip(path, max_bytes, accept)
    if os.path.getsize(path) > max_bytes:
        raise ReadRefused(f"larger than the {max_bytes / 2**20:.0f} MiB limit for a memory snapshot")
    if accept is not None:
        accept(head)
    err: BaseException
    with open(path, "rb") as f:
        try:
            return PlainDataUnpickler(f).load()
        except UnsafePickleError:
            raise
        except (MemoryError, *_LOAD_ERRORS) as e:
            err = e
    with open(path, "rb") as f:  # refused: read it again (up to EXPLAIN_MAX) to say why
        why = explain(f.read(EXPLAIN_MAX + 1), err if not isinstance(err, MemoryError) else None).args[0]
    if why:
        raise UnsafePickleError(why) from None
    raise err


def _load_gzip(path: str, max_bytes: int, accept: Accept | None = None) -> Any:
    """:func:`load_restricted_file` of a gzip file: inflated piece by piece as the unpickler reads
    (:mod:`trainscope.collectors.snapshot_gzip`), so its inflated bytes are never whole in memory
    beside the objects."""
    err: BaseException
    with open(path, "rb") as f:
        buf, stream = open_gunzipped(f, path, max_bytes)
        if accept is not None:
            accept(buf.peek(16)[:16])
        try:
            obj = PlainDataUnpickler(buf).load()
            stream.drain()
            return obj
        except UnsafePickleError:
            raise
        except (MemoryError, *_LOAD_ERRORS) as e:
            err = e
        stream.drain()  # damaged gzip data (found past where the unpickler stopped) is the reason first
    with open(path, "rb") as f:  # refused: inflate it again (up to EXPLAIN_MAX) to say why
        buf, _ = open_gunzipped(f, path, max_bytes)
        try:
            head = buf.read(EXPLAIN_MAX + 1)
        except UnsafePickleError:
            head = b""
    why = explain(head, err if not isinstance(err, MemoryError) else None).args[0]
    if why:
        raise UnsafePickleError(why) from None
    raise err


def explain(data: bytes, e: BaseException | None = None) -> UnsafePickleError:
    """Why ``data`` was refused, for a file already refused: the opcode scan's finding (a declared
    size beyond the file, a memo index ahead, DUP bombs, truncation) when it finds one, else the
    unpickler's own error. Scans only files up to ``EXPLAIN_MAX`` (Python speed, refusals only)."""
    if len(data) <= EXPLAIN_MAX:  # (a longer one was cut at EXPLAIN_MAX + 1 bytes: not scanned)
        try:
            scan_opcodes(data)
        except UnsafePickleError as s:
            return UnsafePickleError(f"not a readable pickle ({s})")
    if e is None:
        return UnsafePickleError("")
    return _unpickle_error(e)


def loads_plain(data: bytes) -> Any:
    """Unpickle ``data`` accepting only plain data types; raise UnsafePickleError otherwise."""
    try:
        scan_opcodes(data)
    except UnsafePickleError as e:
        raise UnsafePickleError(f"not a readable pickle ({e})") from None
    try:
        obj = PlainDataUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except (MemoryError, *_LOAD_ERRORS) as e:
        raise _unpickle_error(e) from None
    check_plain(obj)
    return obj


def check_plain(obj: object, max_depth: int = MAX_DEPTH) -> None:
    """Iteratively check that ``obj`` is a tree of plain data: no other types (sets, bytearrays),
    no cycles, no deeper nesting than ``max_depth``. Shared references are fine (pickle memoizes
    repeated strings and frames): a container is re-checked only when reached deeper than
    before, at most ``max_depth`` times, which also defeats a "billion laughs" graph of lists
    that reference the level below many times."""
    stack: list[tuple[Any, int, bool]] = [(obj, 0, False)]
    on_path: set[int] = set()
    done: dict[int, int] = {}  # container id → the deepest depth it was checked at
    if type(obj) not in _PLAIN_TYPES:
        raise UnsafePickleError(f"holds a {type(obj).__name__}, which a memory snapshot never contains")
    while stack:
        o, depth, leaving = stack.pop()
        if leaving:
            on_path.discard(id(o))
            continue
        if type(o) not in _CONTAINERS:
            continue
        if id(o) in on_path:
            raise UnsafePickleError("contains a reference cycle")
        if done.get(id(o), -1) >= depth:
            continue  # already checked at this depth or deeper: its subtree fits
        if depth >= max_depth:
            raise UnsafePickleError(f"nests deeper than {max_depth} levels")
        done[id(o)] = depth
        on_path.add(id(o))
        stack.append((o, depth, True))
        children: Iterable[object]
        if type(o) is dict:
            if not set(map(type, o)) <= _KEY_TYPES:
                raise UnsafePickleError("has a dict key that is not a string, number or tuple")
            children = o.values()
            tuple_keys = [k for k in o if type(k) is tuple]
        else:
            children = o
            tuple_keys = []
        kinds = set(map(type, children))
        if not kinds <= _PLAIN_TYPES:
            bad = next(iter(kinds - _PLAIN_TYPES))
            raise UnsafePickleError(f"holds a {bad.__name__}, which a memory snapshot never contains")
        if kinds & _CONTAINERS or tuple_keys:
            d1 = depth + 1
            for c in (*children, *tuple_keys) if tuple_keys else children:
                if type(c) in _CONTAINERS and done.get(id(c), -1) < d1:
                    stack.append((c, d1, False))


_PLAIN_TYPES = frozenset(_PLAIN)
_CONTAINERS = frozenset((dict, list, tuple))
_KEY_TYPES = frozenset((str, int, float, bool, type(None), bytes, tuple))
