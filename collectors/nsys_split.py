"""A large Nsight table read by two processes at once: this one and a child interpreter.

Reading a 1 GB Nsight export is SQLite stepping its B-trees: 5 M NVTX ranges take ≈ 3 s, every
other table together ≈ 2 s. The ADBC driver holds the GIL while it steps (two threads reading two
halves of the same table took as long as one after the other), so the second core is used the way
the Kineto reader uses it: a child interpreter of its own (not a fork of a process that may run
threads). The table's row-id span is cut into chunks (:func:`chunk_bounds`); the child claims them
from the last one down, the parent from the first one up once it has read the other tables
(:class:`Claims`, a locked file), so both finish together. Each chunk is read with the parent's
own query and reducer; the child writes its chunks' columns to a spill file as it goes
(:class:`Spill`) and sends the header by pipe; the parent reads them into place and maps their
text and thread codes into its own.

The rows come back in the order one query would give: a table without an index is scanned in
row-id order, both whole and by row-id range, and the split is used only on such a table. Where
the child cannot help (no second core, a small table, an index, a driver refusal, a child that
fails), the parent reads the chunks itself, with the same query and reducer.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from typing import BinaryIO

import numpy as np

SPLIT_MIN_ROWS = 1_000_000  # a child costs ≈ 0.3 s to start: worth it from ≈ 0.6 s of reading
CHUNK_ROWS = 262_144  # row ids a claim covers (≈ 0.13 s of NVTX reading): the two sides end together
MAX_CHUNKS = 64
# A chunk the child read: (chunk, rows, offset of its columns in the spill file, its reducer).
Part = tuple[int, int, int, Any]
# (chunk, rows) → the writable arrays, one per REPLY_COLUMNS entry, where that chunk's rows go.
Place = Callable[[int, int], list[np.ndarray]]
# The child runs the reader of collectors/nsys.py (its reducer is there), which imports this module.
_CHILD = "from trainscope.collectors.nsys import split_child_main; split_child_main()"


def chunk_bounds(lo: int, hi: int) -> list[tuple[int, int]]:
    """Row-id ranges ``[a, b]`` covering ``lo..hi``, in order, about :data:`CHUNK_ROWS` each."""
    n = max(2, min(MAX_CHUNKS, (hi - lo + 1) // CHUNK_ROWS))
    edges = [lo + (hi - lo + 1) * i // n for i in range(n + 1)]
    return [(edges[i], edges[i + 1] - 1) for i in range(n)]


class Claims:
    """Which chunks are taken, in a small file both processes lock: the parent claims from the first
    chunk up (once it has read the other tables), the child from the last one down, so the two
    finish together whatever the other tables cost. Each side reads only what it claimed."""

    def __init__(self, path: str, n: int | None = None) -> None:
        self.path = path
        if n is not None:
            with open(path, "wb") as f:
                f.write((0).to_bytes(8, "little", signed=True) + (n - 1).to_bytes(8, "little", signed=True))

    def claim(self, from_top: bool) -> int | None:
        import fcntl

        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 16, 0)
            low, high = int.from_bytes(raw[:8], "little", signed=True), int.from_bytes(raw[8:], "little", signed=True)
            if low > high:
                return None
            if from_top:
                os.pwrite(fd, (high - 1).to_bytes(8, "little", signed=True), 8)
                return high
            os.pwrite(fd, (low + 1).to_bytes(8, "little", signed=True), 0)
            return low
        finally:
            os.close(fd)  # closing releases the lock


@dataclass
class Request:
    """What the child reads: chunks of ``select`` (the parent's own query) under ``conds`` and a
    row-id range, claimed through ``claims``; its result columns and their kinds, and which
    reducer turns each batch into what is kept."""

    path: str
    wal: bool
    select: str
    conds: list[str]
    bounds: list[tuple[int, int]]
    claims: str
    spill: str  # where the child writes its chunks' columns as it reads them
    names: list[str]
    text: tuple[str, ...]
    real: tuple[str, ...]
    reducer: str  # "nvtx": collectors.nsys._NvtxReducer, with the export's own StringIds


def chunk_sql(select: str, conds: list[str], bounds: tuple[int, int]) -> str:
    return f"{select} WHERE {' AND '.join([*conds, f'rowid BETWEEN {int(bounds[0])} AND {int(bounds[1])}'])}"


class Tail:
    """A child process reading one request; :meth:`result` is its reply or None (read it here)."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.child: subprocess.Popen[bytes] | None = None
        try:
            self.child = subprocess.Popen(
                [sys.executable, "-c", _CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            assert self.child.stdin is not None
            self.child.stdin.write(pickle.dumps(request))
            self.child.stdin.close()
        except OSError:
            self.close()

    def result(self, place: Place) -> list[Part] | None:
        """The child's parts in chunk order, ``[(chunk, rows, offset, reducer), …]``, their columns written
        by ``place(chunk, rows)`` → the writable arrays (one per :data:`REPLY_COLUMNS` entry) where
        that chunk's rows go; None where it failed (the caller then reads the chunks it had claimed)."""
        child = self.child
        if child is None or child.stdout is None:
            return None
        try:
            out = _read_reply(child.stdout, self.request.spill, place)
            if child.wait() != 0 or out is None:
                return None
            return out
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError):
            return None
        finally:
            self.close()

    def close(self) -> None:
        child, self.child = self.child, None
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        if child is not None and child.stdout is not None:
            child.stdout.close()


REPLY_COLUMNS = (("ts", np.int64), ("dur", np.int64), ("thread", np.int32), ("text", np.int32))  # a reducer's


class Spill:
    """The child's chunks' columns, written to a file as each chunk is read (the page cache takes
    them at memory speed while the child reads on; a pipe moved them at ≈ 0.4 GB/s, after the
    last chunk): :data:`REPLY_COLUMNS` in order, raw bytes, each chunk where its offset says."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "r+b")
        self.end = 0

    def write(self, cols: dict[str, np.ndarray]) -> tuple[int, int]:
        """(rows, offset) of one chunk's columns, appended."""
        rows = len(cols["ts"]) if cols else 0
        offset = self.end
        for name, dtype in REPLY_COLUMNS if rows else ():
            raw = np.ascontiguousarray(cols.pop(name), dtype).data.cast("B")
            self.f.write(raw)
            self.end += raw.nbytes
        return rows, offset

    def close(self) -> None:
        self.f.close()


def write_reply(out: BinaryIO, head: list[Part]) -> None:
    """The pickled header ``[(chunk, rows, offset, reducer), …]`` in chunk order (one text list for
    all reducers), length first."""
    data = pickle.dumps(sorted(head, key=lambda p: p[0]), protocol=5)
    out.write(len(data).to_bytes(8, "little"))
    out.write(data)
    out.flush()


def _read_exact(f: Any, n: int) -> bytearray:  # f: the child's stdout, a BufferedReader
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            raise EOFError("the child's reply ended early")
        got += k
    return buf


def _pread_into(fd: int, a: np.ndarray, offset: int) -> None:
    view = a.data.cast("B")
    got = 0
    while got < len(view):
        k = os.preadv(fd, [view[got:]], offset + got)
        if not k:
            raise EOFError("the child's columns ended early")
        got += k


def _read_reply(f: Any, spill: str, place: Place) -> list[Part] | None:
    n = int.from_bytes(_read_exact(f, 8), "little")
    if n == 0:
        return None
    head: list[Part] = pickle.loads(_read_exact(f, n))  # our own child's reply
    fd = os.open(spill, os.O_RDONLY)
    try:
        for i, rows, offset, _ in head:
            if not isinstance(i, int) or not isinstance(rows, int) or rows < 0 or not isinstance(offset, int):
                raise ValueError("a malformed reply")
            if rows:
                arrays = place(i, rows)
                for (_, dtype), a in zip(REPLY_COLUMNS, arrays):
                    if a.dtype != dtype or len(a) != rows:
                        raise ValueError("a column of another type or length")
                    _pread_into(fd, a, offset)
                    offset += a.nbytes
    finally:
        os.close(fd)
    return head
