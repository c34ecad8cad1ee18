"""The per-rank map, run serially, in a process pool (``--jobs N``) or on a Dask cluster (``--dask``).

What crosses a process (or network) boundary: a file path and the analysis options in; a list of
:class:`~trainscope.analyzers.ranks.alignment.RankSummary` (tens of kilobytes per rank) or a one-line error
out. No trace is ever sent: each worker reads its rank's file where it sees it, so on a cluster the
paths must name a file system every worker mounts.

The reduce (alignment, stragglers, the many-rank view) runs in the caller on the summaries.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from dataclasses import field
from typing import Any
from typing import cast

from trainscope.analyzers.ranks.alignment import RankSummary
from trainscope.analyzers.ranks.alignment import summarize
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.analyzers.trace.range_steps import StepRangeError
from trainscope.api import trace_cache as columns  # one module object: tests replace its open_cached
from trainscope.api.cache import enabled
from trainscope.api.inputs import InputDescription
from trainscope.api.inputs import describe_input
from trainscope.collectors import TraceError
from trainscope.collectors.inputs import open_any
from trainscope.collectors.readers import max_decompressed_override
from trainscope.collectors.readers import set_max_decompressed
from trainscope.traces.model import Trace
from trainscope.traces.model import TraceSet

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.I)

RankProgress = Callable[[int, int], None]
"""``progress(ranks_done, ranks_total)``."""

RankResult = list[RankSummary] | str
"""What the map gives for one file: its summaries, or the one line saying why it could not be read."""


@dataclass(frozen=True)
class MapOptions:
    """The analysis options every worker applies (picklable)."""

    thresholds: tuple[tuple[str, float], ...] = ()
    peak_tflops: float | None = None
    step_range: str | None = None
    peak_bandwidth: float | None = None
    rules: Rules | None = None  # the whole table (a picklable value); else the defaults with ``thresholds``
    # --max-decompressed of the caller: a module setting of the parent, so it travels with the options
    # to worker processes (spawned, forkserver or Dask workers do not inherit it).
    max_decompressed: int | None = None
    # Read each rank file through the trace cache (trainscope/api/trace_cache.py; local workers only).
    cache: bool = False

    def table(self) -> Rules:
        return self.rules if self.rules is not None else Rules(dict(self.thresholds))


DEFAULTS = MapOptions()
"""The default options (frozen: one shared value serves every call)."""


@dataclass
class RankSet:
    """The map's result: summaries in rank order, and the files that could not be read."""

    path: str
    summaries: list[RankSummary]
    warnings: list[str] = field(default_factory=list)


def available_cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def summarize_rank(path: str, options: MapOptions = DEFAULTS) -> RankResult:
    """The map step: read one file, analyze each trace it holds, keep the summary. Pure in its
    inputs (a path and options) and picklable both ways; an unreadable file is a one-line string."""

    rules = options.table()
    if max_decompressed_override() != options.max_decompressed:  # the options are the caller's setting
        set_max_decompressed(options.max_decompressed)
    try:
        traces = _read(path, options.cache)
    except TraceError as e:
        return e.problem
    except (OSError, RecursionError) as e:
        return f"cannot read: {getattr(e, 'strerror', None) or e}"
    out = []
    for t in traces:
        if t.rank is None:
            m = _RANK_IN_NAME.search(os.path.basename(path))
            t.rank = int(m.group(1)) if m else None
        try:
            a = analyze_trace(t, rules, options.peak_tflops, options.step_range, options.peak_bandwidth)
        except StepRangeError as e:
            return f"--step-range: {e}"
        out.append(summarize(t, a))
    return out


def _read(path: str, cache: bool) -> list[Trace]:
    """The traces of one rank file, through the trace cache when asked (and not turned off)."""

    if cache and enabled():
        return columns.open_cached(path, lambda: TraceSet(path, open_any(path))).traces
    return open_any(path)


def map_ranks(
    files: list[str],
    options: MapOptions = DEFAULTS,
    jobs: int | None = None,
    dask: Any = None,
    progress: RankProgress | None = None,
    fn: Callable[[str, MapOptions], RankResult] = summarize_rank,
) -> list[RankResult]:
    """``fn(file, options)`` for every file, in file order: serially (``jobs == 1`` or one file),
    in ``jobs`` worker processes (default: the machine's cores), or on the Dask scheduler at
    ``dask`` (an address such as ``tcp://host:8786``, or a ``distributed.Client``)."""
    n = len(files)
    done = 0
    results: list[RankResult | None] = [None] * n

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, n)

    if dask is not None:
        return _map_dask(files, options, dask, fn, tick)
    jobs = jobs or available_cores()
    if jobs <= 1 or n <= 1:
        for i, f in enumerate(files):
            results[i] = fn(f, options)
            tick()
        return cast(list[RankResult], results)  # every slot filled
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, n)) as pool:
            futures = {pool.submit(fn, f, options): i for i, f in enumerate(files)}
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                tick()
    except BrokenProcessPool:
        raise RuntimeError(
            f"a worker process died while analyzing ranks (out of memory?); retry with fewer --jobs than {jobs}"
        ) from None
    return cast(list[RankResult], results)  # every slot filled


def _map_dask(
    files: list[str],
    options: MapOptions,
    dask: Any,
    fn: Callable[[str, MapOptions], RankResult],
    tick: Callable[[], None],
) -> list[RankResult]:
    """``fn`` over ``files`` on the Dask scheduler ``dask``: an address, or a ``distributed.Client``."""
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise RuntimeError("--dask needs Dask distributed: pip install 'trainscope[dask]'") from None
    own = isinstance(dask, str)
    try:
        client = Client(dask, timeout="5s") if own else dask  # type: ignore[no-untyped-call]  # distributed is untyped
    except (OSError, TimeoutError) as e:
        raise RuntimeError(f"cannot reach the Dask scheduler at {dask}: {e}") from None
    try:
        futures = client.map(fn, files, options=options, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[RankResult | None] = [None] * len(files)
        for fut in dask_completed(futures):  # type: ignore[no-untyped-call]  # distributed is untyped
            results[index[fut.key]] = fut.result()
            tick()
        return cast(list[RankResult], results)  # every slot filled
    finally:
        if own:
            client.close()


def run_rank_set(
    path: str | InputDescription,
    options: MapOptions = DEFAULTS,
    jobs: int | None = None,
    dask: Any = None,
    progress: RankProgress | None = None,
) -> RankSet:
    """A rank directory or glob → summaries in rank order (files without a rank after them, in
    file order) and a warning per file that could not be read. Raises ValueError when no file
    holds a trace."""
    ranks = describe_input(path)
    files = list(ranks.rank_files)
    if not files:
        raise ValueError("directory holds no trace files (*.json, *.json.gz, *.sqlite)")
    summaries: list[RankSummary] = []
    warnings: list[str] = []
    for f, res in zip(files, map_ranks(files, options, jobs, dask, progress)):
        if isinstance(res, str):
            if res.startswith("--step-range"):
                raise ValueError(res)
            warnings.append(f"skipped {os.path.basename(f)}: {res}")
        else:
            summaries.extend(res)
    if not summaries:
        raise ValueError("no trace in the directory could be loaded (" + "; ".join(warnings[:3]) + ")")
    summaries.sort(key=lambda s: (s.rank is None, s.rank if s.rank is not None else 0))
    return RankSet(ranks.given, summaries, warnings)
