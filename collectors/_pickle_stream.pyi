"""Types of the C extension ``collectors/_pickle_stream.c``: the streaming reader of plain-data
pickles (:mod:`trainscope.collectors.snapshot` reads memory snapshots with it)."""

from collections.abc import Callable
from typing import Any
from typing import final

class Decline(Exception):
    """The reader does not stream this pickle (an opcode outside plain data, a layout, damage)."""

@final
class Plan:
    """What :func:`scan` found, for :func:`build`."""

    @property
    def memo_count(self) -> int: ...
    @property
    def memo_read(self) -> int: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def max_marks(self) -> int: ...
    @property
    def stop_offset(self) -> int: ...

@final
class Stream:
    """Stands in the built root for a list handed to the callback in batches."""

    @property
    def key(self) -> str | None: ...
    @property
    def index(self) -> int: ...
    @property
    def count(self) -> int: ...

def scan(readinto: Callable[[Any], int | None], /) -> Plan: ...
def build(
    readinto: Callable[[Any], int | None],
    plan: Plan,
    callback: Callable[[Stream, list[Any]], object],
    batch: int,
    key: str,
    each_key: str,
    /,
) -> Any: ...
