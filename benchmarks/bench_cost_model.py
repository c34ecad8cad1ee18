"""The cost model (analyzers/trace/op_formulas.py) against hardware counters, per kernel class.

Two kinds of ground truth:

1. Reference points recorded with Nsight Compute on an H100 (an earlier measuring session; no GPU
   is lent to this project's test runs): per operator, the FLOPs the SMs executed
   (``sm__sass_thread_inst_executed_op_*`` and tensor-pipe counters) or the DRAM bytes moved
   (``dram__bytes.sum``). The formula side is computed here, now, by ``op_cost`` from the same
   shapes, so a change to a formula shows up in this table.
2. Every bundled trace recorded in CUPTI counter mode (``tests/data/cupti``): per kernel class, the
   FLOPs counted against the FLOPs the cost model gives the launching operator's recorded shapes —
   where the operators carry shapes; otherwise the script says why it cannot compare.

Usage: python benchmarks/bench_cost_model.py
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainscope.analyzers.trace.kernels import classify_kernel
from trainscope.analyzers.trace.op_formulas import op_cost

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Reference:
    """One operator run measured with Nsight Compute on an H100."""

    what: str
    kernel_class: str
    quantity: str  # "FLOPs" or "DRAM bytes"
    measured: float
    op: str
    dims: list
    types: list
    concrete: list
    note: str


F32, BF16 = "float", "c10::BFloat16"
REFERENCES = (
    Reference(
        "sgemm 2048×4096×2048 fp32",
        "gemm",
        "FLOPs",
        3.437e10,
        "aten::mm",
        [[2048, 2048], [2048, 4096]],
        [F32, F32],
        ["", ""],
        "FFMA count: exactly 2·M·N·K",
    ),
    Reference(
        "GEMM 4096³ bf16 (tensor cores)",
        "gemm",
        "FLOPs",
        1.374e11,
        "aten::mm",
        [[4096, 4096], [4096, 4096]],
        [BF16, BF16],
        ["", ""],
        "tensor-pipe FLOPs: exactly 2·M·N·K",
    ),
    Reference(
        "causal SDPA 8×16×2048²×64 bf16",
        "attention",
        "FLOPs",
        7.30e10,
        "aten::_scaled_dot_product_flash_attention",
        [[8, 16, 2048, 64]] * 3 + [[], [], []],
        [BF16, BF16, BF16, "Scalar", "Scalar", "Scalar"],
        ["", "", "", "0.", "True", "False"],
        "tensor FLOPs executed; the causal-half formula leaves out the diagonal tiles computed whole",
    ),
    Reference(
        "add of 64 Mi fp32 elements",
        "elementwise",
        "DRAM bytes",
        788e6,
        "aten::add",
        [[64 << 20], [64 << 20], []],
        [F32, F32, "Scalar"],
        ["", "", "1"],
        "two reads + one write, L2-resident tail",
    ),
    Reference(
        "GEMV 8192² fp32",
        "gemm",
        "DRAM bytes",
        271e6,
        "aten::mv",
        [[8192, 8192], [8192]],
        [F32, F32],
        ["", ""],
        "the matrix once, plus x and y",
    ),
    Reference(
        "cuDNN conv2d fp32 (ran as FFT)",
        "convolution",
        "FLOPs",
        6.3e9,
        "aten::conv2d",
        [[64, 64, 56, 56], [64, 64, 3, 3], []],
        [F32, F32, ""],
        ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"],
        "cuDNN picked an FFT algorithm: fewer FLOPs than the direct convolution's formula",
    ),
)


def _model(r: Reference) -> float | None:
    c = op_cost(r.op, r.dims, r.types, r.concrete)
    if c is None:
        return None
    return c.flops if r.quantity == "FLOPs" else c.bytes


def reference_table() -> list[tuple[Reference, float | None]]:
    return [(r, _model(r)) for r in REFERENCES]


def counter_traces() -> list[str]:
    from trainscope.analyzers.trace.hw_counters import hw_counter_report
    from trainscope.collectors.inputs import open_traces

    out = []
    for p in sorted((ROOT / "tests" / "data" / "cupti").glob("*.json*")):
        for t in open_traces(str(p)).traces:
            h = hw_counter_report(t)
            if h is None:
                continue
            out.append(f"{p.name}: {h.summary()}")
            by_cls = ", ".join(
                f"{c} {100 * v / h.total_flops:.0f} %"
                for c, v in sorted(h.by_class.items(), key=lambda x: -x[1])
                if h.total_flops
            )
            out.append(f"  counted FLOPs by class: {by_cls}")
            if h.agreement:
                out.append("  | class | kernels | counted FLOPs | model FLOPs | model ÷ counted |")
                out.append("  |---|---|---|---|---|")
                for a in h.agreement:
                    out.append(
                        f"  | {a.kernel_class} | {a.kernels} | {a.counted_flops:.3g} | {a.model_flops:.3g} | "
                        f"{a.ratio:.3f} |"
                        if a.ratio is not None
                        else f"  | {a.kernel_class} | {a.kernels} | 0 | {a.model_flops:.3g} | – |"
                    )
            out.append(f"  {h.agreement_note}")
    return out


def main() -> int:
    print("Cost model against Nsight Compute, H100 (recorded reference points; formula side computed now)\n")
    print("| operator run | class | quantity | measured | cost model | model ÷ measured | note |")
    print("|---|---|---|---|---|---|---|")
    by_class: dict[str, list[float]] = {}
    for r, m in reference_table():
        ratio = m / r.measured if m is not None else None
        if ratio is not None:
            by_class.setdefault(r.kernel_class, []).append(ratio)
        print(
            f"| {r.what} | {r.kernel_class} | {r.quantity} | {r.measured:.4g} | "
            f"{'–' if m is None else f'{m:.4g}'} | {'–' if ratio is None else f'{ratio:.3f}'} | {r.note} |"
        )
    print("\nper kernel class (model ÷ measured):")
    for c, rs in sorted(by_class.items()):
        print(f"  {c:12s} {', '.join(f'{x:.3f}' for x in rs)}")
    print("\nBundled traces with hardware counters:")
    for line in counter_traces():
        print(line)
    assert classify_kernel("ampere_sgemm_128x64_nn") == "gemm"  # the classes the table is grouped by
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
