"""Every threshold a verdict uses: one table, each with its default, unit and source.

The values come from docs/diagnosis.md §3 (evidence grades from XProf, the
TensorBoard profiler plugin, SageMaker Debugger and HTA) and the textbook (Machine Learning Systems,
mlsysbook.ai, Model Training chapter). Where no
published number exists, the entry says it is trainscope's own default. Users override any of
them with ``--threshold NAME=VALUE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace


@dataclass(frozen=True)
class Threshold:
    name: str
    value: float
    unit: str
    meaning: str
    source: str


_TABLE: tuple[Threshold, ...] = (
    Threshold(
        "data_wait.moderate",
        5.0,
        "% of step time",
        "host waits on the DataLoader",
        "XProf input-pipeline analysis; TensorBoard profiler plugin recommends at > 5 %",
    ),
    Threshold(
        "data_wait.high", 20.0, "% of step time", "host waits on the DataLoader", "XProf input-pipeline analysis"
    ),
    Threshold("host_overhead.moderate", 3.0, "% of step time", "GPU idle while the host launches/computes", "XProf"),
    Threshold("host_overhead.high", 15.0, "% of step time", "GPU idle while the host launches/computes", "XProf"),
    Threshold(
        "sync.moderate",
        3.0,
        "% of step time",
        "GPU idle while the host synchronizes",
        "XProf host-overhead grades, applied to synchronization",
    ),
    Threshold(
        "sync.high",
        15.0,
        "% of step time",
        "GPU idle while the host synchronizes",
        "XProf host-overhead grades, applied to synchronization",
    ),
    Threshold(
        "alloc.moderate",
        3.0,
        "% of step time",
        "GPU idle while the host allocates or frees memory (allocator churn)",
        "XProf host-overhead grades, applied to allocator calls",
    ),
    Threshold(
        "alloc.high",
        15.0,
        "% of step time",
        "GPU idle while the host allocates or frees memory (allocator churn)",
        "XProf host-overhead grades, applied to allocator calls",
    ),
    Threshold("comm.moderate", 3.0, "% of step time", "communication not overlapped with compute", "XProf"),
    Threshold(
        "comm.high",
        15.0,
        "% of step time",
        "communication not overlapped with compute",
        "XProf (TensorBoard profiler plugin: > 10 %)",
    ),
    Threshold(
        "copy.moderate",
        5.0,
        "% of step time",
        "GPU busy only with memory copies",
        "trainscope default (same grade as data wait: copies are input movement)",
    ),
    Threshold(
        "gpu_busy.low", 50.0, "% of step time", "GPU busy below this is low utilization", "TensorBoard profiler plugin"
    ),
    Threshold(
        "gpu_busy.saturated",
        70.0,
        "% of step time",
        "at or above this the GPU is not starved",
        "decision flowchart, Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Pipeline Optimizations › Systematic Optimization Framework: utilization ≥ 70 % is not data-bound",
    ),
    Threshold(
        "kernel_mix.dominant",
        60.0,
        "% of kernel time",
        "a kernel-intensity group (GEMM/conv/attention vs elementwise/norm/softmax/reduction) dominates",
        "trainscope default; the kernel mix is named as evidence (docs/diagnosis.md §2.3) but no source gives a number",
    ),
    Threshold(
        "memory.capacity",
        90.0,
        "% of device memory",
        "peak memory near capacity",
        "TensorBoard profiler plugin; textbook flowchart (memory > 90 %)",
    ),
    Threshold(
        "memory.fragmentation",
        30.0,
        "% of reserved memory",
        "reserved by the allocator but holding no tensor at the reserved peak",
        "ZeRO (Rajbhandari et al. 2020): in some cases over 30 % of memory is unusable through fragmentation",
    ),
    Threshold(
        "memory.oom_slack",
        1.0,
        "% of reserved memory",
        "a snapshot whose allocator holds less cached free memory than this ends at its limit (an OOM there is "
        "a capacity OOM: there is nothing to defragment)",
        "trainscope default: the caching allocator only reaches the device for new segments once its cache is spent",
    ),
    Threshold(
        "tensor_core.low",
        50.0,
        "% of GEMM/conv/attention time",
        "matmul time on tensor cores",
        "trainscope default: below half, mixed precision is the first compute fix (Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Mixed-Precision Training)",
    ),
    Threshold(
        "evidence.min_kernels",
        10.0,
        "kernels",
        "fewer kernels than this in the analyzed steps is too little to diagnose",
        "trainscope default: a verdict needs more than a handful of GPU events (never guess)",
    ),
    Threshold(
        "step.outlier_ratio",
        1.5,
        "× median step",
        "a step this much longer than the median is an outlier",
        "trainscope default",
    ),
    Threshold(
        "launch.cold_start_ms",
        1.0,
        "ms",
        "a kernel launch call lasting this long is a cold start (code loading or compilation inside the launch)",
        "trainscope default: a launch call takes a few µs (CUDA/HIP runtime), so 1 ms is hundreds of launches",
    ),
    Threshold(
        "step.stub_fraction",
        0.02,
        "× median step",
        "a first or last step shorter than this fraction of the other steps' median is a stub (a profiler "
        "step opened as recording stopped): dropped from the statistics and named",
        "trainscope default: far below run-to-run jitter (steps of a busy host vary ≈ 10×, never 50×)",
    ),
    Threshold(
        "step.range_tiling",
        90.0,
        "% of GPU kernel time",
        "repeating annotation ranges whose launches account for this share of kernel time mark the steps",
        "trainscope default: ranges that launch almost all GPU work delimit it",
    ),
    Threshold(
        "pageable_copy.moderate",
        1.0,
        "% of step time",
        "GPU time in host-to-device copies from pageable memory",
        "trainscope default: any pageable copy is a fix away (pinned memory); graded once it costs 1 % of the step",
    ),
    Threshold(
        "sync.bubble_moderate",
        3.0,
        "% of step time",
        "GPU idle after in-step synchronizations",
        "XProf host-overhead grades, applied to synchronization (as sync.moderate)",
    ),
    Threshold(
        "attention.unfused_share",
        10.0,
        "% of kernel time",
        "memory-bound kernels in attention (no fused attention kernel ran)",
        "trainscope default; FlashAttention (Dao et al. 2022): standard attention is bound by memory "
        "reads/writes of the L×L matrices",
    ),
    Threshold(
        "gpu_metrics.compute_active",
        70.0,
        "% SM/tensor activity",
        "compute-bound: SM/tensor activity at least",
        "Nsight Systems GPU metrics / NVML GPM reading (compute-bound: SM/tensor > 70 % and DRAM < 50 %)",
    ),
    Threshold(
        "gpu_metrics.compute_dram_max",
        50.0,
        "% of peak DRAM bandwidth",
        "compute-bound: DRAM bandwidth below",
        "Nsight Systems GPU metrics / NVML GPM reading (docs/diagnosis.md §2.3)",
    ),
    Threshold(
        "gpu_metrics.memory_dram",
        70.0,
        "% of peak DRAM bandwidth",
        "memory-bound: DRAM bandwidth at least",
        "Nsight Systems GPU metrics / NVML GPM reading (memory-bound: DRAM > 70 % and SM/tensor < 50 %)",
    ),
    Threshold(
        "gpu_metrics.memory_active_max",
        50.0,
        "% SM/tensor activity",
        "memory-bound: SM/tensor activity below",
        "Nsight Systems GPU metrics / NVML GPM reading (docs/diagnosis.md §2.3)",
    ),
    Threshold(
        "sync.reported",
        0.5,
        "% of step time",
        "GPU idle after in-step syncs below this is not reported",
        "trainscope default: one sync at the end of a profiled region costs nothing worth a line",
    ),
    Threshold(
        "copy.high",
        20.0,
        "% of step time",
        "GPU busy only with memory copies: high",
        "trainscope default (same grade as data wait: copies are input movement)",
    ),
    Threshold(
        "busy_sink.moderate",
        30.0,
        "% of step time",
        "memory-bound or compute-bound kernel time: a sink worth naming",
        "trainscope default: below a third of the step, the kernels' bound is context, not the bottleneck",
    ),
    Threshold(
        "busy_sink.high",
        60.0,
        "% of step time",
        "memory-bound or compute-bound kernel time: the step's bulk",
        "trainscope default (kernel_mix.dominant applied to step time)",
    ),
    Threshold(
        "stake.moderate",
        3.0,
        "% of step time",
        "a fixable inefficiency inside busy time (unfused attention, no tensor cores) worth a moderate grade",
        "XProf grades for time lost (as host_overhead.moderate)",
    ),
    Threshold(
        "stake.high",
        15.0,
        "% of step time",
        "a fixable inefficiency inside busy time: high",
        "XProf grades for time lost (as host_overhead.high)",
    ),
    Threshold(
        "fix.min_speedup",
        1.02,
        "×",
        "a fix projected below this is a finding, not a ranked fix",
        "trainscope default: a 2 % bound is inside run-to-run noise of step time",
    ),
    Threshold(
        "diff.noise_pts",
        1.0,
        "percentage points",
        "in `trainscope diff`, a finding's metric must move more than this to count as improved or worse",
        "trainscope default (no published number): a move under one point of step time is not called an effect",
    ),
    Threshold(
        "gate.alpha",
        0.05,
        "p-value",
        "`diff --fail-if-slower`: AFTER's steps must be worse than BEFORE's by a one-sided Mann–Whitney rank test "
        "at this level (and by more than the allowed change) to fail the gate",
        "the conventional 5 % level (Fisher); a statistical gate plus a practical threshold as CI gates use "
        "(intel/intel-xpu-backend-for-triton#6441)",
    ),
    Threshold(
        "launch.tiny_kernel_us",
        10.0,
        "µs",
        "median kernel shorter than this is launch-latency scale",
        "trainscope default: a CUDA launch costs ~5–10 µs of host time (HTA launch statistics)",
    ),
    # --deep: launch statistics (HTA get_cuda_kernel_launch_stats) and rank stragglers.
    Threshold(
        "launch.runtime_outlier_us",
        50.0,
        "µs",
        "a launch call on the host longer than this is an outlier",
        "HTA get_cuda_kernel_launch_stats default runtime_cutoff",
    ),
    Threshold(
        "launch.delay_outlier_us",
        100.0,
        "µs",
        "a kernel starting this long after its launch returned is a delay outlier",
        "HTA get_cuda_kernel_launch_stats default launch_delay_cutoff",
    ),
    Threshold(
        "launch.short_kernel_pct",
        50.0,
        "% of launches",
        "share of kernels whose GPU time is shorter than their launch call's host time",
        "trainscope default: launch-bound when most kernels cost less GPU time than host time (HTA launch statistics)",
    ),
    Threshold(
        "launch.queue_starved",
        1.0,
        "operations",
        "mean CUDA-queue length of the busiest stream below this: the GPU drains work as fast as the host issues it",
        "trainscope default, read from HTA queue-length analysis (a queue that stays near empty starves the GPU)",
    ),
    Threshold(
        "straggler.step_pct",
        10.0,
        "% over the ranks' median",
        "a rank whose median step is this much longer than the ranks' median is slow",
        "trainscope default",
    ),
    Threshold(
        "straggler.late_pct",
        5.0,
        "% of median step",
        "a rank entering collectives this much later than the first rank, on average, is late",
        "trainscope default; HTA's straggler analysis ranks by the same late-start signal",
    ),
    Threshold(
        "straggler.alpha",
        0.05,
        "p-value",
        "a rank is the straggler only when it is last at more collectives than chance (1/ranks) allows "
        "at this level (one-sided binomial test)",
        "the conventional 5 % level (Fisher)",
    ),
    Threshold(
        "straggler.cold_factor",
        10.0,
        "× the median collective",
        "the first collective lasting this many times the others' median is a cold start (left out)",
        "trainscope default: NCCL and gloo connect the ranks lazily at a communicator's first collective",
    ),
    Threshold(
        "straggler.cold_max_step",
        0.0,
        "ProfilerStep number",
        "a collective is a cold-start candidate only in a trace whose first recorded step is numbered at most "
        "this (or that numbers no step): a later first step means the job ran collectives before the trace began",
        "PyTorch numbers ProfilerStep#N from the profiler's first step; NCCL connects a communicator's ranks at its "
        "first collective, so a trace that starts at step N > 0 holds no first use",
    ),
    Threshold(
        "straggler.tie_us",
        1.0,
        "µs",
        "ranks arriving within this of the last arrival are last together: the collective names no single last rank",
        "the resolution of Kineto's microsecond timestamps",
    ),
    Threshold(
        "ranks.end_match_us",
        500.0,
        "µs",
        "two ranks' collectives of one kind are the same collective when their ends agree within this "
        "(after the clock offset is removed)",
        "trainscope default: a collective completes on all ranks within a last hop's latency (µs on "
        "NVLink/InfiniBand), far below the gap between successive collectives",
    ),
    Threshold(
        "ranks.end_match_pct",
        20.0,
        "% of the collective's duration",
        "… or within this share of the longer of the two durations (a host thread returning from a "
        "blocking CPU collective, gloo, is late by OS scheduling: ms on a busy host)",
        "trainscope default, measured on a gloo job on a loaded 2-core host: end gaps up to 16 % of the duration",
    ),
    Threshold(
        "ranks.work_explains_pct",
        50.0,
        "% of the wait",
        "the late rank's extra work per step (kernel time outside collectives on GPU ranks, host time outside "
        "collectives on CPU ranks, against the other ranks' median) explains the others' wait for it when it is at "
        "least this share of that wait; below, most of the wait comes from elsewhere (a late start, the host, "
        "the network) and is not called work imbalance. The stake of balancing is capped by the extra work either way",
        "trainscope default: below half, most of the wait is not work that balancing can move",
    ),
    # One-off costs and the steady state (analyzers/trace/one_off.py, docs/analysis.md "Phases before verdicts").
    Threshold(
        "startup.context_ms",
        50.0,
        "ms",
        "the trace's first CUDA/HIP runtime call (not a synchronization) lasting this long, with the GPU "
        "idle, is context creation",
        "CUDA C++ Programming Guide, 'Initialization': the runtime creates the primary context on the first "
        "runtime call that needs it; trainscope default: a runtime call takes µs, context creation 10²–10⁴ ms",
    ),
    Threshold(
        "startup.first_call_ms",
        5.0,
        "ms",
        "a first call (runtime API, range or operator) at least this long, far longer than its later calls, "
        "is a one-off first-use cost; also the least total listed for module loading and teardown",
        "trainscope default: thousands of launches' worth of host time (a launch call takes a few µs)",
    ),
    Threshold(
        "startup.first_call_ratio",
        10.0,
        "× later calls' median",
        "a first call this many times longer than the median of the later calls of the same name (or of the "
        "same kernel's later launches) paid a one-off cost",
        "trainscope default: an order of magnitude, far beyond call-to-call jitter",
    ),
    Threshold(
        "startup.idle_share",
        50.0,
        "% of the call",
        "the GPU idles at least this share of a long call for it to be host-side initialization, not a wait "
        "on GPU work",
        "trainscope default: a call that waits on the device overlaps GPU work for nearly all of its length",
    ),
    Threshold(
        "startup.upload_mb",
        64.0,
        "MB",
        "host-to-device copies before the first kernel moving at least this much (in startup.upload_copies "
        "copies or more) are a one-time weight upload",
        "trainscope default: the weights of a small model (AlexNet: 244 MB in 16 tensors)",
    ),
    Threshold(
        "startup.upload_copies",
        8.0,
        "copies",
        "… in at least this many copies: one per parameter tensor, more than an input batch holds",
        "trainscope default: a batch is a few tensors (inputs, labels, masks), a model's weights many",
    ),
    Threshold(
        "startup.moderate",
        5.0,
        "% of step time",
        "one-off costs (start-up, compilation, capture) inside the judged window",
        "trainscope default (the data-wait grade: time the steady state does not pay)",
    ),
    Threshold(
        "steady.one_off_share",
        50.0,
        "% of step time",
        "a step — or the only window — whose one-off costs take this share is not steady state (left out; "
        "a window with nothing else is NOT REPRESENTATIVE)",
        "trainscope default: the one-off costs then outweigh everything the steady state does",
    ),
    Threshold(
        "steady.warmup_z",
        3.5,
        "modified z-score",
        "a leading step whose duration's modified z-score against the later steps exceeds this (and is "
        "step.outlier_ratio × their median) is a warm-up step",
        "Iglewicz & Hoaglin (1993), How to Detect and Handle Outliers: |M| = 0.6745 (x − median) / MAD > 3.5",
    ),
)

# Findings on the module tree (analyzers/findings/tree.py): regions, repeated blocks, phases.
_TREE_TABLE: tuple[Threshold, ...] = (
    Threshold(
        "tree.region_share",
        20.0,
        "% of the window's GPU time",
        "a region of the module tree (not a phase, not outside every range) holding at least this share of the "
        "window's GPU time dominates it: its kernels' efficiency is worth a finding of its own",
        "trainscope default: a fix inside one region removes at most its time; below a fifth, even halving the "
        "region's kernel time shortens the GPU's work by under 10 %",
    ),
    Threshold(
        "tree.low_pct_of_roof",
        50.0,
        "% of roof",
        "a dominating region whose kernels run below this share of their roofline bound (kernel-time-weighted "
        "% of roof) runs far below it",
        "roofline model (Williams, Waterman & Patterson, CACM 2009): attainable = min(peak, intensity × "
        "bandwidth); trainscope default: below half the roof, the region has at least 2× of headroom",
    ),
    Threshold(
        "tree.attainable_pct_of_roof",
        80.0,
        "% of roof",
        "the share of its roofline bound a tuned kernel attains: a slow region's stake is the time its kernels "
        "would save at this share (never below the roof itself, so never more than the region's own time)",
        "trainscope default, in the range tuned libraries reach: streaming kernels ≈ 80–90 % of peak DRAM "
        "bandwidth (STREAM-like copies), large GEMMs ≈ 70–80 % of peak tensor throughput",
    ),
    Threshold(
        "tree.instance_ratio",
        1.5,
        "× the median instance",
        "the slowest instance of a repeated (folded) block taking at least this many times its siblings' median "
        "GPU time is slower than its siblings (at least 3 instances, so the median is one of them)",
        "trainscope default, the outlier ratio of steps (step.outlier_ratio) applied to a block's instances: "
        "instances of one block launch the same kernels on the same shapes, so their times agree within a few %",
    ),
    Threshold(
        "tree.bwd_fwd_low",
        1.5,
        "× forward",
        "backward's GPU time (communication kernels left out) below this multiple of forward's is far from "
        "the expected ≈ 2×",
        "Kaplan et al. 2020, Scaling Laws for Neural Language Models (training compute C ≈ 6N per token: "
        "forward 2N, backward 4N — a gradient for the inputs and one for the weights per matmul); trainscope "
        "default band ±25 % around 2×",
    ),
    Threshold(
        "tree.bwd_fwd_high",
        2.5,
        "× forward",
        "backward's GPU time (communication kernels left out) above this multiple of forward's is far from the "
        "expected ≈ 2× (activation checkpointing recomputes the forward: ≈ 3×)",
        "Kaplan et al. 2020 (backward ≈ 2× forward); Chen et al. 2016, Training Deep Nets with Sublinear Memory "
        "Cost (recomputation adds one forward pass); trainscope default band ±25 % around 2×",
    ),
)

# Live monitoring (`trainscope watch`): windowed rules over sampled counters (docs/diagnosis.md §3, "live").
_LIVE_TABLE: tuple[Threshold, ...] = (
    Threshold(
        "live.gpu_idle",
        10.0,
        "% utilization",
        "GPU utilization below this counts as near idle",
        "SageMaker Debugger CPUBottleneck / IOBottleneck (GPU < 10 %)",
    ),
    Threshold(
        "live.cpu_saturated",
        90.0,
        "% CPU",
        "host CPU, or the loader processes per core, at or above this is saturated",
        "SageMaker Debugger CPUBottleneck (CPU > 90 %)",
    ),
    Threshold(
        "live.iowait_saturated",
        50.0,
        "% CPU time",
        "I/O wait at or above this starves the input pipeline",
        "SageMaker Debugger IOBottleneck (I/O wait > 50 %)",
    ),
    Threshold(
        "live.starved_share",
        50.0,
        "% of samples",
        "share of the window's samples that must show the starved pattern",
        "SageMaker Debugger CPUBottleneck / IOBottleneck (> 50 % of datapoints)",
    ),
    Threshold(
        "live.p95_util_low",
        70.0,
        "% utilization",
        "p95 GPU utilization below this is underutilized",
        "SageMaker Debugger LowGPUUtilization",
    ),
    Threshold(
        "live.p5_util_fluctuating",
        10.0,
        "% utilization",
        "p95 above live.p95_util_low and p5 below this: fluctuating",
        "SageMaker Debugger LowGPUUtilization",
    ),
    Threshold(
        "live.gpm_active",
        70.0,
        "%",
        "SM/tensor (compute-bound) or DRAM (memory-bound) activity at or above this",
        "NVML GPM / Nsight Systems GPU metrics reading (docs/diagnosis.md §2.3)",
    ),
    Threshold(
        "live.gpm_quiet",
        50.0,
        "%",
        "the other side of the GPM comparison must stay below this",
        "NVML GPM / Nsight Systems GPU metrics reading (docs/diagnosis.md §2.3)",
    ),
    Threshold(
        "live.mem_ctrl_busy",
        60.0,
        "% of time",
        "without GPM: memory-controller busy at or above this reads as memory-bound",
        "trainscope default (NVML utilization.memory is a time share, weaker evidence than GPM DRAM bandwidth)",
    ),
    Threshold(
        "live.throttle_share",
        50.0,
        "% of samples",
        "power/thermal clock slowdown in more than this share of samples",
        "trainscope default",
    ),
    Threshold(
        "live.creep_min_points",
        8.0,
        "samples",
        "memory creep: fewer memory readings than this in the window are not fitted",
        "trainscope default (a least-squares line needs several points to tell a slope from noise)",
    ),
    Threshold(
        "live.creep_min_span",
        5.0,
        "s",
        "memory creep: a window shorter than this is not fitted",
        "trainscope default",
    ),
    Threshold(
        "live.creep_min_r2",
        0.8,
        "R²",
        "memory creep: the line must explain at least this share of the readings' variance (a steady climb)",
        "trainscope default (least-squares coefficient of determination)",
    ),
    Threshold(
        "live.creep_min_growth",
        64.0,
        "MiB",
        "memory creep: growth over the window below this is not material",
        "trainscope default",
    ),
    Threshold(
        "live.creep_min_growth_pct",
        0.5,
        "% of capacity",
        "memory creep: growth over the window below this share of the capacity (host memory or the GPU's) "
        "is not material",
        "trainscope default",
    ),
    Threshold(
        "live.creep_steady_fraction",
        0.25,
        "of the window's slope",
        "memory creep: each half of the window must climb at least at this share of the overall rate "
        "(a one-off allocation is flat on both sides of its step)",
        "trainscope default",
    ),
    Threshold(
        "live.trend_after_steps",
        5.0,
        "steps",
        "memory trends are judged only on samples after the run's first steps (imports, model and "
        "optimizer-state allocation, the allocator's warm-up climb once and then stay flat)",
        "trainscope default: a warm-up ramp read as a leak was reported in every real run tried",
    ),
    Threshold(
        "live.trend_after_s",
        30.0,
        "s",
        "without step timings, memory trends are judged only on samples after the watch's first seconds "
        "(an import of torch and a CUDA context climb for seconds to tens of seconds, then stay flat)",
        "trainscope default: one 30 s window; torch's import was measured at 17 s on a loaded 2-core machine",
    ),
    Threshold(
        "live.creep_soon",
        600.0,
        "s",
        "memory creep: capacity projected within this time is high severity",
        "trainscope default (ten minutes: time to act before the job dies)",
    ),
    Threshold(
        "live.rank_significance",
        0.01,
        "p-value",
        "live straggler: a rank is named only when the one-sided sign test of its input wait against "
        "1/R (R ranks) is below this level",
        "trainscope default (sign test, a standard non-parametric test for paired samples)",
    ),
    Threshold(
        "live.rank_min_samples",
        5.0,
        "samples",
        "live straggler: fewer samples in which every rank stepped than this, and no rank is named",
        "trainscope default",
    ),
    Threshold(
        "live.min_samples",
        4.0,
        "samples",
        "fewer samples than this in the window: warming up",
        "trainscope default (one second at the fastest sampling rate)",
    ),
    Threshold(
        "live.min_steps",
        20.0,
        "steps",
        "step mode: fewer completed steps than this in the window is warming up (and no step-based verdict)",
        "trainscope default: the step-exact wait share of a handful of steps is dominated by the first "
        "iteration's start-up; 20 steps bound one slow step's weight to 5 %",
    ),
    Threshold(
        "live.min_step_seconds",
        2.0,
        "s",
        "step mode: the window's completed steps must also span at least this much time",
        "trainscope default: several scheduler quanta and sampling intervals, so one preempted call "
        "cannot decide the share",
    ),
    Threshold(
        "live.startup_steps",
        1.0,
        "steps",
        "step mode: the run's first completed steps are start-up (iterator and worker creation, lazy "
        "initialization) and stay out of the step statistics",
        "trainscope default; timm's and Lightning's data-time logs skip the first iteration the same way",
    ),
    Threshold(
        "live.verdict_hold",
        5.0,
        "s",
        "a new live verdict replaces the shown one only after it has led for this long without interruption "
        "(hysteresis)",
        "trainscope default: longer than a sampling hiccup or one slow step, shorter than "
        "any bottleneck worth acting on",
    ),
    Threshold(
        "live.power_ceiling_pct",
        1.5,
        "% of median power",
        "without a power limit in the source: busy power whose maximum sits within this of its median, with "
        "the spread below the median at least as wide as above it, is pinned at a ceiling (a power cap)",
        "trainscope default: a limiter clamps power from above, so samples pile up under a hard maximum; "
        "steady uncapped load scatters symmetrically",
    ),
    Threshold(
        "live.power_at_limit_pct",
        97.0,
        "% of the power limit",
        "with a power limit: median busy power at or above this share of the enforced limit is capped",
        "trainscope default; NVML reports the enforced limit (nvmlDeviceGetEnforcedPowerLimit)",
    ),
)
# Fusion candidates (analyzers/trace/fusion.py): the kernel sequences behind the fusion fix.
_FUSION_TABLE: tuple[Threshold, ...] = (
    Threshold(
        "fusion.max_gap_us",
        5.0,
        "µs",
        "kernels on one stream starting at most this long after the previous one ended are back to back: a "
        "fusion candidate's sequence (the GPU waits on nothing else between them)",
        "trainscope default: a queued launch follows the previous kernel within a few µs (CUDA/HIP launch "
        "latency); a longer gap is host or dependency time, not a chain",
    ),
    Threshold(
        "fusion.min_repeats",
        3.0,
        "occurrences",
        "a kernel sequence seen at least this many times in the steps is a fusion candidate (a pattern, "
        "not a coincidence)",
        "trainscope default; HTA's frequent CUDA kernel sequences rank patterns by the same count",
    ),
    Threshold(
        "fusion.max_length",
        8.0,
        "kernels",
        "longest kernel sequence searched for fusion candidates (a longer chain shows as its windows of this length)",
        "trainscope default: bounds the search (one counting pass per length)",
    ),
)
_TABLE = _TABLE + _TREE_TABLE + _LIVE_TABLE + _FUSION_TABLE


class Rules:
    """The threshold table, with user overrides applied."""

    def __init__(self, overrides: dict[str, float] | None = None) -> None:
        self._t = {t.name: t for t in _TABLE}
        for name, value in (overrides or {}).items():
            if name not in self._t:
                raise KeyError(name)
            self._t[name] = replace(
                self._t[name], value=float(value), source=f"user override (default {self._t[name].value:g})"
            )

    def __getitem__(self, name: str) -> Threshold:
        return self._t[name]

    def value(self, name: str) -> float:
        return self._t[name].value

    def all(self) -> list[Threshold]:
        return list(self._t.values())

    @staticmethod
    def names() -> list[str]:
        return [t.name for t in _TABLE]
