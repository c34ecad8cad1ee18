"""FLOPs and bytes moved per GPU kernel, with the precision and the source of each figure.

Sources, best first (each kernel says which one it got):

1. ``recorded flops`` — the ``flops`` arg the profiler writes with ``with_flops=True`` (bytes then
   still come from the shapes);
2. ``hw counters`` — FP instruction counts per kernel from Kineto's CUPTI-profiler mode (FLOPs only;
   tensor-core math is invisible to those counters);
3. ``shapes: <op> <formula> <dtype>`` — the launching operator's ``Input Dims``/``Input type``/
   ``Concrete Inputs`` (``record_shapes=True``) through the formulas below;
4. ``name (last resort)`` — the kernel name says only what kind of work it is: GEMV and
   elementwise/normalization/softmax/reduction kernels are bandwidth-bound, GEMM/convolution/
   attention kernels are counted compute-bound; no FLOPs or bytes;
5. ``unknown`` — none of the above. Never counted as compute-heavy.

A kernel is linked to the operator that launched it: its runtime launch call (by correlation id)
lies inside the innermost operator on that host thread; where no launch call is recorded, Kineto's
"External id" links it. When one operator launches several kernels (a cuDNN convolution and its
layout transforms; a GEMM and its split-K reduction), the operator's FLOPs and bytes are split over
them in proportion to their durations, so each has the operator's arithmetic intensity. Kernels
replayed by a CUDA/HIP graph are linked to the operator around the graph launch when there is one;
they usually have no shapes and fall back to names.

The formulas per operator are in :mod:`op_formulas`.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers.intervals import searchsorted
from trainscope.analyzers.nesting import is_outer_first
from trainscope.analyzers.nesting import nest_parents
from trainscope.analyzers.nesting import outer_first
from trainscope.analyzers.trace.kernel_families import tokenize
from trainscope.analyzers.trace.kernels import classify_kernel
from trainscope.analyzers.trace.op_formulas import PRECISIONS  # noqa: F401 (re-exported)
from trainscope.analyzers.trace.op_formulas import OpCost  # noqa: F401 (re-exported)
from trainscope.analyzers.trace.op_formulas import op_cost  # noqa: F401 (re-exported)
from trainscope.traces.model import CpuOps
from trainscope.traces.model import Trace

# Precision from a kernel name, for operators recorded without dtypes.
_NAME_PRECISION: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("bf16", re.compile(r"bf16|bfloat16|__nv_bfloat16", re.I)),
    ("fp16", re.compile(r"fp16|f16|half|__half|_h\d{3,5}gemm|hgemm|_h884|_h1688|_h16816", re.I)),
    ("fp8", re.compile(r"e4m3|e5m2|fp8", re.I)),
    ("fp64", re.compile(r"dgemm|double|f64", re.I)),
    ("fp32", re.compile(r"sgemm|f32|float|scudnn|_s\d{3,5}gemm", re.I)),
)
_OPAQUE = re.compile(r"OpaqueType<(\d+)u?>")
_ES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
# Kernel names that say an fp32 matrix product runs on TF32 tensor cores (cuBLAS/CUTLASS/cuDNN).
TF32_KERNEL = re.compile(r"tf32|tensorop_s\d|_s16816|_s1688|_s1684", re.I)
# GEMV/dot kernels, by whole words of the name (``gemv2T_kernel_val``, ``internal::gemvx::kernel``,
# ``dot_kernel``, cuBLAS's split-K reduction): a matrix read once per call, bandwidth-bound.
GEMV_WORDS = re.compile(r"\b([sdhcz]?gemv\w*|dot kernel|split ?k ?reduce\w*|split kreduce\w*)\b")
# Gathers and scatters move rows by index whatever else the kernel's name says (a MoE
# ``_finalize_matmul_scatter`` combines expert outputs; it multiplies no matrices).
GATHER_WORDS = re.compile(r"\b(embedding\w*|gather\w*|scatter\w*|index select\w*|indexing\w*)\b")
# A GEMM kernel's tile (M×N×K, as CUTLASS, Tensile "MT…" and Triton put it in the name): autotuners
# pick an M tile of 16 or less only for skinny problems (few rows: decode tokens, small batches),
# whose intensity is at most ~M FLOP/B — far below any ridge point.
GEMM_TILE = re.compile(r"(?:^|_)(?:MT)?(\d+)x(\d+)x(\d+)", re.I)


def name_precision(name: str) -> str | None:
    """The precision a kernel name states (``bf16``, ``sgemm`` → fp32 …), None when it states none."""
    return next((p for p, rx in _NAME_PRECISION if rx.search(name)), None)


SOURCE_KINDS = ("recorded flops", "hw counters", "shapes", "name (last resort)", "unknown")


@dataclass
class KernelCosts:
    """Per kernel (aligned with ``trace.kernels``): FLOPs and bytes (NaN: unknown), precision,
    whether it is matrix math, the source of the figures, and the name-based bound where only the
    name spoke (``""`` otherwise)."""

    flops: np.ndarray
    bytes: np.ndarray
    precision: np.ndarray  # int8 index into PRECISIONS
    matrix: np.ndarray  # bool
    source: np.ndarray  # int32 index into ``sources``
    sources: list[str]
    kind: np.ndarray  # int8 index into SOURCE_KINDS
    name_bound: np.ndarray  # int8: 0 none, 1 memory, 2 compute (name last resort only)
    op: np.ndarray  # int64 cpu_ops row of the launching operator, -1 if none
    notes: list[str]

    def precision_of(self, i: int) -> str:
        return PRECISIONS[int(self.precision[i])]


# --- linking kernels to operators ---------------------------------------------------------------


def link_kernels(trace: Trace) -> np.ndarray:
    """cpu_ops row of the operator that launched each kernel (-1: none found)."""
    k, r, ops, oi = trace.kernels, trace.runtime, trace.cpu_ops, trace.op_inputs
    out = np.full(len(k), -1, np.int64)
    if not len(k) or not len(ops):
        return out
    # 1. launch call (by correlation) inside the innermost operator on its thread
    if len(r):
        rrow = np.flatnonzero(r.correlation >= 0)
        rc, o = codes.ascending(r.correlation[rrow])  # a table's ids ascend already: no sort, no gathers
        if o is not None:
            rrow = rrow[o]
        pos = np.clip(searchsorted(rc, k.correlation), 0, max(0, len(rc) - 1))
        has = (len(rc) > 0) & (k.correlation >= 0)
        has &= rc[pos] == k.correlation if len(rc) else False
        if has.any():
            launches = rrow[pos[has]]
            uniq, inv = _distinct_inverse(launches)
            del rc, rrow, o, pos, launches  # the correlation join's columns: not held through the nesting
            cand = _innermost(ops, r.thread[uniq], r.ts[uniq])
            out[np.flatnonzero(has)] = cand[inv]
    # 2. Kineto's External id, for kernels without a recorded launch
    if len(oi.kernel_external) == len(k) and len(oi.cpu_external) == len(ops):
        miss = (out < 0) & (oi.kernel_external >= 0)
        if miss.any():
            o = np.argsort(oi.cpu_external, kind="stable")
            se = oi.cpu_external[o]
            pos = np.clip(np.searchsorted(se, oi.kernel_external[miss]), 0, len(se) - 1)
            hit = se[pos] == oi.kernel_external[miss]
            rows = np.flatnonzero(miss)
            out[rows[hit]] = o[pos[hit]]
    return out


def _distinct_inverse(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``codes.unique_inverse(rows)``; without a count over every possible row where the rows do not
    descend (kernels in launch order, as an export lists them: one launch each, or a graph's several)."""
    if len(rows) > 1 and bool((rows[1:] >= rows[:-1]).all()):
        new = np.empty(len(rows), bool)
        new[0] = True
        np.not_equal(rows[1:], rows[:-1], out=new[1:])
        inv = np.cumsum(new, dtype=np.intp)
        inv -= 1
        return rows[new], inv
    return codes.unique_inverse(rows)


def _innermost(ops: CpuOps, threads: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Row of the innermost operator on ``threads[i]`` enclosing instant ``at[i]`` (-1: none):
    the last operator of the thread started at or before it, climbed up its enclosing operators
    (:func:`nest_parents`, the stack definition) while it has ended before. One thread at a
    time — its rows, outer first, nested and searched on their own —, so no column of every
    operator is gathered or nested at once (5 M operators of a 1 GB export on two threads)."""
    out = np.full(len(at), -1, np.int64)
    in_order = is_outer_first(ops.ts, ops.dur)
    order = g_o = None
    if not in_order:  # the (thread, start, -duration) order, each thread a block of it
        order = outer_first(ops.ts, ops.dur, ops.thread)
        g_o = ops.thread[order]
    for th in codes.distinct(threads).tolist():
        rows: np.ndarray | None = None
        if order is None:  # in row order: already outer first; the rows' positions only at the end
            sel = ops.thread == th
            s = ops.ts[sel]
            e = ops.dur[sel]
        else:
            assert g_o is not None
            rows = order[np.searchsorted(g_o, th, "left") : np.searchsorted(g_o, th, "right")]
            s = ops.ts[rows]
            e = ops.dur[rows]
        if not len(s):
            continue
        e += s
        mine = np.flatnonzero(threads == th)
        q = at[mine]
        pos = searchsorted(s, q, side="right") - 1  # -1: none
        # the enclosing operator (a position among the thread's rows) where the climb reads it; the
        # thread's starts dropped before the nesting (only its rows' own are nested)
        sub = _climb_rows(s, e, pos, q)
        if sub is None:
            parent = nest_parents(s, e)
            del s
        else:
            s = s[sub]
            parent = _spread(nest_parents(s, e[sub]), sub, len(e))
            del s, sub
        up = np.arange(len(q))  # the queries still climbing
        for _ in range(64):  # climb to the innermost enclosing operator
            p = pos[up]
            c = np.clip(p, 0, None)
            bad = (p >= 0) & (e[c] < q[up])
            if not bad.any():
                break
            up = up[bad]
            pos[up] = parent[c[bad]]
        del e, parent, up
        if rows is None:
            rows = np.flatnonzero(sel)
            del sel
        out[mine] = np.where(pos >= 0, rows[np.clip(pos, 0, None)], -1)
    return out


def _climb_rows(s: np.ndarray, e: np.ndarray, pos: np.ndarray, q: np.ndarray) -> np.ndarray | None:
    """The intervals (outer first) whose :func:`nest_parents` the climb from ``pos`` toward the
    instants ``q`` can read, None where that is all of them. An interval closed before the next one
    starts is nobody's enclosing candidate (every later start is past its end): its parent is asked
    only where a climb starts at it. The rest — the intervals open at the next start, and those
    climbs' first ones — nest alone with the same parents (the candidates they lose were never open
    at their starts): 0.75 M and 1.9 M of the 2.1 M and 2.9 M operators of a 1 GB Nsight export's
    two threads."""
    n = len(s)
    need = np.ones(n, bool)
    np.greater_equal(e[:-1], s[1:], out=need[:-1])
    c = np.clip(pos, 0, None)
    climbs = (pos >= 0) & (e[c] < q)
    need[pos[climbs]] = True
    del c, climbs
    if need.all():
        return None
    sub = np.flatnonzero(need)
    out: np.ndarray = sub.astype(np.int32) if n < 1 << 31 else sub  # four bytes a row, held through the nesting
    return out


def _spread(ps: np.ndarray, sub: np.ndarray, n: int) -> np.ndarray:
    """Parents among ``sub``'s rows (positions into it) as positions among all ``n`` rows (−1 elsewhere)."""
    parent = np.full(n, -1, np.int64)
    has = ps >= 0
    parent[sub[has]] = sub[ps[has]]
    return parent


_LINKED: dict[int, tuple[weakref.ref[Trace], int, int, np.ndarray]] = {}


def linked_operators(trace: Trace) -> np.ndarray:
    """:func:`link_kernels`, once per trace (kernel classes and kernel costs both need it)."""
    key = id(trace)
    hit = _LINKED.get(key)
    if hit is not None and hit[0]() is trace and hit[1] == len(trace.kernels) and hit[2] == len(trace.cpu_ops):
        return hit[3]
    out = link_kernels(trace)
    for dead in [k for k, v in _LINKED.items() if v[0]() is None]:
        del _LINKED[dead]
    _LINKED[key] = (weakref.ref(trace), len(trace.kernels), len(trace.cpu_ops), out)
    return out


# --- per-kernel costs ---------------------------------------------------------------------------


def kernel_costs(trace: Trace) -> KernelCosts:
    k, ops, oi = trace.kernels, trace.cpu_ops, trace.op_inputs
    n = len(k)
    flops, nbytes = np.full(n, np.nan), np.full(n, np.nan)
    prec = np.full(n, PRECISIONS.index("unknown"), np.int8)
    matrix = np.zeros(n, bool)
    source = np.zeros(n, np.int32)
    kind = np.full(n, SOURCE_KINDS.index("unknown"), np.int8)
    name_bound = np.zeros(n, np.int8)
    sources: list[str] = ["unknown"]
    src_index: dict[str, int] = {"unknown": 0}
    notes: list[str] = []

    def src(s: str) -> int:
        i = src_index.get(s)
        if i is None:
            i = src_index[s] = len(sources)
            sources.append(s)
        return i

    op_row = linked_operators(trace)
    linked = op_row >= 0
    has_sig = len(oi.cpu_signature) == len(ops)
    if linked.any():
        rows = op_row[linked]
        # one cost per distinct (operator name, input signature)
        sig = oi.cpu_signature[rows] if has_sig else np.full(len(rows), -1, np.int32)
        pair = ops.name[rows].astype(np.int64) * (len(oi.signatures) + 1) + (sig.astype(np.int64) + 1)
        upair, pinv = codes.unique_inverse(pair)
        costs: list[OpCost | None] = []
        for p in upair.tolist():
            name_i, sig_i = divmod(p, len(oi.signatures) + 1)
            c = None
            if sig_i > 0:
                dims, types, conc = oi.signatures[sig_i - 1]
                try:
                    c = op_cost(trace.strings[name_i], dims, types, conc)
                except (TypeError, ValueError, IndexError, ZeroDivisionError, OverflowError):
                    c = None
            costs.append(c)
        u_f = np.array([c.flops if c else np.nan for c in costs])
        u_b = np.array([c.bytes if c else np.nan for c in costs])
        u_p = np.array(
            [
                PRECISIONS.index(c.precision) if c and c.precision in PRECISIONS else PRECISIONS.index("unknown")
                for c in costs
            ],
            np.int8,
        )
        u_m = np.array([bool(c and c.matrix) for c in costs])
        u_s = np.array([src("shapes: " + c.formula) if c else 0 for c in costs], np.int32)
        # split each operator's cost over its kernels in proportion to their durations
        uops, oinv = codes.unique_inverse(rows)
        dur = k.dur[linked].astype(np.float64)
        tot = np.bincount(oinv, weights=dur)
        cnt = np.bincount(oinv)
        tot_k = tot[oinv]  # the operator's kernel time, per kernel (gathered once)
        share = np.where(tot_k > 0, dur / np.where(tot_k > 0, tot_k, 1), 1.0 / cnt[oinv])
        del tot_k
        lk = np.flatnonzero(linked)
        got = ~np.isnan(u_f[pinv])
        # A matrix operator's FLOPs happen in its math kernels, not in the layout transforms or
        # reductions it also launches: where an operator has both, the math kernels get the FLOPs.
        math_name = np.zeros(len(trace.strings), bool)
        for i in codes.distinct(k.name[lk]).tolist():
            math_name[i] = classify_kernel(trace.strings[i]) in ("gemm", "convolution", "attention")
        is_math = math_name[k.name[lk]]
        mdur = np.bincount(oinv, weights=np.where(is_math, dur, 0.0))
        mdur_k = mdur[oinv]
        use_math = u_m[pinv] & (mdur_k > 0)
        fshare = np.where(use_math, np.where(is_math, dur / np.where(mdur_k > 0, mdur_k, 1), 0.0), share)
        del mdur_k
        flops[lk] = u_f[pinv] * fshare
        nbytes[lk] = u_b[pinv] * share
        prec[lk] = u_p[pinv]
        matrix[lk] = u_m[pinv]
        source[lk] = u_s[pinv]
        kind[lk[got]] = SOURCE_KINDS.index("shapes")
        # recorded FLOPs of the launching operator win over the formula
        rec = ops.flops[rows]
        has_rec = ~np.isnan(rec) & (rec > 0)
        if has_rec.any():
            flops[lk[has_rec]] = rec[has_rec] * fshare[has_rec]
            kind[lk[has_rec]] = SOURCE_KINDS.index("recorded flops")
            for j in np.flatnonzero(has_rec & ~got):
                source[lk[j]] = src("recorded flops (bytes unknown)")
            for j in np.flatnonzero(has_rec & got):
                source[lk[j]] = src("recorded flops; bytes " + sources[source[lk[j]]])
        if (cnt > 1).any():
            notes.append(
                f"{int((cnt > 1).sum()):,} operators launched several kernels: their bytes are split over "
                "those kernels in proportion to duration, their FLOPs over the math kernels among them"
            )
    # operators recorded without dtypes: the precision their kernels' names state (bytes rescaled)
    unk = (prec == PRECISIONS.index("unknown")) & (kind == SOURCE_KINDS.index("shapes"))
    if unk.any():
        by_name: dict[int, tuple[str | None, int]] = {}
        for i in codes.distinct(k.name[unk]).tolist():
            nm = trace.strings[i]
            p = next((p for p, rx in _NAME_PRECISION if rx.search(nm)), None)
            opaque = _OPAQUE.search(nm)  # copy kernels name only the element size: OpaqueType<2u>
            by_name[i] = (p, _ES[p] if p else int(opaque.group(1)) if opaque else 4)
        # per name, then every row at once (a 1 GB Nsight export: a million kernels, none with dtypes)
        p_lut = np.full(len(trace.strings), -1, np.int8)
        f_lut = np.ones(len(trace.strings), np.float64)
        for i, (p, es) in by_name.items():
            if p is not None:
                p_lut[i] = PRECISIONS.index(p)
            f_lut[i] = es / 4
        names = k.name[unk]
        pu = p_lut[names]
        prec[unk] = np.where(pu >= 0, pu, prec[unk])
        nbytes[unk] *= f_lut[names]
        notes.append(
            "operators whose inputs carry no dtype (emit_nvtx ranges, tensor lists): precision from kernel names, 4-byte "
            "elements where the name says none"
        )
    # tensor-core precision from the kernel name only where the operator's precision is fp32
    if n:
        fp32 = (prec == PRECISIONS.index("fp32")) & matrix
        if fp32.any():
            tf32_name = np.zeros(len(trace.strings), bool)
            for i in codes.distinct(k.name[fp32]).tolist():
                tf32_name[i] = bool(TF32_KERNEL.search(trace.strings[i]))
            prec[fp32 & tf32_name[k.name]] = PRECISIONS.index("tf32")
    # hardware counters, then names
    rest = np.isnan(flops) & np.isnan(nbytes)
    if rest.any():
        # per name, in the order of each name's first row (the order sources are numbered in),
        # then every row at once
        rows_r = np.flatnonzero(rest)
        names_r = k.name[rows_r]
        un, first = np.unique(names_r, return_index=True)
        b_lut = np.zeros(len(trace.strings), np.int8)
        s_lut = np.zeros(len(trace.strings), np.int32)
        hw_lut = np.full(len(trace.strings), np.nan)
        for name_i in un[np.argsort(first, kind="stable")].tolist():
            name = trace.strings[name_i]
            if name in oi.hw_flops:
                bound, si = -1, src("hw counters (FP instructions; tensor-core math not counted)")
                hw_lut[name_i] = oi.hw_flops[name]
            else:
                bound, si = _name_fallback(name, src)
            b_lut[name_i], s_lut[name_i] = bound, si
        bound_r, s_r = b_lut[names_r], s_lut[names_r]
        hw = bound_r == -1
        flops[rows_r[hw]] = hw_lut[names_r[hw]]
        kind[rows_r[hw]] = SOURCE_KINDS.index("hw counters")
        named = ~hw & (s_r != 0)
        name_bound[rows_r[named]] = bound_r[named]
        kind[rows_r[named]] = SOURCE_KINDS.index("name (last resort)")
        source[rows_r] = s_r
    return KernelCosts(flops, nbytes, prec, matrix, source, sources, kind, name_bound, op_row, notes)


def _name_fallback(name: str, src: Callable[[str], int]) -> tuple[int, int]:
    """(bound, source index) from a kernel name alone: 1 memory, 2 compute, 0 unknown."""
    t = tokenize(name)
    if GEMV_WORDS.search(t.text):
        return 1, src("name (last resort): GEMV/dot kernels are bandwidth-bound")
    if GATHER_WORDS.search(t.head_text):
        return 1, src("name (last resort): embedding/gather kernels are bandwidth-bound")
    cls = classify_kernel(name)
    if cls == "gemm":
        tile = GEMM_TILE.search(name)
        if tile and int(tile.group(1)) <= 16:
            return 1, src(f"name (last resort): skinny GEMM (M tile {tile.group(1)}) is bandwidth-bound")
    if cls in ("elementwise", "normalization", "softmax", "reduction", "embedding"):
        return 1, src(f"name (last resort): {cls} kernels are bandwidth-bound")
    if cls in ("gemm", "convolution", "attention"):
        return 2, src(f"name (last resort): {cls} kernel, counted compute-bound without shapes")
    if cls == "communication":
        return 0, src("communication kernel: not on the roofline")
    return 0, 0
