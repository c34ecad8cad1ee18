"""Algorithm axis, kernels: busy time limited by arithmetic throughput, and matrix math that does
not use the tensor cores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import LiveMeasure
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import verdict_class
from trainscope.analyzers.findings.catalog import catalog_fix
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
    from trainscope.traces.samples import Snapshot


def _compute_bound(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    why = (
        "SMs/tensor cores are busy while DRAM bandwidth is to spare",
        "arithmetic units are the limit while kernels run",
    )
    return busy_sink_finding(COMPUTE_BOUND, obs, rules, "compute-bound", why, "Hardware counters: compute-bound")


_TC_SEV = by_stake("stake.moderate", "stake.high")


def _no_tensor_cores(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    k = obs.kernels
    tc = k.tensor_core_pct_of_matmul
    matmul_share = 100.0 * k.matmul_ns / k.total_ns if k.total_ns else 0.0
    movable = 1.0 - (tc or 0.0) / 100  # share of matrix time mixed precision can move to tensor cores
    roof = obs.roofline
    if roof is not None and roof.total_ms > 0:
        # Tensor cores from the precision: advice only where that precision has a tensor-core path,
        # for fp32 matrix work the roofline calls compute-bound (never GEMVs, never unknown precision).
        tc = roof.tensor_core_pct_of_matrix
        matmul_share = 100.0 * roof.matrix_ms / roof.total_ms
        movable = roof.tensor_core_candidate_ms / roof.matrix_ms if roof.matrix_ms else 0.0
    if not obs.has_gpu or tc is None or tc >= rules.value("tensor_core.low") or matmul_share < 20.0 or movable <= 0:
        return None
    stake = obs.breakdown.share_pct("compute") * matmul_share / 100 * movable
    return NO_TENSOR_CORES.finding(
        stake,
        [
            ev(rules, "tensor_core.low", "tensor-core share of GEMM/conv/attention time", tc, "<"),
            ctx("GEMM/conv/attention share of kernel time", matmul_share, "%"),
        ],
        "fp32 GEMMs/convolutions run on the CUDA cores; mixed precision moves them to tensor cores",
        rules,
    )


# --- live measures (trainscope watch, counters-only inputs) ------------------------------------------


def _live_compute_bound(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    gpm = ("arithmetic units are the limit while kernels run", "SMs and tensor cores are the limit")
    nvml = (
        "kernels run nearly all the time with modest memory traffic (NVML time shares; GPM would be precise)",
        "The GPU is busy computing",
    )
    return live_busy_finding(COMPUTE_BOUND, s, r, "compute", gpm, nvml)


def live_cpu_step(s: WindowStats, r: Rules) -> Finding:
    """A CPU job (no GPU sampled) whose step-exact wait stays below the input-wait grade: the time
    goes to the step itself (the live verdict's last word on a CPU job)."""
    assert s.data_wait_pct is not None  # the verdict asks only with step timings
    return COMPUTE_BOUND.finding(
        100 - s.data_wait_pct,
        [
            live_ev(
                r,
                "data_wait.moderate",
                "training loop waiting in DataLoader __next__ (step-exact)",
                s.data_wait_pct,
                "<",
            ),
            ctx("training process CPU", s.main_cpu_pct, "% of a core"),
        ],
        "the input pipeline keeps up; no GPU is in use, so the step computes on the CPU",
        r,
        title="Time goes to the training step itself",
        severity="moderate",
    )


# --- wording: the fix in the run's words (its Context) ----------------------------------------


def _mixed_precision_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "mixed-precision",
            "Use tensor cores for the matrix math (reduced precision / TF32)",
            "cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);  // fp32 GEMMs on tensor cores\n"
            "// or cublasGemmEx with CUDA_R_16BF inputs and CUBLAS_COMPUTE_32F (hipBLASLt likewise)",
        )
    dtype = "torch.bfloat16" if bf16 else "torch.float16"
    if c.training:
        change = f'with torch.autocast(device_type="cuda", dtype={dtype}):\n    loss = loss_fn(model(x), y)' + (
            "" if bf16 else "\nscaler = torch.amp.GradScaler()  # fp16 needs loss scaling"
        )
    else:
        change = f"model = model.to({dtype}).eval()\nwith torch.inference_mode():\n    out = model(x)"
    return FixText("mixed-precision", "Use mixed precision so GEMMs and convolutions run on tensor cores", change)


def _compute_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "compute-efficiency",
            "Already on tensor cores: raise arithmetic efficiency",
            "// tune GEMM tile shapes (cuBLASLt/hipBLASLt heuristics, CUTLASS), larger problem sizes per launch",
        )
    lines = []
    if c.inference and not c.compiled and not c.graphs:
        lines.append(
            "# a serving engine: its own compile and graph options (torch.compile inside the server,\n"
            '# CUDA-graph capture of the decode step); a plain script: torch.compile(model, mode="max-autotune")'
        )
    elif not c.compiled and not c.graphs:
        lines.append('model = torch.compile(model, mode="max-autotune")  # autotuned GEMM tiles')
    else:
        lines.append(
            "# already compiled/captured: autotune the GEMMs themselves (TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1, "
            "hipBLASLt/cuBLASLt tuning)"
        )
    if c.training:
        lines.append("# larger batch per GPU if memory allows: fuller tiles on every SM")
    else:
        lines.append("# more requests per batch (the server's batch size): fuller tiles on every SM")
    if not c.fused_attention:
        lines.append("# attention through F.scaled_dot_product_attention (fused kernels)")
    return FixText("compute-efficiency", "Already on tensor cores: raise arithmetic efficiency", "\n".join(lines))


COMPUTE_BOUND = FindingSpec(
    id="algorithm/compute-bound",
    axis="algorithm",
    title="Busy time is dominated by compute-bound kernels",
    measure=_compute_bound,
    can_be_primary=True,
    severity=BUSY_SEV,
    fix=catalog_fix(
        "compute-efficiency", projection="none", superseded_by=("algorithm/no-tensor-cores",), text=_compute_words
    ),
    diff_measure=DiffMeasure(
        "GEMM/conv/attention kernel time",
        "ms per step",
        lambda a: a.kernels.matmul_ns / 1e6 / max(1, len(a.breakdown.steps)),
    ),
    **verdict_class("compute-bound"),
    breakdown=("compute",),
    describes="kernel time limited by arithmetic throughput (counters, roofline, or kernel classes)",
    live=LiveMeasure(
        "busy",
        "GPM SM/tensor vs DRAM activity; without GPM, NVML utilization vs memory-controller share",
        _live_compute_bound,
        BUSY_MIX_THRESHOLDS,
    ),
    thresholds=("gpu_busy.saturated",),
)

NO_TENSOR_CORES = FindingSpec(
    id="algorithm/no-tensor-cores",
    axis="algorithm",
    title="Matrix math runs without tensor cores",
    measure=_no_tensor_cores,
    can_be_primary=False,
    severity=_TC_SEV,
    fix=catalog_fix(
        "mixed-precision",
        projection="amdahl",
        applies=lambda c: getattr(c, "matmul_compute_bound", None) is not False,  # tensor cores speed arithmetic
        text=_mixed_precision_words,
    ),
    whatif_pool="tensor-cores",
    diff_measure=DiffMeasure(
        "tensor-core share of GEMM/conv/attention time",
        "%",
        lambda a: a.kernels.tensor_core_pct_of_matmul,
        lower_is_better=False,
    ),
    critical_path="gpu-compute",
    headline="COMPUTE-BOUND (no tensor cores)",
    label_class="compute-bound",
    breakdown=("compute",),
    describes="GEMM/convolution time on CUDA cores instead of tensor cores",
    thresholds=("tensor_core.low",),
)

SPECS = (COMPUTE_BOUND, NO_TENSOR_CORES)
