"""Unfused attention: softmax(QKᵀ)V written out as separate kernels over the score matrices.

Evidence, from the kernel mix alone: no fused attention kernels (FlashAttention, memory-efficient
SDPA, cuDNN/fmha) ran, while memory-bound kernels took a large share of GPU time inside ranges
named like attention (NVTX ``scaled dot product attention``, ``record_function("attn")``) or,
without such ranges, softmax kernels did. Each of those kernels reads and writes a whole
batch × heads × L × L score matrix, so their cost grows with L² in bytes moved, not FLOPs: the
memory-bandwidth signature that fused attention (which never materializes the matrix) removes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.kernels import LOW_INTENSITY
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.analyzers.trace.steps import name_mask
from trainscope.traces.model import Trace

ATTENTION_RANGE = re.compile(r"attention|attn|sdpa|self_?attn|\bmha\b", re.I)


@dataclass(frozen=True)
class AttentionEvidence:
    kernel_ns: int  # all kernel time in the steps on the device
    fused_ns: int  # fused attention kernels (class "attention")
    ranges: int  # attention-named host ranges in the steps
    in_ranges_ns: int  # kernel time launched inside them
    in_ranges_low_ns: int  # ... of it memory-bound (elementwise, softmax, normalization, reduction)
    softmax_ns: int  # softmax-class kernels anywhere

    @property
    def unfused_ns(self) -> int:
        """Memory-bound attention time: from the ranges when present, else softmax kernels."""
        return self.in_ranges_low_ns if self.ranges else self.softmax_ns

    @property
    def unfused_pct(self) -> float:
        return 100.0 * self.unfused_ns / self.kernel_ns if self.kernel_ns else 0.0


def attention_evidence(
    trace: Trace, segmentation: StepSegmentation, device: int | None, classes: np.ndarray
) -> AttentionEvidence:
    k, r, a = trace.kernels, trace.runtime, trace.annotations
    ws, we = segmentation.starts, segmentation.ends
    on = iv.contains((ws, we), k.ts) & ((k.device == device) if device is not None else True)
    cls = classes[k.name] if len(k) else np.zeros(0, np.int8)
    low = np.isin(cls, [ALL_CLASSES.index(c) for c in LOW_INTENSITY])
    sel = (a.device < 0) & name_mask(trace, ATTENTION_RANGE)[a.name] if len(a) else np.zeros(0, bool)
    ranges = iv.union(a.ts[sel], a.end[sel])
    n_ranges = int((iv.contains((ws, we), a.ts[sel])).sum()) if sel.any() else 0
    launched = iv.contains(ranges, r.ts) & (r.correlation >= 0) if len(r) else np.zeros(0, bool)
    inside = on & np.isin(k.correlation, r.correlation[launched]) if launched.any() else np.zeros(len(k), bool)
    return AttentionEvidence(
        kernel_ns=int(k.dur[on].sum()),
        fused_ns=int(k.dur[on & (cls == ALL_CLASSES.index("attention"))].sum()),
        ranges=n_ranges,
        in_ranges_ns=int(k.dur[inside].sum()),
        in_ranges_low_ns=int(k.dur[inside & low].sum()),
        softmax_ns=int(k.dur[on & (cls == ALL_CLASSES.index("softmax"))].sum()),
    )
