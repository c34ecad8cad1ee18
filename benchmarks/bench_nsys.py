"""Benchmark: Nsight Systems export ingest throughput (kernels per second) and analysis time.

Run on demand (not a test):  python benchmarks/bench_nsys.py [EXPORT.sqlite] [--repeat N]

Default input: the largest shared export in tests/data/nsys/. Ingest is ``open_traces`` (SQLite
read, name resolution, per-process split into the columnar model); analysis is ``analyze_set``.
Best of N in-process runs (the file is in the page cache after the first).

``--per-range-ids OUT.sqlite`` first writes a copy of EXPORT in which every emit_nvtx range has its
own seq and op_id, as a long real profile has (the exports ``bench_scale.py`` builds repeat one
file's ranges, so their texts repeat and the reader's cost for distinct texts is not seen), and
benchmarks that copy.
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


def per_range_ids(source: str, out: str) -> int:
    """Copy ``source`` to ``out`` with each emit_nvtx range's seq and op_id made its own (the row id
    put before the recorded number); returns the ranges changed."""
    import shutil
    import sqlite3

    shutil.copyfile(source, out)
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode=OFF")
    n = con.execute(
        "UPDATE NVTX_EVENTS SET text = replace(replace(text, 'seq = ', 'seq = ' || rowid || '0'),"
        " 'op_id = ', 'op_id = ' || rowid || '0') WHERE text LIKE '%, seq = %' OR text LIKE '%, op_id = %'"
    ).rowcount
    con.commit()
    con.close()
    return n


def main() -> int:
    largest = max(NSYS.glob("*.sqlite"), key=lambda p: p.stat().st_size)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", nargs="?", default=str(largest))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--per-range-ids", metavar="OUT", help="benchmark a copy with per-range seq/op_id (see above)")
    args = ap.parse_args()
    if args.per_range_ids:
        n = per_range_ids(args.export, args.per_range_ids)
        print(f"{args.per_range_ids}: {n:,} ranges with their own seq and op_id")
        args.export = args.per_range_ids

    from trainscope.analyzers.trace.analysis import analyze_set
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
