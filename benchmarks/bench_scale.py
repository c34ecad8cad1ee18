"""Benchmark: trainscope on 0.1 / 0.3 / 1 GB Kineto traces versus Holistic Trace Analysis' load.

Run on demand (not a test):

    python benchmarks/bench_scale.py [--sizes 0.1,0.3,1] [--no-hta] [--gzip] [--keep DIR]

The traces are built by repeating a real trace (default: the A100 control trace of HTA's test
data, 35 MB of JSON) end to end, each copy shifted past the previous one in time and with its
correlation, external and flow ids shifted, so every copy is a new stretch of the same run.
They are written into a temporary directory (or ``--keep DIR``), never into the repository.

Each measurement runs in a fresh subprocess; peak RSS is that child's own ``ru_maxrss`` and CPU
its user + system time (measured in a wrapper process per run). On a shared machine the wall time
stretches with the load average (printed per row); CPU time is what carries to an idle machine. trainscope is timed end to end (process start to the
JSON document on stdout); HTA is timed around ``TraceAnalysis(...)`` inside its process (load
alone, imports excluded). HTA on 1 GB takes minutes: ``--no-hta`` skips it.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "kineto" / "hta_a100_control.json.gz"

HTA_LOAD = """
import sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
TraceAnalysis(trace_files={0: sys.argv[1]}, trace_dir=sys.argv[2])
print(time.perf_counter() - t0)
"""
_ID_ARGS = ("correlation", "External id", "Profiler Event Index", "Ev Idx")


def build_trace(source: pathlib.Path, target_bytes: int, out: pathlib.Path, compress: bool = False) -> tuple[int, int]:
    """Write ``source`` repeated (shifted in time and ids) until ``target_bytes`` of JSON; returns
    (copies, bytes of JSON written)."""
    opener = gzip.open if str(source).endswith(".gz") else open
    with opener(source, "rt") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    period = int(t1 - t0) + 1000  # µs; one copy after the other with a 1 ms gap
    max_id = 1 + max([int(e["id"]) for e in events if isinstance(e.get("id"), int)]
                     + [int(e["args"][k]) for e in events for k in _ID_ARGS
                        if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)] + [0])
    head = json.dumps(doc, indent=2)
    assert head.endswith("}")
    written = 0
    sink = gzip.open(out, "wb", compresslevel=1) if compress else open(out, "wb")
    with sink as w:
        def put(s: str) -> None:
            nonlocal written
            b = s.encode()
            written += len(b)
            w.write(b)

        put(head[:-1].rstrip() + ',\n  "traceEvents": [\n')
        copy = 0
        first = True
        while written < target_bytes:
            dt, did = copy * period, copy * max_id
            parts = []
            for e in events:
                if copy and e.get("ph") == "M":
                    continue  # metadata once
                e2 = dict(e)
                if "ts" in e2 and isinstance(e2["ts"], (int, float)):
                    e2["ts"] = e2["ts"] + dt
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + did
                a = e2.get("args")
                if isinstance(a, dict):
                    a = dict(a)
                    for k in _ID_ARGS:
                        if isinstance(a.get(k), int):
                            a[k] = a[k] + did
                    e2["args"] = a
                parts.append("  " + json.dumps(e2))
            put(("" if first else ",\n") + ",\n".join(parts))
            first = False
            copy += 1
        put("\n  ]\n}\n")
    return copy, written


NSYS_SOURCE = ROOT / "tests" / "data" / "nsys" / "cs336_small_train_step_a100.sqlite"
_NSYS_TIMED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")


def build_nsys(source: pathlib.Path, target_bytes: int, out: pathlib.Path) -> int:
    """Copy an Nsight export and repeat its activity rows (shifted in time and correlation ids)
    until the database reaches ``target_bytes``; returns the copies."""
    import shutil
    import sqlite3

    shutil.copyfile(source, out)
    con = sqlite3.connect(out)
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'") if t in _NSYS_TIMED]
    lo, hi, max_corr = None, None, 0
    cols = {}
    for t in tables:
        cols[t] = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
        a, b = con.execute(f'SELECT min(start), max(COALESCE("end", start)) FROM "{t}"').fetchone()
        if a is not None:
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
        if "correlationId" in cols[t]:
            max_corr = max(max_corr, con.execute(f'SELECT COALESCE(max(correlationId), 0) FROM "{t}"').fetchone()[0])
    period = (hi - lo) + 1_000_000
    base = {t: f"SELECT * FROM \"{t}\"" for t in tables}
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    for t in tables:  # originals kept aside so every copy shifts the original rows
        con.execute(f'CREATE TEMP TABLE "orig_{t}" AS {base[t]}')
    copies = 1
    while out.stat().st_size < target_bytes:
        for t in tables:
            sel = []
            for c in cols[t]:
                if c in ("start", "end"):
                    sel.append(f'"{c}" + {copies * period}')
                elif c == "correlationId":
                    sel.append(f'"{c}" + {copies * (max_corr + 1)}')
                elif c in ("id", "rowid"):
                    sel.append("NULL")
                else:
                    sel.append(f'"{c}"')
            con.execute(f'INSERT INTO "{t}" ({", ".join(chr(34) + c + chr(34) for c in cols[t])}) '
                        f'SELECT {", ".join(sel)} FROM "orig_{t}"')
        con.commit()
        copies += 1
    con.close()
    return copies


def _run(cmd: list[str]) -> tuple[float, float, str, float]:
    """(wall seconds, peak RSS MiB, stdout, CPU seconds) of one child run, measured by a wrapper process."""
    wrapper = ("import resource, subprocess, sys, time; t=time.perf_counter(); "
               "p=subprocess.run(sys.argv[1:], capture_output=True, text=True); w=time.perf_counter()-t; "
               "sys.stderr.write(p.stderr[-3000:]); "
               "r=resource.getrusage(resource.RUSAGE_CHILDREN); "
               "print(p.returncode, w, r.ru_maxrss, r.ru_utime + r.ru_stime); print(p.stdout[-400:])")
    p = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, check=True)
    first, _, rest = p.stdout.partition("\n")
    rc, wall, rss, cpu = first.split()
    if int(rc) != 0:
        sys.exit(f"benchmark command failed ({rc}): {' '.join(cmd)}\n{p.stderr}")
    return float(wall), int(rss) / 1024, rest, float(cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.1,0.3,1", help="trace sizes in GB of JSON (10⁹ bytes), comma-separated")
    ap.add_argument("--source", default=str(SOURCE), help="the real trace to repeat")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA (its 1 GB load takes minutes)")
    ap.add_argument("--gzip", action="store_true", help="write the traces gzip-compressed (.json.gz)")
    ap.add_argument("--nsys", action="store_true",
                    help="build Nsight Systems SQLite exports instead (sizes are of the database file); HTA is skipped")
    ap.add_argument("--keep", metavar="DIR", help="build the traces in DIR and keep them (default: a temporary dir)")
    args = ap.parse_args()
    sizes = [float(s) for s in args.sizes.split(",") if s.strip()]
    tmp = tempfile.TemporaryDirectory() if not args.keep else None
    where = pathlib.Path(args.keep or tmp.name)
    where.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; source {pathlib.Path(args.source).name}")
    try:
        for gb in sizes:
            if args.nsys:
                path = where / f"scale_{gb:g}GB.sqlite"
                if not path.exists():
                    t = time.perf_counter()
                    copies = build_nsys(NSYS_SOURCE, int(gb * 1e9), path)
                    print(f"built {path.name}: {copies} copies in {time.perf_counter() - t:.0f} s", flush=True)
                ts_wall, ts_rss, _, ts_cpu = _run([sys.executable, "-m", "trainscope", "analyze", str(path),
                                                   "--format", "json", "-q"])
                rows.append((path.stat().st_size / 1e6, ts_wall, ts_cpu, ts_rss, None, os.getloadavg()[0]))
                print(_row(*rows[-1]), flush=True)
                continue
            path = where / f"scale_{gb:g}GB.json{'.gz' if args.gzip else ''}"
            if not path.exists():
                t = time.perf_counter()
                copies, n = build_trace(pathlib.Path(args.source), int(gb * 1e9), path, args.gzip)
                print(f"built {path.name}: {copies} copies, {n / 1e6:,.0f} MB of JSON in {time.perf_counter() - t:.0f} s",
                      flush=True)
            json_mb = _json_bytes(path) / 1e6
            ts_wall, ts_rss, _, ts_cpu = _run([sys.executable, "-m", "trainscope", "analyze", str(path), "--format", "json", "-q"])
            hta = None
            if not args.no_hta:
                with tempfile.TemporaryDirectory() as hdir:
                    wall, rss, out, cpu = _run([sys.executable, "-c", HTA_LOAD, str(path), hdir])
                    hta = (float(out.strip().splitlines()[-1]), rss, cpu)
            load = os.getloadavg()[0]
            rows.append((json_mb, ts_wall, ts_cpu, ts_rss, hta, load))
            print(_row(*rows[-1]), flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print()
    print("| trace (JSON) | trainscope wall | CPU | peak RSS | RSS / size | HTA load (wall) | HTA process CPU | HTA RSS "
          "| wall ratio | RSS ratio | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(_row(*r))
    return 0


def _json_bytes(path: pathlib.Path) -> int:
    if not str(path).endswith(".gz"):
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            n += len(chunk)
    return n


def _row(mb: float, wall: float, cpu: float, rss: float, hta, load: float) -> str:
    hta_t = f"{hta[0]:.1f} s" if hta else "—"
    hta_c = f"{hta[2]:.1f} s" if hta else "—"
    hta_m = f"{hta[1]:,.0f} MiB" if hta else "—"
    ratio_t = f"{wall / hta[0]:.2f}" if hta else "—"
    ratio_m = f"{rss / hta[1]:.2f}" if hta else "—"
    return (f"| {mb:,.0f} MB | {wall:.1f} s | {cpu:.1f} s | {rss:,.0f} MiB | {rss * 2**20 / (mb * 1e6):.2f} | {hta_t} | "
            f"{hta_c} | {hta_m} | {ratio_t} | {ratio_m} | {load:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
