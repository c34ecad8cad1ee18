"""Machine axis, memory: busy time limited by memory bandwidth (unfused attention the commonest
case), and memory capacity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import LiveMeasure
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import fixed
from trainscope.analyzers.findings.base import stake_ms
from trainscope.analyzers.findings.base import stake_pct
from trainscope.analyzers.findings.base import verdict_class
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.catalog import catalog_words
from trainscope.analyzers.findings.common import BUSY_MIX_THRESHOLDS
from trainscope.analyzers.findings.common import BUSY_SEV
from trainscope.analyzers.findings.common import busy_sink_finding
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.findings.common import ev
from trainscope.analyzers.findings.common import live_busy_finding
from trainscope.analyzers.findings.common import live_ev
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.live.window_stats import WindowStats
    from trainscope.analyzers.snapshot.summary import DeviceSnapshotMemory
    from trainscope.analyzers.trace.analysis import Analysis
    from trainscope.traces.samples import Snapshot


def _bandwidth(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    why = (
        "DRAM bandwidth is near its peak while SMs wait on memory",
        "kernels that move more bytes than they compute: fusion cuts the traffic",
    )
    title = "Hardware counters: memory-bandwidth-bound"
    fused = obs.fusion.evidence() if obs.fusion is not None else ()  # the sequences the fusion fix would fuse
    return busy_sink_finding(BANDWIDTH, obs, rules, "memory-bound", why, title, fused)


_ATTN_SEV = by_stake("stake.moderate", "stake.high")


def _unfused(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    a = obs.attention
    if not obs.has_gpu or a is None:
        return None
    t = rules["attention.unfused_share"]
    share = a.unfused_pct
    if share < t.value or a.fused_ns > a.unfused_ns:
        return None
    lines = [
        ev(
            rules,
            "attention.unfused_share",
            "memory-bound kernels (elementwise/softmax/reduction) "
            + ("launched inside attention ranges" if a.ranges else "softmax kernels")
            + ", share of kernel time",
            share,
        ),
        Evidence(
            "fused attention kernels (flash / memory-efficient / fmha)",
            round(a.fused_ns / 1e6, 3),
            "ms",
            "",
            "measured",
        ),
    ]
    if a.ranges:
        lines.append(Evidence("attention ranges in the steps", a.ranges, "ranges", "", "trace annotations"))
        low = 100.0 * a.in_ranges_low_ns / a.in_ranges_ns if a.in_ranges_ns else 0.0
        lines.append(Evidence("memory-bound share of attention kernel time", round(low, 2), "%", "", "measured"))
    stake = obs.breakdown.share_pct("compute") * share / 100
    return UNFUSED_ATTENTION.finding(
        stake,
        lines,
        "masking, softmax and scaling run as separate memory-bound kernels over batch × heads × L × L score "
        "matrices; fused attention never writes them to memory",
        rules,
    )


def _capacity(obs: DiagnosisInput, rules: Rules) -> list[Finding]:
    out = []
    for m in obs.memory:
        pct = m.peak_pct
        if pct is not None and pct >= rules.value("memory.capacity"):
            out.append(
                CAPACITY.finding(
                    0.0,
                    [ev(rules, "memory.capacity", "peak memory / device memory", pct)],
                    "little headroom: larger batches or models will not fit",
                    rules,
                    title=f"GPU {m.device} memory near capacity",
                )
            )
    return out


def _peak_pct(a: Analysis) -> float | None:
    pcts = [m.peak_pct for m in a.memory if m.peak_pct is not None]
    return max(pcts) if pcts else None


# --- live measures (trainscope watch, counters-only inputs) ------------------------------------------


def _live_bandwidth(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    gpm = ("kernels move more bytes than they compute: fusion cuts the traffic", "DRAM bandwidth is the limit")
    nvml = (
        "kernels wait on memory (NVML time shares; GPM would measure bandwidth directly)",
        "Memory traffic dominates the busy GPU",
    )
    return live_busy_finding(BANDWIDTH, s, r, "memory", gpm, nvml)


def _live_capacity(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    if s.gpu_mem_pct is None or s.gpu_mem_pct < r.value("memory.capacity"):
        return None
    return CAPACITY.finding(
        0.0,
        [live_ev(r, "memory.capacity", "GPU memory used / total (fullest GPU)", s.gpu_mem_pct)],
        "little headroom: larger batches or models will not fit, and allocator retries slow steps",
        r,
    )


_THROTTLE_ADVICE = {
    "power cap": (
        "GPU clocks held down by the power cap",
        "the GPU draws its power limit and lowers its clocks to stay under it: check the limit "
        "(nvidia-smi -q -d POWER) and whether it was lowered below the board's default",
    ),
    "power brake": (
        "GPU clocks cut by the power brake",
        "an external power-brake signal (the system's power supply or chassis) slows the GPU",
    ),
    "thermal": ("GPU clocks slowed by temperature", "the GPU is too hot: check cooling and airflow"),
}


def _live_throttling(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    if s.throttled_pct is None or s.throttled_pct <= r.value("live.throttle_share"):
        return None
    top = s.throttle_reasons[0][0] if s.throttle_reasons else "power or thermal"
    title, detail = _THROTTLE_ADVICE.get(
        top,
        (
            "GPU clocks slowed by power or temperature",
            "the GPU runs below its clocks: check cooling and the power limit",
        ),
    )
    lines = [live_ev(r, "live.throttle_share", "samples with a power/thermal clock slowdown", s.throttled_pct)]
    lines += [
        ctx(f"samples slowed by: {name}", pct, "% of samples", "NVML clock-event reasons")
        for name, pct in s.throttle_reasons
    ]
    return THROTTLING.finding(0.0, lines, detail, r, title=title)


def _live_power_cap(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    """Power pinned at a limit while the GPUs are busy: the clocks are set by the power budget."""
    if not s.power_gpus or not s.power_capped_gpus or 2 * s.power_capped_gpus <= s.power_gpus:
        return None
    if s.throttle_reasons and s.throttle_reasons[0][0] == "power cap":
        return None  # the clock-event reasons already say it, more directly
    at_limit = s.power_basis == "enforced limit"
    name = "live.power_at_limit_pct" if at_limit else "live.power_ceiling_pct"
    lines = [
        ctx(
            "GPUs whose busy power sits " + ("at the enforced limit" if at_limit else "at a hard ceiling"),
            s.power_capped_gpus,
            f"of {s.power_gpus} GPUs",
            f"power samples; threshold {name} = {r.value(name):g}",
        ),
        ctx("median busy power of those GPUs", s.power_median_w, "W"),
    ]
    detail = (
        "busy power stays pinned under a maximum it never exceeds: the GPUs run at their power limit, so "
        "their clocks follow the power budget"
        + ("" if at_limit else " (this source records no power limit; the ceiling is read from the samples)")
    )
    return POWER_CAP.finding(0.0, lines, detail, r)


# --- memory-snapshot rules (`trainscope memory`) ----------------------------------------------------


def snapshot_findings(mem: list[DeviceSnapshotMemory], capacity_bytes: float | None, rules: Rules) -> list[Finding]:
    """``machine/capacity`` (an OOM that all free memory could not have met, a snapshot at its limit,
    or a peak near the device's memory) and ``machine/fragmentation`` (an OOM with enough free
    memory in too-small blocks, or a large share of reserved memory holding no tensor)."""
    out: list[Finding] = []
    cap_t, frag_t = rules["memory.capacity"], rules["memory.fragmentation"]
    for m in mem:
        frag_ev = ev(
            rules, "memory.fragmentation", "reserved but unallocated at the reserved peak", m.fragmentation_pct
        )
        o = m.oom
        if o is not None and o.status == "oom":
            assert o.requested is not None and o.device_free is not None  # assess_oom sets both for an oom event
            lines = [
                Evidence(
                    "out-of-memory events in the trace",
                    m.oom_events,
                    "events",
                    "OOM seen",
                    "TensorBoard profiler plugin; the textbook's decision flowchart (OOM seen: high)",
                    True,
                ),
                Evidence("failed request", round(o.requested / 2**20, 1), "MiB", "", "trace: oom event", None),
                Evidence(
                    "device free + allocator cached free at the failure",
                    round((o.device_free + o.cached_free) / 2**20, 1),
                    "MiB",
                    "",
                    "trace: oom event; segments",
                    None,
                ),
                frag_ev,
            ]
            if o.kind == "fragmentation":
                out.append(
                    FRAGMENTATION.finding(
                        0.0,
                        lines,
                        "enough memory was free in total, in blocks too small for the request; "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow instead",
                        rules,
                        title=f"GPU {m.device} ran out of memory through fragmentation",
                        severity="high",
                    )
                )
                continue
            out.append(
                CAPACITY.finding(
                    0.0,
                    lines,
                    "the request exceeded all free memory, device and cache together: a capacity OOM",
                    rules,
                    title=f"GPU {m.device} ran out of memory (capacity)",
                )
            )
        elif o is not None and o.status == "at_limit":
            out.append(
                CAPACITY.finding(
                    0.0,
                    [
                        Evidence(
                            "allocator cached free at the dump, share of reserved",
                            round(100.0 * o.cached_free / o.reserved, 3),
                            "% of reserved memory",
                            f"< {rules.value('memory.oom_slack'):g}",
                            rules["memory.oom_slack"].source,
                            True,
                        ),
                        Evidence(
                            "allocated at the dump",
                            round(m.end_allocated / 2**30, 3),
                            "GiB",
                            "",
                            "segments: active_allocated blocks (requested bytes)",
                            None,
                        ),
                        Evidence(
                            "reserved at the dump",
                            round(m.end_reserved / 2**30, 3),
                            "GiB",
                            "",
                            "segments: total_size",
                            None,
                        ),
                    ],
                    "every reserved byte holds a tensor: nothing is left to reuse or defragment, so the next "
                    "allocation needs new device memory (no oom event is recorded; the trace keeps "
                    f"{m.events:,} allocator events)",
                    rules,
                    title=f"GPU {m.device} ends at its memory limit: a capacity OOM, not fragmentation",
                )
            )
        elif capacity_bytes:
            pct = 100.0 * m.peak_reserved / capacity_bytes
            if pct >= cap_t.value:
                out.append(
                    CAPACITY.finding(
                        0.0,
                        [
                            ev(rules, "memory.capacity", "peak reserved / device memory", pct),
                            frag_ev,
                        ],
                        "little headroom: larger batches or models will not fit",
                        rules,
                        title=f"GPU {m.device} memory near capacity",
                    )
                )
        if m.fragmentation_pct >= frag_t.value:
            out.append(
                FRAGMENTATION.finding(
                    0.0,
                    [frag_ev],
                    "the caching allocator holds free blocks it cannot fit requests into; "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow instead",
                    rules,
                    title=f"GPU {m.device}: reserved memory the allocator cannot use for tensors",
                )
            )
    return out


# --- wording: the fix in the run's words (its Context) ----------------------------------------


def _bandwidth_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native and c.decode:
        return FixText(
            "fuse-memory-bound",
            "Read the weights for more tokens: batch, quantize, speculate",
            "// the matrix kernels stream the weights once per step: batch more sequences per step,\n"
            "// quantize the weights (fp8 / int4 GEMMs) and the KV cache, decode speculatively",
        )
    if c.native:
        return FixText(
            "fuse-memory-bound",
            "Fuse memory-bound kernels so data is read once",
            "// merge consecutive elementwise/reduction kernels into one that keeps values in registers;\n"
            "// use vendor fused kernels (cuDNN/MIOpen fused ops, CUTLASS epilogues) where they exist",
        )
    if c.decode:
        return FixText(
            "fuse-memory-bound",
            "Read the weights for more tokens: batch, quantize, speculate",
            "# the matrix kernels stream the weights once per step: more tokens per read, fewer bytes per weight\n"
            "# more sequences per step: raise the server's batch (continuous batching, e.g. max_num_seqs)\n"
            "# fewer bytes: weight quantization (fp8 / int4), and an fp8 KV cache where the server keeps one\n"
            "# more tokens per weight read in autoregressive generation: speculative decoding (a draft model)",
        )
    lines = []
    if not c.compiled:
        lines.append("model = torch.compile(model)  # fuses chains of elementwise/normalization kernels")
    else:
        lines.append(
            "# already compiled: the memory-bound runs left are outside Inductor's fusions —\n"
            "# custom fused kernels (a Triton kernel for the chain), or lower-precision activations"
        )
    # No attention advice here: a trace with no attention (a CNN, DLRM) would be told to call SDPA.
    # Unfused attention is its own finding (machine/unfused-attention) with its own fix, raised only
    # where the trace shows the score matrices going through memory.
    what = "torch.compile" if not c.compiled else "custom kernels"
    return FixText(
        "fuse-memory-bound",
        f"Fuse memory-bound kernels ({what})",
        "\n".join(lines),
    )


def _attention_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "fused-attention",
            "Use a fused attention kernel (FlashAttention / cuDNN fused attention)",
            "// one kernel computes softmax(QK^T)V tile by tile, never writing the score matrix to memory",
        )
    if c.fused_attention:
        return FixText(
            "fused-attention",
            "Send the unfused attention through the fused kernels already in use",
            "# fused attention kernels already run in this trace: the layers that still compute\n"
            "# softmax(QK^T)V kernel by kernel should take the same attention backend (the model's\n"
            "# attention implementation setting), keeping their own mask",
        )
    if c.causal:
        call = "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # the trace records a causal mask"
    else:
        call = (
            "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
            "# keep the model's own mask (None where it attends to every position); no mask is recorded here"
        )
    return FixText(
        "fused-attention",
        "Use fused attention (SDPA / FlashAttention)",
        call + "\n# replaces scores = q @ k.transpose(-2, -1) / sqrt(d); mask; softmax; @ v",
    )


def _capacity_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:  # before training: a native training code gets no PyTorch snippet either
        return FixText(
            "reduce-memory",
            "Cut device memory (smaller working sets, reuse buffers)",
            "// allocate once and reuse; process the problem in tiles that fit; free scratch buffers early",
        )
    if c.training:
        return catalog_words("reduce-memory", native=False)
    return FixText(
        "reduce-memory",
        "Cut inference memory (lower-precision weights, smaller KV cache or batch)",
        "model = model.to(torch.bfloat16)  # or 8-/4-bit weight quantization\n"
        "# cap the batch / KV-cache size (e.g. gpu_memory_utilization, max_num_seqs in the server)",
    )


BANDWIDTH = FindingSpec(
    id="machine/bandwidth",
    axis="machine",
    title="Busy time is dominated by memory-bound kernels",
    measure=_bandwidth,
    can_be_primary=True,
    severity=BUSY_SEV,
    fix=catalog_fix("fuse-memory-bound", projection="roofline", text=_bandwidth_words),
    whatif_pool="memory-bound",
    diff_measure=DiffMeasure("memory-bound kernel time", "ms per step", stake_ms("machine/bandwidth")),
    **verdict_class("memory-bound"),
    breakdown=("compute",),
    describes="kernel time limited by memory bandwidth (counters, roofline, or kernel classes)",
    live=LiveMeasure(
        "busy",
        "GPM SM/tensor vs DRAM activity; without GPM, NVML utilization vs memory-controller share",
        _live_bandwidth,
        BUSY_MIX_THRESHOLDS,
    ),
    thresholds=("gpu_busy.saturated",),
)

UNFUSED_ATTENTION = FindingSpec(
    id="machine/unfused-attention",
    axis="machine",
    title="Attention is computed unfused: score matrices go through memory kernel by kernel",
    measure=_unfused,
    can_be_primary=True,
    severity=_ATTN_SEV,
    fix=catalog_fix("fused-attention", projection="busy", text=_attention_words),
    whatif_pool="memory-bound",
    diff_measure=DiffMeasure(
        "memory-bound attention kernel time", "ms per step", stake_ms("machine/unfused-attention")
    ),
    **verdict_class("memory-bound", "unfused attention"),
    breakdown=("compute",),
    refines="machine/bandwidth",
    describes="memory-bound kernels of attention with no fused attention kernel",
    thresholds=("attention.unfused_share",),
)

CAPACITY = FindingSpec(
    id="machine/capacity",
    axis="machine",
    title="GPU memory near capacity",
    measure=_capacity,
    can_be_primary=False,
    severity=fixed("high"),
    fix=catalog_fix("reduce-memory", projection="none", text=_capacity_words),
    # A run known not to train recomputes nothing in a backward pass: the basis says so.
    alternatives=(
        catalog_fix(
            "reduce-memory",
            variant="not-training",
            projection="none",
            applies=lambda ctx: ctx is not None and not ctx.training,
            text=_capacity_words,
        ),
    ),
    diff_measure=DiffMeasure("peak memory / device memory", "%", _peak_pct),
    **verdict_class("capacity"),
    describes="peak memory against device memory (no share of step time)",
    snapshot=True,
    live=LiveMeasure("capacity", "GPU memory used / total", _live_capacity, ("memory.capacity",)),
    thresholds=("memory.capacity", "memory.oom_slack", "memory.fragmentation"),
)

THROTTLING = FindingSpec(
    id="machine/throttling",
    axis="machine",
    title="GPU clocks slowed by power or temperature",
    measure=None,
    can_be_primary=False,
    severity=fixed("moderate"),
    fix=catalog_fix("check-throttling", projection="none"),
    diff_measure=DiffMeasure("throttled samples", "%", stake_pct("machine/throttling")),
    critical_path="none",
    headline="THROTTLED",
    describes="share of samples with a power/thermal clock slowdown (live)",
    live=LiveMeasure("clocks", "clock-event reasons", _live_throttling, ("live.throttle_share",)),
)

POWER_CAP = FindingSpec(
    id="machine/power-cap",
    axis="machine",
    title="GPUs run at their power limit",
    measure=None,
    can_be_primary=False,
    severity=fixed("moderate"),
    fix=catalog_fix("check-power-limit", projection="none"),
    diff_measure=DiffMeasure("GPUs at their power limit", "GPUs", stake_pct("machine/power-cap")),
    critical_path="none",
    headline="POWER-CAPPED",
    describes="busy power pinned at the enforced limit, or under a hard ceiling in the samples (live)",
    live=LiveMeasure(
        "clocks",
        "busy power against the enforced limit or a ceiling in the samples",
        _live_power_cap,
        ("live.power_at_limit_pct", "live.power_ceiling_pct", "live.min_samples", "gpu_busy.saturated"),
    ),
)

FRAGMENTATION = FindingSpec(
    id="machine/fragmentation",
    axis="machine",
    title="Reserved memory the allocator cannot use for tensors",
    measure=None,
    can_be_primary=False,
    severity=fixed("moderate"),
    fix=catalog_fix("expandable-segments", projection="none"),
    diff_measure=DiffMeasure("peak memory / device memory", "%", _peak_pct),
    critical_path="none",
    headline="MEMORY-FRAGMENTATION",
    describes="reserved memory holding no tensor, or an OOM with enough free memory in too-small blocks "
    "(memory snapshots: `trainscope memory`)",
    snapshot=True,
    thresholds=("memory.fragmentation",),
)

SPECS = (BANDWIDTH, UNFUSED_ATTENTION, CAPACITY, THROTTLING, POWER_CAP, FRAGMENTATION)
