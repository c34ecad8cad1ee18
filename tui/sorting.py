"""The sort keys every table of declared columns shares (``s`` next column, ``r`` reverse, a header
click, the table filled again when either changes): one implementation for the kernels, kernel-diff
and memory tables."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Generic
from typing import Protocol
from typing import TypeVar

from textual.reactive import reactive

if TYPE_CHECKING:  # the mixin is only ever mixed into a widget: type-check it as one
    from textual.widget import Widget as _WidgetBase
else:

    class _WidgetBase:  # a class of its own: ``object`` cannot stand before ``Generic`` among the bases
        pass


class SortColumn(Protocol):
    """A declared column as the sort keys see it: its key and its own first direction."""

    @property
    def key(self) -> str: ...

    @property
    def descending(self) -> bool: ...


C = TypeVar("C", bound=SortColumn)
R = TypeVar("R")


class SortedColumns(_WidgetBase, Generic[C]):
    """Mixin for a widget with reactives ``sort_column`` and ``descending`` whose columns
    (``sort_columns``: objects of type ``C`` with ``key`` and a default ``descending``) are declared once."""

    sort_columns: Sequence[C]  # declared on the widget's class
    sort_column: reactive[str]  # each widget declares both with its own default
    descending: reactive[bool]

    def current_column(self) -> C:
        """The declared column the table is sorted by."""
        return next(c for c in self.sort_columns if c.key == self.sort_column)

    def in_order(self, rows: list[R], key: Callable[[R], Any]) -> list[R]:
        """``rows`` sorted in place by ``key`` (the current column's) in the current direction."""
        rows.sort(key=key, reverse=self.descending)
        return rows

    @property
    def arrow(self) -> str:
        """The current direction as the headers show it."""
        return "▼" if self.descending else "▲"

    def sort_mark(self, key: str, gap: str = "") -> str:
        """The arrow (after ``gap``) on the header of the column sorted by; nothing on the others."""
        return gap + self.arrow if key == self.sort_column else ""

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

    def _refill(self) -> None:
        """Fill the table again in the current order: every widget that mixes this in defines its own
        (Textual's widget metaclass does not combine with ``abc.ABCMeta``, so this cannot be abstract)."""
        raise NotImplementedError(f"{type(self).__name__} mixes in SortedColumns without a _refill()")

    def watch_sort_column(self) -> None:
        self._refill()

    def watch_descending(self) -> None:
        self._refill()
