"""Benchmark: Nsight Systems export ingest throughput (kernels per second) and analysis time.

Run on demand (not a test):  python benchmarks/bench_nsys.py [EXPORT.sqlite] [--repeat N]

Default input: the largest shared export in tests/data/nsys/. Ingest is ``open_traces`` (SQLite
read, name resolution, per-process split into the columnar model); analysis is ``analyze_set``.
Best of N in-process runs (the file is in the page cache after the first).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
NSYS = ROOT / "tests" / "data" / "nsys"


def main() -> int:
    largest = max(NSYS.glob("*.sqlite"), key=lambda p: p.stat().st_size)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", nargs="?", default=str(largest))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    from trainscope.analyzers.analysis import analyze_set
    from trainscope.collectors import open_traces

    ingest, analysis = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ts = open_traces(args.export)
        t1 = time.perf_counter()
        analyze_set(ts)
        t2 = time.perf_counter()
        ingest.append(t1 - t0)
        analysis.append(t2 - t1)
    kernels = sum(len(t.kernels) for t in ts.traces)
    events = sum(
        len(t.kernels)
        + len(t.copies)
        + len(t.memsets)
        + len(t.runtime)
        + len(t.cpu_ops)
        + len(t.annotations)
        + len(t.os_runtime)
        + len(t.counters)
        for t in ts.traces
    )
    best = min(ingest)
    print(
        f"export      {os.path.basename(args.export)} ({os.path.getsize(args.export) / 2**20:.1f} MiB, "
        f"{len(ts.traces)} GPU process(es))"
    )
    print(f"kernels     {kernels:,}   all events {events:,}")
    print(
        f"ingest      best {best * 1e3:.1f} ms of {args.repeat}  →  {kernels / best:,.0f} kernels/s, "
        f"{events / best:,.0f} events/s"
    )
    print(f"analysis    best {min(analysis) * 1e3:.1f} ms")
    print(f"peak RSS    {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (whole process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
