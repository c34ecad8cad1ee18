"""The library and kernel families a GPU kernel's name can belong to: one declared table.

A kernel name is read as tokens, never as a string to search substrings in: ``fbgemm_gpu::
permute_2D_data_kernel`` is the identifier ``permute_2D_data_kernel`` in namespace ``fbgemm_gpu``
(words ``permute``, ``2d``, ``data``, ``kernel``), not a string that contains "gemm". The
tokenizer (:func:`tokenize`) reads demangled C++ (``void ns::name<T, …>(args)``), Itanium-mangled
names (``_ZN7ck_tile6kentry…``) and bare names (``nvjet_tst_192x192_64x4_…``, Triton's
``triton_poi_fused_…``):

* ``head``: the qualified name of the kernel itself (namespaces and identifier), template
  arguments and parameters left out;
* ``namespaces``: the namespace components of the head (``at``, ``native``, ``fbgemm_gpu``);
* ``words``: every identifier split at ``_``, ``::`` and camelCase, lowercased — of the head
  (``head_words``) and of the whole name, template arguments and parameter types included
  (``words``: a cuBLAS kernel named only ``scal_kernel`` carries ``cublasTransposeParams``).

:data:`FAMILIES` is the table. Each row names a library or a kernel family, how its kernels are
recognized (a namespace, an identifier prefix, a head word — token-aligned, each test on whole
tokens), the class of work its kernels do (:data:`~trainscope.analyzers.trace.kernels.ALL_CLASSES`),
whether they run on tensor/matrix cores (``tensor``), on CUDA/vector cores (``vector``) or as their
instruction tokens say (``name``: ``tensorop``, ``hmma``, ``MI16x16x…``, ``sgemm``, ``f32f32``), and
the public source the naming comes from. The first matching row wins; a name no row matches is
classed by the generic word rules of :mod:`kernels`, and the launching operator (where the trace
links one) outranks both for names no library row claims (:func:`kernels.kernel_classes`).

How other tools class kernels, for comparison: Holistic Trace Analysis (HTA) sorts kernels into
communication (``nccl`` in the name), memory (``Memcpy``/``Memset``) and computation; TraceLens
(AMD-AGI) classes GPU work by the framework operator that launched it (``aten::mm`` → GEMM,
``aten::convolution`` → CONV, ``aten::_scaled_dot_product_*`` → SDPA …) and keeps kernel names for
display. trainscope does both: the operator where it is linked, the library table where it is not.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

TENSOR, VECTOR, BY_NAME = "tensor", "vector", "name"


@dataclass(frozen=True)
class KernelTokens:
    head: str  # the kernel's qualified name without template arguments and parameters
    identifier: str  # the last component of the head (the kernel function or the bare name)
    namespaces: tuple[str, ...]
    head_words: tuple[str, ...]
    words: tuple[str, ...]

    @property
    def head_text(self) -> str:
        """Head words joined by single spaces: rules match whole words (``\\b``) in it."""
        return " " + " ".join(self.head_words) + " "

    @property
    def text(self) -> str:
        return " " + " ".join(self.words) + " "


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_GENERIC_IDS = {"kernel", "kernel2", "kentry", "device_kernel", "kernel_entry", "type"}


def split_words(ident: str) -> list[str]:
    out = []
    for part in ident.split("_"):
        if part:
            out += [w.lower() for w in _CAMEL.split(part) if w]
    return out


def _demangled_parts(s: str) -> list[str]:
    """Identifiers of an Itanium-mangled name, in order (length-prefixed runs)."""
    parts, i = [], 0
    while i < len(s):
        if s[i].isdigit() and (i == 0 or not s[i - 1].isdigit()):
            j = i
            while j < len(s) and s[j].isdigit():
                j += 1
            n = int(s[i:j])
            ident = s[j : j + n]
            if n and _IDENT.fullmatch(ident or "_0"):
                parts.append(ident)
                i = j + n
                continue
            i = j
        else:
            i += 1
    return parts


def strip_templates(s: str) -> str:
    """``s`` without its template arguments: ``ns::k<T, U<V>>(args)`` → ``ns::k(args)``."""
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _head(name: str) -> str:
    """``void ns::k<T>(args)`` → ``ns::k``; ``std::enable_if<…>::type ns::k<…>(…)`` → ``ns::k``."""
    s = name.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    s = strip_templates(s).split("(")[0].strip()
    return s.split()[-1] if s.split() else ""


def nested_name(s: str) -> list[str]:
    """The nested name of an Itanium-mangled symbol after ``_ZN``/``_Z``: length-prefixed
    identifiers read in sequence up to the first template (``I``) or end (``E``), a substitution
    (``S_``) skipped (``_ZN5aiter18add_rmsnorm_kernelI…`` → ``["aiter", "add_rmsnorm_kernel"]``)."""
    i, parts = (3 if s.startswith("_ZN") else 2), []
    while i < len(s):
        if s.startswith("S_", i):  # a substitution of an earlier prefix: skip it
            i += 2
            continue
        if not s[i].isdigit():
            break
        j = i
        while j < len(s) and s[j].isdigit():
            j += 1
        n = int(s[i:j])
        parts.append(s[j : j + n])
        i = j + n
    return [p for p in parts if p]


@functools.lru_cache(maxsize=1 << 16)
def tokenize(name: str) -> KernelTokens:
    s = name.strip()
    if s.startswith("_Z"):
        comps = nested_name(s) or [s]
        all_ids = _demangled_parts(s[2:])
    else:
        head = _head(s)
        comps = [c for c in head.split("::") if c] or [s]
        all_ids = _IDENT.findall(s)
    ident = comps[-1]
    if ident.lower() in _GENERIC_IDS and len(comps) > 1:  # internal::gemvx::kernel → gemvx names it
        ident = comps[-2]
    nss = tuple(comps[:-1])
    words = tuple(w for i in all_ids for w in split_words(i))
    head_words = tuple(w for c in comps for w in split_words(c))
    if comps[-1].lower() in _GENERIC_IDS:  # cutlass::Kernel<cutlass_80_tensorop_…>: the template names it
        head_words = words
    return KernelTokens("::".join(comps), ident, nss, head_words, words)


@dataclass(frozen=True)
class KernelFamily:
    """One row of :data:`FAMILIES`. A name belongs to the family when every given test holds:
    ``namespaces`` (one head namespace equals one of them, or starts with one followed by ``_``),
    ``prefixes`` (the identifier starts with one, case-insensitively, at a token boundary),
    ``head_words`` (a regex matching whole words of the head text, e.g. ``r"\\bfprop\\b"``),
    ``any_words`` (the same over all words, template arguments and parameters included).
    ``classes`` refines the class by head words: the first (regex, class) that matches wins,
    else ``kernel_class``."""

    name: str
    library: str
    kernel_class: str
    unit: str  # TENSOR | VECTOR | BY_NAME
    source: str
    namespaces: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    head_words: str | None = None
    any_words: str | None = None
    classes: tuple[tuple[str, str], ...] = ()

    def matches(self, t: KernelTokens) -> bool:
        if not (self.namespaces or self.prefixes or self.head_words or self.any_words):
            return False
        if self.namespaces and not any(
            n == ns or n.startswith(ns + "_") for n in t.namespaces for ns in self.namespaces
        ):
            return False
        if self.prefixes:
            low = t.identifier.lower()
            if not any(
                low == p
                or (
                    low.startswith(p)
                    and (p.endswith("_") or not low[len(p)].isalpha() or t.identifier[len(p)].isupper())
                )
                for p in self.prefixes
            ):
                return False
        if self.head_words and not re.search(self.head_words, t.head_text):
            return False
        return not (self.any_words and not re.search(self.any_words, t.text))

    def class_of(self, t: KernelTokens) -> str:
        for rx, cls in self.classes:
            if re.search(rx, t.head_text):
                return cls
        return self.kernel_class


_CONV_WORDS = (
    r"\b(\w*fprop\w*|\w*dgrad\w*|\w*wgrad\w*|conv\w*|winograd\w*|implicit|im2col\w*|col2im|fft\w*|gcgemm|igemm)\b",
    "convolution",
)
_LAYOUT_WORDS = (
    r"\b(nchw\w*|nhwc\w*|compute\w*offsets\w*|offsets|transpose\w*|sub tensor op\w*|op tensor|scale packed"
    r"|generate winograd tiles)\b",
    "elementwise",
)
_CONV_FIRST = (
    r"\b(\w*fprop\w*|\w*dgrad\w*|\w*wgrad\w*|conv\w*|convolve\w*|winograd|implicit|igemm|im2col\w*|fft\w*|gcgemm)\b",
    "convolution",
)
_NORM_WORDS = (r"\b(bn|batch norm|layer norm|group norm|rms ?norm\w*|instance norm)\b", "normalization")

# Order matters where families overlap: the more specific row first (FBGEMM's GEMMs before its
# sparse/embedding kernels; cuDNN's layout transforms are classes inside the cuDNN row).
FAMILIES: tuple[KernelFamily, ...] = (
    KernelFamily(
        "NCCL/RCCL collectives",
        "NCCL / RCCL",
        "communication",
        VECTOR,
        "NVIDIA NCCL source (src/device: ncclKernel_*/ncclDevKernel_*); ROCm RCCL",
        prefixes=("nccl",),
    ),
    KernelFamily(
        "cuBLASLt nvjet",
        "cuBLAS/cuBLASLt (Hopper, Blackwell)",
        "gemm",
        TENSOR,
        "cuBLAS 12 release notes and Nsight Systems captures on H100: GEMMs named nvjet_*",
        prefixes=("nvjet",),
    ),
    KernelFamily(
        "FBGEMM GEMM",
        "FBGEMM (gen_ai, quantized GEMM)",
        "gemm",
        TENSOR,
        "pytorch/FBGEMM fbgemm_gpu/experimental/gen_ai (f8f8bf16_*, bf16bf16bf16_* GEMMs)",
        namespaces=("fbgemm_gpu",),
        head_words=r"\b([a-z]?\d*gemm\w*|f8f8bf16\w*|bf16bf16bf16\w*|f8i4bf16\w*)\b",
    ),
    KernelFamily(
        "FBGEMM quantize",
        "FBGEMM (quantize ops)",
        "elementwise",
        VECTOR,
        "pytorch/FBGEMM fbgemm_gpu/src/quantize_ops",
        namespaces=("fbgemm_gpu",),
        head_words=r"\b(quantize|dequantize|qparam|fp8rowwise|to|float|half)\b",
    ),
    KernelFamily(
        "FBGEMM/TorchRec embedding and sparse features",
        "FBGEMM (TBE, sparse ops)",
        "embedding",
        VECTOR,
        "pytorch/FBGEMM fbgemm_gpu/src/sparse_ops and codegen/training (split_embedding_*, "
        "bounds_check_indices, permute_*): table-batched embedding lookups and the permutes and "
        "bucketizes of TorchRec's sparse features",
        namespaces=("fbgemm_gpu",),
    ),
    KernelFamily(
        "FBGEMM table-batched embedding",
        "FBGEMM (TBE codegen)",
        "embedding",
        VECTOR,
        "pytorch/FBGEMM fbgemm_gpu/codegen (embedding_forward_split_template.cu, "
        "embedding_backward_split_template.cu, embedding_bounds_check.cu, permute_pooled_embedding_ops)",
        prefixes=(
            "split_embedding_",
            "dense_embedding_",
            "ssd_embedding_",
            "batch_index_select_",
            "bounds_check_indices",
            "permute_pooled_embs",
            "linearize_index",
            "grad_mean_kernel",
        ),
    ),
    KernelFamily(
        "PyTorch embedding",
        "PyTorch (at::native embedding ops)",
        "embedding",
        VECTOR,
        "pytorch/pytorch aten/src/ATen/native/cuda/Embedding.cu, EmbeddingBag.cu",
        head_words=r"\b(embedding bag\w*|embedding backward\w*|embedding dense\w*|embedding renorm\w*)\b",
    ),
    KernelFamily(
        "cuDNN",
        "cuDNN",
        "convolution",
        BY_NAME,
        "cuDNN kernel names (cudnn::, cask_cudnn_*, cutlass_cudnn_*, *_scudnn_*, winograd_nonfused, "
        "bn_fw_*/bn_bw_*, nchwToNhwcKernel)",
        namespaces=("cudnn", "cask_cudnn", "cutlass_cudnn", "cutlass__5x_cudnn", "cudnn_infer", "cudnn_train"),
        classes=(_NORM_WORDS, _CONV_FIRST, _LAYOUT_WORDS),
    ),
    KernelFamily(
        "cuDNN (bare names)",
        "cuDNN",
        "convolution",
        BY_NAME,
        "cuDNN engine kernels without namespace: cudnn_<arch>_scudnn_*, <arch>_scudnn_*, "
        "implicit/explicit_convolve_sgemm, wgrad_alg*_engine, fft2d_*",
        head_words=r"\b(\w*scudnn\w*|cudnn|implicit convolve \w+|explicit convolve \w+|wgrad alg\w* engine|"
        r"fft2d|gcgemm|fft\w*)\b",
    ),
    KernelFamily(
        "Composable Kernel",
        "AMD Composable Kernel (CK, CK-tile)",
        "gemm",
        BY_NAME,
        "ROCm composable_kernel (ck::tensor_operation::device::kernel_*_xdl*, ck_tile::kentry<…>)",
        namespaces=("ck", "ck_tile"),
        classes=((r"\b(fmha\w*|attention|mha)\b", "attention"), (r"\b(conv\w*)\b", "convolution"), _NORM_WORDS),
    ),
    KernelFamily(
        "FlashAttention",
        "FlashAttention / memory-efficient attention",
        "attention",
        TENSOR,
        "Dao-AILab flash-attention (flash::flash_fwd_kernel, pytorch_flash::), xformers/PyTorch "
        "fmha_cutlass* (memory-efficient attention), FlashInfer",
        head_words=r"\b(flash (fwd|bwd|attn|attention|decoding)\w*|fmha\w*|efficient attention\w*|mha (fwd|bwd)\w*)\b",
    ),
    KernelFamily(
        "CUTLASS",
        "CUTLASS",
        "gemm",
        BY_NAME,
        "NVIDIA CUTLASS (cutlass::Kernel<cutlass_80_tensorop_s1688gemm_…>, simt_sgemm, wmma_tensorop, "
        "implicit-GEMM fprop/dgrad/wgrad)",
        any_words=r"\bcutlass\w*\b",
        classes=(_CONV_WORDS,),
    ),
    KernelFamily(
        "cuBLAS GEMM/GEMV",
        "cuBLAS (pre-Hopper naming)",
        "gemm",
        BY_NAME,
        "cuBLAS kernels as Nsight and Kineto record them: <arch>_[sdhc]gemm_*, <arch>_<type>_s1688gemm_*, "
        "gemv2T/gemv2N/gemvx, gemmk1, splitKreduce, sm80_xmma_gemm_* (dtype tokens f32f32/tf32/bf16/f16)",
        head_words=r"\b((maxwell|pascal|volta|turing|ampere|ada|hopper|sm\d+) (\w+ )?[a-z]*\d*gemm\w*"
        r"|sm\d+ xmma gemm|gemv\w*|gemm(k1|ex)\w*|split ?k ?reduce\w*|split kreduce\w*|[sdhcz]gemm\w*|gemm "
        r"splitk\w*|gemv ?nsp)\b",
    ),
    KernelFamily(
        "cuBLAS helper",
        "cuBLAS (level-1 and epilogue kernels)",
        "gemm",
        VECTOR,
        "cuBLAS's own parameter types in the kernel signature (cublasTransposeParams, cublasSplitKParams, …)",
        any_words=r"\bcublas\b",
    ),
    KernelFamily(
        "hipBLASLt/Tensile",
        "hipBLASLt / Tensile (ROCm)",
        "gemm",
        BY_NAME,
        "ROCm Tensile solution names: Cijk_<layout>_…_MT<tile>_MI<mfma>…",
        prefixes=("cijk_",),
    ),
    KernelFamily(
        "hipBLASLt", "hipBLASLt (ROCm)", "gemm", BY_NAME, "ROCm hipBLASLt kernel names", head_words=r"\bhipblaslt\b"
    ),
    KernelFamily(
        "MIOpen",
        "MIOpen (ROCm)",
        "convolution",
        BY_NAME,
        "ROCm MIOpen kernel names (MIOpenBatchNorm*, igemm_fwd/bwd/wrw_gtc*, naive_conv_*, batched_transpose_*)",
        head_words=r"\b(mi open\w*|miopen\w*|igemm|naive conv\w*)\b",
        classes=(_NORM_WORDS, _CONV_FIRST, _LAYOUT_WORDS),
    ),
    KernelFamily(
        "Triton (Inductor)",
        "Triton / TorchInductor",
        "other",
        BY_NAME,
        "PyTorch Inductor kernel names: triton_poi_* (pointwise), triton_red_*/triton_per_* "
        "(reductions), triton_tem_*/triton_mm (templated matmul)",
        prefixes=("triton_",),
        classes=(
            (r"^ triton (tem|mm|bmm)\b", "gemm"),
            (r"^ triton (red|per)\b", "reduction"),
            (r"^ triton poi\b", "elementwise"),
        ),
    ),
    KernelFamily(
        "CUB/rocPRIM primitives",
        "CUB / rocPRIM",
        "reduction",
        VECTOR,
        "NVIDIA CUB (cub::DeviceScanKernel, DeviceRadixSort*, DeviceReduce*), ROCm rocPRIM: "
        "device-wide scan, sort, reduce and select move memory",
        namespaces=("cub", "rocprim", "at_cuda_detail"),
    ),
    KernelFamily(
        "copies",
        "CUDA/HIP runtime and PyTorch copy kernels",
        "elementwise",
        VECTOR,
        "Memcpy/Memset activity names; at::native CatArrayBatchedCopy, direct_copy_kernel_cuda",
        head_words=r"\b(memcpy|memset|cat array batched copy\w*|copy kernel\w*|copy)\b",
    ),
)


@functools.lru_cache(maxsize=1 << 16)
def family_of(name: str) -> KernelFamily | None:
    t = tokenize(name)
    for f in FAMILIES:
        if f.matches(t):
            return f
    return None
