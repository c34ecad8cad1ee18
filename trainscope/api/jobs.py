"""How many cores a single trace's analysis uses when ``--jobs`` is not given: the cores this process
may use (``collectors.readers.usable_cores``: its affinity capped by the CPU quota), and one where the
second core's memory does not fit in what this process may still take
(``collectors.readers.memory_room``: the control groups' limits and the machine's MemAvailable).

The second core runs a large trace's host side beside the kernel stages
(``analyzers.trace.analysis.BESIDE_MIN_ROWS``): both chains' temporaries are then held at once. An
explicit ``--jobs`` is the user's word and is not second-guessed."""

from __future__ import annotations

import sys

from trainscope.analyzers.trace.analysis import BESIDE_MIN_ROWS
from trainscope.analyzers.trace.analysis import host_rows
from trainscope.collectors import readers
from trainscope.traces.model import TraceSet

# What the analysis with the host side beside takes above the trace already read, in bytes per host
# row (operators + runtime calls + annotations + kernels: the rows BESIDE_MIN_ROWS counts). Measured
# on the two 1 GB benchmark inputs (docs/scale.md, "The second core and the memory it needs"): the
# analysis' peak RSS (polled every 2 ms) less the RSS once the trace was read, with jobs=2: the Nsight
# export 336 MiB over 8.33 M rows = 42.3 B/row (jobs=1: 182 MiB, 22.9 B/row; the beside's extra 19.4),
# the Kineto JSON 17 MiB over 2.37 M rows = 7.5 B/row. The larger is taken. It is the serial
# analysis' own temporaries plus the coexisting chains' extra: what must fit when the decision is
# taken (the trace read), since the serial analysis needs its own part anyway.
BESIDE_BYTES_PER_ROW = 42.3
# The allocator's slack, the page cache counted as held, a trace shaped unlike the two measured: half
# again (a single core chosen wrongly costs the ≈ 4 s the host side takes at 1 GB; a second core
# chosen wrongly, the process).
BESIDE_MARGIN = 1.5


def analysis_jobs(cores: int, rows: int, available: int | None) -> int:
    """The analysis' cores: ``cores`` (what the CPU allows), or 1 where the trace is large enough for the
    host side to run beside (``rows`` ≥ BESIDE_MIN_ROWS) and the projected need, with its margin,
    exceeds ``available`` bytes (the room the control groups and the machine leave; None: unknown,
    not limited)."""
    if cores < 2 or rows < BESIDE_MIN_ROWS or available is None:
        return cores
    return cores if beside_need(rows) <= available else 1


def beside_need(rows: int) -> int:
    """Bytes the analysis with the host side beside is projected to take above the trace read, margin
    included."""
    return int(rows * BESIDE_BYTES_PER_ROW * BESIDE_MARGIN)


def default_jobs(traces: TraceSet) -> int:
    """``analysis_jobs`` for the traces read (the largest: they are analyzed one at a time), with the
    room read now; a one-line note on stderr where memory took the second core away."""
    cores = readers.usable_cores()
    rows = max((host_rows(t) for t in traces.traces), default=0)
    if cores < 2 or rows < BESIDE_MIN_ROWS:
        return cores  # no thread either way: nothing to read
    room = readers.memory_room()
    jobs = analysis_jobs(cores, rows, room.available)
    if jobs < cores:
        mib = 1 << 20
        sys.stderr.write(
            f"trainscope: memory: the analysis runs on one core: with the host side beside it would need "
            f"≈ {beside_need(rows) // mib:,} MiB, {(room.available or 0) // mib:,} MiB free (--jobs 2 to insist)\n"
        )
        sys.stderr.flush()
    return jobs
