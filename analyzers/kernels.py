"""Kernel classes (what the GPU's busy time is spent on) and per-kernel statistics.

Classification is by kernel name, once per distinct name. Order matters: the first rule whose
pattern matches wins (normalization before convolution, because cuDNN names its batch-norm
kernels ``cudnn::bn_*``; convolution before GEMM, because implicit-GEMM convolutions say "gemm").
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from trainscope.traces.model import Trace

# (class, regex). High-intensity classes do many FLOPs per byte moved; low-intensity ones are
# limited by memory bandwidth (DIAGNOSIS.md §2.3; seed 000 lines 1176–1274, the roofline).
KERNEL_CLASS_RULES: tuple[tuple[str, str], ...] = (
    ("communication", r"nccl|rccl|all_?reduce|allgather|all_?to_?all|reduce_?scatter|c10d|gloo"),
    ("attention", r"flash|fmha|attention|sdpa|_mha_|mha_fwd|mha_bwd|efficient_attention"),
    ("normalization", r"batch_?norm|layer_?norm|group_?norm|rms_?norm|instance_?norm|cudnn::bn_|bn_fw|bn_bw|welford"),
    ("softmax", r"softmax"),
    # Layout transforms and index setup that cuDNN/MIOpen name like convolutions move bytes, not FLOPs.
    ("elementwise", r"nchwtonhwc|nhwctonchw|computeoffsets|subtensorop|optensor"),
    ("convolution", r"conv|scudnn|cudnn|winograd|fprop|dgrad|wgrad|implicit_?gemm|miopen.*(conv|igemm)|igemm"),
    ("gemm", r"gemm|gemv|cublas|cutlass|Cijk_|matmul|wgmma|triton_mm|triton_tem|_mm_|dot_kernel|hipblaslt|ck_tile.*gemm"),
    ("reduction", r"reduce|sum_kernel|mean_kernel|norm_kernel|argmax|argmin|triton_red|triton_per|cross_entropy|nll_loss|cumsum|scan"),
    ("elementwise", r"elementwise|vectorized|unrolled|triton_poi|fill|copy|cat_?array|index|gather|scatter|embedding|"
                    r"dropout|relu|gelu|silu|sigmoid|tanh|add|mul|div|adam|sgd|foreach|multi_tensor|pool|upsample|"
                    r"transpose|permute|where|clamp|exp|sqrt|pow|cast|convert"),
)
HIGH_INTENSITY = ("gemm", "convolution", "attention")
LOW_INTENSITY = ("elementwise", "normalization", "softmax", "reduction")
ALL_CLASSES = HIGH_INTENSITY + LOW_INTENSITY + ("communication", "other")

# Tensor-core (NVIDIA) / matrix-core (AMD MFMA) kernels, recognized by the instruction or tile
# names that cuBLAS, cuDNN, CUTLASS, Triton and Tensile put into kernel names.
TENSOR_CORE_PATTERN = re.compile(
    r"tensorop|xdlops|[hsi]\d{3,5}(gemm|conv|_)|hmma|xmma|wgmma|gmma|imma|_tc_|flash|fmha|tf32|bf16|fp16|f16|"
    r"_MI\d+x\d+|MFMA|sm[89]\d_.*(gemm|fprop|dgrad|wgrad)|ampere_(h|bf|fp16|s16)|volta_h|turing_h",
    re.I,
)
_COMPILED = tuple((cls, re.compile(rx, re.I)) for cls, rx in KERNEL_CLASS_RULES)


@functools.lru_cache(maxsize=1 << 16)  # pure in the name; ranks of one job share their kernel names
def classify_kernel(name: str) -> str:
    for cls, rx in _COMPILED:
        if rx.search(name):
            return cls
    return "other"


def uses_tensor_cores(name: str, kernel_class: str) -> bool:
    return kernel_class in HIGH_INTENSITY and bool(TENSOR_CORE_PATTERN.search(name))


@dataclass(frozen=True)
class KernelStat:
    name: str
    kernel_class: str
    tensor_core: bool
    count: int
    total_ns: int
    mean_ns: float
    share_pct: float  # of all kernel time in the window


@dataclass(frozen=True)
class KernelSummary:
    total_ns: int  # summed kernel durations (streams may overlap, so this can exceed wall time)
    count: int
    by_class_ns: dict[str, int]
    tensor_core_ns: int
    matmul_ns: int  # GEMM + convolution + attention
    top: list[KernelStat]
    median_kernel_ns: float

    def class_share_pct(self, cls: str) -> float:
        return 100.0 * self.by_class_ns.get(cls, 0) / self.total_ns if self.total_ns else 0.0

    @property
    def high_intensity_pct(self) -> float:
        return sum(self.class_share_pct(c) for c in HIGH_INTENSITY)

    @property
    def low_intensity_pct(self) -> float:
        return sum(self.class_share_pct(c) for c in LOW_INTENSITY)

    @property
    def tensor_core_pct_of_matmul(self) -> float | None:
        return 100.0 * self.tensor_core_ns / self.matmul_ns if self.matmul_ns else None


def kernel_classes(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per string-table entry: class index into ALL_CLASSES, and tensor-core flag (kernel names only)."""
    cls = np.full(len(trace.strings), ALL_CLASSES.index("other"), np.int8)
    tc = np.zeros(len(trace.strings), bool)
    for i in np.unique(trace.kernels.name):
        name = trace.strings[i]
        c = classify_kernel(name)
        cls[i] = ALL_CLASSES.index(c)
        tc[i] = uses_tensor_cores(name, c)
    return cls, tc


def kernel_summary(trace: Trace, mask: np.ndarray | None = None, device: int | None = None, top_n: int = 15,
                   classes: tuple[np.ndarray, np.ndarray] | None = None) -> KernelSummary:
    """Kernel time by class and the top kernels, over the kernels selected by ``mask``/``device``.
    ``classes`` is :func:`kernel_classes` of the trace, when the caller already has it."""
    k = trace.kernels
    sel = np.ones(len(k), bool) if mask is None else mask.copy()
    if device is not None:
        sel &= k.device == device
    names, durs = k.name[sel], k.dur[sel]
    cls_of, tc_of = classes if classes is not None else kernel_classes(trace)
    total = int(durs.sum())
    per_name = np.bincount(names, weights=durs, minlength=len(trace.strings)) if len(names) else np.zeros(0)
    counts = np.bincount(names, minlength=len(trace.strings)) if len(names) else np.zeros(0, np.int64)
    by_class: dict[str, int] = {c: 0 for c in ALL_CLASSES}
    if len(names):
        cls_time = np.bincount(cls_of[names], weights=durs, minlength=len(ALL_CLASSES))
        by_class = {c: int(cls_time[i]) for i, c in enumerate(ALL_CLASSES)}
    tc_ns = int(durs[tc_of[names]].sum()) if len(names) else 0
    matmul = sum(by_class[c] for c in HIGH_INTENSITY)
    top: list[KernelStat] = []
    if len(names):
        for i in np.argsort(-per_name)[:top_n]:
            if counts[i] == 0:
                break
            cname = ALL_CLASSES[cls_of[i]]
            top.append(KernelStat(
                name=trace.strings[i], kernel_class=cname, tensor_core=bool(tc_of[i]), count=int(counts[i]),
                total_ns=int(per_name[i]), mean_ns=float(per_name[i] / counts[i]),
                share_pct=100.0 * float(per_name[i]) / total if total else 0.0,
            ))
    return KernelSummary(
        total_ns=total, count=int(sel.sum()), by_class_ns=by_class, tensor_core_ns=tc_ns, matmul_ns=matmul,
        top=top, median_kernel_ns=float(np.median(durs)) if len(durs) else 0.0,
    )
