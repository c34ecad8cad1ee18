"""Row-by-row construction of the columnar model: per-column Python lists, frozen to numpy once."""
from __future__ import annotations

from typing import Type

import numpy as np

from trainscope.traces.model import Table


class StringTable:
    """Interns names so tables store int32 indices instead of strings."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self.strings: list[str] = []

    def intern(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = len(self.strings)
            self._index[s] = i
            self.strings.append(s)
        return i


class TableBuilder:
    """Collects rows for one table; ``add`` takes values in ``FIELDS`` order."""

    def __init__(self, table: Type[Table]) -> None:
        self.table = table
        self.fields = list(table.FIELDS)
        self.columns: list[list] = [[] for _ in self.fields]
        # Bound appenders, so the hot loop does one call per column and no attribute lookups.
        self._appends = [c.append for c in self.columns]

    def add(self, *values) -> None:
        for append, v in zip(self._appends, values):
            append(v)

    def __len__(self) -> int:
        return len(self.columns[0])

    def build(self) -> Table:
        cols = {
            name: np.array(col, dtype=self.table.FIELDS[name]) if col else np.empty(0, self.table.FIELDS[name])
            for name, col in zip(self.fields, self.columns)
        }
        self.columns = []
        return self.table(**cols)


class ChunkedTableBuilder(TableBuilder):
    """A :class:`TableBuilder` frozen to numpy slice by slice (``flush``), so a streamed trace
    holds its rows as arrays, not as millions of Python ints; ``build`` joins the slices."""

    def __init__(self, table: Type[Table]) -> None:
        super().__init__(table)
        self.parts: list[Table] = []

    def mark(self) -> int:
        return len(self)

    def rollback(self, mark: int) -> None:
        for col in self.columns:
            del col[mark:]

    def flush(self) -> None:
        if not len(self):
            return
        self.parts.append(TableBuilder.build(self))
        self.columns = [[] for _ in self.fields]
        self._appends = [c.append for c in self.columns]

    def build(self) -> Table:
        self.flush()
        parts, self.parts = self.parts, []
        if not parts:
            return TableBuilder.build(self)
        if len(parts) == 1:
            return parts[0]
        return self.table(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in self.fields})
