"""The sort keys every table of declared columns shares (``s`` next column, ``r`` reverse, a header
click): one implementation for the kernels, kernel-diff and memory tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar


class SortedColumns:
    """Mixin for a widget with reactives ``sort_column`` and ``descending`` whose columns
    (``sort_columns``: objects with ``key`` and a default ``descending``) are declared once."""

    sort_columns: ClassVar[Sequence]

    def action_sort_next(self) -> None:
        keys = [c.key for c in self.sort_columns]
        self.sort_by(keys[(keys.index(self.sort_column) + 1) % len(keys)])

    def sort_by(self, key: str) -> None:
        """Sort by ``key``: the same column again reverses it; a new one starts in its own direction."""
        if key == self.sort_column:
            self.descending = not self.descending
        else:
            col = next(c for c in self.sort_columns if c.key == key)
            self.set_reactive(type(self).descending, col.descending)
            self.sort_column = key

    def action_reverse(self) -> None:
        self.descending = not self.descending
