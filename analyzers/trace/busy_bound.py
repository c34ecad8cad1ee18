"""How much memory-bound kernel time a kernel-level fix can remove, bounded by the roofline.

A what-if never assumes that work vanishes. Memory-bound time is the time to move bytes, so:

- **matrix kernels** (GEMM/GEMV, attention) below the ridge point stream their operands — for a
  decode step, the weights — which must be read at least once: such a kernel can shrink at most to
  ``bytes / peak bandwidth`` (Williams, Waterman & Patterson, "Roofline", CACM 2009). With its bytes
  unknown (a kernel classed by its name only) no bound exists and none of its time is counted.
- **fusable kernels** (elementwise, normalization, softmax, reduction) below the ridge: fusing a run
  of ``n`` consecutive such kernels on one stream into one kernel removes the intermediates — each
  written by one kernel and read by the next — and keeps the run's first read and last write. With
  per-kernel bytes ``b_i`` the removed traffic is ``Σ b_i − (b_1 + b_n) / 2`` (each kernel taken to
  read and write about equally); with bytes unknown every kernel is taken to move the same bytes,
  so ``(n − 1) / n`` of the run's traffic goes. Time follows traffic (the kernels are memory-bound).
  A lone kernel between two matrix kernels removes nothing here.

The removable time is a share of the memory-bound kernel time; the finding's stake (the
memory-bound sink, % of step time) scales by that share. Compute-bound time is bounded the same
way by FLOPs over the peak, but no fix in the table projects it (the tensor-core fix has its own
Amdahl bound), so only the memory side is computed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers.trace.cost import KernelCosts
from trainscope.analyzers.trace.kernels import HIGH_INTENSITY
from trainscope.analyzers.trace.kernels import LOW_INTENSITY
from trainscope.analyzers.trace.kernels import classify_kernel
from trainscope.analyzers.trace.roofline import Roofline
from trainscope.traces.model import Trace


@dataclass(frozen=True)
class BusyBound:
    memory_ms: float  # memory-bound kernel time (summed over the window's kernels)
    matrix_ms: float  # of it, matrix kernels (streaming their operands)
    matrix_floor_ms: float  # bytes / peak bandwidth of the matrix kernels whose bytes are known
    matrix_known_ms: float  # time of those matrix kernels
    fusable_ms: float  # memory-bound elementwise/normalization/softmax/reduction time
    fused_removed_ms: float  # intermediate traffic removed by fusing runs of them
    runs: int  # runs of two or more fusable kernels
    fused_kernels: int  # kernels in those runs
    bandwidth_gbps: float | None

    @property
    def removable_ms(self) -> float:
        return max(0.0, self.matrix_known_ms - self.matrix_floor_ms) + self.fused_removed_ms

    @property
    def removable_fraction(self) -> float:
        """Share of memory-bound kernel time a fix could remove at best (0 … < 1)."""
        return min(1.0, self.removable_ms / self.memory_ms) if self.memory_ms > 0 else 0.0

    def basis(self, stake_pct: float) -> str:
        """The bound with its inputs, in words."""
        unknown = self.matrix_ms - self.matrix_known_ms
        parts = [f"roofline bound on the {stake_pct:.1f} % memory-bound time ({self.memory_ms:.2f} ms of kernels)"]
        if self.matrix_ms > 0:
            if self.matrix_known_ms > 0:
                parts.append(
                    f"matrix kernels {self.matrix_known_ms:.2f} ms shrink at most to bytes / "
                    f"{self.bandwidth_gbps:g} GB/s = {self.matrix_floor_ms:.2f} ms"
                )
            if unknown > 0:
                parts.append(
                    f"matrix kernels {unknown:.2f} ms (operand/weight streaming, bytes unknown) keep their time"
                )
        parts.append(
            f"fusing {self.runs} run{'s' * (self.runs != 1)} of consecutive memory-bound "
            f"elementwise/normalization kernels ({self.fused_kernels} kernel{'s' * (self.fused_kernels != 1)}, {self.fusable_ms:.2f} ms "
            f"in all) removes their intermediate traffic, {self.fused_removed_ms:.2f} ms"
        )
        parts.append(f"removable {self.removable_ms:.2f} ms = {100 * self.removable_fraction:.1f} % of it")
        return "; ".join(parts)


def busy_bound(trace: Trace, kernel_mask: np.ndarray | None, costs: KernelCosts, roof: Roofline) -> BusyBound:
    """The bound for the kernels ``kernel_mask`` selects (those the roofline was drawn over)."""
    k = trace.kernels
    sel = np.ones(len(k), bool) if kernel_mask is None else kernel_mask
    memory_names = {r.name for r in roof.rows if r.bound == "memory"}
    ids = codes.distinct(k.name[sel]) if sel.any() else np.empty(0, np.int64)
    is_mem = np.zeros(len(trace.strings), bool)
    cls_matrix = np.zeros(len(trace.strings), bool)
    cls_fusable = np.zeros(len(trace.strings), bool)
    for i in ids.tolist():
        name = trace.strings[i]
        is_mem[i] = name in memory_names
        c = classify_kernel(name)
        cls_matrix[i] = c in HIGH_INTENSITY
        cls_fusable[i] = c in LOW_INTENSITY
    idx = np.flatnonzero(sel)
    order = idx[np.lexsort((k.ts[idx], k.stream[idx], k.device[idx]))]
    names = k.name[order]
    dur = k.dur[order].astype(np.float64) / 1e6  # ms
    byts = costs.bytes[order]
    mem = is_mem[names]
    matrix = mem & (costs.matrix[order] | cls_matrix[names])
    fusable = mem & ~matrix & cls_fusable[names]
    bw = roof.bandwidth_gbps
    known = matrix & ~np.isnan(byts) & (bw is not None)
    floor = (
        float(np.minimum(byts[known] / (bw * 1e9) * 1e3, dur[known]).sum()) if bw else 0.0
    )  # a kernel keeps ≥ its floor

    # runs of consecutive fusable kernels on one (device, stream)
    lane = k.device[order].astype(np.int64) * (1 << 32) + k.stream[order].astype(np.int64)
    removed, runs, in_runs = fused_runs(fusable, lane, dur, byts)
    return BusyBound(
        memory_ms=float(dur[mem].sum()),
        matrix_ms=float(dur[matrix].sum()),
        matrix_floor_ms=floor,
        matrix_known_ms=float(dur[known].sum()),
        fusable_ms=float(dur[fusable].sum()),
        fused_removed_ms=removed,
        runs=runs,
        fused_kernels=in_runs,
        bandwidth_gbps=bw,
    )


def fused_runs(fusable: np.ndarray, lane: np.ndarray, dur: np.ndarray, byts: np.ndarray) -> tuple[float, int, int]:
    """(time the fusion of each run of ≥ 2 consecutive fusable kernels on one lane removes, the
    runs, the kernels in them): a run of m kernels keeps its first input and last output, so the
    fusion removes the share of its bytes in between — (m − 1) / m of its time where bytes are
    unknown. Vectorized over the runs (runs of one length summed as the rows of one gather: the
    same sums as each run's own), the same figures as :func:`fused_runs_loop`, bit for bit."""
    n = len(fusable)
    if not n:
        return 0.0, 0, 0
    cont = np.zeros(n, bool)  # continues the run of the kernel before it
    np.logical_and(fusable[1:], fusable[:-1], out=cont[1:])
    cont[1:] &= lane[1:] == lane[:-1]
    first = np.flatnonzero(fusable & ~cont)
    ends = fusable.copy()
    ends[:-1] &= ~cont[1:]
    m = np.flatnonzero(ends) - first + 1
    del cont, ends
    long = m >= 2
    first, m = first[long], m[long]
    if not len(first):
        return 0.0, 0, 0
    t_sum = np.empty(len(first))
    b_sum = np.empty(len(first))
    for size in np.unique(m).tolist():
        sel = np.flatnonzero(m == size)
        rows = first[sel, None] + np.arange(size)
        t_sum[sel] = dur[rows].sum(axis=1)
        b_sum[sel] = byts[rows].sum(axis=1)
    nan = np.concatenate([[0], np.cumsum(np.isnan(byts))])
    by_count = (nan[first + m] - nan[first] > 0) | ~(b_sum > 0)  # bytes unknown or none
    with np.errstate(invalid="ignore", divide="ignore"):
        share = (b_sum - (byts[first] + byts[first + m - 1]) / 2) / b_sum
    positive = ~by_count & (share > 0.0)
    frac = np.where(by_count, (m - 1) / m, np.where(positive, share, 0.0))
    removed = np.cumsum(t_sum * frac)[-1]  # summed run by run, in order, as the loop adds
    # the loop's sum is a numpy float once a byte share above 0 entered it
    return (removed if positive.any() else float(removed)), int(len(first)), int(m.sum())


def fused_runs_loop(fusable: np.ndarray, lane: np.ndarray, dur: np.ndarray, byts: np.ndarray) -> tuple[float, int, int]:
    """The kernel-by-kernel definition of :func:`fused_runs` (the reference it is tested against)."""
    removed, runs, in_runs = 0.0, 0, 0
    start = 0
    n = len(fusable)
    while start < n:
        if not fusable[start]:
            start += 1
            continue
        end = start
        while end + 1 < n and fusable[end + 1] and lane[end + 1] == lane[start]:
            end += 1
        m = end - start + 1
        if m >= 2:
            t = dur[start : end + 1]
            b = byts[start : end + 1]
            if np.isnan(b).any() or b.sum() <= 0:
                frac = (m - 1) / m
            else:
                frac = max(0.0, (b.sum() - (b[0] + b[-1]) / 2) / b.sum())
            removed += float(t.sum()) * frac
            runs += 1
            in_runs += m
        start = end + 1
    return removed, runs, in_runs
