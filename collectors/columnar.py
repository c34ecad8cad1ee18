"""Columnar reading of SQLite tables (the Nsight Systems export): columns as numpy arrays without
a Python object per row, texts dictionary-encoded.

Python's ``sqlite3`` hands back one tuple per row and one ``str``/``int`` object per value; on a
1 GB Nsight export (5 M NVTX ranges, 2 M runtime calls) building and converting those objects is
most of the reading time and the peak memory. The ADBC SQLite driver (``adbc-driver-sqlite``,
Apache Arrow's Database Connectivity) runs the same SQL and writes the values straight into Arrow
columns, in batches of :data:`BATCH_ROWS` rows; each batch becomes numpy arrays at once, and a
text column becomes integer codes into a list of its distinct values (NVTX texts repeat every
step: a 5 M-row column holds a few hundred strings). Measured figures: docs/scale.md.

Nsight's own columnar exports (``nsys export --type arrowdir`` or ``parquetdir``: one Arrow IPC or
Parquet file per table) are read by :class:`ArrowDir` through the same interface, without SQLite.

The driver is optional at run time: where it is missing, or refuses a table (a value of a type
the column's first rows did not have, which only a damaged export holds), :class:`Unavailable`
is raised and the caller reads that table with ``sqlite3``, whose errors are the precise ones.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

# A table's columns by name: int64 or float64 arrays, a TextColumn for a text column.
Columns = dict[str, Any]

BATCH_ROWS = 65_536  # rows per Arrow batch (1,024 by default: its per-batch cost then dominates)


class Unavailable(Exception):
    """The columnar reader cannot read this (no driver, or a value off the column's type)."""


@dataclass
class TextColumn:
    """A text column as codes into its distinct values: ``values[codes[i]]`` is row i's text
    (None for SQL NULL)."""

    values: list[Any]  # the distinct texts (None: NULL; whatever a damaged export's cell holds)
    codes: np.ndarray

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, rows: np.ndarray) -> TextColumn:
        return TextColumn(self.values, self.codes[rows])

    def tolist(self) -> list[Any]:
        v = self.values
        return [v[c] for c in self.codes.tolist()]

    @staticmethod
    def concat(parts: list[TextColumn]) -> TextColumn:
        if parts and all(p.values is parts[0].values for p in parts):
            return TextColumn(parts[0].values, np.concatenate([p.codes for p in parts]))
        space = TextSpace()  # each part's codes mapped into one code space
        out = [space.add(p).codes for p in parts]
        return TextColumn(space.values, np.concatenate(out) if out else np.empty(0, np.int64))

    @staticmethod
    def encode(items: Iterable[Any]) -> TextColumn:
        index: dict[Any, int] = {}
        values: list[Any] = []
        codes = []
        for s in items:
            k = index.get(s)
            if k is None:
                k = index[s] = len(values)
                values.append(s)
            codes.append(k)
        return TextColumn(values, np.asarray(codes, np.int64))


class TextSpace:
    """One code space for a text column read in batches: each batch's codes mapped into it as the
    batch arrives, so every batch's codes mean the same texts (``values`` only grows)."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.values: list[Any] = []
        self._known: Any = None  # the values add_arrow has seen, as an Arrow array (for its lookup)
        self._known_codes = np.empty(0, np.int64)  # their codes

    def add_arrow(self, dictionary: Any, codes: np.ndarray) -> TextColumn:
        """A batch's text column given as Arrow's dictionary encoding (``codes`` index
        ``dictionary``; ``len(dictionary)`` for NULL), in this space's codes: the same as
        :meth:`add` of ``TextColumn(dictionary.to_pylist() + [None], codes)``, but the values this
        space already holds are found by Arrow (``index_in``), and only new ones become Python
        strings — a 1 GB Nsight export's 78 NVTX batches each hold the same 17,279 texts."""
        import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type information
        import pyarrow.compute as pc  # type: ignore[import-untyped]  # pyarrow ships no type information

        n = len(dictionary)
        lut = np.empty(n + 1, np.int64)
        if n:
            # (no pa.array() of Python or numpy data here: it imports pandas, 0.3 s and 35 MiB)
            if self._known is None:
                miss = np.ones(n, bool)
            else:
                known = self._known if self._known.type == dictionary.type else self._known.cast(dictionary.type)
                pos = pc.index_in(dictionary, value_set=known)
                miss = _nulls(pos) if pos.null_count else np.zeros(n, bool)
                lut[:n] = self._known_codes[np.where(miss, 0, _values(pos, np.int64))]
            new = np.flatnonzero(miss)
            if len(new):
                index, values = self.index, self.values
                codes_new = np.empty(len(new), np.int64)
                for i, j in enumerate(new.tolist()):
                    v = dictionary[j].as_py()
                    k = index.get(v)
                    if k is None:
                        k = index[v] = len(values)
                        values.append(v)
                    lut[j] = codes_new[i] = k
                taken = dictionary.take(pa.Array.from_buffers(pa.int64(), len(new), [None, pa.py_buffer(new)]))
                self._known = (
                    taken if self._known is None else pa.concat_arrays([self._known, taken.cast(self._known.type)])
                )
                self._known_codes = np.concatenate([self._known_codes, codes_new])
        k = self.index.get(None)  # the NULL slot: as add() of a batch whose values end with None
        if k is None:
            k = self.index[None] = len(self.values)
            self.values.append(None)
        lut[n] = k
        return TextColumn(self.values, lut[codes])

    def add(self, t: TextColumn) -> TextColumn:
        index, values = self.index, self.values
        lut = np.empty(len(t.values), np.int64)
        for j, v in enumerate(t.values):
            k = index.get(v)
            if k is None:
                k = index[v] = len(values)
                values.append(v)
            lut[j] = k
        return TextColumn(values, lut[t.codes])


def join_arrays(parts: list[Columns]) -> Columns:
    """Concatenate batches of plain arrays column by column, each batch's column freed once joined
    (memory grows by one column, not by the whole table); an empty dict for no batches."""
    if len(parts) == 1:
        return parts[0]
    out: Columns = {}
    for c in list(parts[0]) if parts else []:
        out[c] = np.concatenate([p[c] for p in parts])
        for p in parts:
            del p[c]
    return out


def available() -> bool:
    try:
        import adbc_driver_manager  # noqa: F401
        import adbc_driver_sqlite  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


_NUMPY_OF = {
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "double": np.float64,
    "float": np.float32,
}


def _values(a: Any, dtype: DTypeLike) -> np.ndarray:
    """A fixed-width Arrow array's values as a new numpy array of ``dtype`` (a copy: a view would
    keep the driver's whole batch alive — measured 200 bytes a row held against 48 copied). Read
    from the data buffer directly: ``Array.to_numpy`` and ``pc.fill_null`` with a Python value
    import pandas (0.6 s and 40 MiB, for nothing here). Values at NULL slots are undefined."""
    src = _NUMPY_OF.get(str(a.type))
    if src is None:
        raise Unavailable(f"column type {a.type}")
    buf = a.buffers()[1]
    if buf is None or not len(a):
        return np.zeros(len(a), dtype)
    return np.frombuffer(buf, src, len(a), a.offset * np.dtype(src).itemsize).astype(dtype)


def _nulls(a: Any) -> np.ndarray:
    """True where the Arrow array holds NULL."""
    bitmap = a.buffers()[0]
    if bitmap is None or not a.null_count:
        return np.zeros(len(a), bool)
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")
    nulls: np.ndarray = bits[a.offset : a.offset + len(a)] == 0
    return nulls


def _batch_columns(
    batch: Any, names: list[str], text: set[str], real: set[str], spaces: dict[str, TextSpace] | None = None
) -> Columns:
    import pyarrow as pa
    import pyarrow.compute as pc

    out: Columns = {}
    for j, col in enumerate(names):
        a = batch.column(j)
        if col in text:
            if not (pa.types.is_string(a.type) or pa.types.is_large_string(a.type) or pa.types.is_null(a.type)):
                a = pc.cast(a, pa.string())
            if pa.types.is_null(a.type):
                out[col] = TextColumn([None], np.zeros(len(a), np.int64))
                continue
            enc = pc.dictionary_encode(a)
            if isinstance(enc, pa.ChunkedArray):
                enc = enc.combine_chunks()
            codes = _values(enc.indices, np.int64)
            if enc.indices.null_count:
                codes[_nulls(enc.indices)] = len(enc.dictionary)
            if spaces is not None and col in spaces:  # straight into the caller's code space
                out[col] = spaces[col].add_arrow(enc.dictionary, codes)
            else:
                out[col] = TextColumn(enc.dictionary.to_pylist() + [None], codes)
        elif col in real:
            if not (pa.types.is_floating(a.type) or pa.types.is_integer(a.type)):
                raise Unavailable(f"{col}: {a.type}")
            if a.null_count:
                raise Unavailable(f"{col}: NULL")
            out[col] = _values(a, np.float64)
        else:
            if not pa.types.is_integer(a.type):
                raise Unavailable(f"{col}: {a.type}")  # a float or text where integers belong
            if a.null_count:
                raise Unavailable(f"{col}: NULL")
            out[col] = _values(a, np.int64)
    return out


def _join(parts: list[Columns], names: list[str], text: set[str], real: set[str]) -> Columns:
    if not parts:
        return {
            c: TextColumn([], np.empty(0, np.int64))
            if c in text
            else np.empty(0, np.float64 if c in real else np.int64)
            for c in names
        }
    if len(parts) == 1:
        return parts[0]
    out = {}
    for c in names:  # column by column, each part's column freed once joined: memory grows by one column
        out[c] = TextColumn.concat([p[c] for p in parts]) if c in text else np.concatenate([p[c] for p in parts])
        for p in parts:
            del p[c]
    return out


class SqliteColumns:
    """An SQLite database read through the ADBC driver, read-only. The driver manager's own API,
    not its DB-API module (which imports pandas: 0.2–1 s of start-up for nothing here)."""

    def __init__(self, path: str, wal: bool = False) -> None:
        if not available():
            raise Unavailable("adbc-driver-sqlite and pyarrow are not installed")
        import adbc_driver_manager
        import adbc_driver_sqlite

        uri = pathlib.Path(path).absolute().as_uri().replace("file://", "file:", 1)
        uri += "?mode=ro&immutable=1" if wal else "?mode=ro"
        try:
            self.db = adbc_driver_sqlite.connect(uri)
            self.con = adbc_driver_manager.AdbcConnection(self.db)
        except Exception as e:  # the driver's errors are its own classes
            raise Unavailable(str(e)) from None

    def fetch(
        self,
        sql: str,
        names: list[str],
        text: Iterable[str] = (),
        real: Iterable[str] = (),
        reduce: Callable[[Columns], Columns] | None = None,
        spaces: dict[str, TextSpace] | None = None,
    ) -> Columns:
        """Run ``sql`` (its result columns named ``names``, in order): int64 arrays, float64 for
        ``real``, :class:`TextColumn` for ``text`` (one code space for the whole result, or the
        caller's ``spaces``, shared by several fetches: the chunks of one table).
        ``reduce(batch) → dict of arrays``, where given, turns each batch into what the caller
        keeps as soon as it is read, so the whole table is never held as fetched."""
        import adbc_driver_manager
        import pyarrow as pa

        text, real = set(text), set(real)
        try:
            cur = adbc_driver_manager.AdbcStatement(self.con)
        except Exception as e:
            raise Unavailable(str(e)) from None
        try:
            cur.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cur.set_sql_query(sql)
            stream, _ = cur.execute_query()
            reader = pa.RecordBatchReader._import_from_c(stream.address)
            parts = []
            if spaces is None:
                spaces = {c: TextSpace() for c in text}
            for b in reader:
                if not b.num_rows:
                    continue
                part = _batch_columns(b, names, text, real, spaces)  # texts into one code space at once
                parts.append(reduce(part) if reduce is not None else part)
        except Unavailable:
            raise
        except Exception as e:  # type inference refused a row, invalid UTF-8, …
            raise Unavailable(f"{type(e).__name__}: {str(e)[:120]}") from None
        finally:
            try:
                cur.close()
            except Exception:
                pass
        if reduce is not None:
            return join_arrays(parts)
        return _join(parts, names, text, real)

    def close(self) -> None:
        for h in (self.con, self.db):
            try:
                h.close()
            except Exception:
                pass
        release_arrow_memory()


def release_arrow_memory() -> None:
    """Hand back what pyarrow's allocator (mimalloc or jemalloc) keeps of the batches once read:
    ≈ 30 MiB after a 1 GB Nsight export, held through the whole analysis otherwise."""
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except (ImportError, AttributeError):  # pyarrow < 13 has no release_unused
        pass


class ArrowDir:
    """Nsight's columnar export (``nsys export --type arrowdir|parquetdir``): a directory holding
    one ``TABLE.arrow`` (Arrow IPC) or ``TABLE.parquet`` file per table."""

    SUFFIXES = (".arrow", ".parquet")

    def __init__(self, path: str) -> None:
        if not available():
            raise Unavailable(
                "pyarrow is not installed: `pip install pyarrow` reads Nsight's arrowdir/parquetdir exports"
            )
        self.path = path
        self.files: dict[str, str] = {}
        for name in sorted(os.listdir(path)):
            stem, ext = os.path.splitext(name)
            if ext in self.SUFFIXES and stem not in self.files:
                self.files[stem] = os.path.join(path, name)

    @classmethod
    def looks_like(cls, path: str) -> bool:
        try:
            names = os.listdir(path)
        except OSError:
            return False
        return any(n in (f"CUPTI_ACTIVITY_KIND_KERNEL{s}", f"StringIds{s}") for n in names for s in cls.SUFFIXES)

    def tables(self) -> set[str]:
        return set(self.files)

    def schema(self, table: str) -> list[str]:
        f = self.files[table]
        if f.endswith(".parquet"):
            import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no type information

            return list(pq.read_schema(f).names)

        return list(self._open_ipc(f).schema.names)

    @staticmethod
    def _open_ipc(f: str) -> Any:  # a pyarrow IPC file or stream reader
        import pyarrow as pa
        import pyarrow.ipc as ipc  # type: ignore[import-untyped]  # pyarrow ships no type information

        source = pa.memory_map(f)
        try:
            return ipc.open_file(source)
        except pa.ArrowInvalid:
            return ipc.open_stream(pa.memory_map(f))

    def batches(self, table: str, columns: list[str]) -> Iterator[Any]:  # pyarrow RecordBatches
        f = self.files[table]
        if f.endswith(".parquet"):
            import pyarrow.parquet as pq

            yield from pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS, columns=columns)
            return
        r = self._open_ipc(f)
        if hasattr(r, "num_record_batches"):
            for i in range(r.num_record_batches):
                yield r.get_batch(i).select(columns)
        else:
            for b in r:
                yield b.select(columns)

    def table(
        self,
        table: str,
        wanted: dict[str, object],
        text: Iterable[str] = (),
        real: Iterable[str] = (),
        row_filter: Callable[[Columns], np.ndarray] | None = None,
    ) -> Columns:
        """``wanted``: column → default value where the table lacks it (None: required). NULLs
        take the default too. ``row_filter(batch_columns) → bool mask`` selects rows."""
        import pyarrow as pa
        import pyarrow.compute as pc

        text, real = set(text), set(real)
        have = set(self.schema(table))
        missing = [c for c, d in wanted.items() if c not in have and d is None]
        if missing:
            raise Unavailable(f"{table} lacks {missing}")
        present = [c for c in wanted if c in have]
        names = list(wanted)
        parts = []
        for b in self.batches(table, present):
            n = b.num_rows
            cols = []
            for c in names:
                if c in have:
                    a = b.column(present.index(c))
                    if c not in text and wanted[c] is not None and a.null_count:
                        a = pc.fill_null(
                            a, pa.scalar(wanted[c]).cast(a.type) if not pa.types.is_null(a.type) else wanted[c]
                        )
                    elif c not in text and a.null_count:
                        a = pc.fill_null(a, 0)
                else:
                    a = (
                        pa.nulls(n, pa.string())
                        if c in text
                        else pa.array(np.full(n, wanted[c], np.float64 if c in real else np.int64))
                    )
                if c not in text and pa.types.is_null(a.type):
                    a = pa.array(np.full(n, wanted[c] or 0, np.float64 if c in real else np.int64))
                cols.append(a)
            part = _batch_columns(pa.RecordBatch.from_arrays(cols, names=names), names, text, real)
            if row_filter is not None:
                keep = row_filter(part)
                part = {
                    c: (v.take(np.flatnonzero(keep)) if isinstance(v, TextColumn) else v[keep]) for c, v in part.items()
                }
            parts.append(part)
        return _join(parts, names, text, real)
