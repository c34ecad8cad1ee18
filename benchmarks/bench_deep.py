"""Cost of `analyze --deep`: HTA's load, critical path and launch statistics per trace.

    python benchmarks/bench_deep.py [TRACE ...]   (default: the GPU traces in tests/data/kineto)

Prints wall time per stage, the process's peak resident memory while HTA ran and its growth, and
the status (ok / partial / skipped with the reason)."""

from __future__ import annotations

import pathlib
import sys

from trainscope.analyzers.deep.second_opinion import deep_analysis
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.collectors import open_traces

DATA = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "kineto"


def main(paths: list[str]) -> int:
    paths = paths or [
        str(p) for p in sorted(DATA.glob("*.json.gz")) if "cpu_only" not in p.name and "non_gpu" not in p.name
    ]
    print(
        f"{'trace':44s} {'MB':>6s} {'load s':>7s} {'path s':>7s} {'launch s':>8s} {'peak MiB':>9s} {'+MiB':>6s}  status"
    )
    for p in paths:
        t = open_traces(p).traces[0]
        d = deep_analysis(t, analyze_trace(t))
        st = d.stage_s

        def f(k: str, st: dict = st) -> str:
            return f"{st[k]:7.2f}" if k in st else "      —"

        print(
            f"{pathlib.Path(p).name[:44]:44s} {pathlib.Path(p).stat().st_size / 2**20:6.1f} {f('load')} "
            f"{f('critical_path')} {f('launch_stats'):>8s} {d.peak_rss_mb or 0:9.0f} {d.rss_growth_mb or 0:6.0f}  "
            f"{d.status}{': ' + d.reason[:70] if d.reason else ''}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
