"""NVIDIA Nsight Systems SQLite exports (``nsys export --type sqlite``) → the normalized model.

One export can hold several processes (e.g. the ranks of a single-node DDP job, profiled
together): every process that ran GPU work becomes one :class:`Trace`. An export without GPU rows
becomes the trace of its busiest host process, with its capture settings and CPU samples
(:mod:`~trainscope.collectors.nsys_capture`), so it is analyzed on what it holds. Read:

- kernels (``CUPTI_ACTIVITY_KIND_KERNEL``, demangled names), copies with copy kind and
  source/destination memory kind (``..._MEMCPY``; pageable host memory is kept), memsets;
- CUDA runtime and driver calls (``..._RUNTIME``; backtrace duplicates of old exports dropped,
  ``_v3020``-style version suffixes removed so ``cudaStreamSynchronize_v3020`` reads as the API);
- NVTX ranges: ``torch.autograd.profiler.emit_nvtx`` operator ranges become CPU operators,
  every other range an annotation (steps, phases, user ranges);
- OS runtime calls (``OSRT_API``), GPU hardware counters (``GPU_METRICS``);
- devices from ``TARGET_INFO_GPU`` (name, memory, SMs), mapped from the CUDA device ids that
  activity records use through ``TARGET_INFO_CUDA_DEVICE`` where present.

Schemas from 2.9 (nsys 2022) to 3.27 (nsys 2026) and later load: columns are looked up by name,
optional ones default, and any table may be absent (Nsight creates only tables that hold rows).
The file is opened read-only (``mode=ro`` URI); nothing is written next to it.

The large tables are read as columns (collectors/columnar.py: the ADBC SQLite driver writes them
into Arrow batches, texts dictionary-encoded, only the columns used), with ``sqlite3`` as the
fallback for a table the driver refuses. Nsight's columnar exports (``nsys export --type
arrowdir`` / ``parquetdir``, a directory with one file per table) are read by the same reader
without SQLite (:func:`load_nsys_columnar`).
"""

from __future__ import annotations

import gc
import os
import pathlib
import pickle
import re
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from trainscope.collectors import columnar
from trainscope.collectors import nsys_capture
from trainscope.collectors import nsys_split
from trainscope.collectors import readers
from trainscope.collectors.columnar import Columns
from trainscope.collectors.columnar import TextColumn
from trainscope.collectors.errors import TraceError
from trainscope.collectors.nsys_graphs import add_graph_replays
from trainscope.collectors.readers import Progress
from trainscope.traces.builder import StringTable
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS
from trainscope.traces.model import Annotations
from trainscope.traces.model import Copies
from trainscope.traces.model import Counters
from trainscope.traces.model import CpuOps
from trainscope.traces.model import Device
from trainscope.traces.model import Kernels
from trainscope.traces.model import MemoryEvents
from trainscope.traces.model import Memsets
from trainscope.traces.model import OpInputs
from trainscope.traces.model import RuntimeCalls
from trainscope.traces.model import Thread
from trainscope.traces.model import Trace

# CUPTI copy kinds (ENUM_CUDA_MEMCPY_OPER names, or raw codes where old exports lack the enum).
_COPY_BY_NAME = {
    "HTOD": "HtoD",
    "DTOH": "DtoH",
    "HTOA": "HtoD",
    "ATOH": "DtoH",
    "ATOA": "DtoD",
    "ATOD": "DtoD",
    "DTOA": "DtoD",
    "DTOD": "DtoD",
    "HTOH": "HtoH",
    "PTOP": "PtoP",
    "UVM_HTOD": "HtoD",
    "UVM_DTOH": "DtoH",
    "UVM_DTOD": "DtoD",
}
_COPY_RAW = (
    "UNKNOWN",
    "HTOD",
    "DTOH",
    "HTOA",
    "ATOH",
    "ATOA",
    "ATOD",
    "DTOA",
    "DTOD",
    "HTOH",
    "PTOP",
    "UVM_HTOD",
    "UVM_DTOH",
    "UVM_DTOD",
)
# Nsight's memory kinds (ENUM_CUDA_MEM_KIND; the same codes in 2022 exports that lack the enum).
_MEM_BY_NAME = {
    "PAGEABLE": "pageable",
    "PINNED": "pinned",
    "DEVICE": "device",
    "ARRAY": "device",
    "MANAGED": "managed",
    "DEVICE_STATIC": "device",
    "MANAGED_STATIC": "managed",
    "UNKNOWN": "unknown",
}
_MEM_RAW = ("PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC", "MANAGED_STATIC", "UNKNOWN")
# NVTX event types that are ranges (push/pop and start/end, of NVTX and NVTX-for-tools).
_NVTX_RANGE_TYPES = (59, 60, 70, 71)
# eventClass of CUDA call backtraces: 2022 exports store each API call twice, once as this.
_BACKTRACE_CLASS = 67
_API_VERSION = re.compile(r"^(cu\w+?)_v\d{4,5}$")
# emit_nvtx decorates operator ranges: "aten::mm, seq = 12, op_id = 34, sizes = [[...]], ...".
_EMIT_NVTX_KEYS = ("seq = ", "op_id = ", "sizes = ", "input_op_ids = ")
# An emit_nvtx text is "name, seq = 12, op_id = 34, sizes = [[64, 128], []], input_op_ids = [(33,0)]":
# every range has its own seq and op_id, so the 5 M operator ranges of a 1 GB export are 5 M distinct
# texts (each a Python string, classified and parsed one by one; measured on a 303 MB export with
# real per-call ids: 854 MiB peak against 442 with the texts made alike). What is read from a text
# is its name (before the first ", "), whether it is decorated (what follows that ", ") and its
# sizes; :func:`_alike` keeps exactly those, in SQL (:data:`_ALIKE_SQL`) as the rows are read.
_ALIKE_FIRST = "instr(text, ', ')"
_ALIKE_REST = f"substr(text, {_ALIKE_FIRST} + 2"
_ALIKE_SIZES = "substr(text, instr(text, ', sizes = '))"
_ALIKE_SQL = (
    f"CASE WHEN {_ALIKE_FIRST} > 0 AND ({_ALIKE_REST}, 6) = 'seq = ' OR {_ALIKE_REST}, 8) = 'op_id = '"
    f" OR {_ALIKE_REST}, 8) = 'sizes = ' OR {_ALIKE_REST}, 15) = 'input_op_ids = ')"
    f" THEN substr(text, 1, {_ALIKE_FIRST} - 1) || CASE WHEN instr(text, ', sizes = ') = 0 THEN ', seq = 0'"
    f" WHEN instr({_ALIKE_SIZES}, ', input_op_ids = ') = 0 THEN {_ALIKE_SIZES}"
    f" ELSE substr({_ALIKE_SIZES}, 1, instr({_ALIKE_SIZES}, ', input_op_ids = ') - 1) END ELSE text END"
)


def _alike(text: str | None) -> str | None:
    """A decorated emit_nvtx text without its per-call parts: "name, sizes = …" (from the first
    ", sizes = " up to the ", input_op_ids = " after it), or "name, seq = 0" without sizes; any other
    text as it is. :data:`_ALIKE_SQL` computes the same in SQLite."""
    if text is None:
        return None
    name, sep, rest = text.partition(", ")
    if not sep or not rest.startswith(_EMIT_NVTX_KEYS):
        return text
    i = text.find(", sizes = ")
    if i < 0:
        return name + ", seq = 0"
    sizes = text[i:]
    j = sizes.find(", input_op_ids = ")
    return name + (sizes if j < 0 else sizes[:j])


_ANNOTATION_OPS = re.compile(r"^(ProfilerStep#|Optimizer\.|## )")
_BATCH = 200_000  # rows fetched per batch from a table
_SAMPLE = 65_536  # rows sampled to tell whether a text column's texts repeat
_GPU_METRIC_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")

_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")


@dataclass
class _Split:
    """A table read in row-id chunks by this process and ``tail``'s child."""

    request: nsys_split.Request
    tail: nsys_split.Tail

    def close(self) -> None:
        self.tail.close()
        for name in (self.request.claims, self.request.spill):
            try:
                os.unlink(name)
            except OSError:
                pass


@dataclass(frozen=True)
class _Rows:
    """One table's columns as numpy arrays (ints) or lists (text), by column name."""

    cols: Columns

    def __len__(self) -> int:
        return len(next(iter(self.cols.values()))) if self.cols else 0

    def __getitem__(self, k: str) -> Any:  # an array, or a TextColumn for a text column
        return self.cols[k]


_Metrics = tuple[_Rows, dict[tuple[int, int], str]]  # GPU metric samples, and names by (type, metric id)
_Selection = np.ndarray | slice  # a process's rows of a table: a mask, or all of them


def _is_wal(path: str) -> bool:
    with open(path, "rb") as f:
        header = f.read(20)
    return len(header) == 20 and 2 in header[18:20]


class TextRepairs:
    """An SQLite text factory: UTF-8 text as it is; a byte that is not UTF-8 as the visible text
    ``\\xNN`` (never U+FFFD, which would hide what was there), counted in ``bytes``."""

    def __init__(self) -> None:
        self.bytes = 0

    def __call__(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", "backslashreplace")
            self.bytes += text.count("\\x") - raw.decode("utf-8", "ignore").count("\\x")
            return text


def text_repairs(con: sqlite3.Connection) -> int:
    """Bytes that were not UTF-8 in the TEXT cells read so far through ``con``."""
    factory = con.text_factory
    return factory.bytes if isinstance(factory, TextRepairs) else 0


def connect_readonly(path: str) -> sqlite3.Connection:
    """Open ``path`` read-only, writing nothing beside it. ``mode=ro`` can neither create nor modify
    the file; a rollback-journal database (what ``nsys export`` writes) then needs no other file and
    still sees the lock of an export in progress. A WAL-mode database would get ``-wal``/``-shm``
    files even read-only (and fail in a read-only folder), so it is opened ``immutable=1``: no
    locks, no files, the last checkpointed state."""
    wal = _is_wal(path)
    uri = pathlib.Path(path).absolute().as_uri() + ("?mode=ro&immutable=1" if wal else "?mode=ro")
    try:
        con = sqlite3.connect(uri, uri=True, timeout=2.0, check_same_thread=False)
        # A damaged export can hold any bytes in a TEXT column (names, even the schema): each byte
        # that is not UTF-8 is kept as visible text (\xNN, as the Kineto reader does) and counted.
        con.text_factory = TextRepairs()
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        raise TraceError(path, f"cannot read the SQLite database ({_sqlite_problem(e)})") from None
    return con


def _sqlite_problem(e: Exception) -> str:
    msg = " ".join(str(e).split())  # one line: a malformed schema's message quotes its SQL text
    if "malformed database schema" in msg:
        return "malformed database schema: the file is corrupt"
    if len(msg) > 160:
        msg = msg[:157] + "..."
    if "locked" in msg:
        return "it is locked by another process; wait for `nsys export` to finish"
    if "not a database" in msg or "malformed" in msg:
        return f"{msg}: the file is corrupt or truncated"
    return msg


def load_nsys(path: str, progress: Progress | None = None) -> list[Trace]:
    """Read an Nsight Systems SQLite export: one :class:`Trace` per process that used the GPU."""
    con = connect_readonly(path)
    cols = None
    if columnar.available():
        try:
            cols = columnar.SqliteColumns(path, wal=_is_wal(path))
        except columnar.Unavailable:
            cols = None
    try:
        return _Reader(path, _SqliteSource(path, con, cols), progress).read()
    except sqlite3.DatabaseError as e:
        raise TraceError(path, f"cannot read the Nsight export ({_sqlite_problem(e)})") from None
    except (ValueError, TypeError, OverflowError) as e:  # SQLite columns can hold any type
        raise TraceError(path, f"unexpected value in the Nsight export ({type(e).__name__}: {str(e)[:120]})") from None
    finally:
        con.close()
        if cols is not None:
            cols.close()


def load_nsys_columnar(path: str, progress: Progress | None = None) -> list[Trace]:
    """Read Nsight's columnar export (``nsys export --type arrowdir`` or ``parquetdir``): a
    directory of one Arrow IPC or Parquet file per table, the tables and columns of the SQLite export."""
    try:
        src = _ArrowSource(path)
    except columnar.Unavailable as e:
        raise TraceError(path, str(e)) from None
    try:
        return _Reader(path, src, progress).read()
    except columnar.Unavailable as e:
        raise TraceError(path, f"cannot read the Nsight columnar export ({e})") from None
    except (OSError, ValueError, TypeError, OverflowError) as e:  # pyarrow's errors derive from these
        raise TraceError(path, f"cannot read the Nsight columnar export ({type(e).__name__}: {str(e)[:120]})") from None


class _SqliteSource:
    """An SQLite export: small tables and schema through ``sqlite3``, large ones as columns."""

    def __init__(self, path: str, con: sqlite3.Connection, cols: columnar.SqliteColumns | None) -> None:
        self.path = path
        self.con = con
        self.cols = cols
        self.tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')}

    def _repeats(self, table: str, col: str) -> bool:
        """Whether the first :data:`_SAMPLE` texts of ``col`` hold each distinct text four times or more
        on average. Encoding texts as codes into their distinct values pays where they repeat; where
        they do not (emit_nvtx ranges, each with its own seq and op_id), :func:`_alike` costs ~0.5 µs a
        row in SQL and saves a Python string a row (measured: 303 MB export, 854 -> 415 MiB)."""
        n, d = self.con.execute(
            f'SELECT count("{col}"), count(DISTINCT "{col}") FROM (SELECT "{col}" FROM "{table}" LIMIT {_SAMPLE})'
        ).fetchone()
        return bool(d * 2 <= n)

    def small(self, table: str, cols: list[str], distinct: bool = False) -> list[tuple[Any, ...]]:
        """All rows of a small table's ``cols`` (None for a column the table lacks)."""
        have = self.columns(table)
        exprs = ", ".join(f'"{c}"' if c in have else "NULL" for c in cols)
        return list(self.con.execute(f'SELECT {"DISTINCT " if distinct else ""}{exprs} FROM "{table}"'))

    def query(
        self,
        table: str,
        wanted: dict[str, str | None],
        text: tuple[str, ...] = (),
        not_null: tuple[str, ...] = (),
        one_of: tuple[str, tuple[int, ...]] | None = None,
        none_of: tuple[str, tuple[int, ...]] | None = None,
        alike: tuple[str, ...] = (),
    ) -> tuple[str, list[str], dict[str, str | None]] | None:
        """The ``SELECT … FROM table`` of :meth:`rows`, its conditions and the columns it returns
        (None where it would select nothing)."""
        have = self.columns(table)
        alike = tuple(c for c in alike if c in have and not self._repeats(table, c))
        conds = [f'"{c}" IS NOT NULL' for c in not_null]
        if one_of is not None:
            conds.append(f'"{one_of[0]}" IN ({", ".join(str(int(x)) for x in one_of[1])})')
            if one_of[0] not in have:
                raise TraceError(self.path, f"Nsight export table {table} lacks column {one_of[0]!r} (unknown schema)")
            wanted = {c: d for c, d in wanted.items() if c != one_of[0]}  # a filter, not a column to keep
        if none_of is not None:
            col, fill = none_of[0], wanted.get(none_of[0]) or "0"
            value = f'COALESCE("{col}", {fill})' if col in have else fill
            conds.append(f"{value} NOT IN ({', '.join(str(int(x)) for x in none_of[1])})")
            wanted = {c: d for c, d in wanted.items() if c != col}
        exprs = []
        for col, default in wanted.items():
            if col in have:
                if col in alike:
                    exprs.append(_ALIKE_SQL.replace("text", f'"{col}"'))
                elif col in text:
                    exprs.append(f'"{col}"')
                else:
                    exprs.append(f'COALESCE("{col}", {default if default is not None else 0})')
            elif default is None:
                raise TraceError(self.path, f"Nsight export table {table} lacks column {col!r} (unknown schema)")
            else:
                exprs.append(default)
        if not exprs:
            return None
        return f'SELECT {", ".join(exprs)} FROM "{table}"', conds, wanted

    def row_span(self, table: str) -> int:
        """About how many rows ``table`` holds (its row-id span: two B-tree lookups, no scan)."""
        if table not in self.tables:
            return 0
        # Two queries: SQLite answers a lone min() or max() of the row id from the B-tree's edge,
        # but scans the whole table for both in one SELECT (0.5 s on a 1 GB export).
        lo = self.con.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()[0]
        hi = self.con.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
        return hi - lo + 1 if isinstance(lo, int) and isinstance(hi, int) else 0

    def split_table(
        self,
        table: str,
        wanted: dict[str, str | None],
        text: tuple[str, ...] = (),
        real: tuple[str, ...] = (),
        not_null: tuple[str, ...] = (),
        one_of: tuple[str, tuple[int, ...]] | None = None,
        none_of: tuple[str, tuple[int, ...]] | None = None,
        alike: tuple[str, ...] = (),
        reducer: str = "nvtx",
    ) -> _Split | None:
        """Start a child process reading a large ``table`` in row-id chunks from its end (see
        collectors/nsys_split.py); :meth:`rows` with ``split=`` reads chunks from the start once
        the other tables are read, and merges. None where a child cannot help: no second core, no
        columnar driver or no file locks, a small table, an index on it."""
        if self.cols is None or readers.usable_cores() < 2:
            return None
        try:
            import fcntl  # noqa: F401  (the claims are file locks)
        except ImportError:
            return None
        span = self.row_span(table)
        if span < nsys_split.SPLIT_MIN_ROWS:
            return None
        if self.con.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
        ).fetchone()[0]:
            return None  # an index may order the rows otherwise than the row ids
        q = self.query(table, wanted, text, not_null, one_of, none_of, alike)
        if q is None:
            return None
        select, conds, wanted = q
        lo = self.con.execute(f'SELECT min(rowid) FROM "{table}"').fetchone()[0]
        bounds = nsys_split.chunk_bounds(lo, lo + span - 1)
        import tempfile

        made: list[str] = []
        try:
            for prefix in ("trainscope-claims-", "trainscope-spill-"):
                fd, name = tempfile.mkstemp(prefix=prefix)
                os.close(fd)
                made.append(name)
            nsys_split.Claims(made[0], len(bounds))
        except OSError:
            for name in made:
                os.unlink(name)
            return None
        claims, spill = made
        req = nsys_split.Request(
            self.path, _is_wal(self.path), select, conds, bounds, claims, spill, list(wanted), text, real, reducer
        )
        return _Split(req, nsys_split.Tail(req))

    def _split_rows(self, split: _Split, reducer: Callable[[], _NvtxReducer] | None) -> _Rows | None:
        """Chunks claimed from the start read here, the child's taken from it (or read here where it
        failed), merged in row order into the first chunk's reducer; None where the driver
        refuses (the caller reads the table as a whole, with its precise errors)."""
        cols = self.cols
        assert cols is not None and reducer is not None
        req = split.request
        claims = nsys_split.Claims(req.claims)

        spaces = {c: columnar.TextSpace() for c in req.text}  # one text list for this side's chunks
        # The whole table's reduced columns, written chunk by chunk in row order: pages are taken
        # as rows arrive (np.empty commits none), and no chunk is held twice or joined at the end.
        span = req.bounds[-1][1] - req.bounds[0][0] + 1
        whole = {name: np.empty(span, dtype) for name, dtype in nsys_split.REPLY_COLUMNS}
        state: dict[str, Any] = {"red": None, "n": 0, "placed": 0}

        def append(cols: Columns, red: _NvtxReducer) -> None:
            """One chunk's reduced rows after those already written, in the first reducer's codes (a
            chunk the child's reply already put in its place is mapped where it lies)."""
            rows = len(cols["ts"]) if cols else 0
            if state["red"] is None:
                state["red"] = red
            elif rows:
                cols = state["red"].absorb(cols, red)
            n = state["n"]
            if n + rows > span:
                raise ValueError("more rows than row ids")
            for name, _ in nsys_split.REPLY_COLUMNS:
                if rows and cols[name].base is not whole[name]:
                    whole[name][n : n + rows] = cols[name]
            state["n"] = n + rows

        def read(i: int) -> None:
            red = reducer()
            sql = nsys_split.chunk_sql(req.select, req.conds, req.bounds[i])
            append(cols.fetch(sql, req.names, text=req.text, real=req.real, reduce=red, spaces=spaces), red)

        def place(i: int, rows: int) -> list[np.ndarray]:
            """Where the child's next chunk goes: after this side's rows and its earlier chunks."""
            n = state["n"] + state["placed"]
            state["placed"] += rows
            if n + rows > span:
                raise ValueError("more rows than row ids")
            return [whole[name][n : n + rows] for name, _ in nsys_split.REPLY_COLUMNS]

        try:
            mine: list[int] = []
            while (i := claims.claim(from_top=False)) is not None:
                mine.append(i)
                read(i)
            theirs = split.tail.result(place)
            if theirs is not None and [p[0] for p in theirs] == list(range(len(mine), len(req.bounds))):
                for _, rows, _, red in theirs:
                    n = state["n"]
                    append({name: whole[name][n : n + rows] for name, _ in nsys_split.REPLY_COLUMNS}, red)
            else:  # the child failed: its chunks are read here (over whatever it had written)
                for i in range(len(mine), len(req.bounds)):
                    read(i)
        except columnar.Unavailable:
            return None
        finally:
            split.close()
        n = state["n"]
        first: _NvtxReducer = state["red"]  # the first chunk's, into which every chunk was merged
        return first.finish({name: whole[name][:n] for name, _ in nsys_split.REPLY_COLUMNS})

    def rows(
        self,
        table: str,
        wanted: dict[str, str | None],
        where: str = "",
        text: tuple[str, ...] = (),
        real: tuple[str, ...] = (),
        not_null: tuple[str, ...] = (),
        one_of: tuple[str, tuple[int, ...]] | None = None,
        none_of: tuple[str, tuple[int, ...]] | None = None,
        reducer: Callable[[], _NvtxReducer] | None = None,
        alike: tuple[str, ...] = (),
        split: _Split | None = None,
    ) -> _Rows:
        """Select ``wanted`` (column → SQL default when the column is absent, or None when it is
        required) from ``table``; integer columns come back as int64 arrays, ``real`` ones as
        float64, ``text`` ones as :class:`TextColumn`. Rows with NULL in a ``not_null`` column, or
        with ``one_of[0]`` outside ``one_of[1]``, or ``none_of[0]`` (its default where NULL or
        absent) inside ``none_of[1]``, are left out. ``reducer()`` makes a :class:`_Reducer`: each
        batch is reduced as it is read, the table never held whole. ``alike``: text columns read
        through :func:`_alike` (in SQL) where their texts hardly repeat (:meth:`_repeats`).
        ``split``: the rows past its row id read in a child process started by :meth:`split_table`
        (collectors/nsys_split.py), merged here into the reducer's code spaces."""
        if split is not None:
            got = self._split_rows(split, reducer)
            if got is not None:
                return got
        q = self.query(table, wanted, text, not_null, one_of, none_of, alike)
        if q is None:
            return _Rows({})
        select, conds, wanted = q
        where = f"WHERE {' AND '.join(conds)}" if conds else ""
        if self.cols is not None:
            red = reducer() if reducer is not None else None
            try:
                fetched = self.cols.fetch(
                    f"{select} {where}",
                    list(wanted),
                    text=text,
                    real=real,
                    reduce=red,
                )
                return red.finish(fetched) if red is not None else _Rows(fetched)
            except columnar.Unavailable:
                pass  # a value off the column's type: sqlite3 reads this table, with its own errors
        red = reducer() if reducer is not None else None
        cur = self.con.execute(f"{select} {where}")
        numeric = [j for j, col in enumerate(wanted) if col not in text and col not in real]
        spaces = {col: columnar.TextSpace() for col in text}
        # Read in batches, each frozen to arrays at once: memory holds one batch of Python rows,
        # not the whole table (a 10 M-kernel export would otherwise cost gigabytes of tuples).
        parts: list[Columns] = []
        while data := cur.fetchmany(_BATCH):
            if len(numeric) == len(wanted):  # one conversion for the whole batch: much faster than per column
                arr = np.array(data, dtype=np.int64).reshape(len(data), len(wanted))
                out: Columns = {col: arr[:, j] for j, col in enumerate(wanted)}
            else:
                out = {}
                for j, col in enumerate(wanted):
                    if col in text:
                        out[col] = spaces[col].add(TextColumn.encode(r[j] for r in data))
                    elif col in real:
                        out[col] = np.fromiter((r[j] for r in data), dtype=np.float64, count=len(data))
                    else:
                        out[col] = np.fromiter((r[j] for r in data), dtype=np.int64, count=len(data))
            parts.append(red(out) if red is not None else out)
        if red is not None:
            return red.finish(columnar.join_arrays(parts))
        if not parts:
            return _Rows(
                {
                    col: TextColumn([], np.empty(0, np.int64))
                    if col in text
                    else np.empty(0, np.float64 if col in real else np.int64)
                    for col in wanted
                }
            )
        if len(parts) == 1:
            return _Rows(parts[0])
        return _Rows(
            {
                col: TextColumn.concat([p[col] for p in parts])
                if col in text
                else np.concatenate([p[col] for p in parts])
                for col in wanted
            }
        )


class _ArrowSource:
    """Nsight's arrowdir/parquetdir export through the same interface as :class:`_SqliteSource`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dir = columnar.ArrowDir(path)
        self.tables = self.dir.tables()

    def columns(self, table: str) -> set[str]:
        return set(self.dir.schema(table))

    def split_table(self, table: str, wanted: dict[str, str | None], **kw: Any) -> None:
        return None  # one Arrow or Parquet file a table: read whole

    def small(self, table: str, cols: list[str], distinct: bool = False) -> list[tuple[Any, ...]]:
        have = self.columns(table)
        present = [c for c in cols if c in have]
        out: list[tuple[Any, ...]] = []
        for b in self.dir.batches(table, present):
            data = {c: b.column(i).to_pylist() for i, c in enumerate(present)}
            n = b.num_rows
            out += list(zip(*[data.get(c, [None] * n) for c in cols]))
        return list(dict.fromkeys(out)) if distinct else out

    def rows(
        self,
        table: str,
        wanted: dict[str, str | None],
        where: str = "",
        text: tuple[str, ...] = (),
        real: tuple[str, ...] = (),
        not_null: tuple[str, ...] = (),
        one_of: tuple[str, tuple[int, ...]] | None = None,
        none_of: tuple[str, tuple[int, ...]] | None = None,
        reducer: Callable[[], _NvtxReducer] | None = None,
        alike: tuple[str, ...] = (),
        split: None = None,
    ) -> _Rows:
        defaults: dict[str, object] = {}
        for c, d in wanted.items():
            defaults[c] = None if d is None else (None if d == "NULL" else (float(d) if c in real else int(d)))
        have = self.columns(table)
        missing = [c for c, d in wanted.items() if d is None and c not in have and c not in text]
        if missing:
            raise TraceError(self.path, f"Nsight export table {table} lacks column {missing[0]!r} (unknown schema)")

        def keep(cols: Columns) -> np.ndarray:
            m = np.ones(len(next(iter(cols.values()))), bool)
            for c in not_null:  # NULLs were filled with 0 (the SQLite path drops those rows)
                if c in cols and not isinstance(cols[c], TextColumn):
                    m &= cols[c] != 0
            if one_of is not None:
                m &= np.isin(cols[one_of[0]], np.asarray(one_of[1], np.int64))
            if none_of is not None:
                m &= ~np.isin(cols[none_of[0]], np.asarray(none_of[1], np.int64))
            return m

        wanted_defaults = {c: (0 if defaults[c] is None and c not in text else defaults[c]) for c in wanted}
        r = _Rows(
            self.dir.table(
                table,
                wanted_defaults,
                text=text,
                real=real,
                row_filter=keep if (not_null or one_of or none_of) else None,
            )
        )
        for f in (one_of, none_of):
            if f is not None:
                r.cols.pop(f[0], None)  # a filter, not a column to keep (as in the SQLite source)
        if reducer is not None:  # the whole table is one batch here
            red = reducer()
            return red.finish(red(r.cols) if len(r) else {})
        return r


class _NvtxRanges(_Rows):
    """NVTX ranges as the model keeps them, 24 bytes a row: ``ts``, ``dur`` (int64), ``thread`` (int32
    code into ``gtids``, the global thread ids) and ``text`` (a :class:`TextColumn` with int32 codes);
    ``first`` lists the text codes in the order of their first range."""

    def __init__(self, cols: Columns, gtids: np.ndarray, first: np.ndarray) -> None:
        super().__init__(cols)
        object.__setattr__(self, "gtids", gtids)
        object.__setattr__(self, "first", first)

    gtids: np.ndarray
    first: np.ndarray


class _NvtxReducer:
    """Reduces each batch of NVTX rows, as it is read, to the columns the model keeps: 5 M ranges of a
    1 GB export held as fetched (seven int64 columns) plus their copies cost gigabytes; reduced,
    24 bytes a row. A range's thread is its own (``globalTid``) or, for a range ended on another
    thread, the ending one; its text its own (``text``) or a registered string (``textId``)."""

    def __init__(self, strings_raw: dict[int, str]) -> None:
        self.strings_raw = strings_raw
        self.gtid_code: dict[int, int] = {}
        self.text_id_code: dict[int, int] = {}  # textId → −1 − its index in id_texts
        self.id_texts: list[str] = []
        self.values: list[str | None] = [None]
        self.null_code: int | None = None
        self.scanned = 0
        self.first: dict[int, int] = {}  # text code → first row
        self.n = 0

    def __call__(self, part: Columns) -> Columns:
        g, eg = part["globalTid"], part["endGlobalTid"]
        tid = np.where(g != 0, g, eg)
        u, inv = np.unique(tid, return_inverse=True)
        lut = np.array([self.gtid_code.setdefault(x, len(self.gtid_code)) for x in u.tolist()], np.int32)
        thread = lut[inv.reshape(-1)]
        tc: TextColumn = part["text"]
        self.values = tc.values  # one code space across batches: this list only grows
        for j in range(self.scanned, len(tc.values)):
            if tc.values[j] is None:
                self.null_code = j
        self.scanned = len(tc.values)
        codes = tc.codes.astype(np.int32)
        if self.null_code is not None:
            isnull = tc.codes == self.null_code
            if isnull.any():
                ids, inv2 = np.unique(part["textId"][isnull], return_inverse=True)
                neg = np.empty(len(ids), np.int32)
                for j, i in enumerate(ids.tolist()):
                    k = self.text_id_code.get(i)
                    if k is None:
                        k = self.text_id_code[i] = -1 - len(self.id_texts)
                        self.id_texts.append(self.strings_raw.get(i, ""))
                    neg[j] = k
                codes[isnull] = neg[inv2.reshape(-1)]
        if len(codes):
            uc, fc = np.unique(codes, return_index=True)
            for c, f in zip(uc.tolist(), fc.tolist()):
                if c not in self.first:
                    self.first[c] = self.n + f
        self.n += len(codes)
        st = part["start"]
        return {"ts": st, "dur": part["end"] - st, "thread": thread, "text": codes}

    def absorb(self, cols: Columns, other: _NvtxReducer) -> Columns:
        """The reduced columns of later rows, read by ``other`` (another process's reducer over the
        same query, or this process's over another chunk), with their thread and text codes
        mapped into this reducer's spaces; this reducer then stands for both parts (call
        :meth:`finish` on the joined columns). ``cols`` is emptied."""
        if not cols:
            return {}
        threads = np.array(
            [
                self.gtid_code.setdefault(gt, len(self.gtid_code))
                for gt in sorted(other.gtid_code, key=other.gtid_code.__getitem__)
            ],
            np.int32,
        )
        text_lut = self._text_lut(other.values)
        id_lut = np.empty(len(other.id_texts), np.int32)  # other's −1 − i → this one's
        for tid, k in sorted(other.text_id_code.items(), key=lambda x: -x[1]):
            mine = self.text_id_code.get(tid)
            if mine is None:
                mine = self.text_id_code[tid] = -1 - len(self.id_texts)
                self.id_texts.append(other.id_texts[-1 - k])
            id_lut[-1 - k] = mine
        codes = cols.pop("text")  # each column taken out of ``cols`` (freed once mapped)
        neg = codes < 0
        if text_lut is None:  # the same text list (chunks this process read): codes stand
            mapped = codes
        else:
            mapped = np.empty(len(codes), np.int32)
            mapped[~neg] = text_lut[codes[~neg]]
        if neg.any():
            mapped[neg] = id_lut[-1 - codes[neg]]
        for c, f in sorted(other.first.items(), key=lambda x: x[1]):
            mc = int(id_lut[-1 - c]) if c < 0 else (c if text_lut is None else int(text_lut[c]))
            if mc not in self.first:
                self.first[mc] = self.n + f
        self.n += other.n
        del codes
        thread = threads[cols.pop("thread")]
        return {"ts": cols.pop("ts"), "dur": cols.pop("dur"), "thread": thread, "text": mapped}

    def _text_lut(self, other: list[str | None]) -> np.ndarray | None:
        """Codes into ``other`` (another reducer's text list) → codes into this one's, which takes
        the texts it lacks; None where the two lists are one (chunks read by the same process
        share it). Made once per list: a process's chunks share theirs."""
        values = self.values
        if other is values:
            return None
        cache = self.__dict__.setdefault("_luts", {})
        hit = cache.get(id(other))
        if hit is not None and hit[0] is other:
            known: np.ndarray = hit[1]
            return known
        index = self.__dict__.get("_index")
        if index is None or len(index) != len(values):
            index = self.__dict__["_index"] = {v: j for j, v in enumerate(values)}
        lut = np.empty(len(other), np.int32)
        for j, v in enumerate(other):
            k = index.get(v)
            if k is None:
                k = index[v] = len(values)
                values.append(v)
            lut[j] = k
        cache[id(other)] = (other, lut)
        return lut

    def __getstate__(self) -> dict[str, Any]:
        # the parent has the export's strings; the lookup caches are the parent's own
        return {**self.__dict__, "strings_raw": {}, "_luts": {}, "_index": None}

    def finish(self, cols: Columns) -> _NvtxRanges:
        if not cols:
            cols = {
                "ts": np.empty(0, np.int64),
                "dur": np.empty(0, np.int64),
                "thread": np.empty(0, np.int32),
                "text": np.empty(0, np.int32),
            }
        n_text = len(self.values)
        codes = cols["text"]
        neg = codes < 0
        if neg.any():  # textId strings after the texts: one code space
            codes[neg] = n_text - 1 - codes[neg]

        def final(c: int) -> int:
            return c if c >= 0 else n_text - 1 - c

        cols["text"] = TextColumn(list(self.values) + self.id_texts, codes)
        first = np.array([final(c) for c, _ in sorted(self.first.items(), key=lambda x: x[1])], np.int64)
        gtids = np.zeros(len(self.gtid_code), np.int64)
        for gt, k in self.gtid_code.items():
            gtids[k] = gt
        return _NvtxRanges(cols, gtids, first)


class _Reader:
    def __init__(self, path: str, src: _SqliteSource | _ArrowSource, progress: Progress | None) -> None:
        self.path = path
        self.src = src
        self.progress = progress
        self.tables = src.tables
        self.warnings: list[str] = []

    # -- schema helpers ------------------------------------------------------------------
    def columns(self, table: str) -> set[str]:
        return self.src.columns(table)

    def rows(self, table: str, wanted: dict[str, str | None], **kw: Any) -> _Rows:
        return self.src.rows(table, wanted, **kw)

    def enum_names(self, table: str, prefix: str) -> dict[int, str] | None:
        if table not in self.tables:
            return None
        return {int(i): str(n).removeprefix(prefix) for i, n in self.src.small(table, ["id", "name"]) if n}

    def metadata(self) -> dict[str, str]:
        for t in _META_TABLES:
            if t in self.tables and {"name", "value"} <= self.columns(t):
                return {str(n): str(v) for n, v in self.src.small(t, ["name", "value"])}
        return {}

    # -- main ----------------------------------------------------------------------------
    def read(self) -> list[Trace]:
        meta = self.metadata()
        nsight = (
            bool(meta) or "StringIds" in self.tables or any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in self.tables)
        )
        if not nsight:
            raise TraceError(
                self.path,
                "SQLite database is not an Nsight Systems export "
                "(no StringIds, CUPTI_ACTIVITY_KIND_* or export metadata tables)",
            )
        if "StringIds" not in self.tables:
            raise TraceError(self.path, "Nsight Systems export has no StringIds table: names cannot be resolved")
        kernel_table = "CUPTI_ACTIVITY_KIND_KERNEL"
        self._progress("reading Nsight export", 0.0)
        self.strings_raw = dict(self.src.small("StringIds", ["id", "value"]))
        split = self._start_nvtx_split()
        try:
            kernels = self._kernels(kernel_table) if kernel_table in self.tables else self._no_kernels()
            self._progress("reading Nsight export", 0.3)
            copies = self._copies()
            memsets = self._memsets()
            runtime = self._runtime()
            osrt = self._osrt()
            metrics = self._gpu_metrics()
            self._progress("reading Nsight export", 0.6)
            nvtx = self._nvtx(split)
        finally:
            if split is not None:
                split.close()
        # No GPU rows (no kernel, copy or memset): the export is analyzed on what it holds (CUDA
        # calls, NVTX ranges, OS runtime calls, CPU samples), with what it says of its capture.
        gpu_rows = [r for r in (kernels, copies, memsets) if r is not None and len(r)]
        samples = capture = None
        if not gpu_rows:
            capture = nsys_capture.capture_info(self.src)
            samples = nsys_capture.cpu_samples(self.src)
            if not any(r is not None and len(r) for r in (runtime, nvtx, osrt)) and samples is None:
                raise TraceError(self.path, _nothing_to_analyze(capture))
        self._progress("reading Nsight export", 0.9)
        thread_names = self._thread_names()
        gpus, cuda_map = self._devices()
        session_ns = self._session_start()

        if len(kernels):
            procs = sorted(set(kernels["proc"].tolist()))
            # A rank per process only when there are several; DDP convention: rank i uses GPU i.
            first_dev = {p: int(kernels["deviceId"][kernels["proc"] == p].min()) for p in procs}
        elif gpu_rows:  # copies or memsets only: the processes that ran them
            procs = sorted(set(np.concatenate([r["proc"] for r in gpu_rows]).tolist()))
            first_dev = {
                p: min(int(r["deviceId"][r["proc"] == p].min()) for r in gpu_rows if (r["proc"] == p).any())
                for p in procs
            }
        else:  # host rows only: the process with the most of them
            procs = [self._host_process(runtime, nvtx, osrt, samples)]
            first_dev = {procs[0]: 0}
        order = sorted(procs, key=lambda p: (first_dev[p], p))
        traces = []
        for rank, proc in enumerate(order):
            traces.append(
                self._build(
                    proc,
                    rank if len(procs) > 1 else None,
                    len(procs) if len(procs) > 1 else None,
                    kernels,
                    copies,
                    memsets,
                    runtime,
                    nvtx,
                    osrt,
                    metrics,
                    thread_names,
                    gpus,
                    cuda_map,
                    session_ns,
                    meta,
                    consume=rank == len(order) - 1,  # the last process: NVTX columns dropped as split
                    samples=samples,
                    capture=capture,
                )
            )
        add_graph_replays(self.src, traces, order, session_ns)  # graph-level CUDA graph replays
        if len(procs) > 1:
            pids = ", ".join(f"pid {p & 0xFFFFFF} → rank {i} (GPU {first_dev[p]})" for i, p in enumerate(order))
            for t in traces:
                t.warnings.append(f"{len(procs)} processes used the GPU; ranks assigned by GPU order: {pids}")
        self._progress("reading Nsight export", 1.0)
        return traces

    def _progress(self, stage: str, frac: float | None) -> None:
        if self.progress:
            self.progress(stage, frac)

    def _host_process(
        self,
        runtime: _Rows | None,
        nvtx: _NvtxRanges | None,
        osrt: _Rows | None,
        samples: dict[str, np.ndarray] | None,
    ) -> int:
        """The process (``globalPid >> 24``) with the most host rows: CUDA calls, NVTX ranges, OS
        runtime calls, CPU samples (an export without GPU rows is read for that process)."""
        counts: dict[int, int] = {}
        cols = [r["proc"] for r in (runtime, osrt) if r is not None and len(r)]
        if nvtx is not None and len(nvtx):
            cols.append(nvtx.gtids[nvtx["thread"]] >> 24)
        if samples is not None:
            cols.append(samples["globalTid"] >> 24)
        for c in cols:
            u, n = np.unique(c, return_counts=True)
            for p, k in zip(u.tolist(), n.tolist()):
                counts[p] = counts.get(p, 0) + k
        return max(counts, key=lambda p: (counts[p], -p)) if counts else 0

    # -- tables --------------------------------------------------------------------------
    def _no_kernels(self) -> _Rows:
        """The kernel table of an export that holds none (no CUPTI_ACTIVITY_KIND_KERNEL table)."""
        z = np.empty(0, np.int64)
        return _Rows(
            {
                "start": z,
                "end": z,
                "deviceId": z,
                "streamId": z,
                "correlationId": z,
                "globalPid": z,
                "proc": z,
                "name_uniq": [],
                "name_inv": z,
            }
        )

    def _kernels(self, table: str) -> _Rows:
        have = self.columns(table)
        name_col = next((c for c in ("demangledName", "shortName", "mangledName") if c in have), None)
        if name_col is None:
            raise TraceError(self.path, f"Nsight export table {table} has no kernel name column (unknown schema)")
        r = self.rows(
            table,
            {
                "start": None,
                "end": None,
                "deviceId": None,
                "streamId": "-1",
                "correlationId": "-1",
                "globalPid": "0",
                name_col: None,
            },
        )
        return self._with_proc(r, "globalPid", {"name": name_col})

    def _copies(self) -> _Rows | None:
        t = "CUPTI_ACTIVITY_KIND_MEMCPY"
        if t not in self.tables:
            return None
        r = self.rows(
            t,
            {
                "start": None,
                "end": None,
                "deviceId": None,
                "streamId": "-1",
                "copyKind": "0",
                "srcKind": "7",
                "dstKind": "7",
                "bytes": "0",
                "correlationId": "-1",
                "globalPid": "0",
            },
        )
        kinds = self.enum_names("ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_") or dict(enumerate(_COPY_RAW))
        mems = self.enum_names("ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_") or dict(enumerate(_MEM_RAW))
        kind_code = {k: COPY_KINDS.index(_COPY_BY_NAME.get(v, "unknown")) for k, v in kinds.items()}
        mem_code = {k: MEMORY_KINDS.index(_MEM_BY_NAME.get(v, "unknown")) for k, v in mems.items()}
        r.cols["kind"] = _map_codes(r["copyKind"], kind_code)
        r.cols["src"] = _map_codes(r["srcKind"], mem_code)
        r.cols["dst"] = _map_codes(r["dstKind"], mem_code)
        return self._with_proc(r, "globalPid")

    def _memsets(self) -> _Rows | None:
        t = "CUPTI_ACTIVITY_KIND_MEMSET"
        if t not in self.tables:
            return None
        r = self.rows(
            t,
            {
                "start": None,
                "end": None,
                "deviceId": None,
                "streamId": "-1",
                "bytes": "0",
                "correlationId": "-1",
                "globalPid": "0",
            },
        )
        return self._with_proc(r, "globalPid")

    def _runtime(self) -> _Rows | None:
        t = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if t not in self.tables:
            return None
        r = self.rows(
            t,
            {"start": None, "end": None, "globalTid": "0", "nameId": None, "correlationId": "-1", "eventClass": "0"},
            none_of=("eventClass", (_BACKTRACE_CLASS,)),  # left out in the query: never fetched
        )
        return self._with_proc(r, "globalTid", {"name": "nameId"}, normalize=_api_name)

    _NVTX_QUERY: dict[str, Any] = {
        "wanted": {
            "start": None,
            "end": None,
            "eventType": None,
            "globalTid": "0",
            "endGlobalTid": "0",
            "textId": "-1",
            "text": "NULL",
        },
        "not_null": ("end",),
        "one_of": ("eventType", _NVTX_RANGE_TYPES),
        "text": ("text",),
        "alike": ("text",),
    }

    def _has_nvtx(self) -> bool:
        t = "NVTX_EVENTS"
        return t in self.tables and bool({"text", "textId"} & self.columns(t))

    def _start_nvtx_split(self) -> _Split | None:
        """A large NVTX table's later rows read in a child while this process reads the other tables
        (collectors/nsys_split.py), the two processes claiming its chunks from either end."""
        if not self._has_nvtx():
            return None
        q = self._NVTX_QUERY
        split: _Split | None = self.src.split_table(
            "NVTX_EVENTS", q["wanted"], **{k: v for k, v in q.items() if k != "wanted"}
        )
        return split

    def _nvtx(self, split: _Split | None = None) -> _NvtxRanges | None:
        if not self._has_nvtx():
            return None
        strings_raw = self.strings_raw
        q = self._NVTX_QUERY
        r = self.rows(
            "NVTX_EVENTS",
            q["wanted"],
            **{k: v for k, v in q.items() if k != "wanted"},
            reducer=lambda: _NvtxReducer(strings_raw),
            split=split,
        )
        return r  # type: ignore[return-value]

    def _osrt(self) -> _Rows | None:
        t = "OSRT_API"
        if t not in self.tables:
            return None
        r = self.rows(t, {"start": None, "end": None, "globalTid": "0", "nameId": None})
        return self._with_proc(r, "globalTid", {"name": "nameId"})

    def _gpu_metrics(self) -> _Metrics | None:
        if "GPU_METRICS" not in self.tables or "TARGET_INFO_GPU_METRICS" not in self.tables:
            return None
        info = self.columns("TARGET_INFO_GPU_METRICS")
        if not {"metricId", "metricName"} <= info:
            self.warnings.append(
                "GPU_METRICS present but TARGET_INFO_GPU_METRICS has no metric names: counters ignored"
            )
            return None
        names = {
            (int(t) if t is not None else -1, int(m)): str(n)
            for t, m, n in self.src.small(
                "TARGET_INFO_GPU_METRICS", ["typeId", "metricId", "metricName"], distinct=True
            )
        }
        r = self.rows(
            "GPU_METRICS", {"timestamp": None, "typeId": "0", "metricId": None, "value": "0"}, real=("value",)
        )
        return r, names

    def _thread_names(self) -> dict[int, str]:
        if "ThreadNames" not in self.tables:
            return {}
        return {
            int(g): self.strings_raw.get(int(n), "")
            for n, g in self.src.small("ThreadNames", ["nameId", "globalTid"])
            if g is not None
        }

    def _devices(self) -> tuple[dict[int, dict[str, Any]], dict[tuple[int, int], int]]:
        """Physical GPUs by TARGET_INFO_GPU id, and (pid, CUDA device id) → physical id."""
        gpus: dict[int, dict[str, Any]] = {}
        if "TARGET_INFO_GPU" in self.tables:
            have = self.columns("TARGET_INFO_GPU")
            cols = [
                c
                for c in ("id", "name", "totalMemory", "smCount", "computeMajor", "computeMinor", "cuDevice")
                if c in have
            ]
            if "id" in cols:
                for row in self.src.small("TARGET_INFO_GPU", cols):
                    d = dict(zip(cols, row))
                    gpus[int(d["id"])] = d
        cuda_map: dict[tuple[int, int], int] = {}
        if "TARGET_INFO_CUDA_DEVICE" in self.tables and {"gpuId", "cudaId", "pid"} <= self.columns(
            "TARGET_INFO_CUDA_DEVICE"
        ):
            for gpu, cuda, pid in self.src.small("TARGET_INFO_CUDA_DEVICE", ["gpuId", "cudaId", "pid"]):
                if gpu is not None and cuda is not None:
                    cuda_map[(int(pid), int(cuda))] = int(gpu)
                    # numMultiprocessors would also be here; TARGET_INFO_GPU has the SM count too
        return gpus, cuda_map

    def _session_start(self) -> int:
        t = "TARGET_INFO_SESSION_START_TIME"
        if t in self.tables and "utcEpochNs" in self.columns(t):
            rows = self.src.small(t, ["utcEpochNs"])
            if rows and isinstance(rows[0][0], int):
                return rows[0][0]
        return 0

    def _with_proc(
        self,
        r: _Rows,
        gid: str,
        named: dict[str, str] | None = None,
        normalize: Callable[[str], str] | None = None,
    ) -> _Rows:
        r.cols["proc"] = r[gid] >> 24
        for out, col in (named or {}).items():
            ids = r[col]
            uniq, inv = np.unique(ids, return_inverse=True)
            texts = [self.strings_raw.get(int(i), f"<string {int(i)}>") for i in uniq]
            if normalize:
                texts = [normalize(s) for s in texts]
            r.cols[out + "_uniq"] = texts
            r.cols[out + "_inv"] = inv.astype(np.int64)
        return r

    # -- one process → one Trace -----------------------------------------------------------
    def _build(
        self,
        proc: int,
        rank: int | None,
        world: int | None,
        kernels: _Rows,
        copies: _Rows | None,
        memsets: _Rows | None,
        runtime: _Rows | None,
        nvtx: _NvtxRanges | None,
        osrt: _Rows | None,
        metrics: _Metrics | None,
        thread_names: dict[int, str],
        gpus: dict[int, dict[str, Any]],
        cuda_map: dict[tuple[int, int], int],
        session_ns: int,
        meta: dict[str, str],
        consume: bool = False,
        samples: dict[str, np.ndarray] | None = None,
        capture: dict[str, object] | None = None,
    ) -> Trace:
        strings = StringTable()
        threads: dict[int, int] = {}

        def intern_column(r: _Rows, sel: _Selection, field: str) -> np.ndarray:
            lut = (
                np.array([strings.intern(s) for s in r[field + "_uniq"]], np.int32)
                if len(r[field + "_uniq"])
                else np.zeros(0, np.int32)
            )
            inv = take(r, field + "_inv", sel)
            return lut[inv] if len(inv) else np.empty(0, np.int32)

        def take(r: _Rows, col: str, sel: _Selection) -> np.ndarray:
            # ``consume`` (the last process to read the tables): each raw column leaves the table
            # as it is turned into the model's, so the two are never both whole.
            column: np.ndarray = r.cols.pop(col) if consume else r.cols[col]
            return column[sel]

        def span(r: _Rows, sel: _Selection) -> tuple[np.ndarray, np.ndarray]:
            ts = take(r, "start", sel)
            return ts, take(r, "end", sel) - ts

        def thread_column(gtids: np.ndarray) -> np.ndarray:
            uniq, inv = np.unique(gtids, return_inverse=True)
            lut = np.array([threads.setdefault(int(g), len(threads)) for g in uniq.tolist()], np.int32)
            return lut[inv] if len(gtids) else np.empty(0, np.int32)

        def thread_codes(codes: np.ndarray, gtids: np.ndarray) -> np.ndarray:
            # thread_column of gtids[codes], without sorting the rows: the distinct threads are few
            present = np.flatnonzero(np.bincount(codes, minlength=len(gtids))) if len(codes) else codes[:0]
            present = present[np.argsort(gtids[present], kind="stable")]
            lut = np.zeros(len(gtids), np.int32)
            for c, g in zip(present.tolist(), gtids[present].tolist()):
                lut[c] = threads.setdefault(g, len(threads))
            return lut[codes] if len(codes) else np.empty(0, np.int32)

        def select(r: _Rows) -> _Selection:
            # Every row this process's (one GPU process, the common case): views, not copies.
            m = (r.cols.pop("proc") if consume else r["proc"]) == proc
            return slice(None) if m.all() else m

        def columns(r: _Rows, named: dict[str, str]) -> dict[str, np.ndarray]:
            # this process's rows: ts and dur from start and end, the model's other columns by name
            sel = select(r)
            ts, dur = span(r, sel)
            return {"ts": ts, "dur": dur, **{field: take(r, col, sel) for field, col in named.items()}}

        pid = int(proc) & 0xFFFFFF
        ks = select(kernels)
        k_ts, k_dur = span(kernels, ks)
        k = Kernels(
            ts=k_ts,
            dur=k_dur,
            device=take(kernels, "deviceId", ks),
            stream=take(kernels, "streamId", ks),
            name=intern_column(kernels, ks, "name"),
            correlation=take(kernels, "correlationId", ks),
        )
        del k_ts, k_dur
        c = Copies(**columns(copies, _COPY_COLUMNS)) if copies is not None else Copies.empty()
        m = Memsets(**columns(memsets, _MEMSET_COLUMNS)) if memsets is not None else Memsets.empty()
        if runtime is not None:
            rs = select(runtime)
            r_ts, r_dur = span(runtime, rs)
            rt = RuntimeCalls(
                ts=r_ts,
                dur=r_dur,
                thread=thread_column(take(runtime, "globalTid", rs)),
                name=intern_column(runtime, rs, "name"),
                correlation=take(runtime, "correlationId", rs),
            )
            del r_ts, r_dur
        else:
            rt = RuntimeCalls.empty()
        ann, ops, op_texts, op_order = self._ranges(nvtx, proc, strings, thread_codes, consume)
        if osrt is not None:
            os_ = select(osrt)
            os_calls = RuntimeCalls(
                ts=osrt["start"][os_],
                dur=osrt["end"][os_] - osrt["start"][os_],
                thread=thread_column(osrt["globalTid"][os_]),
                name=intern_column(osrt, os_, "name"),
                correlation=np.full(len(osrt["start"][os_]), -1, np.int64),
            )
        else:
            os_calls = RuntimeCalls.empty()

        devices = self._trace_devices(pid, np.unique(np.concatenate([k.device, c.device, m.device])), gpus, cuda_map)
        counters = self._counters(metrics, devices, pid, gpus, cuda_map, strings)

        # Times relative to the first event of this process (as for Kineto), origin in UTC ns.
        tables = (k, c, m, rt, ops, ann)
        mine = (samples["globalTid"] >> 24) == proc if samples is not None else np.zeros(0, bool)
        firsts = [int(t.ts.min()) for t in tables if len(t)]
        if not firsts:  # no GPU, CUDA or NVTX row: the OS runtime calls and CPU samples set the origin
            firsts = [int(os_calls.ts.min())] if len(os_calls) else []
            firsts += [int(samples["start"][mine].min())] if samples is not None and mine.any() else []
        origin = min(firsts) if firsts else 0
        for t in (*tables, os_calls, counters):
            t.ts -= origin
        negative = sum(int((t.dur < 0).sum()) for t in (*tables, os_calls))
        warnings = list(self.warnings)
        con = getattr(self.src, "con", None)
        bad = text_repairs(con) if con is not None else 0
        if bad:
            warnings.append(
                f"text that is not UTF-8 in the export's TEXT cells kept as visible escapes: {bad:,} "
                f"byte{'s' if bad != 1 else ''} (\\xNN); every row holding one is read"
            )
        if negative:
            k, c, m, rt = k.select(k.dur >= 0), c.select(c.dur >= 0), m.select(m.dur >= 0), rt.select(rt.dur >= 0)
            ops, ann, os_calls = ops.select(ops.dur >= 0), ann.select(ann.dur >= 0), os_calls.select(os_calls.dur >= 0)
            warnings.append(f"{negative:,} events with negative duration skipped")

        names = {g: thread_names.get(g, "") for g in threads}
        thread_list = [
            Thread(pid=str((g >> 24) & 0xFFFFFF), tid=str(g & 0xFFFFFF), name=names[g])
            for g, _ in sorted(threads.items(), key=lambda x: x[1])
        ]
        metadata: dict[str, object] = {
            "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
            "export_schema": meta.get("EXPORT_SCHEMA_VERSION"),
            "pid": pid,
            "os_runtime_calls": len(os_calls),
        }
        if capture is not None:  # an export without GPU rows: what it says of its capture, its samples
            metadata["capture"] = capture
            if samples is not None and mine.any():
                metadata["cpu_samples"] = nsys_capture.summarize_samples(samples, mine, self.strings_raw, origin)
        trace = Trace(
            source=self.path,
            format="nsys-sqlite",
            origin_ns=session_ns + origin,
            strings=strings.strings,
            devices=devices,
            threads=thread_list,
            kernels=k,
            copies=c,
            memsets=m,
            runtime=rt,
            cpu_ops=ops,
            annotations=ann,
            memory=MemoryEvents.empty(),
            counters=counters,
            rank=rank,
            world_size=world,
            metadata=metadata,
            warnings=warnings,
            os_runtime=os_calls,
            op_inputs=_emit_nvtx_inputs(op_texts, op_order),
        )
        return trace

    def _ranges(
        self,
        nvtx: _NvtxRanges | None,
        proc: int,
        strings: StringTable,
        thread_codes: Callable[[np.ndarray, np.ndarray], np.ndarray],
        consume: bool,
    ) -> tuple[Annotations, CpuOps, TextColumn, np.ndarray]:
        """This process's NVTX ranges as annotations and operators, the operators' texts, and the
        order of those texts' first ranges. ``consume``: the last process to read them, so each
        column is dropped from ``nvtx`` once split (memory grows by one column, not all of them)."""
        if nvtx is None:
            return Annotations.empty(), CpuOps.empty(), TextColumn([], np.empty(0, np.int64)), np.empty(0, np.int64)
        mine = (nvtx.gtids >> 24) == proc
        sel: np.ndarray | slice = slice(None) if mine.all() else np.flatnonzero(mine[nvtx["thread"]])
        texts: TextColumn = nvtx["text"]
        cache: dict[str, tuple[bool, int]] = {}

        def classify(text: str | None) -> tuple[bool, int]:
            s = text or ""
            hit = cache.get(s)
            if hit is None:
                # emit_nvtx decoration: "aten::mm, seq = 1, op_id = 2, sizes = ..." (cheap test first)
                base, sep, rest = s.partition(", ")
                decorated = bool(sep) and rest.startswith(_EMIT_NVTX_KEYS)
                is_op = decorated and not _ANNOTATION_OPS.match(base)
                hit = cache[s] = (is_op, strings.intern(base if decorated else s))
            return hit

        # Each distinct text classified once, in the order of its first range (the string table's order).
        codes = texts.codes[sel]
        if isinstance(sel, slice):
            order = nvtx.first
        elif len(codes):
            u, first = np.unique(codes, return_index=True)
            order = u[np.argsort(first, kind="stable")]
        else:
            order = np.empty(0, np.int64)
        is_op_u = np.zeros(len(texts.values), bool)
        name_u = np.zeros(len(texts.values), np.int32)
        for c in order.tolist():
            is_op_u[c], name_u[c] = classify(texts.values[c])
        is_op = is_op_u[codes]
        is_ann = ~is_op
        op_order = order[is_op_u[order]]

        def split(col: str) -> tuple[np.ndarray, np.ndarray]:
            v = (nvtx.cols.pop(col) if consume else nvtx[col])[sel]
            return v[is_ann], v[is_op]

        ann_ts, op_ts = split("ts")
        ann_dur, op_dur = split("dur")
        ann_th, op_th = split("thread")
        ann = Annotations(
            ts=ann_ts,
            dur=ann_dur,
            thread=thread_codes(ann_th, nvtx.gtids),
            name=name_u[codes[is_ann]],
            device=np.full(len(ann_ts), -1, np.int16),
        )
        del ann_ts, ann_dur, ann_th
        op_codes = codes[is_op]
        if consume:
            nvtx.cols.pop("text")
        del codes
        ops = CpuOps(
            ts=op_ts,
            dur=op_dur,
            thread=thread_codes(op_th, nvtx.gtids),
            name=name_u[op_codes],
            # NVTX records no FLOPs: one NaN seen through every row (read-only, no memory; 40 MiB
            # for the 5 M operators of a 1 GB export as a filled column). A selection copies it.
            flops=np.broadcast_to(np.float64(np.nan), (len(op_ts),)),
        )
        return ann, ops, TextColumn(texts.values, op_codes), op_order

    def _trace_devices(
        self, pid: int, used: np.ndarray, gpus: dict[int, dict[str, Any]], cuda_map: dict[tuple[int, int], int]
    ) -> list[Device]:
        devices = []
        for dev in used.tolist():
            phys = cuda_map.get((pid, dev))
            if phys is None:  # no mapping table: CUDA ordinal as recorded, else the same id
                phys = next((i for i, g in gpus.items() if g.get("cuDevice") == dev), dev)
            g = gpus.get(phys)
            if g is None:
                devices.append(Device(id=int(dev), name=f"GPU {dev}", vendor="nvidia"))
                continue
            major, minor = g.get("computeMajor"), g.get("computeMinor")
            devices.append(
                Device(
                    id=int(dev),
                    name=str(g.get("name") or f"GPU {dev}"),
                    vendor="nvidia",
                    total_memory=int(g["totalMemory"]) if g.get("totalMemory") else None,
                    sm_count=int(g["smCount"]) if g.get("smCount") else None,
                    compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
                )
            )
        return devices

    def _counters(
        self,
        metrics: _Metrics | None,
        devices: list[Device],
        pid: int,
        gpus: dict[int, dict[str, Any]],
        cuda_map: dict[tuple[int, int], int],
        strings: StringTable,
    ) -> Counters:
        if metrics is None:
            return Counters.empty()
        r, names = metrics
        # typeId's low byte is the physical GPU (TARGET_INFO_GPU.id); report on the CUDA id this
        # process used for it, and keep only GPUs this process used.
        phys_to_dev: dict[int, int] = {}
        for d in devices:
            phys = cuda_map.get((pid, d.id))
            if phys is None:
                phys = next((i for i, g in gpus.items() if g.get("cuDevice") == d.id), d.id)
            phys_to_dev[phys] = d.id
        gpu = r["typeId"] & 0xFF
        keep = np.isin(gpu, list(phys_to_dev))
        lut_dev = np.array([phys_to_dev.get(int(x), -1) for x in range(256)], np.int16)
        # Each distinct (type, metric) pair named once, in the order of its first sample.
        pairs = np.stack([r["typeId"], r["metricId"]], axis=1) if len(r) else np.empty((0, 2), np.int64)
        name_idx = np.empty(len(r), np.int32)
        if len(r):
            u, first, inv = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
            lut = np.empty(len(u), np.int32)
            for j in np.argsort(first, kind="stable").tolist():
                t, mid = int(u[j, 0]), int(u[j, 1])
                n = names.get((t, mid)) or names.get((-1, mid))
                lut[j] = strings.intern(n if n is not None else f"metric {mid}")
            name_idx = lut[inv.reshape(-1)]
        return Counters(ts=r["timestamp"][keep], device=lut_dev[gpu[keep]], name=name_idx[keep], value=r["value"][keep])


def _nothing_to_analyze(capture: dict[str, Any]) -> str:
    """The refusal for an export with no GPU rows and no host rows either, with what its capture
    settings say."""
    what = "Nsight Systems export holds nothing to analyze: no GPU rows (kernels, copies, memsets), CUDA calls"
    what += ", NVTX ranges, OS runtime calls or CPU samples"
    if capture.get("cuda_requested"):
        return what + " although CUDA tracing was on: the traced process did not use the GPU while recording"
    return what + ": profile with `nsys profile --trace=cuda,nvtx,osrt ...`"


def _map_codes(codes: np.ndarray, table: dict[int, int]) -> np.ndarray:
    # Sized by the table, not the data: one hostile code (2**62) must not allocate exabytes.
    lut = np.zeros(max([*table.keys(), 0]) + 1, np.int8)
    for k, v in table.items():
        if k >= 0:
            lut[k] = v
    safe = np.clip(codes, 0, len(lut) - 1)
    out: np.ndarray = lut[safe]
    out[(codes < 0) | (codes >= len(lut))] = 0
    return out


def _api_name(name: str) -> str:
    m = _API_VERSION.match(name)
    return m.group(1) if m else name


# The model's column ← the export's column, for the activity tables read as they are (start and
# end give ts and dur).
_COPY_COLUMNS = {
    "device": "deviceId",
    "stream": "streamId",
    "kind": "kind",
    "src": "src",
    "dst": "dst",
    "bytes": "bytes",
    "correlation": "correlationId",
}
_MEMSET_COLUMNS = {"device": "deviceId", "stream": "streamId", "bytes": "bytes", "correlation": "correlationId"}

_SIZES = re.compile(r", sizes = (\[.*?\]\])(?:, |$)")


def _emit_nvtx_inputs(texts: TextColumn, order: np.ndarray | None = None) -> OpInputs:
    """Input shapes of ``emit_nvtx(record_shapes=True)`` operator ranges ("aten::mm, seq = 3, op_id = 9,
    sizes = [[64, 128], [128, 256]], …"), for the cost model. NVTX records no dtypes: they are marked
    unknown ("?") and the cost model takes them from the kernel names."""
    import json

    sig_index: dict[str, int] = {}
    sigs: list[tuple[list[Any], list[Any], list[Any]]] = []
    # The same range text repeats every step: each distinct text parsed once, in first-range order.
    lut = np.full(len(texts.values), -1, np.int32)
    if len(texts.codes):
        if order is None:  # ``order``: the codes in the order of their first row, where known
            u, first = np.unique(texts.codes, return_index=True)
            order = u[np.argsort(first, kind="stable")]
        for c in order.tolist():
            lut[c] = _signature_of(texts.values[c] or "", sig_index, sigs, json)
    rows = lut[texts.codes] if len(texts.codes) else np.full(0, -1, np.int32)
    if not sigs:
        return OpInputs()
    # NVTX has no External ids: cpu_external and kernel_external stay empty (absent, as OpInputs
    # allows), not one -1 per operator and per kernel (40 and 8 MiB for the 5 M operators and 1 M
    # kernels of a 1 GB export, held through the analysis; the linking sorted the first).
    return OpInputs(np.empty(0, np.int64), np.empty(0, np.int64), rows, sigs)


def _signature_of(
    text: str, sig_index: dict[str, int], sigs: list[tuple[list[Any], list[Any], list[Any]]], json: ModuleType
) -> int:
    """Index of the input-shape signature in ``text`` (added to ``sigs`` when new), −1 if none."""
    m = _SIZES.search(text)
    if not m:
        return -1
    key = m.group(1)
    j = sig_index.get(key)
    if j is None:
        try:
            dims = json.loads(key)
        except ValueError:
            return -1
        if not isinstance(dims, list):
            return -1
        j = sig_index[key] = len(sigs)
        sigs.append((dims, ["?"] * len(dims), []))
    return j


def split_read_tail(req: nsys_split.Request) -> list[nsys_split.Part] | None:
    """In the child: claim chunks from the top, read each with a reducer of its own and write its
    columns to the spill file, ``[(chunk, rows, offset, reducer), …]``; None where the driver refuses."""
    con = connect_readonly(req.path)
    try:
        strings_raw = dict(con.execute('SELECT "id", "value" FROM "StringIds"').fetchall())
    finally:
        con.close()
    try:
        cols = columnar.SqliteColumns(req.path, wal=req.wal)
    except columnar.Unavailable:
        return None
    claims = nsys_split.Claims(req.claims)
    head: list[nsys_split.Part] = []
    spaces = {c: columnar.TextSpace() for c in req.text}  # one text list for every chunk: sent once
    spill = nsys_split.Spill(req.spill)
    try:
        while (i := claims.claim(from_top=True)) is not None:
            red = _NvtxReducer(strings_raw)
            sql = nsys_split.chunk_sql(req.select, req.conds, req.bounds[i])
            rows, offset = spill.write(
                cols.fetch(sql, req.names, text=req.text, real=req.real, reduce=red, spaces=spaces)
            )
            head.append((i, rows, offset, red))
    except columnar.Unavailable:
        return None
    finally:
        cols.close()
        spill.close()
    return head


def split_child_main() -> None:
    """The child of :class:`nsys_split.Tail`: reads its request from stdin, replies on stdout."""
    gc.disable()  # acyclic arrays and a few dicts: nothing for the collector to find
    req = pickle.loads(sys.stdin.buffer.read())  # our parent's request
    if not isinstance(req, nsys_split.Request):
        sys.exit(2)
    try:
        out = split_read_tail(req)
    except Exception:  # any failure: the parent reads the tail itself, with its precise errors
        out = None
    stdout = sys.stdout.buffer
    if out is None:
        stdout.write((0).to_bytes(8, "little"))
        stdout.flush()
        return
    nsys_split.write_reply(stdout, out)
