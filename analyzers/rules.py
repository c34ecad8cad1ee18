"""Every threshold a verdict uses: one table, each with its default, unit and source.

The values come from ``shared/design/DIAGNOSIS.md`` §3 (evidence grades from XProf, the
TensorBoard profiler plugin, SageMaker Debugger and HTA) and the textbook (seed 000). Where no
published number exists, the entry says it is trainscope's own default. Users override any of
them with ``--threshold NAME=VALUE``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Threshold:
    name: str
    value: float
    unit: str
    meaning: str
    source: str


_TABLE: tuple[Threshold, ...] = (
    Threshold("data_wait.moderate", 5.0, "% of step time", "host waits on the DataLoader",
              "XProf input-pipeline analysis; TensorBoard profiler plugin recommends at > 5 %"),
    Threshold("data_wait.high", 20.0, "% of step time", "host waits on the DataLoader", "XProf input-pipeline analysis"),
    Threshold("host_overhead.moderate", 3.0, "% of step time", "GPU idle while the host launches/computes", "XProf"),
    Threshold("host_overhead.high", 15.0, "% of step time", "GPU idle while the host launches/computes", "XProf"),
    Threshold("sync.moderate", 3.0, "% of step time", "GPU idle while the host synchronizes",
              "XProf host-overhead grades, applied to synchronization"),
    Threshold("sync.high", 15.0, "% of step time", "GPU idle while the host synchronizes",
              "XProf host-overhead grades, applied to synchronization"),
    Threshold("comm.moderate", 3.0, "% of step time", "communication not overlapped with compute", "XProf"),
    Threshold("comm.high", 15.0, "% of step time", "communication not overlapped with compute",
              "XProf (TensorBoard profiler plugin: > 10 %)"),
    Threshold("copy.moderate", 5.0, "% of step time", "GPU busy only with memory copies",
              "trainscope default (same grade as data wait: copies are input movement)"),
    Threshold("gpu_busy.low", 50.0, "% of step time", "GPU busy below this is low utilization",
              "TensorBoard profiler plugin"),
    Threshold("gpu_busy.saturated", 70.0, "% of step time", "at or above this the GPU is not starved",
              "textbook decision flowchart: utilization ≥ 70 % is not data-bound (seed 000 lines 2078–2154)"),
    Threshold("kernel_mix.dominant", 60.0, "% of kernel time",
              "a kernel-intensity group (GEMM/conv/attention vs elementwise/norm/softmax/reduction) dominates",
              "trainscope default; DIAGNOSIS.md §2.3 names the kernel mix as the evidence but no number"),
    Threshold("memory.capacity", 90.0, "% of device memory", "peak memory near capacity",
              "TensorBoard profiler plugin; textbook flowchart (memory > 90 %)"),
    Threshold("memory.fragmentation", 30.0, "% of reserved memory", "reserved by the allocator but holding no tensor at the reserved peak",
              "seed 002: in some cases over 30 % of memory is unusable through fragmentation"),
    Threshold("tensor_core.low", 50.0, "% of GEMM/conv/attention time", "matmul time on tensor cores",
              "trainscope default: below half, mixed precision is the first compute fix (seed 000 §2059 on)"),
    Threshold("evidence.min_kernels", 10.0, "kernels", "fewer kernels than this in the analyzed steps is too little to diagnose",
              "trainscope default: a verdict needs more than a handful of GPU events (DIAGNOSIS.md: never guess)"),
    Threshold("step.outlier_ratio", 1.5, "× median step", "a step this much longer than the median is an outlier",
              "trainscope default"),
    Threshold("pageable_copy.moderate", 1.0, "% of step time", "GPU time in host-to-device copies from pageable memory",
              "trainscope default: any pageable copy is a fix away (pinned memory); graded once it costs 1 % of the step"),
    Threshold("sync.bubble_moderate", 3.0, "% of step time", "GPU idle after in-step synchronizations",
              "XProf host-overhead grades, applied to synchronization (as sync.moderate)"),
    Threshold("attention.unfused_share", 10.0, "% of kernel time",
              "memory-bound kernels in attention (no fused attention kernel ran)",
              "trainscope default; FlashAttention (Dao et al. 2022): standard attention is bound by memory "
              "reads/writes of the L×L matrices"),
    Threshold("gpu_metrics.compute_active", 70.0, "% SM/tensor activity", "compute-bound: SM/tensor activity at least",
              "DIAGNOSIS.md §2.3 (compute-bound: SM/tensor > 70 % and DRAM < 50 %)"),
    Threshold("gpu_metrics.compute_dram_max", 50.0, "% of peak DRAM bandwidth", "compute-bound: DRAM bandwidth below",
              "DIAGNOSIS.md §2.3"),
    Threshold("gpu_metrics.memory_dram", 70.0, "% of peak DRAM bandwidth", "memory-bound: DRAM bandwidth at least",
              "DIAGNOSIS.md §2.3 (memory-bound: DRAM > 70 % and SM/tensor < 50 %)"),
    Threshold("gpu_metrics.memory_active_max", 50.0, "% SM/tensor activity", "memory-bound: SM/tensor activity below",
              "DIAGNOSIS.md §2.3"),
    Threshold("diff.noise_pts", 1.0, "percentage points",
              "in `trainscope diff`, a finding's metric must move more than this to count as improved or worse",
              "trainscope default (no published number): a move under one point of step time is not called an effect"),
    Threshold("launch.tiny_kernel_us", 10.0, "µs", "median kernel shorter than this is launch-latency scale",
              "trainscope default: a CUDA launch costs ~5–10 µs of host time (HTA launch statistics)"),
    # --deep: launch statistics (HTA get_cuda_kernel_launch_stats) and rank stragglers.
    Threshold("launch.runtime_outlier_us", 50.0, "µs", "a launch call on the host longer than this is an outlier",
              "HTA get_cuda_kernel_launch_stats default runtime_cutoff"),
    Threshold("launch.delay_outlier_us", 100.0, "µs", "a kernel starting this long after its launch returned is a delay outlier",
              "HTA get_cuda_kernel_launch_stats default launch_delay_cutoff"),
    Threshold("launch.short_kernel_pct", 50.0, "% of launches",
              "share of kernels whose GPU time is shorter than their launch call's host time",
              "trainscope default: launch-bound when most kernels cost less GPU time than host time (HTA launch statistics)"),
    Threshold("launch.queue_starved", 1.0, "operations",
              "mean CUDA-queue length of the busiest stream below this: the GPU drains work as fast as the host issues it",
              "trainscope default, read from HTA queue-length analysis (a queue that stays near empty starves the GPU)"),
    Threshold("straggler.step_pct", 10.0, "% over the ranks' median",
              "a rank whose median step is this much longer than the ranks' median is slow",
              "trainscope default"),
    Threshold("straggler.late_pct", 5.0, "% of median step",
              "a rank entering collectives this much later than the first rank, on average, is late",
              "trainscope default; HTA's straggler analysis ranks by the same late-start signal"),
    Threshold("ranks.end_match_us", 500.0, "µs",
              "two ranks' collectives of one kind are the same collective when their ends agree within this "
              "(after the clock offset is removed)",
              "trainscope default: a collective completes on all ranks within a last hop's latency (µs on "
              "NVLink/InfiniBand), far below the gap between successive collectives"),
    Threshold("ranks.end_match_pct", 20.0, "% of the collective's duration",
              "… or within this share of the longer of the two durations (a host thread returning from a "
              "blocking CPU collective, gloo, is late by OS scheduling: ms on a busy host)",
              "trainscope default, measured on a gloo job on a loaded 2-core host: end gaps up to 16 % of the duration"),
)

# Live monitoring (`trainscope watch`): windowed rules over sampled counters (DIAGNOSIS.md §3, "live").
_LIVE_TABLE: tuple[Threshold, ...] = (
    Threshold("live.gpu_idle", 10.0, "% utilization", "GPU utilization below this counts as near idle",
              "SageMaker Debugger CPUBottleneck / IOBottleneck (GPU < 10 %)"),
    Threshold("live.cpu_saturated", 90.0, "% CPU", "host CPU, or the loader processes per core, at or above this is saturated",
              "SageMaker Debugger CPUBottleneck (CPU > 90 %)"),
    Threshold("live.iowait_saturated", 50.0, "% CPU time", "I/O wait at or above this starves the input pipeline",
              "SageMaker Debugger IOBottleneck (I/O wait > 50 %)"),
    Threshold("live.starved_share", 50.0, "% of samples", "share of the window's samples that must show the starved pattern",
              "SageMaker Debugger CPUBottleneck / IOBottleneck (> 50 % of datapoints)"),
    Threshold("live.p95_util_low", 70.0, "% utilization", "p95 GPU utilization below this is underutilized",
              "SageMaker Debugger LowGPUUtilization"),
    Threshold("live.p5_util_fluctuating", 10.0, "% utilization", "p95 above live.p95_util_low and p5 below this: fluctuating",
              "SageMaker Debugger LowGPUUtilization"),
    Threshold("live.gpm_active", 70.0, "%", "SM/tensor (compute-bound) or DRAM (memory-bound) activity at or above this",
              "DIAGNOSIS.md §2.3 (NVML GPM / Nsight GPU metrics)"),
    Threshold("live.gpm_quiet", 50.0, "%", "the other side of the GPM comparison must stay below this",
              "DIAGNOSIS.md §2.3 (NVML GPM / Nsight GPU metrics)"),
    Threshold("live.mem_ctrl_busy", 60.0, "% of time", "without GPM: memory-controller busy at or above this reads as memory-bound",
              "trainscope default (NVML utilization.memory is a time share, weaker evidence than GPM DRAM bandwidth)"),
    Threshold("live.throttle_share", 50.0, "% of samples", "power/thermal clock slowdown in more than this share of samples",
              "trainscope default"),
    Threshold("live.min_samples", 4.0, "samples", "fewer samples than this in the window: warming up",
              "trainscope default (one second at the fastest sampling rate)"),
    Threshold("live.min_steps", 3.0, "steps", "step mode: fewer completed steps than this in the window is warming up",
              "trainscope default"),
)
_TABLE = _TABLE + _LIVE_TABLE


class Rules:
    """The threshold table, with user overrides applied."""

    def __init__(self, overrides: dict[str, float] | None = None) -> None:
        self._t = {t.name: t for t in _TABLE}
        for name, value in (overrides or {}).items():
            if name not in self._t:
                raise KeyError(name)
            self._t[name] = replace(self._t[name], value=float(value), source=f"user override (default {self._t[name].value:g})")

    def __getitem__(self, name: str) -> Threshold:
        return self._t[name]

    def value(self, name: str) -> float:
        return self._t[name].value

    def all(self) -> list[Threshold]:
        return list(self._t.values())

    @staticmethod
    def names() -> list[str]:
        return [t.name for t in _TABLE]
