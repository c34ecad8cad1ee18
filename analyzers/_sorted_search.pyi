"""Types of the C extension ``analyzers/_sorted_search.c`` (:func:`trainscope.analyzers.intervals.searchsorted`)."""

from typing import Any

def search(a: Any, v: Any, out: Any, right: bool, /) -> None:
    """``out[k] = numpy.searchsorted(a, v[k], 'right' if right else 'left')`` (int64 buffers)."""
