"""Row-by-row construction of the columnar model: per-column Python lists, frozen to numpy once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from typing import Generic
from typing import Protocol
from typing import TypeVar

import numpy as np

from trainscope.traces.model import Annotations
from trainscope.traces.model import Column
from trainscope.traces.model import Copies
from trainscope.traces.model import Counters
from trainscope.traces.model import CpuOps
from trainscope.traces.model import Device
from trainscope.traces.model import Kernels
from trainscope.traces.model import MemoryEvents
from trainscope.traces.model import Memsets
from trainscope.traces.model import RuntimeCalls
from trainscope.traces.model import Table
from trainscope.traces.model import Thread
from trainscope.traces.model import Trace

_T = TypeVar("_T", bound=Table)


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


class TableBuilder(Generic[_T]):
    """Collects rows for one table; ``add`` takes values in ``FIELDS`` order."""

    def __init__(self, table: type[_T]) -> None:
        self.table = table
        self.skipped = 0  # rows dropped by build(): a value outside its column's type
        self.fields = list(table.FIELDS)
        self.columns: list[list[object]] = [[] for _ in self.fields]
        # Bound appenders, so the hot loop does one call per column and no attribute lookups.
        self._appends = [c.append for c in self.columns]

    def add(self, *values: object) -> None:
        for append, v in zip(self._appends, values):
            append(v)

    def __len__(self) -> int:
        return len(self.columns[0])

    def build(self) -> _T:
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

    def _salvage(self, dtypes: list[np.dtype[Any]]) -> list[Column]:
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
        return [
            np.array([col[i] for i in keep], dtype=dt) if keep else np.empty(0, dt)
            for col, dt in zip(self.columns, dtypes)
        ]


class _Skips(Protocol):
    @property
    def skipped(self) -> int: ...


def skipped_warning(builders: Iterable[_Skips], what: str = "events") -> list[str]:
    """The one warning for every row the builders dropped (empty when none was)."""
    n = sum(b.skipped for b in builders)
    return (
        [
            f"{n:,} {what} skipped: a value beyond what the trace model stores (an integer beyond 64 bits, "
            "a device or GPU index beyond 16 bits)"
        ]
        if n
        else []
    )


class ChunkedTableBuilder(TableBuilder[_T]):
    """A :class:`TableBuilder` frozen to numpy slice by slice (``flush``), so a streamed trace
    holds its rows as arrays, not as millions of Python ints; ``build`` joins the slices."""

    def __init__(self, table: type[_T]) -> None:
        super().__init__(table)
        self.parts: list[_T] = []

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

    def build(self) -> _T:
        self.flush()
        parts, self.parts = self.parts, []
        if not parts:
            return TableBuilder.build(self)
        if len(parts) == 1:
            return parts[0]
        return self.table(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in self.fields})


class TraceBuilder:
    """A normalized :class:`~trainscope.traces.model.Trace` written event by event — for synthetic
    traces (the property tests of the invariant pass, the semantic fuzzer): host threads, step
    markers, CPU operators, launch calls linked to their kernels, copies and memsets by correlation
    id, on one rank. Times are ns from the trace's origin."""

    def __init__(
        self, source: str = "synthetic", rank: int | None = None, device_name: str = "NVIDIA A100-SXM4-80GB"
    ) -> None:
        self.source, self.rank = source, rank
        self.strings = StringTable()
        self.devices = [Device(0, device_name, "nvidia", 80 << 30, 108, "8.0")]
        self.threads = [Thread("1", "1", "python")]
        self.kernels, self.copies, self.memsets = TableBuilder(Kernels), TableBuilder(Copies), TableBuilder(Memsets)
        self.runtime, self.cpu_ops, self.annotations = (
            TableBuilder(RuntimeCalls),
            TableBuilder(CpuOps),
            TableBuilder(Annotations),
        )
        self._corr = 0

    def step(self, n: int, ts: int, dur: int, device: int = -1) -> None:
        """A ``ProfilerStep#n`` marker on the host lane (``device`` -1) or a GPU lane."""
        self.annotations.add(ts, dur, 0, self.strings.intern(f"ProfilerStep#{n}"), device)

    def annotation(self, name: str, ts: int, dur: int, device: int = -1) -> None:
        self.annotations.add(ts, dur, 0, self.strings.intern(name), device)

    def cpu_op(self, name: str, ts: int, dur: int) -> None:
        self.cpu_ops.add(ts, dur, 0, self.strings.intern(name), float("nan"))

    def launch(self, ts: int, dur: int, name: str = "cudaLaunchKernel") -> int:
        """A runtime call; returns its correlation id (for the GPU work it issues)."""
        self._corr += 1
        self.runtime.add(ts, dur, 0, self.strings.intern(name), self._corr)
        return self._corr

    def kernel(self, name: str, ts: int, dur: int, correlation: int, stream: int = 7, device: int = 0) -> None:
        self.kernels.add(ts, dur, device, stream, self.strings.intern(name), correlation)

    def copy(
        self, ts: int, dur: int, nbytes: int, correlation: int, kind: int = 1, stream: int = 7, device: int = 0
    ) -> None:
        """``kind`` indexes ``COPY_KINDS`` (1: HtoD); source pinned host, destination device."""
        self.copies.add(ts, dur, device, stream, kind, 2, 3, nbytes, correlation)

    def build(self) -> Trace:
        return Trace(
            source=self.source,
            format="kineto",
            origin_ns=0,
            strings=list(self.strings.strings),
            devices=list(self.devices),
            threads=list(self.threads),
            kernels=self.kernels.build(),
            copies=self.copies.build(),
            memsets=self.memsets.build(),
            runtime=self.runtime.build(),
            cpu_ops=self.cpu_ops.build(),
            annotations=self.annotations.build(),
            memory=MemoryEvents.empty(),
            counters=Counters.empty(),
            rank=self.rank,
        )


def training_trace(
    steps: int = 4,
    wait_us: int = 8_000,
    kernels: int = 20,
    kernel_us: int = 300,
    streams: int = 1,
    copy_us: int = 200,
    rank: int | None = None,
) -> Trace:
    """A synthetic training run: per step, a DataLoader wait of ``wait_us``, one host-to-device copy
    of the batch, then ``kernels`` launches whose kernels (GEMM and elementwise, alternating) run back
    to back on ``streams`` streams, each kernel ``kernel_us`` long; the step ends 100 µs after its
    last kernel."""
    b = TraceBuilder(rank=rank)
    t = 1_000_000
    wait = wait_us * 1000
    per_stream = -(-kernels // streams)
    step_ns = 2000 + wait + 14_000 + copy_us * 1000 + max(per_stream * kernel_us * 1000, kernels * 6000) + 100_000
    for n in range(steps):
        b.step(n + 1, t, step_ns)
        b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 1000, wait)
        host = t + 2000 + wait
        c = b.launch(host, 5000, "cudaMemcpyAsync")
        gpu = host + 8000
        b.copy(gpu, copy_us * 1000, 64 << 20, c)
        gpu += copy_us * 1000
        host += 6000
        ends = [gpu] * streams
        for k in range(kernels):
            c = b.launch(host, 4000)
            s = k % streams
            start = max(ends[s], host + 5000)
            name = "ampere_sgemm_128x64_nn" if k % 2 == 0 else "void at::native::vectorized_elementwise_kernel<4>"
            b.kernel(name, start, kernel_us * 1000, c, stream=7 + s)
            ends[s] = start + kernel_us * 1000
            host += 6000
        t += step_ns
    return b.build()
