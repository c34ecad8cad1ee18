"""Kernel classes (what the GPU's busy time is spent on) and per-kernel statistics.

A kernel is classed once per distinct name, in this order:

1. the library or kernel family its tokens name (:data:`kernel_families.FAMILIES`: cuBLAS incl.
   ``nvjet``, CUTLASS, Tensile ``Cijk_``, cuDNN, MIOpen, FBGEMM/TorchRec, NCCL, Triton,
   FlashAttention, CUB …), which also says whether it runs on tensor cores;
2. the generic word rules below, over the words of the kernel's own name first (``at::native::
   vectorized_elementwise_kernel``), then over its template arguments and parameters — whole words
   only, so "fbgemm" is not "gemm" and "rotary_embedding" is not an embedding lookup.

Where the trace links kernels to the operators that launched them, :func:`kernel_classes` lets the
operator decide for names that step 1 does not claim (:func:`operator_class`). Whether a kernel is
memory- or compute-bound is the roofline's call from FLOPs and bytes (:mod:`roofline`), never the
class's.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers.trace.kernel_families import BY_NAME
from trainscope.analyzers.trace.kernel_families import TENSOR
from trainscope.analyzers.trace.kernel_families import family_of
from trainscope.analyzers.trace.kernel_families import split_words
from trainscope.analyzers.trace.kernel_families import tokenize
from trainscope.traces.model import Trace

# (class, regex over whole words). High-intensity classes do many FLOPs per byte moved; low-intensity
# ones are limited by memory bandwidth (docs/diagnosis.md §2.3; Machine Learning Systems
# (mlsysbook.ai), Model Training chapter, §Arithmetic Intensity, the roofline). Order matters: the
# first rule whose words match wins (normalization before convolution; convolution before GEMM,
# because implicit-GEMM convolutions say "gemm").
KERNEL_CLASS_RULES: tuple[tuple[str, str], ...] = (
    (
        "communication",
        r"\b(nccl\w*|rccl\w*|all ?reduce|allreduce|all ?gather|allgather|all ?to ?all|alltoall\w*|"
        r"reduce ?scatter|c10d|gloo)\b",
    ),
    ("attention", r"\b(flash\w* (fwd|bwd|attn|attention)\w*|fmha\w*|attention|attn|sdpa|mha|efficient attention\w*)\b"),
    (
        "normalization",
        r"\b(batch ?norm\w*|layer ?norm\w*|group ?norm\w*|rms ?norm\w*|instance ?norm\w*|bn (fw|bw)\w*|"
        r"welford\w*)\b",
    ),
    ("softmax", r"\b(soft ?max\w*)\b"),
    # Layout transforms and index setup that cuDNN/MIOpen name like convolutions move bytes, not FLOPs.
    ("elementwise", r"\b(nchw to nhwc\w*|nhwc to nchw\w*|compute\w* offsets\w*|sub tensor op\w*|op tensor\w*)\b"),
    (
        "convolution",
        r"\b(conv(\dd)?|convolution\w*|convolve\w*|winograd\w*|\w*fprop\w*|\w*dgrad\w*|\w*wgrad\w*|implicit gemm|igemm|"
        r"im2col\w*|col2im\w*|depthwise\w*)\b",
    ),
    ("gemm", r"\b([sdhczi]?\d*gemm\w*|[sdhcz]?gemv\w*|matmul\w*|bmm|mm|wgmma|dot kernel|xmma gemm)\b"),
    (
        "reduction",
        r"\b(reduce\w*|reduction\w*|sum kernel|mean kernel|norm kernel|arg ?max|arg ?min|cross entropy\w*|"
        r"nll\w*|cum ?sum|scan\w*)\b",
    ),
    (
        "elementwise",
        r"\b(elementwise\w*|vectorized\w*|unrolled\w*|fill\w*|copy\w*|cat array\w*|index\w*|gather\w*|"
        r"scatter\w*|dropout\w*|relu|gelu|silu|sigmoid|tanh|add|mul|div|adam\w*|sgd|foreach\w*|"
        r"multi tensor\w*|pool\w*|upsample\w*|transpose\w*|permute\w*|where|clamp\w*|exp|sqrt|pow|"
        r"cast\w*|convert\w*|rotary\w*|act and mul|distribution\w*|nchw\w*|nhwc\w*)\b",
    ),
)
HIGH_INTENSITY = ("gemm", "convolution", "attention")
# embedding: table lookups and the permutes of sparse features (FBGEMM/TorchRec, EmbeddingBag):
# gathers of rows, bandwidth-bound whatever the table's dtype.
LOW_INTENSITY = ("elementwise", "normalization", "softmax", "reduction", "embedding")
ALL_CLASSES = HIGH_INTENSITY + LOW_INTENSITY + ("communication", "other")

# Tensor-core (NVIDIA) / matrix-core (AMD MFMA) kernels, recognized by the instruction or tile
# names that cuBLAS, cuDNN, CUTLASS, Triton and Tensile put into kernel names (families whose
# unit is ``name``).
TENSOR_CORE_PATTERN = re.compile(
    r"tensorop|xdlops|xdl|[hsi]\d{3,5}(gemm|conv|_)|hmma|xmma|wgmma|gmma|imma|_tc_|flash|fmha|tf32|bf16|fp16|f16|"
    r"_MI\d+x\d+|MFMA|sm[89]\d_.*(gemm|fprop|dgrad|wgrad)|ampere_(h|bf|fp16|s16)|volta_h|turing_h",
    re.I,
)
_COMPILED = tuple((cls, re.compile(rx)) for cls, rx in KERNEL_CLASS_RULES)


@functools.lru_cache(maxsize=1 << 16)  # long C++ names through many regexes: the analysis asks several times
def classify_kernel(name: str) -> str:
    fam = family_of(name)
    if fam is not None:
        return fam.class_of(tokenize(name))
    t = tokenize(name)
    for text in (t.head_text, t.text):
        for cls, rx in _COMPILED:
            if rx.search(text):
                return cls
    return "other"


# Names that spell out FP32 (or FP64) operands without TF32: FFMA/DFMA kernels, whatever their
# family prefix (``sm80_xmma_gemm_f32f32_f32f32_f32…`` is an xmma kernel on CUDA cores).
NON_TENSOR_PATTERN = re.compile(
    r"f32f32_f32f32|f64f64|sgemm|dgemm|_ffma|_dfma|simt|scudnn(?!.*(h|bf)\d)|gcgemm|fft", re.I
)


def uses_tensor_cores(name: str, kernel_class: str) -> bool:
    """From the kernel's family where it names one unit (``nvjet`` GEMMs: tensor cores; FBGEMM
    embedding lookups: none), from its instruction tokens otherwise. The roofline decides from the
    launching operator's dtype first (:mod:`roofline`)."""
    if kernel_class not in HIGH_INTENSITY:
        return False
    fam = family_of(name)
    if fam is not None and fam.unit != BY_NAME:
        return fam.unit == TENSOR
    if NON_TENSOR_PATTERN.search(name) and not re.search(r"tf32|tensorop|hmma|h\d{3,5}gemm|bf16|f16", name, re.I):
        return False
    return bool(TENSOR_CORE_PATTERN.search(name))


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


# The launching operator's class, from the words of its name (``aten::addmm``, ``aten::native_layer_norm``,
# ``autograd::engine::evaluate_function: MmBackward0``, ``fbgemm::permute_2D_sparse_data``): what TraceLens
# classes GPU work by. A kernel named by a library (:data:`kernel_families.FAMILIES`) keeps its family's
# class (cuDNN's layout transforms under ``aten::convolution`` stay layout transforms).
OPERATOR_CLASS_RULES: tuple[tuple[str, str], ...] = (
    (
        "communication",
        r"\b(c10d|nccl\w*|record param comms|all ?reduce\w*|all ?gather\w*|all ?to ?all\w*|"
        r"reduce ?scatter\w*|broadcast)\b",
    ),
    ("attention", r"\b(scaled dot product\w*|flash attention\w*|efficient attention\w*|flash attn\w*|sdpa)\b"),
    ("normalization", r"\b(batch norm\w*|layer norm\w*|group norm\w*|rms norm\w*|instance norm\w*)\b"),
    ("softmax", r"\b(softmax|log softmax)\b"),
    (
        "embedding",
        r"(?<!rotary )\b(embedding|embedding bag|embedding dense backward|embedding backward|split embedding\w*|"
        r"dense embedding\w*)\b|^ fbgemm (permute|block bucketize|bounds check|jagged|split|dense)\b",
    ),
    ("convolution", r"\b(conv(\dd)?|conv transpose\w*|convolution\w*)\b"),
    ("gemm", r"\b(mm|bmm|addmm|addbmm|baddbmm|matmul|linear|mv|addmv|scaled mm|einsum)\b"),
)
_OP_COMPILED = tuple((cls, re.compile(rx)) for cls, rx in OPERATOR_CLASS_RULES)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=1 << 14)
def operator_class(op_name: str) -> str | None:
    """The class of work an operator does, from its name; None when its name says nothing."""
    text = " " + " ".join(w for i in _IDENT.findall(op_name) for w in split_words(i)) + " "
    for cls, rx in _OP_COMPILED:
        if rx.search(text):
            return cls
    return None


def _with_operator(name_cls: str, op_cls: str | None, claimed: bool) -> str:
    """The class of a kernel name given the class of the operators that launched it."""
    if op_cls is None or claimed or name_cls == op_cls:
        return name_cls
    if name_cls == "other":
        return op_cls
    # A generic kernel (``elementwise_kernel<…batch_norm…>``) under a normalization, softmax or embedding
    # operator is that operator's work. Under a matrix operator or a collective it keeps its own class:
    # an elementwise kernel there is a bias add, an epilogue or a buffer copy, not matrix math or transfer.
    return op_cls if op_cls in LOW_INTENSITY else name_cls


def kernel_classes(trace: Trace, op_row: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per string-table entry: class index into ALL_CLASSES, and tensor-core flag (kernel names only).
    ``op_row`` is the launching operator of each kernel (:func:`cost.linked_operators`, computed here
    when not given); a name launched mostly (by time) by one operator class takes that class unless
    a library family claims the name."""
    cls = np.full(len(trace.strings), ALL_CLASSES.index("other"), np.int8)
    tc = np.zeros(len(trace.strings), bool)
    k = trace.kernels
    names = codes.distinct(k.name)
    op_major: dict[int, str | None] = {}
    if len(k) and len(trace.cpu_ops):
        if op_row is None:
            from trainscope.analyzers.trace.cost import linked_operators  # circle: cost imports this module

            op_row = linked_operators(trace)
        linked = op_row >= 0
        if linked.any():
            ops = trace.cpu_ops
            op_names = ops.name[op_row[linked]]
            uop = codes.distinct(op_names)
            ocls = {int(i): operator_class(trace.strings[i]) for i in uop.tolist()}
            code = np.array(
                [ALL_CLASSES.index(ocls[int(i)]) if ocls[int(i)] else len(ALL_CLASSES) for i in uop.tolist()]
            )
            per_k = code[np.searchsorted(uop, op_names)]
            kn = k.name[linked]
            w = np.bincount(
                kn.astype(np.int64) * (len(ALL_CLASSES) + 1) + per_k,
                weights=k.dur[linked].astype(np.float64) + 1.0,
                minlength=len(trace.strings) * (len(ALL_CLASSES) + 1),
            )
            w = w.reshape(len(trace.strings), len(ALL_CLASSES) + 1)
            for i in codes.distinct(kn).tolist():
                best = int(w[i].argmax())
                op_major[i] = ALL_CLASSES[best] if best < len(ALL_CLASSES) else None
    for i in names.tolist():
        name = trace.strings[i]
        c = _with_operator(classify_kernel(name), op_major.get(i), family_of(name) is not None)
        cls[i] = ALL_CLASSES.index(c)
        tc[i] = uses_tensor_cores(name, c)
    return cls, tc


def kernel_summary(
    trace: Trace,
    mask: np.ndarray | None = None,
    device: int | None = None,
    top_n: int = 15,
    classes: tuple[np.ndarray, np.ndarray] | None = None,
) -> KernelSummary:
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
    by_class: dict[str, int] = dict.fromkeys(ALL_CLASSES, 0)
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
            top.append(
                KernelStat(
                    name=trace.strings[i],
                    kernel_class=cname,
                    tensor_core=bool(tc_of[i]),
                    count=int(counts[i]),
                    total_ns=int(per_name[i]),
                    mean_ns=float(per_name[i] / counts[i]),
                    share_pct=100.0 * float(per_name[i]) / total if total else 0.0,
                )
            )
    return KernelSummary(
        total_ns=total,
        count=int(sel.sum()),
        by_class_ns=by_class,
        tensor_core_ns=tc_ns,
        matmul_ns=matmul,
        top=top,
        median_kernel_ns=float(np.median(durs)) if len(durs) else 0.0,
    )
