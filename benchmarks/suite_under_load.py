"""Run the README's test command several times in a row while busy loops load every core: a test
whose verdict depends on machine load or timing shows up as a failure here (run on demand, not a
test; a flaky test is a defect to fix, never to retry).

    python benchmarks/suite_under_load.py                 # 5 runs of `python -m pytest -n auto`, 2 busy loops
    python benchmarks/suite_under_load.py --runs 3 --loops 4 -- -m "not slow"

Prints, per run, the wall time, pytest's closing line and the load average, then a summary line
(``N of N runs green``). A red run's whole pytest output (the failures' tracebacks and captured
output) is kept in ``--keep`` (default ``suite-under-load-runN.log`` in the current folder) and
its path printed, so a flake seen once can be read, not only named. Exits 1 when any run failed. The busy loops are plain Python processes
spinning on arithmetic, like ``stress --cpu N``; they are stopped however the script ends.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import subprocess
import sys
import time


def _spin() -> None:  # pragma: no cover - runs in a child process until terminated
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs of the suite in a row (default 5)")
    p.add_argument("--loops", type=int, default=2, help="busy loops beside it (default 2)")
    p.add_argument(
        "--keep",
        default="suite-under-load-run{n}.log",
        help="where a red run's whole output is written ({n}: the run's number)",
    )
    p.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: -n auto)")
    a = p.parse_args(argv)
    args = a.pytest_args or ["-n", "auto"]
    loops = [mp.Process(target=_spin, daemon=True) for _ in range(a.loops)]
    for lp in loops:
        lp.start()
    green = 0
    try:
        for i in range(1, a.runs + 1):
            t0 = time.monotonic()
            r = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], capture_output=True, text=True
            )
            wall = time.monotonic() - t0
            tail = [ln for ln in r.stdout.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
            closing = tail[-1].strip("= ") if tail else f"exit {r.returncode}, no closing line"
            green += r.returncode == 0
            print(
                f"run {i}: {wall / 60:5.1f} min  load {os.getloadavg()[0]:4.1f}  rc {r.returncode}  {closing}",
                flush=True,
            )
            if r.returncode != 0:
                fails = [ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
                print("\n".join("    " + ln for ln in fails[:20]), flush=True)
                kept = a.keep.format(n=i)
                with open(kept, "w", encoding="utf-8") as f:
                    f.write(r.stdout + "\n--- stderr ---\n" + r.stderr)
                print(f"    whole output: {os.path.abspath(kept)}", flush=True)
    finally:
        for lp in loops:
            lp.terminate()
    print(f"{green} of {a.runs} runs green under {a.loops} busy loops")
    return 0 if green == a.runs else 1


if __name__ == "__main__":
    sys.exit(main())
