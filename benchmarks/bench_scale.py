"""Benchmark: trainscope on 0.1 / 0.3 / 1 GB Kineto traces versus Holistic Trace Analysis' load.

Run on demand (not a test); the floors need the ``bench`` extra (``pip install -e ".[bench]"``:
pysimdjson) and HTA's load the ``hta`` extra:

    python benchmarks/bench_scale.py [--sizes 0.1,0.3,1] [--no-hta] [--gzip] [--keep DIR]
    python benchmarks/bench_scale.py --all --sizes 1 --keep /tmp/scale   # the issue-26 table, one run
    python benchmarks/bench_scale.py --peers [--sizes 1 --keep /tmp/scale] [--nsys-ai PATH] [FILE ...]
    python benchmarks/bench_scale.py --pairs 3 --memory-stream 1 --sizes 1 --keep /tmp/scale  # the Nsight bar
    python benchmarks/bench_scale.py --pairs 3 --memory-stream 1 --sizes 1 --keep /tmp/scale \
        --baseline ../main/.venv/bin/python   # ... with the code before a change in each pair

``--all`` measures, per size and in the same run: the Kineto JSON with its floors (a bare
simdjson parse of the same file, HTA's load unless ``--no-hta``) and ``--perfetto`` on it, the
same JSON gzip-compressed, an Nsight SQLite export of the same size with its floor (a bare
column fetch of the tables and columns the reader selects), and the 64-rank map serial against
``--jobs 2`` (``--ranks N``). Every figure is printed with its ratio to its reference and the
load average, so the ratios carry to another machine even where the seconds do not.

The traces are built by repeating a real trace (default: the A100 control trace of HTA's test
data, 35 MB of JSON) end to end, each copy shifted past the previous one in time and with its
correlation, external and flow ids shifted, so every copy is a new stretch of the same run.
They are written into a temporary directory (or ``--keep DIR``), never into the repository.

Each measurement runs in a fresh subprocess; peak RSS is that child's own ``ru_maxrss`` and CPU
its user + system time (measured in a wrapper process per run). On a shared machine the wall time
stretches with the load average (printed per row); CPU time is what carries to an idle machine. trainscope is timed end to end (process start to the
JSON document on stdout); HTA is timed around ``TraceAnalysis(...)`` inside its process (load
alone, imports excluded). HTA on 1 GB takes minutes: ``--no-hta`` skips it.

``--pairs N`` measures issue 39's Nsight bar: the Kineto trace and the Nsight export of the first
size, interleaved N times (each pair: Kineto, Nsight, then the export's bare column fetch), and
prints per pair Nsight ÷ Kineto and Nsight ÷ its floor (wall), Nsight ÷ Kineto in CPU, and the load
average. ``--memory-stream K`` repeats the pairs with K processes beside each run that copy a
``--stream-mib`` buffer into another in a loop (numpy, far past any cache): a second busy program
taking memory bandwidth, the slow-memory condition (no root needed, unlike a cgroup limit); their
bandwidth together is printed. Every trainscope run here is a first look (``TRAINSCOPE_NO_CACHE=1``).
``--baseline PYTHON`` adds to each pair the Nsight export analyzed by another interpreter (another
checkout's environment: the code before a change), so before and after share the load.

``--peers`` measures trainscope beside its peers on the same inputs, paired in one run: a first look
(an empty analysis cache of its own) and a second look (the same command again: the cache's hit)
of trainscope; Holistic Trace Analysis on each Kineto input (load, temporal breakdown and idle-time
breakdown: what trainscope's verdict covers; it has no cache, so its second look is a second run);
nsys-ai's ``diagnose`` on each Nsight export, first with an empty home (its Parquet/DuckDB cache is
built) and again (the cache read). Inputs: the FILEs given, else the bundled A100 Kineto trace and
Nsight export, or with ``--sizes`` the built traces of those sizes. Ratios are peer ÷ trainscope
(wall, CPU, peak RSS) for each look, and trainscope's second look ÷ its first and ÷ the peer's warm
run. A peer that is not installed is named and skipped (nsys-ai: ``--nsys-ai PATH`` or on ``PATH``).
nsys-ai's DuckDB path loads the ``sqlite_scanner`` extension, which it downloads when it is missing.
Where the extension is installed as a package beside nsys-ai (``pip install
duckdb-extension-sqlite-scanner`` in its environment: a machine without DuckDB's extension
server), it is installed into the empty home before the first look — a one-time setup, not part of
either look. Otherwise, on a machine without that network, its log says "DuckDB unavailable" and it
falls back to sqlite3 — the table then says so, since those runs time a failed download, not its
cache.
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

from bench_analyze import HTA_LOAD  # HTA's load alone, timed in a child (benchmarks/ is on the path)

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "kineto" / "hta_a100_control.json.gz"

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
    max_id = 1 + max(
        [int(e["id"]) for e in events if isinstance(e.get("id"), int)]
        + [
            int(e["args"][k])
            for e in events
            for k in _ID_ARGS
            if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)
        ]
        + [0]
    )
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
_NSYS_TIMED = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "NVTX_EVENTS",
    "OSRT_API",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
)


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
    base = {t: f'SELECT * FROM "{t}"' for t in tables}
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
            con.execute(
                f'INSERT INTO "{t}" ({", ".join(chr(34) + c + chr(34) for c in cols[t])}) '
                f'SELECT {", ".join(sel)} FROM "orig_{t}"'
            )
        con.commit()
        copies += 1
    con.close()
    return copies


def scale_trace(args, where: pathlib.Path, gb: float) -> pathlib.Path:
    """The ``gb`` GB Kineto trace repeated from ``args.source`` in ``where``, built once and kept there."""
    path = where / f"scale_{gb:g}GB.json"
    if not path.exists():
        copies, n = build_trace(pathlib.Path(args.source), int(gb * 1e9), path)
        print(f"built {path.name}: {copies} copies, {n / 1e6:,.0f} MB", flush=True)
    return path


def scale_export(where: pathlib.Path, gb: float) -> pathlib.Path:
    """The ``gb`` GB Nsight export repeated from the bundled one in ``where``, built once and kept there."""
    path = where / f"scale_{gb:g}GB.sqlite"
    if not path.exists():
        build_nsys(NSYS_SOURCE, int(gb * 1e9), path)
        print(f"built {path.name}", flush=True)
    return path


def _run(cmd: list[str], cwd: str | None = None) -> tuple[float, float, str, float]:
    """(wall seconds, peak RSS MiB, stdout, CPU seconds) of one child run, measured by a wrapper process."""
    wrapper = (
        "import resource, subprocess, sys, time; t=time.perf_counter(); "
        "p=subprocess.run(sys.argv[1:], capture_output=True, text=True); w=time.perf_counter()-t; "
        "sys.stderr.write(p.stderr[-3000:]); "
        "r=resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(p.returncode, w, r.ru_maxrss, r.ru_utime + r.ru_stime); print(p.stdout[-400:])"
    )
    p = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, check=True, cwd=cwd)
    first, _, rest = p.stdout.partition("\n")
    rc, wall, rss, cpu = first.split()
    if int(rc) != 0:
        sys.exit(f"benchmark command failed ({rc}): {' '.join(cmd)}\n{p.stderr}")
    return float(wall), int(rss) / 1024, rest, float(cpu)


SIMDJSON_PARSE = """
import sys, time, gzip
import simdjson
path = sys.argv[1]
t0 = time.perf_counter()
if path.endswith(".gz"):
    from zlib_ng import gzip_ng
    data = gzip_ng.open(path, "rb").read()
else:
    data = open(path, "rb").read()
doc = simdjson.Parser().parse(data)
n = len(doc["traceEvents"] if hasattr(doc, "keys") else doc)
print(time.perf_counter() - t0)
"""

# The bare fetch of what collectors/nsys.py selects, through the same driver, with no processing.
COLUMN_FETCH = """
import sys, time
from trainscope.collectors.columnar import SqliteColumns
t0 = time.perf_counter()
c = SqliteColumns(sys.argv[1])
q = {
  "CUPTI_ACTIVITY_KIND_KERNEL": 'SELECT start, "end", deviceId, streamId, correlationId, globalPid, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL',
  "CUPTI_ACTIVITY_KIND_RUNTIME": 'SELECT start, "end", globalTid, nameId, correlationId, eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME',
  "NVTX_EVENTS": 'SELECT start, "end", eventType, COALESCE(globalTid, 0), COALESCE(endGlobalTid, 0), COALESCE(textId, -1), text FROM NVTX_EVENTS WHERE "end" IS NOT NULL',
  "CUPTI_ACTIVITY_KIND_MEMCPY": 'SELECT start, "end", deviceId, streamId, copyKind, srcKind, dstKind, bytes, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY',
}
for t, sql in q.items():
    # one name per result column: the select list's top-level commas (COALESCE(x, 0) holds one)
    cols, depth = 1, 0
    for ch in sql.split(" FROM ")[0]:
        depth += ch == "("
        depth -= ch == ")"
        cols += ch == "," and depth == 0
    names = [f"c{i}" for i in range(cols)]
    # A floor that skips a table is no floor: any failure ends the run (it once skipped NVTX).
    c.fetch(sql, names, text=[names[-1]] if t in ("NVTX_EVENTS",) else [])
print(time.perf_counter() - t0)
"""


def _child_seconds(code: str, *argv: str) -> tuple[float, float, float, float]:
    """(seconds the child printed, its wall, peak RSS MiB, CPU s)."""
    wall, rss, out, cpu = _run([sys.executable, "-c", code, *argv])
    return float(out.strip().splitlines()[-1]), wall, rss, cpu


def _analyze(path: pathlib.Path, *extra: str, python: str | None = None) -> tuple[float, float, str, float]:
    """A first look: the analysis cache off (a second run of the same input would read its document).
    ``python``: another interpreter (another checkout's environment: the code before a change), run
    from ``/`` so that no ``trainscope`` directory in the working directory shadows its own."""
    return _run_env(
        [python or sys.executable, "-m", "trainscope", "analyze", str(path), "--format", "json", "-q", *extra],
        {**os.environ, "TRAINSCOPE_NO_CACHE": "1"},
        cwd="/" if python else None,
    )


# A process streaming memory: copies one buffer into another (each far past any cache) until
# stopped, then says how many bytes it moved in how long. Beside a measurement it takes the
# memory bandwidth a second busy program would: the slow-memory condition of issue 39.
STREAM = """
import signal, sys, time
import numpy as np
n = int(sys.argv[1]) << 20
a = np.ones(n, np.uint8)
b = np.empty_like(a)
b[:] = a
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
print("ready", flush=True)
t0, moved = time.perf_counter(), 0
while not stop:
    np.copyto(b, a)
    a, b = b, a
    moved += 2 * n  # read one, written the other
print(moved, time.perf_counter() - t0, flush=True)
"""


class MemoryStream:
    """``n`` processes streaming memory (:data:`STREAM`, ``mib`` MiB buffers each) while the block
    runs; :attr:`gbps` is their bandwidth together (GB/s), read when they stop."""

    def __init__(self, n: int, mib: int = 256) -> None:
        self.n, self.mib, self.procs, self.gbps = n, mib, [], 0.0

    def __enter__(self) -> MemoryStream:
        for _ in range(self.n):
            p = subprocess.Popen([sys.executable, "-c", STREAM, str(self.mib)], stdout=subprocess.PIPE, text=True)
            self.procs.append(p)
        for p in self.procs:
            assert p.stdout is not None
            p.stdout.readline()  # "ready": its buffers are touched
        return self

    def __exit__(self, *exc) -> None:
        total = 0.0
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            out, _ = p.communicate(timeout=60)
            try:
                moved, secs = out.split()
                total += float(moved) / 1e9 / max(float(secs), 1e-9)
            except ValueError:
                pass
        self.gbps = total


def run_nsys_pairs(args, where: pathlib.Path) -> None:
    """Issue 39's Nsight bar: the 1 GB Nsight export beside the 1 GB Kineto trace, interleaved
    (Kineto, Nsight, the Nsight floor) ``--pairs`` times, idle and then under ``--memory-stream N``
    (N processes streaming memory beside each run); the ratios per pair, with the load average."""
    import statistics

    gb = float(args.sizes.split(",")[0])
    k_path, n_path = scale_trace(args, where, gb), scale_export(where, gb)
    conditions = [0] + ([args.memory_stream] if args.memory_stream else [])
    rows, summary = [], []
    for streams in conditions:
        ratios_k, ratios_f = [], []
        for i in range(args.pairs):
            with MemoryStream(streams, args.stream_mib) as ms:
                load0 = _load()
                k_wall, k_rss, _, k_cpu = _analyze(k_path)
                n_wall, n_rss, _, n_cpu = _analyze(n_path)
                floor, _, _, _ = _child_seconds(COLUMN_FETCH, str(n_path))
                base = _analyze(n_path, python=args.baseline) if args.baseline else None
                serial = _analyze(n_path, "--jobs", "1") if args.serial else None
                load1 = _load()
            cond = f"{streams} streaming ({ms.gbps:.1f} GB/s)" if streams else "none"
            ratios_k.append(n_wall / k_wall)
            ratios_f.append(n_wall / floor)
            rows.append(
                f"| {cond} | {i + 1} | {k_wall:.1f} s, {k_cpu:.1f} CPU-s, {k_rss:,.0f} MiB "
                f"| {n_wall:.1f} s, {n_cpu:.1f} CPU-s, {n_rss:,.0f} MiB | {floor:.1f} s "
                f"| **{n_wall / k_wall:.2f}×** | {n_wall / floor:.2f}× | {n_cpu / k_cpu:.2f}× | {load0} → {load1} |"
                + (
                    f" {base[0]:.1f} s, {base[3]:.1f} CPU-s, {base[1]:,.0f} MiB | {base[0] / k_wall:.2f}× "
                    f"| {base[3] / k_cpu:.2f}× |"
                    if base
                    else ""
                )
                + (
                    f" {serial[0]:.1f} s, {serial[3]:.1f} CPU-s, {serial[1]:,.0f} MiB | {serial[0] / k_wall:.2f}× |"
                    if serial
                    else ""
                )
            )
            print(rows[-1], flush=True)
        summary.append(
            f"memory streams {streams}: Nsight ÷ Kineto {min(ratios_k):.2f}–{max(ratios_k):.2f}× "
            f"(median {statistics.median(ratios_k):.2f}×), Nsight ÷ column fetch "
            f"{min(ratios_f):.2f}–{max(ratios_f):.2f}×"
        )
    print()
    print(f"machine: {os.cpu_count()} CPUs; load average 1/5/15 min at the end: {_load()}")
    print(
        "| memory streams | pair | Kineto (wall, CPU, peak RSS) | Nsight (wall, CPU, peak RSS) | Nsight column fetch "
        "| Nsight ÷ Kineto (wall) | Nsight ÷ fetch | Nsight ÷ Kineto (CPU) | load avg before → after |"
        + (
            " Nsight, baseline code (wall, CPU, peak RSS) | baseline ÷ Kineto (wall) | baseline ÷ Kineto (CPU) |"
            if args.baseline
            else ""
        )
        + (" Nsight `--jobs 1` (wall, CPU, peak RSS) | `--jobs 1` ÷ Kineto (wall) |" if args.serial else "")
    )
    print(
        "|---|---|---|---|---|---|---|---|---|"
        + ("---|---|---|" if args.baseline else "")
        + ("---|---|" if args.serial else "")
    )
    for r in rows:
        print(r)
    for line in summary:
        print(line)


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def build_ranks(where: pathlib.Path, n: int, source: pathlib.Path) -> pathlib.Path:
    """``n`` rank files (copies of one real trace: the same work per rank) in ``where/ranksN``."""
    import shutil

    d = where / f"ranks{n}"
    d.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        f = d / f"rank{r}.json.gz"
        if not f.exists():
            shutil.copyfile(source, f)
    return d


def run_all(args, where: pathlib.Path) -> None:
    """The issue-26 table: every input at the same size, each beside its floor, in one run."""
    from zlib_ng import gzip_ng

    rows: list[str] = []

    def row(label: str, wall: float, cpu: float, rss: float, ref: str) -> None:
        rows.append(f"| {label} | {wall:.1f} s | {cpu:.1f} s | {rss:,.0f} MiB | {ref} | {_load()} |")
        print(rows[-1], flush=True)

    for gb in [float(s) for s in args.sizes.split(",") if s.strip()]:
        path = scale_trace(args, where, gb)
        gz = where / f"scale_{gb:g}GB.json.gz"
        if not gz.exists():
            import shutil

            with open(path, "rb") as f, gzip_ng.open(gz, "wb", compresslevel=1) as g:
                shutil.copyfileobj(f, g, 1 << 24)
        db = scale_export(where, gb)
        mb = path.stat().st_size / 1e6
        floor, fw, frss, fcpu = _child_seconds(SIMDJSON_PARSE, str(path))
        row(f"simdjson parse, {mb:,.0f} MB JSON (floor)", floor, fcpu, frss, "—")
        k_wall, k_rss, _, k_cpu = _analyze(path)
        row(f"Kineto JSON {mb:,.0f} MB", k_wall, k_cpu, k_rss, f"{k_wall / floor:.2f}× simdjson parse")
        with tempfile.TemporaryDirectory() as d:
            p_wall, p_rss, _, p_cpu = _analyze(path, "--perfetto", f"{d}/x.json")
        row(
            f"Kineto JSON {mb:,.0f} MB --perfetto",
            p_wall,
            p_cpu,
            p_rss,
            f"+{100 * (p_wall / k_wall - 1):.0f} % time, +{p_rss - k_rss:,.0f} MiB",
        )
        g_wall, g_rss, _, g_cpu = _analyze(gz)
        row(
            f"Kineto .json.gz ({gz.stat().st_size / 1e6:,.0f} MB)",
            g_wall,
            g_cpu,
            g_rss,
            f"{g_wall / k_wall:.2f}× plain",
        )
        c_floor, cw, crss, ccpu = _child_seconds(COLUMN_FETCH, str(db))
        dbmb = db.stat().st_size / 1e6
        row(f"column fetch, {dbmb:,.0f} MB SQLite (floor)", c_floor, ccpu, crss, "—")
        n_wall, n_rss, _, n_cpu = _analyze(db)
        row(
            f"Nsight SQLite {dbmb:,.0f} MB",
            n_wall,
            n_cpu,
            n_rss,
            f"{n_wall / k_wall:.2f}× Kineto, {n_wall / c_floor:.2f}× column fetch",
        )
        if not args.no_hta:
            with tempfile.TemporaryDirectory() as hdir:
                h, hw, hrss, hcpu = _child_seconds(HTA_LOAD, str(path), hdir)
            row(f"HTA load {mb:,.0f} MB", h, hcpu, hrss, f"trainscope {k_wall / h:.2f}× of it")
    if args.ranks:
        d = build_ranks(
            where, args.ranks, ROOT / "tests" / "data" / "kineto" / "resnet50_v100_num_workers_0.pt.trace.json.gz"
        )
        s_wall, s_rss, _, s_cpu = _analyze(d, "--jobs", "1")
        row(f"{args.ranks} ranks, serial", s_wall, s_cpu, s_rss, "—")
        j_wall, j_rss, _, j_cpu = _analyze(d, "--jobs", "2")
        row(f"{args.ranks} ranks, --jobs 2", j_wall, j_cpu, j_rss, f"{j_wall / s_wall:.2f}× serial")
    print()
    print(f"machine: {os.cpu_count()} CPUs; load average 1/5/15 min at the end: {_load()}")
    print("| input | wall | CPU | peak RSS | ratio to its reference | load avg 1/5/15 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(r)


HTA_LOOK = """
import sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
a = TraceAnalysis(trace_files={0: sys.argv[1]}, trace_dir=sys.argv[2])
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False)
print(time.perf_counter() - t0)
"""


def _trainscope_looks(path: pathlib.Path, cache: str) -> list[tuple[float, float, float]]:
    """(wall, CPU, RSS) of trainscope's first look (empty cache) and second look (its hit)."""
    env = {**os.environ, "TRAINSCOPE_CACHE_DIR": cache}
    env.pop("TRAINSCOPE_NO_CACHE", None)
    out = []
    for _ in range(2):
        wall, rss, _, cpu = _run_env(
            [sys.executable, "-m", "trainscope", "analyze", str(path), "--format", "json", "-q"], env
        )
        out.append((wall, cpu, rss))
    return out


def _run_env(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, float, str, float]:
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return _run(cmd, cwd)
    finally:
        os.environ.clear()
        os.environ.update(old)


def _install_duckdb_extension(exe: str, env: dict) -> bool:
    """Install DuckDB's ``sqlite_scanner`` into the home ``env`` names, from the
    ``duckdb-extension-sqlite-scanner`` package of nsys-ai's own interpreter (the one its script
    names), so that nsys-ai's DuckDB path works without DuckDB's extension server. True when done."""
    try:
        first = pathlib.Path(exe).read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return False
    python = first[2:].strip() if first.startswith("#!") else ""
    if not python or not os.path.exists(python.split()[0]):
        return False
    code = "from duckdb_extensions import import_extension; import_extension('sqlite_scanner')"
    r = subprocess.run([*python.split(), "-c", code], env=env, capture_output=True, text=True)
    return r.returncode == 0


def _nsys_ai_looks(exe: str, path: pathlib.Path) -> tuple[list[tuple[float, float, float]], bool]:
    """(wall, CPU, RSS) of nsys-ai ``diagnose`` twice on a private copy of ``path`` with an empty
    home (its cache is built, then read), and whether its DuckDB path was unavailable."""
    import shutil

    with tempfile.TemporaryDirectory() as home:
        copy = pathlib.Path(home) / path.name
        shutil.copyfile(path, copy)
        env = {**os.environ, "HOME": home, "XDG_CACHE_HOME": f"{home}/.cache"}
        _install_duckdb_extension(exe, env)
        looks, degraded = [], False
        for i in range(2):
            log = f"{home}/log{i}.txt"
            wrapper = (  # its log (stdout and stderr) to a file, read for the DuckDB fallback
                "import subprocess, sys; f=open(sys.argv[1], 'w'); "
                "sys.exit(subprocess.run(sys.argv[2:], stdout=f, stderr=subprocess.STDOUT).returncode)"
            )
            wall, rss, _, cpu = _run_env(
                [
                    sys.executable,
                    "-c",
                    wrapper,
                    log,
                    exe,
                    "diagnose",
                    str(copy),
                    "--format",
                    "json",
                    "-o",
                    f"{home}/o{i}.json",
                ],
                env,
            )
            degraded |= "DuckDB unavailable" in pathlib.Path(log).read_text(errors="replace")
            looks.append((wall, cpu, rss))
        return looks, degraded


def run_peers(args, where: pathlib.Path) -> None:
    """trainscope's first and second look beside HTA (Kineto) and nsys-ai (Nsight), paired per input."""
    import shutil

    inputs = [pathlib.Path(f) for f in args.files]
    if not inputs and args.sizes_given:
        for gb in [float(s) for s in args.sizes.split(",") if s.strip()]:
            inputs += [scale_trace(args, where, gb), scale_export(where, gb)]
    if not inputs:
        inputs = [SOURCE, NSYS_SOURCE]
    exe = args.nsys_ai or shutil.which("nsys-ai")
    try:
        import hta  # noqa: F401

        have_hta = not args.no_hta
    except ImportError:
        have_hta = False
        print("HTA (traceinsight) is not installed here: the Kineto rows have no peer", flush=True)
    if exe is None:
        print("nsys-ai is not on PATH (--nsys-ai PATH): the Nsight rows have no peer", flush=True)
    rows = []

    def ratio(a: float, b: float) -> str:
        return f"×{a / b:.2f}" if b > 0 else "—"

    for path in inputs:
        mb = path.stat().st_size / 1e6
        with tempfile.TemporaryDirectory() as cache:
            first, second = _trainscope_looks(path, cache)
        nsight = path.suffix == ".sqlite"
        peer, looks, note = None, None, ""
        if nsight and exe is not None:
            peer = "nsys-ai diagnose"
            looks, degraded = _nsys_ai_looks(exe, path)
            note = (
                " (its DuckDB cache unavailable: timed a failed extension download, then sqlite3)" if degraded else ""
            )
        elif not nsight and have_hta:
            peer = "HTA load + temporal + idle breakdown"
            looks = []
            for _ in range(2):
                with tempfile.TemporaryDirectory() as hdir:
                    _, wall, rss, cpu = _child_seconds(HTA_LOOK, str(path), hdir)
                looks.append((wall, cpu, rss))
        line = f"| {path.name} ({mb:,.0f} MB) | {first[0]:.2f} s / {second[0]:.2f} s | ×{second[0] / first[0]:.3f} |"
        if looks is not None:
            (pw1, pc1, pr1), (pw2, pc2, pr2) = looks
            line += (
                f" {peer}{note}: {pw1:.2f} s / {pw2:.2f} s | first look {ratio(pw1, first[0])} wall, "
                f"{ratio(pc1, first[1])} CPU, {ratio(pr1, first[2])} RSS | second look {ratio(pw2, second[0])} wall, "
                f"{ratio(pc2, second[1])} CPU, {ratio(pr2, second[2])} RSS | trainscope's second ÷ peer's warm "
                f"{second[0] / pw2:.3f} |"
            )
        else:
            line += " no peer | — | — | — |"
        line += f" {_load()} |"
        rows.append(line)
        print(line, flush=True)
    print()
    print(f"machine: {os.cpu_count()} CPUs; load average 1/5/15 min at the end: {_load()}")
    print(
        "| input | trainscope first / second look (wall) | second ÷ first | peer: first / second run (wall) "
        "| first look, peer ÷ trainscope | second look, peer ÷ trainscope | trainscope second ÷ peer warm "
        "| load avg 1/5/15 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.1,0.3,1", help="trace sizes in GB of JSON (10⁹ bytes), comma-separated")
    ap.add_argument("--source", default=str(SOURCE), help="the real trace to repeat")
    ap.add_argument("--no-hta", action="store_true", help="skip HTA (its 1 GB load takes minutes)")
    ap.add_argument("--gzip", action="store_true", help="write the traces gzip-compressed (.json.gz)")
    ap.add_argument(
        "--nsys",
        action="store_true",
        help="build Nsight Systems SQLite exports instead (sizes are of the database file); HTA is skipped",
    )
    ap.add_argument("--keep", metavar="DIR", help="build the traces in DIR and keep them (default: a temporary dir)")
    ap.add_argument("--all", action="store_true", help="every input and its floor in one run (the issue-26 table)")
    ap.add_argument(
        "--ranks",
        type=int,
        default=0,
        metavar="N",
        help="with --all: N rank files, analyzed serially and with --jobs 2",
    )
    ap.add_argument(
        "--pairs",
        type=int,
        default=0,
        metavar="N",
        help="the Nsight bar: N interleaved pairs of the Kineto trace and the Nsight export of the first "
        "size (with the export's column-fetch floor), idle and with --memory-stream",
    )
    ap.add_argument(
        "--memory-stream",
        type=int,
        default=0,
        metavar="N",
        help="with --pairs: also measure with N processes streaming memory beside each run (slow memory)",
    )
    ap.add_argument("--stream-mib", type=int, default=256, help="each streaming process's buffer, MiB (two of them)")
    ap.add_argument(
        "--baseline",
        metavar="PYTHON",
        help="with --pairs: also run the Nsight export with this interpreter in each pair (another checkout's "
        "environment, e.g. main's: the code before a change, measured under the same load)",
    )
    ap.add_argument(
        "--serial",
        action="store_true",
        help="with --pairs: also run the Nsight export with --jobs 1 in each pair (the analysis on one core: "
        "the least memory)",
    )
    ap.add_argument("--peers", action="store_true", help="trainscope's first and second look beside HTA and nsys-ai")
    ap.add_argument("--nsys-ai", metavar="PATH", help="with --peers: the nsys-ai executable (default: on PATH)")
    ap.add_argument("files", nargs="*", help="with --peers: the inputs (default: bundled traces, or --sizes built)")
    args = ap.parse_args()
    args.sizes_given = "--sizes" in sys.argv
    for flag, run in (("peers", run_peers), ("pairs", run_nsys_pairs), ("all", run_all)):
        if getattr(args, flag):
            tmp = tempfile.TemporaryDirectory() if not args.keep else None
            where = pathlib.Path(args.keep or tmp.name)
            where.mkdir(parents=True, exist_ok=True)
            print(
                f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; load average {_load()}", flush=True
            )
            try:
                run(args, where)
            finally:
                if tmp is not None:
                    tmp.cleanup()
            return 0
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
                ts_wall, ts_rss, _, ts_cpu = _run(
                    [sys.executable, "-m", "trainscope", "analyze", str(path), "--format", "json", "-q"]
                )
                rows.append((path.stat().st_size / 1e6, ts_wall, ts_cpu, ts_rss, None, os.getloadavg()[0]))
                print(_row(*rows[-1]), flush=True)
                continue
            path = where / f"scale_{gb:g}GB.json{'.gz' if args.gzip else ''}"
            if not path.exists():
                t = time.perf_counter()
                copies, n = build_trace(pathlib.Path(args.source), int(gb * 1e9), path, args.gzip)
                print(
                    f"built {path.name}: {copies} copies, {n / 1e6:,.0f} MB of JSON in {time.perf_counter() - t:.0f} s",
                    flush=True,
                )
            json_mb = _json_bytes(path) / 1e6
            ts_wall, ts_rss, _, ts_cpu = _run(
                [sys.executable, "-m", "trainscope", "analyze", str(path), "--format", "json", "-q"]
            )
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
    print(
        "| trace (JSON) | trainscope wall | CPU | peak RSS | RSS / size | HTA load (wall) | HTA process CPU | HTA RSS "
        "| wall ratio | RSS ratio | load avg |"
    )
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
    return (
        f"| {mb:,.0f} MB | {wall:.1f} s | {cpu:.1f} s | {rss:,.0f} MiB | {rss * 2**20 / (mb * 1e6):.2f} | {hta_t} | "
        f"{hta_c} | {hta_m} | {ratio_t} | {ratio_m} | {load:.1f} |"
    )


if __name__ == "__main__":
    sys.exit(main())
