"""The roofline per kernel: arithmetic intensity against the device's ridge point at the kernel's
precision (Machine Learning Systems (mlsysbook.ai), Model Training chapter; Williams, Waterman &
Patterson, "Roofline", CACM 2009).

For each kernel with FLOPs and bytes (:mod:`cost`): intensity I = FLOPs / bytes; the compute roof P
is the device's dense peak for that precision — the tensor/matrix-core peak for matrix products at
a precision that has tensor cores on that device, else the vector peak; the memory roof is the
bandwidth B. The ridge point is P / B: a kernel below it is **memory**-bound, above it
**compute**-bound. Attainable = min(P, I·B); % of roof = achieved FLOP/s ÷ attainable. A kernel
known only by name is classed by name (GEMV and elementwise: memory) and carries no rate; one with
neither cost nor a recognizable name is **unknown**. Communication kernels are kept apart.

Busy time is summed kernel time (concurrent streams can make it exceed wall time): ``bound_ms``
splits it into memory / compute / unknown, ``shares`` gives the same as fractions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers.devices import DeviceSpec
from trainscope.analyzers.trace.cost import SOURCE_KINDS
from trainscope.analyzers.trace.cost import KernelCosts
from trainscope.analyzers.trace.cost import kernel_costs
from trainscope.analyzers.trace.cost import name_precision
from trainscope.analyzers.trace.kernel_families import nested_name
from trainscope.analyzers.trace.kernel_families import strip_templates
from trainscope.analyzers.trace.kernels import HIGH_INTENSITY
from trainscope.analyzers.trace.kernels import classify_kernel
from trainscope.analyzers.trace.kernels import uses_tensor_cores
from trainscope.analyzers.trace.op_formulas import PRECISIONS
from trainscope.traces.model import Column
from trainscope.traces.model import Trace

BOUNDS = ("memory", "compute", "unknown")
# Above this % of roof a kernel's model is flagged rather than shown (5 % for clock boost and the
# spread of published peaks).
OVER_ROOF_PCT = 105.0
_COMM = 3  # internal bound code for communication kernels


@dataclass(frozen=True)
class RooflineRow:
    """One kernel name, aggregated over its calls in the window."""

    name: str
    count: int
    total_ms: float
    flops: float | None  # summed over the calls whose FLOPs are known
    bytes: float | None
    intensity: float | None  # FLOP per byte
    tflops: float | None  # achieved, over the calls with known FLOPs
    gbps: float | None  # achieved, over the calls with known bytes
    pct_of_roof: float | None  # achieved FLOP/s ÷ min(peak, I·bandwidth), or B/s ÷ bandwidth without FLOPs
    bound: str  # "memory" | "compute" | "unknown" | "communication"
    precision: str
    source: str  # where the FLOPs/bytes came from (the source of most of its time)
    tensor_cores: bool  # the roof is a tensor/matrix-core roof
    roof_tflops: float | None  # the compute roof at its precision
    share_pct: float = 0.0  # of kernel time in the window
    # achieved beyond the roof (> OVER_ROOF_PCT): no kernel beats its peak, so the FLOPs or bytes the
    # cost model gave it are wrong (a convolution run as Winograd/FFT does fewer FLOPs than the
    # direct formula; bytes of index ops); pct_of_roof is None then
    over_roof_pct: float | None = None

    @property
    def short_name(self) -> str:
        s = short_kernel_name(self.name)
        return s if len(s) <= 48 else s[:47] + "…"


@dataclass
class Roofline:
    device: str  # "H100 SXM" or the trace's name when not in the table
    bandwidth_gbps: float | None
    spec: DeviceSpec | None
    rows: list[RooflineRow]  # heaviest first
    bound_ms: dict[str, float]  # "memory", "compute", "unknown": summed kernel ms
    communication_ms: float = 0.0
    total_ms: float = 0.0  # all kernel time in the window (including communication)
    source_ms: dict[str, float] = field(default_factory=dict)  # SOURCE_KINDS → kernel ms
    flops: float = 0.0  # FLOPs of the window's kernels where known
    matrix_flops: float = 0.0  # of them, matrix products (GEMM/conv/attention)
    matrix_flops_by_precision: dict[str, float] = field(default_factory=dict)
    non_tensor_compute_ms: float = 0.0  # compute-bound kernel time whose roof is not a tensor-core roof
    matrix_ms: float = 0.0  # GEMM/convolution/attention kernel time (by operator, else by name)
    tensor_core_ms: float = 0.0  # of it, on tensor/matrix cores (by precision; by name only without one)
    # of the rest, compute-bound matrix math at fp32 on a device whose tensor cores take fp16/bf16/tf32:
    # what mixed precision can move to tensor cores (fp64 codes, bandwidth-bound GEMVs, kernels of
    # unknown precision and devices without tensor cores get no advice)
    tensor_core_candidate_ms: float = 0.0
    matrix_costed_ms: float = 0.0  # matrix kernel time whose FLOPs are known (coverage of the MFU estimate)
    notes: list[str] = field(default_factory=list)

    @property
    def tensor_core_pct_of_matrix(self) -> float | None:
        return 100.0 * self.tensor_core_ms / self.matrix_ms if self.matrix_ms else None

    def pct_of_kernel_time(self, bound: str) -> float:
        """Share of all kernel time in the window (communication included) with this bound."""
        return 100.0 * self.bound_ms.get(bound, 0.0) / self.total_ms if self.total_ms else 0.0

    @property
    def busy_ms(self) -> float:
        return sum(self.bound_ms.values())

    def share_pct(self, bound: str) -> float:
        """Share of (non-communication) kernel time with this bound."""
        b = self.busy_ms
        return 100.0 * self.bound_ms.get(bound, 0.0) / b if b else 0.0

    @property
    def shares(self) -> dict[str, float]:
        return {b: self.share_pct(b) / 100.0 for b in BOUNDS}

    def evidence_line(self, bound: str) -> str:
        """A quotable line for the heaviest kernel with this bound, e.g. "GEMV 95 % of kernel time:
        0.25 FLOP/B, 240 GB/s = 75 % of the T4's 320 GB/s"."""
        rows = [r for r in self.rows if r.bound == bound]
        if not rows:
            return f"no {bound}-bound kernels"
        r = rows[0]
        head = f"{r.short_name} {r.share_pct:.0f} % of kernel time"
        if r.intensity is None or r.pct_of_roof is None:
            return f"{head}: {r.source}"
        if bound == "memory" and r.gbps is not None and self.bandwidth_gbps:
            return (
                f"{head}: {r.intensity:.3g} FLOP/B, {_gb(r.gbps)} = {r.pct_of_roof:.0f} % of the {self.device}'s "
                f"{_gb(self.bandwidth_gbps)}"
            )
        if r.tflops is not None and r.roof_tflops:
            unit = "tensor-core " if r.tensor_cores else ""
            return (
                f"{head}: {r.intensity:.3g} FLOP/B, {r.tflops:.3g} TFLOP/s = {r.pct_of_roof:.0f} % of the "
                f"{self.device}'s {r.roof_tflops:g} TFLOP/s {r.precision} {unit}peak"
            )
        return f"{head}: {r.intensity:.3g} FLOP/B"

    def rows_by(self, key: str = "total") -> list[RooflineRow]:
        """The rows heaviest first (``total``) or by % of roof, lowest first (``pct_of_roof``: the
        kernels furthest from their own roof lead; rows without one last)."""
        if key == "total":
            return list(self.rows)
        if key == "pct_of_roof":
            return sorted(self.rows, key=lambda r: (r.pct_of_roof is None, r.pct_of_roof or 0.0, -r.total_ms))
        raise ValueError(f"unknown sort key {key!r} (total, pct_of_roof)")

    def ridge(self, precision: str = "bf16", matrix: bool = True) -> float | None:
        if self.spec is None:
            return None
        p, _ = self.spec.peak(precision, matrix)
        return p * 1e12 / (self.spec.memory_gbps * 1e9) if p else None


def _gb(gbps: float) -> str:
    return f"{gbps / 1000:.3g} TB/s" if gbps >= 1000 else f"{gbps:.3g} GB/s"


_GENERIC = {"kernel", "kernel2", "kentry", "device_kernel", "kernel_entry"}


def short_kernel_name(name: str) -> str:
    """``void (anonymous namespace)::cunn_SoftMaxForward<8, …>(…)`` → ``cunn_SoftMaxForward``;
    a generic wrapper (``cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_…>``) → its first template argument."""
    s = name.strip()
    if s.startswith("_Z"):
        parts = nested_name(s)  # empty identifiers left out
        named = [p for p in parts if p.lower() not in _GENERIC]
        return (named or parts or [name[:40]])[-1]
    if s.startswith("void "):
        s = s[5:]
    s = s.replace("(anonymous namespace)", "anon")
    bare = strip_templates(s).split("(")[0].strip()
    last = bare.split("::")[-1].strip() if bare else ""
    if last.lower() in _GENERIC and "<" in s:
        m = re.match(r"\s*([\w:]+)", s[s.index("<") + 1 :])
        return (m.group(1).split("::")[-1] if m else "") or last
    return last or name[:40]


def tensor_core_names(trace: Trace, costs: KernelCosts, spec: DeviceSpec, name_tc: np.ndarray) -> np.ndarray:
    """Per string-table entry, whether that kernel name runs on tensor/matrix cores: from the
    launching operator's precision where the cost model has one (an fp32 ``xmma`` GEMM is not
    tensor-core; a bf16 one on a V100 is not either), from the name (``name_tc``) only where not."""
    k = trace.kernels
    out: Column = name_tc.copy()  # numpy's stubs give copy() of an unshaped array as Any
    known = (
        costs.matrix & (costs.precision != PRECISIONS.index("unknown")) & (costs.precision != PRECISIONS.index("int"))
    )
    if not known.any():
        return out
    idx = np.flatnonzero(known)
    on_tc = np.zeros(len(idx), bool)
    prec = costs.precision[idx]
    for p in codes.distinct(prec).tolist():
        on_tc[prec == p] = spec.peak(PRECISIONS[p], True)[1]
    names = k.name[idx]
    votes = np.bincount(names, weights=np.where(on_tc, 1.0, -1.0), minlength=len(out))
    seen = np.bincount(names, minlength=len(out)) > 0
    for i in np.flatnonzero(seen).tolist():  # layout transforms launched by a convolution stay off
        if classify_kernel(trace.strings[i]) in HIGH_INTENSITY:
            out[i] = votes[i] > 0
    return out


def roofline(
    trace: Trace,
    kernel_mask: np.ndarray | None,
    spec: DeviceSpec | None,
    costs: KernelCosts | None = None,
    device_name: str | None = None,
) -> Roofline:
    """The roofline of the kernels selected by ``kernel_mask`` on the device described by ``spec``."""
    k = trace.kernels
    costs = costs if costs is not None else kernel_costs(trace)
    sel = np.ones(len(k), bool) if kernel_mask is None else kernel_mask
    idx = np.flatnonzero(sel)
    dur = k.dur[idx].astype(np.float64)
    f, b = costs.flops[idx], costs.bytes[idx]
    prec = costs.precision[idx]
    mat = costs.matrix[idx]
    n = len(idx)

    # Compute roof per (precision, matrix) pair, in TFLOP/s; tensor-core flag. Launches whose
    # operator recorded no shapes take the precision their kernel's name states and count as matrix
    # math when the name is a GEMM/convolution/attention kernel: each launch's roof is the peak of
    # its own precision and unit, so a bf16 GEMM with a few shapeless launches is not held against
    # the fp32 CUDA-core peak.
    rprec, rmat = prec.copy(), mat.copy()
    no_p = prec == PRECISIONS.index("unknown")
    if no_p.any():
        names_np = k.name[idx]
        for i in codes.distinct(names_np[no_p]).tolist():
            nm = trace.strings[i]
            pn = name_precision(nm)
            on_i = no_p & (names_np == i)
            if pn is not None:
                rprec[on_i] = PRECISIONS.index(pn)
            if classify_kernel(nm) in HIGH_INTENSITY:
                rmat[on_i] = True
    roof = np.full(n, np.nan)
    tc = np.zeros(n, bool)
    if spec is not None and n:
        for p in codes.distinct(rprec).tolist():
            for m in (False, True):
                on = (rprec == p) & (rmat == m)
                if not on.any():
                    continue
                pname = PRECISIONS[p]
                if pname in ("unknown", "int"):
                    pname = "fp32"
                peak, is_tc = spec.peak(pname, m)
                roof[on] = peak if peak else np.nan
                tc[on] = is_tc
    bw = spec.memory_gbps if spec is not None else np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        inten = f / b
        ridge = roof * 1e12 / (bw * 1e9)
    known = ~np.isnan(inten) & ~np.isnan(ridge) & ~np.isinf(inten)
    bound = np.full(n, 2, np.int8)  # unknown
    bound[known & (inten < ridge)] = 0
    bound[known & (inten >= ridge)] = 1
    nb = costs.name_bound[idx]
    bound[~known & (nb == 1)] = 0
    bound[~known & (nb == 2)] = 1
    names = k.name[idx]
    # communication kernels are not on the roofline
    comm_name = np.zeros(len(trace.strings), bool)
    for i in codes.distinct(names).tolist():
        comm_name[i] = classify_kernel(trace.strings[i]) == "communication"
    is_comm = comm_name[names] if n else np.zeros(0, bool)
    bound[is_comm] = _COMM

    bound_ms = {bb: float(dur[bound == i].sum()) / 1e6 for i, bb in enumerate(BOUNDS)}
    comm_ms = float(dur[is_comm].sum()) / 1e6
    total_ms = float(dur.sum()) / 1e6
    kind = costs.kind[idx]
    source_ms = {s: float(dur[kind == i].sum()) / 1e6 for i, s in enumerate(SOURCE_KINDS)}
    fk = ~np.isnan(f)
    flops = float(f[fk].sum())
    mfl = fk & mat
    by_prec: dict[str, float] = {}
    for p in codes.distinct(prec[mfl]).tolist():
        by_prec[PRECISIONS[p]] = float(f[mfl & (prec == p)].sum())

    # tensor cores: from the precision where the operator gave one, from the name only where not
    cls_name = np.zeros(len(trace.strings), bool)
    tc_name = np.zeros(len(trace.strings), bool)
    for i in codes.distinct(names).tolist():
        c = classify_kernel(trace.strings[i])
        cls_name[i] = c in HIGH_INTENSITY
        tc_name[i] = uses_tensor_cores(trace.strings[i], c)
    no_prec = (prec == PRECISIONS.index("unknown")) | ~mat
    is_matrix = (mat | cls_name[names]) & ~is_comm if n else np.zeros(0, bool)
    on_tc = np.where(no_prec & ~mat, tc_name[names], tc) if n else np.zeros(0, bool)
    fastpath = spec is not None and bool(spec.matrix & {"fp16", "bf16", "tf32"})
    # What mixed precision can move to tensor cores: fp32 matrix math (precision known, from the
    # operator or the kernel's name) that the roofline calls compute-bound. Bandwidth-bound matrix
    # work (GEMV, skinny GEMMs) gains nothing from faster arithmetic; unknown precision is no candidate.
    candidate = is_matrix & ~on_tc & (rprec == PRECISIONS.index("fp32")) & (bound == 1)
    matrix_ms = float(dur[is_matrix].sum()) / 1e6
    tc_ms = float(dur[is_matrix & on_tc].sum()) / 1e6
    # a device outside the table may or may not have tensor cores: its candidates still count (the
    # finding names the kernels); one the table knows counts only where fp16/bf16/tf32 cores exist
    cand_ms = float(dur[candidate].sum()) / 1e6 if fastpath or spec is None else 0.0
    non_tc = float(dur[(bound == 1) & ~on_tc & ~is_comm].sum()) / 1e6
    matrix_costed_ms = float(dur[is_matrix & fk].sum()) / 1e6

    rows = _rows(trace, names, dur, f, b, prec, bound, tc, roof, costs.source[idx], costs.sources, bw, total_ms)
    dev = spec.key if spec is not None else (device_name or "unknown device")
    notes = list(costs.notes)
    over = [r for r in rows if r.over_roof_pct is not None]
    if over:
        worst = max(over, key=lambda r: r.over_roof_pct or 0.0)  # all set: filtered above
        notes.append(
            f"{len(over)} kernel name{'s' if len(over) != 1 else ''} ran faster than {'their' if len(over) != 1 else 'its'} roof "
            f"by the cost model (worst {worst.short_name} at {worst.over_roof_pct:.0f} %, {worst.source}): "
            "their FLOPs or bytes are wrong (Winograd/FFT convolutions, partial reads), so no % of roof is shown"
        )
    if spec is None:
        notes.append(
            f"no peaks known for {device_name or 'this device'!r}: bounds need a ridge point "
            "(pass --peak-tflops and --peak-bandwidth)"
        )
    return Roofline(
        dev,
        None if spec is None else spec.memory_gbps,
        spec,
        rows,
        bound_ms,
        comm_ms,
        total_ms,
        source_ms,
        flops,
        float(f[mfl].sum()),
        by_prec,
        non_tc,
        matrix_ms,
        tc_ms,
        cand_ms,
        matrix_costed_ms,
        notes,
    )


def _rows(
    trace: Trace,
    names: Column,
    dur: Column,
    f: Column,
    b: Column,
    prec: Column,
    bound: Column,
    tc: Column,
    roof: Column,
    source: Column,
    sources: list[str],
    bw: float,
    total_ms: float,
) -> list[RooflineRow]:
    if not len(names):
        return []
    un, inv = codes.unique_inverse(names)
    m = len(un)
    cnt = np.bincount(inv, minlength=m)
    tdur = np.bincount(inv, weights=dur, minlength=m)
    fk, bk = ~np.isnan(f), ~np.isnan(b)
    fsum = np.bincount(inv, weights=np.where(fk, f, 0.0), minlength=m)
    bsum = np.bincount(inv, weights=np.where(bk, b, 0.0), minlength=m)
    fdur = np.bincount(inv, weights=np.where(fk, dur, 0.0), minlength=m)
    bdur = np.bincount(inv, weights=np.where(bk, dur, 0.0), minlength=m)
    fn = np.bincount(inv, weights=fk.astype(float), minlength=m)
    bn = np.bincount(inv, weights=bk.astype(float), minlength=m)
    fb = fk & bk  # calls with both: intensity and % of roof come from these
    fb_f = np.bincount(inv, weights=np.where(fb, f, 0.0), minlength=m)
    fb_b = np.bincount(inv, weights=np.where(fb, b, 0.0), minlength=m)
    fb_d = np.bincount(inv, weights=np.where(fb, dur, 0.0), minlength=m)
    fb_n = np.bincount(inv, weights=fb.astype(float), minlength=m)

    def majority(codes: np.ndarray, ncodes: int) -> np.ndarray:
        w = np.bincount(inv * ncodes + codes.astype(np.int64), weights=dur + 1e-9, minlength=m * ncodes)
        codes_max: Column = w.reshape(m, ncodes).argmax(axis=1)  # argmax(axis=…) is Any in numpy's stubs
        return codes_max

    bmaj = majority(bound, 4)
    pmaj = majority(prec, len(PRECISIONS))
    # the source with the most time per name
    pair = inv.astype(np.int64) * (len(sources) + 1) + source
    up, pinv = codes.unique_inverse(pair)
    pw = np.bincount(pinv, weights=dur + 1e-9)
    best_src = np.zeros(m, np.int64)
    best_w = np.full(m, -1.0)
    for u, w in zip(up.tolist(), pw.tolist()):
        r, s = divmod(u, len(sources) + 1)
        if w > best_w[r]:
            best_w[r], best_src[r] = w, s
    # A row's roof is one peak — the one of most of its time among the calls its % of roof is
    # measured on (FLOPs and bytes known), else among all its calls — never an average of a
    # tensor-core and a CUDA-core peak.
    roof_of = np.full(m, np.nan)
    tc_of = majority(tc.astype(np.int8), 2).astype(bool)
    has_roof = ~np.isnan(roof)
    if has_roof.any():
        # (peak, unit) pairs: the row's roof and its tensor-core flag come from the same calls
        # (the distinct peaks are few: coded in one dimension, not np.unique over rows, which took
        # 0.65 s for the million kernels of a 1 GB Nsight export; the same pairs in the same order)
        upeak, pcode = np.unique(np.where(has_roof, roof, -1.0), return_inverse=True)
        code = pcode.reshape(-1).astype(np.int64) * 2 + tc.astype(bool)
        ucode, rcode = codes.unique_inverse(code)
        rcode = rcode.reshape(-1)
        upairs = np.stack([upeak[ucode // 2], (ucode % 2).astype(np.float64)], axis=1)
        nr = len(upairs)
        for pick in (has_roof, has_roof & fb):  # the second overrides where it has calls
            w = np.bincount(inv * nr + rcode, weights=np.where(pick, dur + 1e-9, 0.0), minlength=m * nr).reshape(m, nr)
            best = w.argmax(axis=1)
            got = w.max(axis=1) > 0
            roof_of = np.where(got, upairs[best, 0], roof_of)
            tc_of = np.where(got, upairs[best, 1] > 0.5, tc_of)
    order = np.argsort(-tdur)
    label = BOUNDS + ("communication",)
    out: list[RooflineRow] = []
    for r in order.tolist():
        fl = float(fsum[r]) if fn[r] else None
        by = float(bsum[r]) if bn[r] else None
        tf = fl / (fdur[r] / 1e9) / 1e12 if fl is not None and fdur[r] > 0 else None
        gb = by / (bdur[r] / 1e9) / 1e9 if by is not None and bdur[r] > 0 else None
        inten = float(fb_f[r] / fb_b[r]) if fb_n[r] and fb_b[r] > 0 else None
        pct = None
        peak = None if np.isnan(roof_of[r]) else float(roof_of[r])
        if inten is not None and peak and bw and not np.isnan(bw):
            att = min(peak * 1e12, inten * bw * 1e9)
            fd = float(fb_d[r])
            ach = float(fb_f[r]) / (fd / 1e9) if fd > 0 else None
            if ach is not None and att > 0:
                pct = 100.0 * ach / att
            if inten == 0 and gb is not None:
                pct = 100.0 * gb / bw
        over = None
        if pct is not None and pct > OVER_ROOF_PCT:
            over, pct = pct, None  # faster than physics: the FLOPs/bytes model of this kernel is wrong
        out.append(
            RooflineRow(
                name=trace.strings[un[r]],
                count=int(cnt[r]),
                total_ms=float(tdur[r]) / 1e6,
                flops=fl,
                bytes=by,
                intensity=inten,
                tflops=tf,
                gbps=gb,
                pct_of_roof=pct,
                bound=label[bmaj[r]],
                precision=PRECISIONS[pmaj[r]],
                source=sources[best_src[r]],
                tensor_cores=bool(tc_of[r]),
                roof_tflops=peak,
                share_pct=100.0 * float(tdur[r]) / 1e6 / total_ms if total_ms else 0.0,
                over_roof_pct=over,
            )
        )
    return out
