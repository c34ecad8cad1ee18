"""FLOPs and bytes of one framework operator call from its recorded input shapes and dtypes.

Formulas (per call; ``es`` = element size of the dtype; FMA = 2 FLOPs), after TraceLens' and
PyTorch's ``torch.utils.flop_counter`` conventions:
- matmul family (mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm): 2·M·K·N (× batch); bytes
  A + B + C (+ bias); matrix-vector (mv, addmv) 2·M·N and dot 2·N, bytes every element once;
- convolution forward: 2·N·Cout·∏out·(Cin/groups)·∏kernel; output size from stride/padding/dilation
  in ``Concrete Inputs`` (assumed stride 1, same padding where not recorded, and said so);
  backward: one forward's FLOPs per gradient computed (input, weight), output size from grad_output;
- attention (SDPA/flash/memory-efficient): 4·B·H·L·S·E forward (half when causal), 2.5× that
  backward; bytes Q, K, V, O (and their gradients);
- embedding / embedding_bag: 0 FLOPs; bytes gathered rows twice (read + write) plus the indices;
  index_select / gather / index the same: the picked elements twice plus the indices, never the
  whole source tensor;
- elementwise/unary/binary: 1 FLOP per output element; bytes inputs + output (the largest input's
  size, or the first input for in-place ``_`` ops);
- normalizations 5 (forward) / 8 (backward) FLOPs per element, bytes 2× / 3× the input;
  softmax 5 / 4 FLOPs per element, bytes 2× / 3×; reductions 1 FLOP per input element, bytes the
  input; copies, cat, stack: 0 FLOPs, bytes read + written;
- fused/foreach optimizer ops (``_foreach_*``, ``_fused_adam(w)``): bytes every tensor list read, the
  in-place ones written again; FLOPs ≈ 1 per element (``_foreach``) or 12 (Adam/AdamW).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int", "unknown")
_DTYPES: dict[str, tuple[str, int]] = {
    "double": ("fp64", 8),
    "float": ("fp32", 4),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "signed char": ("int8", 1),
    "unsigned char": ("int8", 1),
    "bool": ("int", 1),
    "short int": ("int", 2),
    "int": ("int", 4),
    "long int": ("int", 8),
    "long": ("int", 8),
    "c10::complex<float>": ("fp32", 8),
    "c10::complex<double>": ("fp64", 16),
    "?": ("unknown", 4),  # shapes without dtypes (Nsight emit_nvtx): 4 bytes until the kernel name says otherwise
}


@dataclass(frozen=True)
class OpCost:
    flops: float
    bytes: float
    precision: str
    matrix: bool  # a matrix product (GEMM/convolution/attention): tensor cores apply
    formula: str  # "aten::mm [M,K]x[K,N] = [2048,768]x[768,3072] bf16"


# One recorded operator call's inputs, as the trace lists them (Kineto "Input Dims", "Input type",
# "Concrete Inputs"; one entry per input): a shape is a list of ints, a tensor list a list of shapes,
# anything else (a scalar, an empty entry) is not a tensor.
Dims = Sequence[object]
Types = Sequence[str]
Concrete = Sequence[object]  # the value of a non-tensor input as text ("[1, 1]", "True"), else ""
Shape = list[int]
Tensor = tuple[Shape, str, int]  # (shape, precision, element size)


# --- shapes -----------------------------------------------------------------------------------


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _is_shape(x: object) -> TypeGuard[Shape]:
    return isinstance(x, list) and all(isinstance(d, int) for d in x)


def _is_shape_list(x: object) -> TypeGuard[list[Shape]]:
    return isinstance(x, list) and all(_is_shape(d) for d in x)


def _tensor(dims: Dims, types: Types, i: int) -> Tensor | None:
    """Input ``i`` as (shape, precision, element size), when it is a tensor with a known dtype."""
    if i >= len(dims) or i >= len(types):
        return None
    shape, t = dims[i], types[i]
    if not _is_shape(shape) or t not in _DTYPES or (not shape and t in ("double", "long int", "bool")):
        return None  # Python scalars are recorded as 0-d "double"/"long int" inputs
    prec, es = _DTYPES[t]
    return shape, prec, es


def _tensors(dims: Dims, types: Types) -> list[Tensor]:
    out = []
    for i in range(len(dims)):
        t = _tensor(dims, types, i)
        if t is not None:
            out.append(t)
    return out


def _tensor_lists(dims: Dims, types: Types, default: tuple[str, int]) -> list[list[Shape]]:
    return [
        d
        for i, d in enumerate(dims)
        if _is_shape_list(d) and d and (i >= len(types) or types[i] in ("TensorList", "GenericList", ""))
    ]


def _list_arg(concrete: Concrete, i: int) -> list[int] | None:
    v = concrete[i] if i < len(concrete) else None
    if not isinstance(v, str):
        return None
    s = v.strip()
    if s.startswith("[") and s.endswith("]"):
        try:
            return [int(x) for x in s[1:-1].split(",") if x.strip()]
        except ValueError:
            return None
    try:
        return [int(s)]
    except ValueError:
        return None


def _int_arg(concrete: Concrete, i: int) -> int | None:
    v = _list_arg(concrete, i)
    return v[0] if v and len(v) == 1 else None


def _bool_arg(concrete: Concrete, i: int) -> bool | None:
    if i < len(concrete) and isinstance(concrete[i], str) and concrete[i] in ("True", "False"):
        return concrete[i] == "True"
    return None


def _fmt(shape: list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


# --- formulas ---------------------------------------------------------------------------------


def _matvec(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    """mv / addmv (A[M,N]·x[N]) and dot / vdot (x·y): two FLOPs per matrix element, every element read
    once — about 2 / element size FLOP per byte (0.25 in fp64): bandwidth-bound on any device."""
    base = op.split("::")[-1]
    ia = 1 if base == "addmv" else 0
    a, x = _tensor(dims, types, ia), _tensor(dims, types, ia + 1)
    if a is None or x is None:
        return None
    (sa, prec, es), sx = a, x[0]
    if base in ("dot", "vdot"):
        n = _numel(sa)
        return OpCost(2.0 * n, float(2 * n * es + es), prec, False, f"{op} 2·N, x{_fmt(sa)} {prec}")
    if len(sa) != 2 or len(sx) != 1:
        return None
    m, n = sa
    nbytes = float((m * n + n + m) * es + (m * es if base == "addmv" else 0))
    return OpCost(2.0 * m * n, nbytes, prec, True, f"{op} 2·M·N, A{_fmt(sa)}·x{_fmt(sx)} {prec}")


def _matmul(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    base = op.split("::")[-1]
    ia, ib, bias = {"addmm": (1, 2, 0), "baddbmm": (1, 2, 0), "addbmm": (1, 2, 0)}.get(base, (0, 1, None))
    a, b = _tensor(dims, types, ia), _tensor(dims, types, ib)
    if a is None or b is None:
        return None
    (sa, prec, es), (sb, _, esb) = a, b
    if base == "_scaled_mm":
        prec = "fp8" if prec == "fp8" else prec
    if base == "linear":  # x[..., K] · W[N, K]ᵀ
        if len(sb) != 2 or not sa:
            return None
        k, n = sb[1], sb[0]
        m = _numel(sa[:-1])
        batch, shape_out = 1, [m, n]
        label = f"[..,K]x[N,K]ᵀ = {_fmt(sa)}x{_fmt(sb)}ᵀ"
    else:
        if len(sa) == 1:
            sa = [1] + sa
        if len(sb) == 1:
            sb = sb + [1]
        if len(sa) < 2 or len(sb) < 2:
            return None
        m, k, n = sa[-2], sa[-1], sb[-1]
        ba, bb = sa[:-2], sb[:-2]
        batch = max(_numel(ba), _numel(bb))
        shape_out = [batch * m, n]
        label = ("[M,K]x[K,N]" if batch == 1 else "[B,M,K]x[B,K,N]") + f" = {_fmt(sa)}x{_fmt(sb)}"
    flops = 2.0 * batch * m * k * n
    out_es = 2 if base == "_scaled_mm" else es
    nbytes = float(_numel(sa) * es + _numel(sb) * esb + _numel(shape_out) * out_es)
    if bias is not None:
        t = _tensor(dims, types, bias)
        if t is not None:
            nbytes += _numel(t[0]) * t[2]
            flops += _numel(shape_out)
    return OpCost(flops, nbytes, prec, True, f"{op} {label} {prec}")


# Argument positions (input, weight, stride, padding, dilation, transposed, groups) per convolution op.
_CONV_ARGS = {
    "convolution": (0, 1, 3, 4, 5, 6, 8),
    "_convolution": (0, 1, 3, 4, 5, 6, 8),
    "conv1d": (0, 1, 3, 4, 5, None, 6),
    "conv2d": (0, 1, 3, 4, 5, None, 6),
    "conv3d": (0, 1, 3, 4, 5, None, 6),
    "cudnn_convolution": (0, 1, 3, 2, 4, None, 5),
    "miopen_convolution": (0, 1, 4, 3, 5, None, 6),
    "cudnn_convolution_transpose": (0, 1, 4, 2, 5, True, 6),
    "mkldnn_convolution": (0, 1, 4, 3, 5, None, 6),
    "conv_transpose2d": (0, 1, 3, 4, 7, True, 6),
    "conv_transpose1d": (0, 1, 3, 4, 7, True, 6),
    "conv_transpose3d": (0, 1, 3, 4, 7, True, 6),
}


def _conv_out(
    spatial: list[int],
    kernel: list[int],
    stride: list[int] | None,
    padding: list[int] | None,
    dilation: list[int] | None,
) -> list[int]:
    nd = len(spatial)

    def arg(v: list[int] | None, default: int) -> list[int]:
        if not v:
            return [default] * nd
        return v * nd if len(v) == 1 else v

    s, p, d = arg(stride, 1), arg(padding, 0), arg(dilation, 1)
    return [max(1, (spatial[i] + 2 * p[i] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1) for i in range(nd)]


def _conv(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    base = op.split("::")[-1]
    pos = _CONV_ARGS.get(base)
    if pos is None:
        return None
    ii, iw, ist, ipd, idl, itr, igr = pos
    x, w = _tensor(dims, types, ii), _tensor(dims, types, iw)
    if x is None or w is None or len(x[0]) < 3 or len(w[0]) != len(x[0]):
        return None
    (sx, prec, es), (sw, _, esw) = x, w
    transposed = itr if isinstance(itr, bool) else bool(_bool_arg(concrete, itr)) if itr is not None else False
    groups = _int_arg(concrete, igr) or 1
    stride, padding, dilation = _list_arg(concrete, ist), _list_arg(concrete, ipd), _list_arg(concrete, idl)
    note = ""
    if stride is None:
        note = " (stride/padding not recorded: output size = input size assumed)"
        out_sp = list(sx[2:])
    elif transposed:
        out_sp = [
            (sx[2 + i] - 1) * (stride[i] if len(stride) > i else stride[0]) + sw[2 + i] for i in range(len(sx) - 2)
        ]
    else:
        out_sp = _conv_out(list(sx[2:]), list(sw[2:]), stride, padding, dilation)
    n = sx[0]
    if transposed:  # weight [Cin, Cout/groups, k…]
        cout = sw[1] * groups
        flops = 2.0 * n * sx[1] * _numel(sx[2:]) * sw[1] * _numel(sw[2:])
    else:
        cout = sw[0]
        flops = 2.0 * n * cout * _numel(out_sp) * sw[1] * _numel(sw[2:])
    out = [n, cout] + out_sp
    nbytes = float(_numel(sx) * es + _numel(sw) * esw + _numel(out) * es)
    return OpCost(
        flops, nbytes, prec, True, f"{op} 2·N·Cout·∏out·Cin/g·∏k, x{_fmt(sx)} w{_fmt(sw)} → {_fmt(out)} {prec}{note}"
    )


def _conv_backward(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    base = op.split("::")[-1]
    if base == "convolution_backward":  # (grad_output, input, weight, bias_sizes, stride, …, groups, output_mask)
        go, x, w = _tensor(dims, types, 0), _tensor(dims, types, 1), _tensor(dims, types, 2)
        mask_s = concrete[10] if len(concrete) > 10 and isinstance(concrete[10], str) else ""
        mask = [m.strip() == "True" for m in mask_s.strip("[]").split(",")] if mask_s else [True, True, False]
        transposed = bool(_bool_arg(concrete, 7))
    elif base == "cudnn_convolution_backward_input":  # (input_size, grad_output, weight, …)
        go, w = _tensor(dims, types, 1), _tensor(dims, types, 2)
        x = (go[0][:1] + [w[0][1]] + go[0][2:], go[1], go[2]) if go and w else None  # sizes only approximate
        size = _list_arg(concrete, 0)
        if size and x:
            x = (size, x[1], x[2])
        mask, transposed = [True, False], False
    elif base == "cudnn_convolution_backward_weight":  # (weight_size, grad_output, input, …)
        go, x = _tensor(dims, types, 1), _tensor(dims, types, 2)
        size = _list_arg(concrete, 0)
        w = (size, x[1], x[2]) if size and x else None
        mask, transposed = [False, True], False
    else:
        return None
    if go is None or x is None or w is None or len(go[0]) < 3 or len(w[0]) < 3:
        return None
    sgo, prec, es = go
    sx, sw = x[0], w[0]
    per = 2.0 * sgo[0] * sgo[1] * _numel(sgo[2:]) * sw[1] * _numel(sw[2:])  # one forward's FLOPs
    if transposed:
        per = 2.0 * sx[0] * sx[1] * _numel(sx[2:]) * sw[1] * _numel(sw[2:])
    grads = int(bool(mask[0])) + int(len(mask) > 1 and bool(mask[1]))
    if grads == 0:
        return None
    nbytes = float(_numel(sgo) * es + (_numel(sx) + _numel(sw)) * es)
    nbytes += (_numel(sx) * es if mask[0] else 0) + (_numel(sw) * es if len(mask) > 1 and mask[1] else 0)
    which = " + ".join(g for g, on in zip(("grad input", "grad weight"), mask[:2]) if on)
    return OpCost(
        per * grads,
        nbytes,
        prec,
        True,
        f"{op} {grads}× forward FLOPs ({which}), grad_out{_fmt(sgo)} w{_fmt(sw)} {prec}",
    )


def _attention(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    base = op.split("::")[-1]
    backward = "backward" in base
    iq = 1 if backward else 0  # backward ops take grad_out first
    q, k, v = (_tensor(dims, types, iq + j) for j in range(3))
    if q is None or k is None or v is None:
        return None
    (sq, prec, es), sk, sv = q, k[0], v[0]
    if len(sq) == 4 and len(sk) == 4:
        flash_layout = base.startswith(("_flash_attention", "_efficient_attention"))
        s_len = sk[1] if flash_layout else sk[-2]  # [B, L, H, E] for the flash/efficient kernels, else [B, H, L, E]
    elif len(sq) == 3 and len(sk) == 3:  # varlen [total, H, E]: the longest key sequence bounds the work
        s_len = _int_arg(concrete, 6 if not backward else 8) or sk[0]
    else:
        return None
    causal = {
        "_scaled_dot_product_flash_attention": 4,
        "_scaled_dot_product_efficient_attention": 6,
        "scaled_dot_product_attention": 5,
        "_flash_attention_forward": 8,
        "_scaled_dot_product_cudnn_attention": 6,
    }.get(base)
    is_causal = bool(_bool_arg(concrete, causal)) if causal is not None else False
    fwd = 4.0 * _numel(sq) * s_len * (0.5 if is_causal else 1.0)
    io = (_numel(sq) * 2 + _numel(sk) + _numel(sv)) * es  # q, k, v, out
    flops, nbytes = (2.5 * fwd, 2.0 * io + _numel(sq) * es) if backward else (fwd, float(io))
    return OpCost(
        flops,
        float(nbytes),
        prec,
        True,
        f"{op} {'2.5 × ' if backward else ''}4·B·H·L·S·E{' /2 (causal)' if is_causal else ''}, "
        f"q{_fmt(sq)} k{_fmt(sk)} {prec}",
    )


def _embedding(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    base = op.split("::")[-1]
    w, idx = _tensor(dims, types, 0), _tensor(dims, types, 1)
    if base.endswith("backward"):
        g = _tensor(dims, types, 0)
        if g is None:
            return None
        return OpCost(float(_numel(g[0])), 2.0 * _numel(g[0]) * g[2], g[1], False, f"{op} bytes 2·grad {g[1]}")
    if w is None or idx is None or len(w[0]) != 2:
        return None
    n, d = _numel(idx[0]), w[0][1]
    flops = float(n * d) if "bag" in base else 0.0
    return OpCost(
        flops,
        float(2 * n * d * w[2] + n * idx[2]),
        w[1],
        False,
        f"{op} bytes 2·indices·D·es + indices, w{_fmt(w[0])} idx{_fmt(idx[0])} {w[1]}",
    )


def _index(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    """index_select(x, dim, idx) / gather(x, dim, idx) / index(x, [idx]): the rows or elements the
    indices pick are read and written once, plus the indices; the rest of ``x`` is not touched
    (a [151936, 1024] embedding table indexed by 8,944 tokens moves 8,944 rows, not the table)."""
    base = op.split("::")[-1]
    x = _tensor(dims, types, 0)
    if x is None or not x[0]:
        return None
    shape, prec, es = x
    if base == "index_select":
        idx = _tensor(dims, types, 2)
        dim = _int_arg(concrete, 1) or 0
        if idx is None or not -len(shape) <= dim < len(shape) or shape[dim] == 0:
            return None
        out = _numel(idx[0]) * (_numel(shape) // shape[dim])
    elif base == "gather":
        idx = _tensor(dims, types, 2)
        if idx is None:
            return None
        out = _numel(idx[0])
    else:  # aten::index(x, [idx, ...]): the first index tensor picks along the leading dims
        lists = [d for d in dims[1:2] if _is_shape_list(d) and d]
        if not lists:
            return None
        first = lists[0][0]
        k = len(lists[0])
        idx = (first, "int", 8)
        out = _numel(first) * _numel(shape[k:])
    return OpCost(
        0.0,
        float(2 * out * es + _numel(idx[0]) * idx[2]),
        prec,
        False,
        f"{op} bytes 2·picked elements + indices, x{_fmt(shape)} idx{_fmt(idx[0])} {prec}",
    )


def _elementwise(op: str, dims: Dims, types: Types, concrete: Concrete, flops_per: float = 1.0) -> OpCost | None:
    ts = _tensors(dims, types)
    if not ts:
        return None
    big = max(ts, key=lambda t: _numel(t[0]))
    out = ts[0] if op.endswith("_") else big
    nbytes = sum(_numel(s) * es for s, _, es in ts) + _numel(out[0]) * out[2]
    return OpCost(
        flops_per * _numel(big[0]),
        float(nbytes),
        ts[0][1],
        False,
        f"{op} elementwise {flops_per:g} FLOP/element, bytes inputs + output, {_fmt(big[0])} {ts[0][1]}",
    )


def _scaled(op: str, dims: Dims, types: Types, flops_per: float, bytes_per: float, what: str) -> OpCost | None:
    x = next((t for t in _tensors(dims, types) if t[0]), None)
    if x is None:
        return None
    n = _numel(x[0])
    return OpCost(
        flops_per * n,
        bytes_per * n * x[2],
        x[1],
        False,
        f"{op} {what} {flops_per:g} FLOP/element, bytes {bytes_per:g}× input {_fmt(x[0])} {x[1]}",
    )


def _copy(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    ts = _tensors(dims, types)
    lists = _tensor_lists(dims, types, ("fp32", 4))
    if lists:  # cat / stack: a list of inputs, written once more as the output
        es = 2 if ts and ts[0][2] == 2 else 4
        n = sum(_numel(s) for s in lists[0])
        return OpCost(0.0, 2.0 * n * es, "unknown", False, f"{op} bytes 2·Σ inputs ({len(lists[0])} tensors)")
    if not ts:
        return None
    if op.endswith("copy_") and len(ts) >= 2:
        nbytes = _numel(ts[0][0]) * ts[0][2] + _numel(ts[1][0]) * ts[1][2]
        return OpCost(
            0.0, float(nbytes), ts[1][1], False, f"{op} bytes dst + src {_fmt(ts[0][0])} {ts[1][1]}→{ts[0][1]}"
        )
    x = ts[0]
    return OpCost(0.0, 2.0 * _numel(x[0]) * x[2], x[1], False, f"{op} bytes 2× input {_fmt(x[0])} {x[1]}")


def _foreach(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    lists = _tensor_lists(dims, types, ("fp32", 4))
    if not lists:
        return None
    n = sum(_numel(s) for s in lists[0])
    base = op.split("::")[-1]
    adam = "adam" in base
    read = sum(sum(_numel(s) for s in lst) for lst in lists)
    written = sum(
        sum(_numel(s) for s in lst) for lst in (lists[:1] if not adam else [x for i, x in enumerate(lists) if i != 1])
    )
    es = 4  # tensor lists carry no dtype in the trace: optimizer state is fp32 in mixed precision too
    return OpCost(
        (12.0 if adam else 1.0) * n,
        float((read + written) * es),
        "fp32",
        False,
        f"{op} bytes lists read + in-place lists written ({len(lists)} lists, {n:,} elements, fp32 assumed)",
    )


_MATMUL = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm)$")
_MATVEC = re.compile(r"^aten::(mv|addmv|dot|vdot)$")
_CONV_BWD = re.compile(
    r"^aten::(convolution_backward|cudnn_convolution_backward_input|cudnn_convolution_backward_weight)$"
)
_ATTN = re.compile(
    r"^aten::(scaled_dot_product_attention|_scaled_dot_product_(flash|efficient|cudnn)_attention(_backward)?|"
    r"_flash_attention_(forward|backward)|_efficient_attention_(forward|backward))$"
)
_EMB = re.compile(r"^aten::(embedding|embedding_bag|_embedding_bag|embedding_dense_backward|_embedding_bag_backward)$")
_NORM_FWD = re.compile(r"(native_|cudnn_|miopen_|_fused_)?(layer|batch|group|instance|rms)_?norm$|rmsnorm$", re.I)
_NORM_BWD = re.compile(r"(layer|batch|group|instance|rms)_?norm_backward$", re.I)
_SOFTMAX = re.compile(r"^aten::(_softmax|softmax|_log_softmax|log_softmax)$")
_SOFTMAX_BWD = re.compile(r"^aten::(_softmax_backward_data|_log_softmax_backward_data)$")
_REDUCE = re.compile(
    r"^aten::(sum|mean|max|min|amax|amin|argmax|argmin|norm|linalg_vector_norm|var|std|var_mean|"
    r"std_mean|prod|any|all|logsumexp|cumsum|cumprod|nll_loss|nll_loss_forward|nll_loss2d_forward|"
    r"mse_loss|topk|sort)$"
)
_INDEX = re.compile(r"^aten::(index_select|gather|index)$")
_COPY = re.compile(
    r"^aten::(copy_|_to_copy|clone|contiguous|cat|stack|_cat|masked_select|"
    r"repeat|expand_copy|permute_copy|transpose_copy|constant_pad_nd)$"
)
_FOREACH = re.compile(r"^aten::(_foreach_\w+|_fused_adamw?_?|_fused_sgd_?)$")
# ATen pointwise operators (unary, binary, activation and their backward, fills, in-place forms).
_POINTWISE = re.compile(
    r"^aten::(add|sub|mul|div|rsub|addcmul|addcdiv|neg|abs|exp|exp2|log|log1p|log2|sqrt|rsqrt|pow|reciprocal|sign|"
    r"relu|gelu|silu|mish|sigmoid|tanh|hardtanh|hardswish|hardsigmoid|leaky_relu|elu|softplus|threshold|"
    r"clamp|clamp_min|clamp_max|where|masked_fill|fill|zero|lerp|maximum|minimum|eq|ne|lt|le|gt|ge|"
    r"logical_not|logical_and|logical_or|bitwise_and|bitwise_or|bitwise_not|floor|ceil|round|trunc|frac|"
    r"sin|cos|erf|erfinv|native_dropout|dropout|bernoulli|uniform|normal|"
    r"threshold_backward|gelu_backward|silu_backward|sigmoid_backward|tanh_backward|hardtanh_backward|"
    r"native_dropout_backward|mse_loss_backward|nll_loss_backward|leaky_relu_backward|elu_backward|"
    r"max_pool2d_with_indices|max_pool2d_with_indices_backward|avg_pool2d|avg_pool2d_backward|"
    r"adaptive_avg_pool2d|_adaptive_avg_pool2d|_adaptive_avg_pool2d_backward|upsample_nearest[123]d|"
    r"upsample_bilinear2d|upsample_nearest2d_backward|index_put_|scatter|scatter_add|index_add)_?$"
)


def op_cost(op: str, dims: Dims, types: Types, concrete: Concrete) -> OpCost | None:
    """FLOPs and bytes of one operator call from its recorded inputs, or None when no formula applies."""
    if _MATMUL.match(op):
        return _matmul(op, dims, types, concrete)
    if _MATVEC.match(op):
        return _matvec(op, dims, types, concrete)
    base = op.split("::")[-1]
    if op.startswith("aten::") and base in _CONV_ARGS:
        return _conv(op, dims, types, concrete)
    if _CONV_BWD.match(op):
        return _conv_backward(op, dims, types, concrete)
    if _ATTN.match(op):
        return _attention(op, dims, types, concrete)
    if _EMB.match(op):
        return _embedding(op, dims, types, concrete)
    if _SOFTMAX.match(op):
        return _scaled(op, dims, types, 5.0, 2.0, "softmax")
    if _SOFTMAX_BWD.match(op):
        return _scaled(op, dims, types, 4.0, 3.0, "softmax backward")
    if _NORM_BWD.search(base):
        return _scaled(op, dims, types, 8.0, 3.0, "normalization backward")
    if _NORM_FWD.search(base):
        return _scaled(op, dims, types, 5.0, 2.0, "normalization")
    if _FOREACH.match(op):
        return _foreach(op, dims, types, concrete)
    if _INDEX.match(op):
        return _index(op, dims, types, concrete)
    if _COPY.match(op):
        return _copy(op, dims, types, concrete)
    if _REDUCE.match(op):
        return _scaled(op, dims, types, 1.0, 1.0, "reduction")
    if _POINTWISE.match(op):
        return _elementwise(op, dims, types, concrete)
    return None
