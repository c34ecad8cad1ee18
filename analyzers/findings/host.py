"""Algorithm axis, host side: the GPU waits for the host to issue work, or idles after the host
blocks on it."""

from __future__ import annotations

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import ms_per_step
from trainscope.analyzers.findings.base import stake_ms
from trainscope.analyzers.findings.base import verdict_class
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.findings.common import ev
from trainscope.analyzers.findings.common import graded_ev
from trainscope.analyzers.findings.common import raised_stake
from trainscope.analyzers.findings.common import sink_line
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context
from trainscope.analyzers.trace.gpu_gaps import INFERRED
from trainscope.analyzers.trace.gpu_gaps import LAUNCH_CALL
from trainscope.analyzers.trace.host_idle import COLD_START_DETAIL

_LAUNCH_SEV = by_stake("host_overhead.moderate", "host_overhead.high")


def _launch(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    stake = raised_stake(obs, rules, "launch", _LAUNCH_SEV)
    if stake is None or obs.sinks is None:
        return None
    k = obs.kernels
    lines = [
        graded_ev(rules, _LAUNCH_SEV, "GPU idle while the host launches/computes", stake),
        ctx("median kernel duration", k.median_kernel_ns / 1e3, "µs"),
        ctx("kernels per step", obs.kernels_per_step, "kernels"),
        sink_line(obs, "launch"),
    ]
    lines.extend(obs.host_evidence.get("launch", ())[1:])  # cold start, launch calls, frames
    tiny = k.median_kernel_ns / 1e3 < rules.value("launch.tiny_kernel_us")
    detail = (
        "many short kernels: the host cannot issue them as fast as the GPU runs them"
        if tiny
        else "host-side work (Python, framework ops, runtime calls) between kernels leaves the GPU waiting"
    )
    g = obs.gaps
    late = g.ns.get("issued-late", 0) if g is not None and g.sink_of("issued-late") == "launch" else 0
    if g is not None and late and obs.sinks.by_key["launch"].ns and late >= 0.5 * obs.sinks.by_key["launch"].ns:
        lines.append(ctx(g.metric("issued-late"), round(g.pct("issued-late"), 2), "% of step time", INFERRED))
        if g.launch_call_us is not None and g.issue_interval_us:
            lines.append(
                ctx(
                    f"{LAUNCH_CALL} / interval between launches (medians)",
                    round(g.launch_call_us, 1),
                    f"µs / {g.issue_interval_us:.1f} µs",
                    "runtime calls",
                )
            )
            if g.issue_interval_us > 10 * g.launch_call_us:
                detail = (
                    f"the GPU's next work is issued late: a launch call takes {g.launch_call_us:.0f} µs but one "
                    f"comes only every {g.issue_interval_us / 1e3:.2f} ms — host work between launches that the "
                    "trace does not record keeps the GPU waiting (inferred from the GPU timeline and runtime calls)"
                )
    h = obs.host_idle
    if h is not None and h.cold_start is not None and h.cold_start.idle_ns >= 0.5 * stake / 100 * h.step_ns:
        detail = COLD_START_DETAIL  # first-call code loading inside launches: profile after warm-up
    if g is not None and g.sink_of("cold-start") == "launch" and g.pct("cold-start") >= 0.5 * stake:
        detail = (
            f"device code is being compiled or loaded while the GPU waits ({g.pct('cold-start'):.1f} % of step time: "
            "JIT/NVRTC compile ranges ending in module or library loads, inferred from the GPU timeline and runtime "
            "calls) — a one-time cost: warm up before measuring, cache compiled kernels, or compile ahead of time"
        )
    return LAUNCH_OVERHEAD.finding(stake, lines, detail, rules)


_SYNC_SEV = by_stake("sync.moderate", "sync.high")


def _sync(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    stake = raised_stake(obs, rules, "sync", _SYNC_SEV)
    if stake is None:
        return None
    lines = [
        graded_ev(rules, _SYNC_SEV, "GPU idle while the host synchronizes", stake),
        sink_line(obs, "sync"),
        *obs.host_evidence.get("sync", ())[1:],
    ]
    return SYNC.finding(
        stake,
        lines,
        SYNC.detail_for(
            obs.context,
            "cudaDeviceSynchronize/cudaStreamSynchronize "
            "or blocking copies (.item(), .cpu(), print, torch.tensor(..., device=...)) inside the step",
        ),
        rules,
    )


_BLOCKING_SEV = by_stake("sync.bubble_moderate", "sync.high")


def _blocking(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    s = obs.syncs
    if not obs.has_gpu or s is None or not s.count or s.bubble_pct < rules.value("sync.reported"):
        return None
    calls = ", ".join(f"{n} ×{c}" for n, c in sorted(s.by_name.items(), key=lambda x: -x[1])[:3])
    return BLOCKING_SYNC.finding(
        s.bubble_pct,
        [
            ev(rules, "sync.bubble_moderate", "GPU idle after syncs (capped at the host's blocked time)", s.bubble_pct),
            ctx("synchronizing calls per step", s.per_step, "calls", f"trace: {calls}"),
            Evidence("host time blocked in them", round(s.host_ns / 1e6, 3), "ms", "", "measured"),
        ],
        BLOCKING_SYNC.detail_for(
            obs.context,
            "each sync drains the GPU queue (.item(), .cpu(), print(loss), "
            "torch.cuda.synchronize()); the GPU then waits for the host to issue the next kernel",
        ),
        rules,
    )


# --- wording: the fix in the run's words (its Context) ----------------------------------------


_NATIVE_SYNC = (
    "// replace cudaDeviceSynchronize()/blocking cudaMemcpy inside the loop with stream order and events:\n"
    "cudaEventRecord(done, stream); cudaStreamWaitEvent(other_stream, done);\n"
    "cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, stream);  // read results a step later"
)


def _blocking_sync_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("remove-blocking-syncs", "Take synchronizations out of the step", _NATIVE_SYNC)
    if c.training:
        change = (
            "running_loss += loss.detach()              # not loss.item() every step\n"
            "if step % 100 == 0: print(running_loss.item() / 100)  # sync rarely\n"
            "# drop torch.cuda.synchronize() and .cpu() from the training loop"
        )
    else:
        change = (
            "# build inputs on the GPU, or copy them from pinned memory without blocking:\n"
            "x = torch.as_tensor(values).pin_memory().to(device, non_blocking=True)  # not torch.tensor(..., device=...)\n"
            "# read results (.item(), .tolist(), .cpu()) once per batch, after the next launch is queued"
        )
    return FixText("remove-blocking-syncs", "Take synchronizations out of the step", change)


def _sync_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText("remove-syncs", "Remove host-device synchronizations from the step", _NATIVE_SYNC)
    if c.training:
        change = (
            "# keep metrics on the GPU; read them every N steps, not every step\n"
            "running_loss += loss.detach()        # not loss.item()\n"
            "x = x.to(device, non_blocking=True)  # not a blocking copy"
        )
    else:
        change = (
            "# keep results on the GPU until they are needed; read them in one copy per batch\n"
            "x = x.to(device, non_blocking=True)  # not a blocking copy"
        )
    return FixText("remove-syncs", "Remove host-device synchronizations from the step", change)


def _launch_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "reduce-launch-overhead",
            "Launch fewer, larger kernels (CUDA/HIP graphs, kernel fusion)",
            "cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);  // record the step's launches once\n"
            "... launches ...\ncudaStreamEndCapture(stream, &graph); cudaGraphInstantiate(&exec, graph, 0);\n"
            "cudaGraphLaunch(exec, stream);                               // one launch per step",
        )
    lines = []
    if c.graphs:
        lines.append(
            "# the step already replays CUDA/HIP graphs: the launches left are outside them —\n"
            "# move that work into the captured region, or batch more requests per replay"
        )
    elif c.compiled:
        lines.append('model = torch.compile(model, mode="reduce-overhead")  # already compiled: add CUDA-graph capture')
    else:
        lines.append('model = torch.compile(model, mode="reduce-overhead")  # fuses kernels, captures CUDA graphs')
    opt = _fused_optimizer_line(c)
    if opt:
        lines.append(opt)
    if c.inference and not c.graphs:
        lines.append(
            "# serving: batch more requests per launch (continuous batching in the server)"
            if c.decode_loop  # LLM-serving advice only where the trace shows a decode loop
            else "# inference: more inputs per forward (a larger batch): fewer, larger launches"
        )
    title = (
        "Launch fewer, larger kernels (more work per graph replay)"
        if c.graphs
        else "Launch fewer, larger kernels (CUDA graphs / torch.compile, bigger batches)"
    )
    return FixText("reduce-launch-overhead", title, "\n".join(lines))


def _fused_optimizer_line(c: Context) -> str | None:
    """A fused-optimizer line only for a training run whose trace records an Adam-family optimizer
    that is not already fused (an SGD, Adagrad or FusedAdam run gets none)."""
    if not c.training or c.fused_optimizer:
        return None
    name = c.optimizer
    if name is None or not name.lower().startswith("adam"):
        return None
    return f"optimizer = torch.optim.{name}(params, fused=True)  # one kernel per step, not per tensor"


def _cold_start_words(c: Context) -> FixText:
    if c.native:
        return FixText(
            "warm-up-kernels",
            "Load kernels before the timed work (warm-up, ahead-of-time code objects)",
            "// launch each kernel once (or cuModuleLoad/hipModuleLoad the code objects) before the loop;\n"
            "// build for the exact GPU architecture so no JIT compilation happens at first launch",
        )
    then = (
        "# then record only the warm steps: torch.cuda.profiler.start()/stop() around them and\n"
        "# nsys profile --capture-range=cudaProfilerApi"
        if c.source_format.startswith("nsys")
        else "# then profile: schedule(wait=1, warmup=2, active=3) in torch.profiler"
    )
    return FixText(
        "warm-up-kernels",
        "Warm up before measuring: the first launches load kernel code",
        "for _ in range(3):          # untimed warm-up iterations load and compile every kernel\n"
        "    step(batch)\n"
        "torch.cuda.synchronize()\n" + then,
    )


def _sync_detail(c: Context, default: str) -> str:
    if c.native:
        return "cudaDeviceSynchronize/cudaStreamSynchronize or blocking cudaMemcpy/hipMemcpy calls inside the step"
    return default


def _blocking_detail(c: Context, default: str) -> str:
    if c.native:
        return (
            "each sync drains the GPU queue (cudaDeviceSynchronize, cudaStreamSynchronize, a blocking cudaMemcpy); "
            "the GPU then waits for the host to issue the next kernel"
        )
    return default


LAUNCH_OVERHEAD = FindingSpec(
    id="host/launch-overhead",
    axis="algorithm",
    title="GPU waits for the host to issue work",
    measure=_launch,
    can_be_primary=True,
    severity=_LAUNCH_SEV,
    fix=catalog_fix("reduce-launch-overhead", projection="idle", text=_launch_words, cold_start=_cold_start_words),
    whatif_pool="host-idle",
    diff_measure=DiffMeasure(
        "GPU idle while the host launches/computes", "ms per step", ms_per_step("idle_host_overhead")
    ),
    **verdict_class("launch"),
    breakdown=("idle_host_overhead",),
    describes="GPU idle while the host runs framework ops or runtime calls",
    thresholds=("launch.tiny_kernel_us",),
)

SYNC = FindingSpec(
    id="host/sync",
    axis="algorithm",
    title="Host-device synchronization stalls the pipeline",
    measure=_sync,
    can_be_primary=True,
    severity=_SYNC_SEV,
    fix=catalog_fix("remove-syncs", projection="idle", text=_sync_words),
    whatif_pool="host-idle",
    diff_measure=DiffMeasure("GPU idle while the host synchronizes", "ms per step", ms_per_step("idle_sync")),
    **verdict_class("sync"),
    breakdown=("idle_sync",),
    describes="GPU idle while the host is blocked in a synchronizing call",
    detail_words=_sync_detail,
)

BLOCKING_SYNC = FindingSpec(
    id="host/blocking-sync",
    axis="algorithm",
    title="Blocking host-device synchronizations inside the step",
    measure=_blocking,
    can_be_primary=True,
    severity=_BLOCKING_SEV,
    fix=catalog_fix("remove-blocking-syncs", projection="idle", text=_blocking_sync_words),
    whatif_pool="host-idle",
    diff_measure=DiffMeasure("GPU idle after blocking synchronizations", "ms per step", stake_ms("host/blocking-sync")),
    **verdict_class("sync"),
    breakdown=("idle_sync", "idle_host_overhead", "idle_other"),
    describes="GPU idle after each in-step sync, capped at the host's blocked time",
    detail_words=_blocking_detail,
    refines="host/sync",
    thresholds=("sync.reported",),
)

_ALLOC_SEV = by_stake("alloc.moderate", "alloc.high")


def _alloc(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    h = obs.host_idle
    stake = raised_stake(obs, rules, "allocator", _ALLOC_SEV)
    if stake is None or h is None:
        return None
    steps = max(1, len(obs.segmentation.steps))
    lines = [
        graded_ev(
            rules,
            _ALLOC_SEV,
            "GPU idle while the host allocates or frees memory (allocator, event and stream calls)",
            stake,
        ),
        sink_line(obs, "allocator"),
        ctx("allocator calls per step (in the steps, on the launching threads)", h.alloc_calls / steps, "calls"),
        *obs.host_evidence.get("alloc", ())[1:],  # the calls behind it, by name
    ]
    calls = [c for c in h.calls if c.cls == "alloc"]
    top = calls[0] if calls else None
    frees = sum(c.idle_ns for c in calls if "Free" in c.name or "Release" in c.name or "Unmap" in c.name)
    what = f"{top.name} ×{top.count} ({top.idle_ns / 1e6:,.1f} ms of GPU idle)" if top else "allocator calls"
    if obs.context is not None and obs.context.native:
        detail = (
            f"{what}: device or pinned memory is allocated and freed inside the loop "
            f"({h.alloc_calls / steps:,.0f} calls per step); freeing device memory synchronizes the device and the "
            "GPU waits for the host to return"
        )
    elif frees >= 0.5 * sum(c.idle_ns for c in calls) and calls:
        detail = (
            f"{what}: the step frees device memory back to the driver ({h.alloc_calls / steps:,.0f} allocator calls "
            "per step) — each free synchronizes the device while the GPU waits. PyTorch's caching allocator makes "
            "no such call in a steady step: it is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1) or emptied every step "
            "(torch.cuda.empty_cache())"
        )
    else:
        detail = (
            f"{what}: memory, events or streams are created inside the step ({h.alloc_calls / steps:,.0f} allocator "
            "calls per step) while the GPU waits — allocate them once and reuse them"
        )
    return ALLOCATOR_CHURN.finding(stake, lines, detail, rules)


def _alloc_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "allocator-reuse",
            "Allocate once, outside the loop (or from a stream-ordered memory pool)",
            "// allocate device and pinned buffers, events and streams once, before the loop, and reuse them:\n"
            "cudaMalloc(&buf, max_bytes);        // not cudaMalloc/cudaFree every iteration\n"
            "// where sizes vary: cudaMallocAsync/cudaFreeAsync on a pool that keeps its memory\n"
            "cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all);",
        )
    return FixText(
        "allocator-reuse",
        "Turn the caching allocator back on (or stop allocating and freeing every step)",
        "unset PYTORCH_NO_CUDA_MEMORY_CACHING    # =1 turns the caching allocator off: every free reaches cudaFree/hipFree\n"
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # ROCm: PYTORCH_HIP_ALLOC_CONF; fewer, growable segments\n"
        "# in the loop: no torch.cuda.empty_cache(); reuse preallocated buffers (out=..., tensors made once)",
    )


ALLOCATOR_CHURN = FindingSpec(
    id="host/allocator-churn",
    axis="algorithm",
    title="GPU idles while the host allocates and frees memory (allocator churn)",
    measure=_alloc,
    can_be_primary=True,
    severity=_ALLOC_SEV,
    fix=catalog_fix("allocator-reuse", projection="idle", text=_alloc_words),
    whatif_pool="host-idle",
    diff_measure=DiffMeasure("GPU idle in allocator calls", "ms per step", stake_ms("host/allocator-churn")),
    **verdict_class("allocator"),
    breakdown=("idle_other", "idle_host_overhead"),
    describes="GPU idle while the host is in cudaMalloc/cudaFree, hipFree, cudaHostAlloc or event/stream creation",
)

_RANGES_SEV = by_stake("host_overhead.moderate", "host_overhead.high")


def _named_work(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    stake = raised_stake(obs, rules, "host-ranges", _RANGES_SEV)
    if stake is None:
        return None
    g = obs.gaps
    lines = [
        graded_ev(rules, _RANGES_SEV, "GPU idle while the host works in named ranges that issue no GPU work", stake),
        sink_line(obs, "host-ranges"),
    ]
    top = sorted(g.ranges.items(), key=lambda x: -x[1])[:4] if g is not None else []
    lines += [ctx(f"GPU idle inside host range '{name}'", ns / 1e6, "ms", "trace: host ranges") for name, ns in top]
    names = ", ".join(f"'{n}'" for n, _ in top[:3]) or "named ranges"
    return NAMED_HOST_WORK.finding(
        stake,
        lines,
        f"the host works in {names} while the GPU has nothing issued: that work sits on the step's critical path",
        rules,
    )


NAMED_HOST_WORK = FindingSpec(
    id="host/named-work",
    axis="algorithm",
    title="GPU idles while the host does named work (I/O, checkpoint, logging, eval)",
    measure=_named_work,
    can_be_primary=True,
    severity=_RANGES_SEV,
    fix=catalog_fix("host-work-off-path", projection="idle"),
    whatif_pool="host-idle",
    diff_measure=DiffMeasure("GPU idle during named host work", "ms per step", stake_ms("host/named-work")),
    **verdict_class("host-work"),
    breakdown=("idle_other",),
    describes="GPU idle while the host runs named ranges that issue no GPU work",
)

SPECS = (LAUNCH_OVERHEAD, SYNC, BLOCKING_SYNC, ALLOCATOR_CHURN, NAMED_HOST_WORK)
