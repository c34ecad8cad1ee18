"""Machine axis, memory: busy time limited by memory bandwidth (unfused attention the commonest
case), and memory capacity."""

from __future__ import annotations

from trainscope.analyzers.context import Context
from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import (
    DiffMeasure,
    Evidence,
    Finding,
    FindingSpec,
    Fix,
    FixText,
    by_stake,
    fixed,
    stake_ms,
    stake_pct,
)
from trainscope.analyzers.findings.common import ev, raised, sink_line
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.analysis import Analysis

_BUSY_SEV = by_stake("busy_sink.moderate", "busy_sink.high")


def _bandwidth(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    if not obs.has_gpu or obs.sinks is None or not raised(obs, rules, "memory-bound", _BUSY_SEV):
        return None
    stake = obs.sinks.pct("memory-bound")
    lines = [
        ev(rules, "busy_sink.moderate", "memory-bound kernel time, share of step time", stake),
        *obs.busy_evidence,
        sink_line(obs, "memory-bound"),
        ev(rules, "gpu_busy.saturated", "GPU busy", obs.breakdown.gpu_busy_pct),
    ]
    if obs.sinks.busy_source == "hardware counters":  # measured evidence first
        lines = [*obs.busy_evidence] + [x for x in lines if x not in obs.busy_evidence]
    counters = obs.sinks.busy_source == "hardware counters"
    return BANDWIDTH.finding(
        stake,
        lines,
        "DRAM bandwidth is near its peak while SMs wait on memory"
        if counters
        else "kernels that move more bytes than they compute: fusion cuts the traffic",
        rules,
        title="Hardware counters: memory-bandwidth-bound" if counters else None,
    )


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
        Evidence(
            "memory-bound kernels (elementwise/softmax/reduction) "
            + ("launched inside attention ranges" if a.ranges else "softmax kernels")
            + ", share of kernel time",
            round(share, 2),
            t.unit,
            f"≥ {t.value:g}",
            t.source,
            True,
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
        return FixText(
            "reduce-memory",
            "Cut activation memory (checkpointing, mixed precision)",
            "from torch.utils.checkpoint import checkpoint\nout = checkpoint(block, x, use_reentrant=False)",
        )
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
    severity=_BUSY_SEV,
    fix=Fix(
        "fuse-memory-bound",
        "Fuse memory-bound kernels (torch.compile; fused optimizers and attention)",
        "model = torch.compile(model)\n"
        "F.scaled_dot_product_attention(q, k, v)  # fused attention instead of softmax(QK^T)V",
        "// fuse chains of elementwise/normalization kernels into one kernel (one read, one write);\n"
        "// keep intermediates in registers/shared memory; use lower-precision storage (bf16/fp8) to halve bytes",
        projection="roofline",
        basis="roofline bound on the {stake:.1f} % memory-bound kernel time",
        whatif_label="memory-bound kernels at their roofline bound (fused runs, operands read once)",
        text=_bandwidth_words,
    ),
    whatif_pool="memory-bound",
    diff_measure=DiffMeasure("memory-bound kernel time", "ms per step", stake_ms("machine/bandwidth")),
    critical_path="gpu-compute",
    headline="MEMORY-BANDWIDTH-BOUND",
    label_class="memory-bound",
    sink="memory-bound",
    breakdown=("compute",),
    describes="kernel time limited by memory bandwidth (counters, roofline, or kernel classes)",
    live=True,
)

UNFUSED_ATTENTION = FindingSpec(
    id="machine/unfused-attention",
    axis="machine",
    title="Attention is computed unfused: score matrices go through memory kernel by kernel",
    measure=_unfused,
    can_be_primary=True,
    severity=_ATTN_SEV,
    fix=Fix(
        "fused-attention",
        "Use fused attention (SDPA / FlashAttention)",
        "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # the model's own mask\n"
        "# replaces scores = q @ k.transpose(-2, -1) / sqrt(d); mask; softmax; @ v",
        "// call a fused attention kernel (cuDNN frontend SDPA, FlashAttention's C++ API, CK/aiter fmha on ROCm)\n"
        "// instead of GEMM → softmax → GEMM over materialized L×L score matrices",
        projection="busy",
        basis="fused attention never writes the score matrices: the {stake:.1f} % memory-bound "
        "attention time (mask, softmax, scaling over them) goes, the matmuls stay",
        whatif_label="unfused attention's memory-bound kernels gone",
        text=_attention_words,
    ),
    whatif_pool="memory-bound",
    diff_measure=DiffMeasure(
        "memory-bound attention kernel time", "ms per step", stake_ms("machine/unfused-attention")
    ),
    critical_path="gpu-compute",
    headline="MEMORY-BANDWIDTH-BOUND (unfused attention)",
    label_class="memory-bound",
    sink="memory-bound",
    breakdown=("compute",),
    refines="machine/bandwidth",
    describes="memory-bound kernels of attention with no fused attention kernel",
)

CAPACITY = FindingSpec(
    id="machine/capacity",
    axis="machine",
    title="GPU memory near capacity",
    measure=_capacity,
    can_be_primary=False,
    severity=fixed("high"),
    fix=Fix(
        "reduce-memory",
        "Cut activation memory (checkpointing, mixed precision)",
        "from torch.utils.checkpoint import checkpoint\nout = checkpoint(block, x, use_reentrant=False)",
        "// recompute activations in the backward pass instead of storing them; store them in bf16;\n"
        "// free workspaces between phases (cudaFreeAsync with a memory pool)",
        projection="none",
        basis="no speed projection: frees memory for larger batches (recomputation costs ~⅓ more forward time)",
        text=_capacity_words,
    ),
    whatif_pool=None,
    diff_measure=DiffMeasure("peak memory / device memory", "%", _peak_pct),
    critical_path="none",
    headline="MEMORY-CAPACITY-BOUND",
    label_class="capacity",
    describes="peak memory against device memory (no share of step time)",
    live=True,
)

THROTTLING = FindingSpec(
    id="machine/throttling",
    axis="machine",
    title="GPU clocks slowed by power or temperature",
    measure=None,
    can_be_primary=False,
    severity=fixed("moderate"),
    fix=Fix(
        "check-throttling",
        "Check cooling and power limits",
        "nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE",
        "nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE   # or rocm-smi --showpower --showtemp",
        projection="none",
        basis="no projection: clocks, not work, are the limit",
    ),
    whatif_pool=None,
    diff_measure=DiffMeasure("throttled samples", "%", stake_pct("machine/throttling")),
    critical_path="none",
    headline="THROTTLED",
    label_class=None,
    describes="share of samples with a power/thermal clock slowdown (live)",
    live=True,
    offline=False,
)

POWER_CAP = FindingSpec(
    id="machine/power-cap",
    axis="machine",
    title="GPUs run at their power limit",
    measure=None,
    can_be_primary=False,
    severity=fixed("moderate"),
    fix=Fix(
        "check-power-limit",
        "Check the power limit and what the GPUs spend it on",
        "nvidia-smi -q -d POWER        # enforced vs default limit\n"
        "nvidia-smi -pl <watts>        # restore the default limit (needs admin rights)",
        "nvidia-smi -q -d POWER        # or: rocm-smi --showpower --showmaxpower",
        projection="none",
        basis="no projection: the power budget, not the work, sets the clocks",
    ),
    whatif_pool=None,
    diff_measure=DiffMeasure("GPUs at their power limit", "GPUs", stake_pct("machine/power-cap")),
    critical_path="none",
    headline="POWER-CAPPED",
    label_class=None,
    describes="busy power pinned at the enforced limit, or under a hard ceiling in the samples (live)",
    live=True,
    offline=False,
)

FRAGMENTATION = FindingSpec(
    id="machine/fragmentation",
    axis="machine",
    title="Reserved memory the allocator cannot use for tensors",
    measure=None,
    can_be_primary=False,
    severity=fixed("moderate"),
    fix=Fix(
        "expandable-segments",
        "Let the caching allocator grow segments instead of splitting them",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python your_job.py\n"
        "# or allocate the largest, longest-lived tensors first; avoid many differently sized temporaries",
        "// allocate long-lived buffers once, up front, from one arena; use cudaMallocAsync with a memory pool\n"
        "// (cudaMemPoolSetAttribute release threshold) rather than many cudaMalloc/cudaFree of varying sizes",
        projection="none",
        basis="no speed projection: frees reserved memory for tensors",
    ),
    whatif_pool=None,
    diff_measure=DiffMeasure("peak memory / device memory", "%", _peak_pct),
    critical_path="none",
    headline="MEMORY-FRAGMENTATION",
    label_class=None,
    describes="reserved memory holding no tensor, or an OOM with enough free memory in too-small blocks "
    "(memory snapshots: `trainscope memory`)",
    offline=False,
)

SPECS = (BANDWIDTH, UNFUSED_ATTENTION, CAPACITY, THROTTLING, POWER_CAP, FRAGMENTATION)
