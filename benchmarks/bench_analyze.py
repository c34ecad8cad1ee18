"""Benchmark: `trainscope analyze` end to end versus Holistic Trace Analysis' load alone.

Run on demand (not a test):  python benchmarks/bench_analyze.py [TRACE] [--repeat N]

Each measurement runs in a fresh subprocess, so imports are counted and peak RSS is that run's
own (ru_maxrss of the child). Target (issue 2): trainscope end to end ≤ 0.5 × HTA's load time.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "tests" / "data" / "kineto" / "hta_a100_control.json.gz"

HTA_LOAD = """
import sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
TraceAnalysis(trace_files={0: sys.argv[1]}, trace_dir=sys.argv[2])
print(time.perf_counter() - t0)
"""


def _child(cmd: list[str]) -> tuple[float, str]:
    """Wall seconds of one run of ``cmd`` and its stdout."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"benchmark command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return wall, p.stdout


def _peak_rss(cmd: list[str]) -> float:
    """Peak RSS in MiB of one run of ``cmd``, measured in a wrapper process of its own (the
    kernel's ru_maxrss of children is a maximum over all of them, so each needs its own parent)."""
    wrapper = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, check=True).stdout
    return int(out.strip()) / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    trace = os.path.abspath(args.trace)
    ts_cmd = [sys.executable, "-m", "trainscope", "analyze", trace, "--format", "json", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        hta_cmd = [sys.executable, "-c", HTA_LOAD, trace, tmp]
        ts_times = [_child(ts_cmd)[0] for _ in range(args.repeat)]
        hta_runs = [_child(hta_cmd) for _ in range(args.repeat)]
        hta_load = [float(out.strip().splitlines()[-1]) for _, out in hta_runs]
        hta_wall = [w for w, _ in hta_runs]
        ts_rss = _peak_rss(ts_cmd)
        hta_rss = _peak_rss(hta_cmd)
    size = os.path.getsize(trace) / 2**20
    ts, hl = statistics.median(ts_times), statistics.median(hta_load)
    print(f"trace: {trace} ({size:.1f} MiB on disk)")
    print(f"runs: {args.repeat} each, median shown; machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"trainscope analyze, end to end (process start to JSON): {ts:7.3f} s   peak RSS {ts_rss:7.1f} MiB")
    print(f"HTA TraceAnalysis load alone (timed inside the process): {hl:7.3f} s   peak RSS {hta_rss:7.1f} MiB")
    print(f"HTA process wall time (imports + load):                  {statistics.median(hta_wall):7.3f} s")
    print(f"ratio trainscope / HTA load: {ts / hl:.2f}  (target ≤ 0.50)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
