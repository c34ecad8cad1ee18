"""Time and memory of reading a CUDA memory snapshot safely, against plain ``pickle.loads`` of the
same file: the real 3.7 MB snapshot, and one of about 1 GB built by repeating its segments
(addresses shifted), blocks and trace entries (times shifted; each copy's frame lists are new
lists of the same memoized frame dicts, as PyTorch writes them).

    python benchmarks/bench_snapshot.py [--size-mb 1000] [--keep DIR] [--no-analysis] [--in-process] [--gzip]
                                        [--fallback] [--digest] [--skip-small]

Each figure is measured in a fresh process: ``pickle.loads`` (the unsafe floor, timed on the bytes
already in memory, peak RSS including those bytes) and ``load_snapshot`` (read, restricted C
unpickle and parse in a forked child under RLIMIT_AS, the model sent back): its wall time, the
parent's peak RSS and the reader child's peak RSS (``RUSAGE_CHILDREN``; it counts the pages the
child shares with its parent too). ``--in-process`` adds the same read without the child;
``--gzip`` the same read of the built snapshot gzipped, its ratios of the inflated size;
``--fallback`` the restricted unpickler's path beside the streaming reader's (the reader where the
extension is not built). CPU is user + system of the process and its reader child.
"""

from __future__ import annotations

import argparse
import gzip
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SNAPSHOT = os.path.join(HERE, "..", "tests", "data", "memory", "mem_cs336_nothanmin_trainstep.pickle.gz")

_PLAIN = """
import pickle, resource, sys, time
data = open(sys.argv[1], "rb").read()
t = time.perf_counter(); obj = pickle.loads(data); dt = time.perf_counter() - t  # trusted: built here
print(dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

_SAFE = """
import resource, sys, time
from trainscope.collectors.snapshot import load_snapshot, load_snapshot_in_process
load = load_snapshot_in_process if sys.argv[2] == "in-process" else load_snapshot
t = time.perf_counter(); snap = load(sys.argv[1]); dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the load's, before any analysis
ta = 0.0
if sys.argv[3] == "analysis":
    from trainscope.analyzers.snapshot.summary import snapshot_memory
    t = time.perf_counter(); snapshot_memory(snap); ta = time.perf_counter() - t
events = sum(len(tr) for tr in snap.traces)
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(dt, rss, kids.ru_maxrss * 1024, ta, events, me.ru_maxrss * 1024,
      me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime)
if sys.argv[4] == "digest":  # the model's value, to compare the readers' (after the figures above)
    import hashlib
    h, seen = hashlib.sha256(), {}

    def stack(frames):  # a frame list's value, hashed once per list object (equal stacks are shared)
        if id(frames) not in seen:
            seen[id(frames)] = hashlib.sha256(repr(frames).encode()).digest()
        return seen[id(frames)]

    for seg in snap.segments:
        h.update(repr((seg.device, seg.address, seg.total_size, seg.allocated_size, seg.segment_type)).encode())
        for b in seg.blocks:
            h.update(repr((b.address, b.size, b.requested_size, b.state)).encode() + stack(b.frames))
    for tr in snap.traces:
        h.update(repr(tr.device).encode())
        for col in (tr.action, tr.addr, tr.size, tr.time_us):
            h.update(col.dtype.str.encode() + col.tobytes())
        h.update(b"".join(map(stack, tr.frames)))
    h.update(repr((snap.annotations, snap.allocator_settings, snap.warnings)).encode())
    print(int(h.hexdigest()[:12], 16))
"""


def _run(code: str, *args: str, reader: str = "") -> list[float]:
    """``code`` in a fresh interpreter; ``reader="unpickler"`` turns the streaming reader off."""
    env = dict(os.environ, TRAINSCOPE_SNAPSHOT_READER=reader)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"measurement failed: {out.stderr.strip()[-800:]}")
    return [float(x) for x in out.stdout.split()]


def _repeated(raw: dict, repeat: int) -> dict:
    """``raw`` with its segments (addresses shifted), blocks and events (times shifted) repeated;
    each copy's frame lists are new lists of the same memoized frame dicts, as PyTorch writes them."""
    events = raw["device_traces"][0]
    span = events[-1]["time_us"] - events[0]["time_us"] + 1
    segs = raw["segments"]
    shift = max(s["address"] + s["total_size"] for s in segs) - min(s["address"] for s in segs)

    def copy_block(b: dict, k: int) -> dict:
        c = dict(b, address=b["address"] + k * shift) if "address" in b else dict(b)
        if isinstance(b.get("frames"), list):
            c["frames"] = list(b["frames"])
        return c

    big = dict(raw)
    big["segments"] = [
        dict(s, address=s["address"] + k * shift, blocks=[copy_block(b, k) for b in s["blocks"]])
        for k in range(repeat)
        for s in segs
    ]
    big["device_traces"] = [
        [
            dict(e, time_us=e["time_us"] + k * span, frames=list(e.get("frames") or []))
            for k in range(repeat)
            for e in events
        ]
    ]
    return big


def build_large(raw: dict, path: str, size_bytes: int) -> None:
    """Write a snapshot of about ``size_bytes`` by repeating ``raw`` (the size of one more copy
    measured from one and two copies)."""
    one, two = (len(pickle.dumps(_repeated(raw, k), protocol=4)) for k in (1, 2))
    repeat = max(1, round((size_bytes - one) / (two - one)) + 1)
    with open(path, "wb") as f:
        pickle.dump(_repeated(raw, repeat), f, protocol=4)


def measure(
    path: str,
    analysis: bool,
    in_process: bool,
    inflated: str | None = None,
    fallback: bool = False,
    digest: bool = False,
) -> None:
    """``inflated``: for a gzipped ``path``, the uncompressed file (``pickle.loads``' floor and the
        size the ratios are of). ``fallback``: also the restricted unpickler's path (the reader before
        the streaming one, and where it is not built). ``digest``: print a hash of each reader's model
    (columns, frames by value, segments and blocks), to check that they read the same."""
    from trainscope.collectors.snapshot import STREAMING_MISSING

    size = os.path.getsize(inflated or path)
    mib = 2**20
    plain_s, plain_rss = _run(_PLAIN, inflated or path)
    print(
        ("gzipped: " if inflated else "")
        + f"{size / mib:9.1f} MiB  pickle.loads {plain_s:7.2f} s (RSS {plain_rss / mib:6.0f} MiB)  "
        f"load avg {os.getloadavg()[0]:.2f}"
    )
    readers = [("streaming", "")] if not STREAMING_MISSING else []
    if fallback or STREAMING_MISSING:
        readers.append(("unpickler", "unpickler"))
    for name, reader in readers:
        safe_s, parent_rss, child_rss, analysis_s, events, after, cpu, *dig = _run(
            _SAFE, path, "child", "analysis" if analysis else "-", "digest" if digest else "-", reader=reader
        )
        print(
            f"  {name:9s} {int(events):>10,} events  load_snapshot {safe_s:7.2f} s = {safe_s / plain_s:4.2f}× "
            f"(CPU {cpu:6.2f} s)  RSS parent {parent_rss / mib:6.0f} MiB ({parent_rss / size:4.2f}× file), "
            f"reader child {child_rss / mib:6.0f} MiB ({child_rss / size:4.2f}× file)"
            + (f"  analysis {analysis_s:6.2f} s (RSS then {after / mib:6.0f} MiB)" if analysis else "")
            + f"  load avg {os.getloadavg()[0]:.2f}"
            + (f"  model digest {int(dig[0]):012x}" if dig else "")
        )
        if in_process:
            s, rss, _, _, _, _, cpu = _run(_SAFE, path, "in-process", "-", "-", reader=reader)
            print(
                f"  {name:9s} in-process (no child): {s:7.2f} s = {s / plain_s:4.2f}× (CPU {cpu:6.2f} s)  "
                f"RSS {rss / mib:6.0f} MiB ({rss / size:4.2f}× file)"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=1000.0, help="size of the built snapshot (MB, 10⁶ bytes)")
    ap.add_argument("--keep", help="write the built snapshot into this directory and keep it")
    ap.add_argument("--no-analysis", action="store_true", help="skip timing snapshot_memory")
    ap.add_argument("--in-process", action="store_true", help="also time the read without the child")
    ap.add_argument(
        "--fallback",
        action="store_true",
        help="also time the restricted unpickler's path (TRAINSCOPE_SNAPSHOT_READER=unpickler)",
    )
    ap.add_argument("--digest", action="store_true", help="print a hash of each reader's model (equal = same model)")
    ap.add_argument("--skip-small", action="store_true", help="only the built snapshot")
    ap.add_argument(
        "--gzip", action="store_true", help="also read the built snapshot gzipped (ratios of its inflated size)"
    )
    a = ap.parse_args()
    print(
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
    )
    raw_bytes = gzip.open(SNAPSHOT).read()
    with tempfile.TemporaryDirectory() as d:
        small = os.path.join(d, "snapshot.pickle")
        with open(small, "wb") as f:
            f.write(raw_bytes)
        if not a.skip_small:
            measure(small, not a.no_analysis, a.in_process, fallback=a.fallback, digest=a.digest)
        large = os.path.join(a.keep or d, f"snapshot_{a.size_mb:.0f}MB.pickle")
        if not os.path.exists(large):
            build_large(pickle.loads(raw_bytes), large, int(a.size_mb * 1e6))  # trusted fixture
        measure(large, not a.no_analysis, a.in_process, fallback=a.fallback, digest=a.digest)
        if a.gzip:
            gz = large + ".gz"
            if not os.path.exists(gz):
                with open(large, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            measure(gz, not a.no_analysis, a.in_process, inflated=large, fallback=a.fallback, digest=a.digest)


if __name__ == "__main__":
    main()
