"""Row-by-row construction of the columnar model: per-column Python lists, frozen to numpy once."""
from __future__ import annotations

from typing import Type

import numpy as np

from trainscope.traces.model import Table


# The longest name kept whole. Real kernel names (C++ templates) reach a few KB; a longer one is
# cut here, once, so no analyzer ever runs its regexes over megabytes (50 names of 1 MB took 40 s).
MAX_NAME = 8192


def clip_name(s: str) -> str:
    return s if len(s) <= MAX_NAME else f"{s[:MAX_NAME]}…[{len(s) - MAX_NAME:,} more characters]"


class StringTable:
    """Interns names so tables store int32 indices instead of strings (names clipped to MAX_NAME)."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self.strings: list[str] = []

    def intern(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            clipped = clip_name(s)
            i = self._index.get(clipped)
            if i is None:
                i = len(self.strings)
                self._index[clipped] = i
                self.strings.append(clipped)
            self._index[s] = i
        return i


class TableBuilder:
    """Collects rows for one table; ``add`` takes values in ``FIELDS`` order."""

    def __init__(self, table: Type[Table]) -> None:
        self.table = table
        self.skipped = 0  # rows dropped by build(): a value outside its column's type
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
        """The table. A row holding a value its column cannot store (an int beyond int64, a GPU index
        beyond int16, a non-number) is dropped and counted in ``skipped``, never fatal: one damaged
        event must not abort the analysis of the others."""
        dtypes = [self.table.FIELDS[name] for name in self.fields]
        try:
            arrays = [np.array(col, dtype=dt) if col else np.empty(0, dt) for col, dt in zip(self.columns, dtypes)]
        except (OverflowError, ValueError, TypeError):
            arrays = self._salvage(dtypes)
        self.columns = []
        return self.table(**dict(zip(self.fields, arrays)))

    def _salvage(self, dtypes: list[np.dtype]) -> list[np.ndarray]:
        """Column by column: find the rows whose value does not fit, then build from the others."""
        n = len(self.columns[0]) if self.columns else 0
        bad: set[int] = set()
        for col, dt in zip(self.columns, dtypes):
            try:
                np.array(col, dtype=dt)
                continue
            except (OverflowError, ValueError, TypeError):
                pass
            for i, v in enumerate(col):
                try:
                    np.array(v, dtype=dt)
                except (OverflowError, ValueError, TypeError):
                    bad.add(i)
        self.skipped += len(bad)
        keep = [i for i in range(n) if i not in bad]
        return [np.array([col[i] for i in keep], dtype=dt) if keep else np.empty(0, dt)
                for col, dt in zip(self.columns, dtypes)]


def skipped_warning(builders, what: str = "events") -> list[str]:
    """The one warning for every row the builders dropped (empty when none was)."""
    n = sum(b.skipped for b in builders)
    return [f"{n:,} {what} skipped: a value beyond what the trace model stores (an integer beyond 64 bits, "
            "a device or GPU index beyond 16 bits)"] if n else []


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
