"""Kernel-launch statistics and CUDA-queue length (from HTA) as evidence for ``host/launch-overhead``.

A step is launch-bound when the host cannot issue kernels as fast as the GPU finishes them. Two
signals say so, both computed by Holistic Trace Analysis:

- launch statistics (``get_cuda_kernel_launch_stats``): per launch, the host time of the runtime
  call and the GPU time of its kernel. Kernels shorter than their own launch are launch-bound by
  construction; launch-delay outliers (the kernel started long after the call returned) show a
  GPU that was busy with earlier work, i.e. the host running ahead.
- queue length (``get_queue_length_summary``): outstanding operations per stream. A queue that
  stays near empty starves the GPU; a long one means the host is ahead and launches are not the limit.

Pure functions over HTA's tables; HTA is run by :mod:`trainscope.analyzers.deep.second_opinion`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.rules import Rules


@dataclass(frozen=True)
class QueueStat:
    stream: int
    samples: int
    mean: float
    p50: float
    max: float


@dataclass(frozen=True)
class LaunchStats:
    launches: int  # launches whose kernel/copy/memset is in the trace (HTA joins them by correlation)
    short_kernels: int  # GPU time < host time of the launch call
    runtime_outliers: int  # launch call longer than launch.runtime_outlier_us
    delay_outliers: int  # kernel started later than launch.delay_outlier_us after the call returned
    median_launch_us: float
    median_kernel_us: float
    median_delay_us: float
    p95_delay_us: float
    queues: list[QueueStat]  # busiest stream first
    evidence: list[Evidence]
    supports_launch_overhead: bool | None  # None: too little to say
    conclusion: str

    @property
    def short_kernel_pct(self) -> float:
        return 100.0 * self.short_kernels / self.launches if self.launches else 0.0


def summarize_launches(stats: Any, queue_summary: Any | None, rules: Rules) -> LaunchStats:
    """``stats``: HTA's per-launch table (columns cpu_duration, gpu_duration, launch_delay, in µs);
    ``queue_summary``: HTA's queue-length summary (index (rank, stream), columns
    ('queue_length', count/mean/50%/max)) or None."""
    n = int(len(stats))
    cpu, gpu, delay = stats["cpu_duration"], stats["gpu_duration"], stats["launch_delay"]
    short = int((gpu < cpu).sum())
    rt_cut, dl_cut = rules.value("launch.runtime_outlier_us"), rules.value("launch.delay_outlier_us")
    queues = _queues(queue_summary)

    def med(s: Any) -> float:  # a pandas Series
        return float(s.median()) if n else 0.0

    runtime_outliers, delay_outliers = int((cpu > rt_cut).sum()), int((delay > dl_cut).sum())
    median_launch_us, median_kernel_us, median_delay_us = med(cpu), med(gpu), med(delay)
    p95_delay_us = float(delay.quantile(0.95)) if n else 0.0

    short_pct = 100.0 * short / n if n else 0.0
    t_short, t_queue = rules["launch.short_kernel_pct"], rules["launch.queue_starved"]
    ev = [
        Evidence(
            "kernels shorter than their launch call",
            round(short_pct, 2),
            t_short.unit,
            f"≥ {t_short.value:g}",
            t_short.source,
            short_pct >= t_short.value,
        ),
        Evidence(
            f"median launch call {median_launch_us:.1f} µs, median kernel {median_kernel_us:.1f} µs",
            None,
            "",
            "",
            "HTA launch statistics",
            None,
        ),
        Evidence(
            f"launch-delay outliers (> {dl_cut:g} µs)",
            delay_outliers,
            "launches",
            "",
            rules["launch.delay_outlier_us"].source,
            None,
        ),
        Evidence(
            f"launch calls > {rt_cut:g} µs",
            runtime_outliers,
            "launches",
            "",
            rules["launch.runtime_outlier_us"].source,
            None,
        ),
    ]
    if queues:
        q = queues[0]
        ev.append(
            Evidence(
                f"mean CUDA-queue length, busiest stream ({q.stream})",
                round(q.mean, 2),
                t_queue.unit,
                f"< {t_queue.value:g}",
                t_queue.source,
                q.mean < t_queue.value,
            )
        )

    if n < rules.value("evidence.min_kernels"):
        supports, text = None, f"only {n} launches with their kernels in the trace: too few to judge launch overhead"
    else:
        many_short = short_pct >= t_short.value
        starved = queues[0].mean < t_queue.value if queues else None
        if many_short and starved is not False:
            supports = True
            text = f"{short_pct:.0f} % of kernels run shorter than their launch call" + (
                f" and the busiest stream's queue averages {queues[0].mean:.1f} operations: the host cannot "
                "keep the GPU fed"
                if queues
                else ""
            )
        elif starved and not many_short:
            supports = True
            text = (
                f"the busiest stream's queue averages {queues[0].mean:.1f} operations (near empty): the GPU "
                f"waits for launches, though only {short_pct:.0f} % of kernels are shorter than their launch"
            )
        else:
            supports = False
            why = [f"only {short_pct:.0f} % of kernels are shorter than their launch call"] if not many_short else []
            if starved is False:
                why.append(
                    f"the busiest stream's queue averages {queues[0].mean:.1f} outstanding operations "
                    f"(median launch delay {median_delay_us:.0f} µs): the host runs ahead of the GPU"
                )
            text = "launches are not the limit: " + "; ".join(why)
    return LaunchStats(
        n,
        short,
        runtime_outliers,
        delay_outliers,
        median_launch_us,
        median_kernel_us,
        median_delay_us,
        p95_delay_us,
        queues,
        evidence=ev,
        supports_launch_overhead=supports,
        conclusion=text,
    )


def _queues(summary: Any | None) -> list[QueueStat]:
    if summary is None or len(summary) == 0:
        return []
    out = []
    for idx, row in summary.iterrows():
        stream = idx[1] if isinstance(idx, tuple) else idx
        out.append(
            QueueStat(
                int(stream),
                int(row[("queue_length", "count")]),
                float(row[("queue_length", "mean")]),
                float(row[("queue_length", "50%")]),
                float(row[("queue_length", "max")]),
            )
        )
    # The busiest stream: the one with the most queue events (launches and completions).
    return sorted(out, key=lambda q: -q.samples)
