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

import gzip
import io
import pickle
import zlib

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB of pickle → ~5 GiB of Python objects: larger is refused
MAX_DEPTH = 64  # snapshots nest 5 deep (segments → blocks → frames → dict)
_PLAIN = (dict, list, tuple, str, int, float, bool, type(None), bytes)


class UnsafePickleError(Exception):
    """The pickle asked for something other than plain data, or is malformed or too large."""


class PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # noqa: D401 - pickle API
        raise UnsafePickleError(f"refuses to load {module}.{name}: a memory snapshot holds only plain data "
                                "(a pickle naming a class or function may run code)")

    def persistent_load(self, pid):
        raise UnsafePickleError("refuses a persistent reference: a memory snapshot holds only plain data")


def read_bounded(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The file's bytes, gunzipped when gzip-compressed, refusing more than ``max_bytes``."""
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=f) as g:
                try:
                    data = g.read(max_bytes + 1)
                except (OSError, EOFError, zlib.error) as e:
                    raise UnsafePickleError(f"gzip data is damaged: {e}") from None
        else:
            data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafePickleError(f"larger than the {max_bytes / 2**20:.0f} MiB limit for a memory snapshot")
    return data


def loads_plain(data: bytes):
    """Unpickle ``data`` accepting only plain data types; raise UnsafePickleError otherwise."""
    try:
        obj = PlainDataUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, MemoryError, UnicodeDecodeError, RecursionError) as e:
        raise UnsafePickleError(f"not a readable pickle ({type(e).__name__}: {e})") from None
    check_plain(obj)
    return obj


def check_plain(obj, max_depth: int = MAX_DEPTH) -> None:
    """Iteratively check that ``obj`` is a tree of plain data: no other types (sets, bytearrays),
    no cycles, no deeper nesting than ``max_depth``. Shared references are fine (pickle memoizes
    repeated strings and frames): a container is re-checked only when reached deeper than
    before, at most ``max_depth`` times, which also defeats a "billion laughs" graph of lists
    that reference the level below many times."""
    stack: list[tuple[object, int, bool]] = [(obj, 0, False)]
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
