"""Fusion candidates: kernel sequences that repeat back to back on one stream, with the traffic
fusing each would remove, bounded by the roofline.

A **sequence** is ``L`` (2 … ``fusion.max_length``) consecutive kernels on one (device, stream) in
the analyzed steps, each starting at most ``fusion.max_gap_us`` after the previous one ended, every
kernel after the first **memory-bound** by the roofline (a memory-bound kernel can be folded into
the kernel that produced its input: elementwise chains, a normalization after a residual add, a
bias and activation in a GEMM's epilogue). Communication kernels and kernels of unknown or compute
bound after the first break a sequence: fusion cannot fold them into their producer. Kernels are
told apart by their name and, where the trace records the launching operator's input dims
(``record_shapes=True``), those dims: one kernel at two shapes is two kernels.

A sequence seen at least ``fusion.min_repeats`` times is a **candidate**. Occurrences are counted
without overlap (a pattern ``A A`` in ``A A A`` occurs once). Candidates are ranked by the
memory-bound kernel time they hold and tiled greedily: a candidate keeps only the occurrences none
of whose kernels a higher-ranked candidate already holds (a sub-sequence of a longer candidate
drops out; a longer chain's shifted windows too), so the candidates' times add up.

What fusion removes (Williams, Waterman & Patterson, "Roofline", CACM 2009; as
:mod:`busy_bound` bounds the fusion fix): fusing kernel ``i`` and kernel ``i + 1`` keeps the
tensor the first writes and the second reads in registers or shared memory. Each kernel is taken
to read and write about equally, so that tensor moves at most ``min(b_i, b_{i+1})`` bytes (written
once, read once) with ``b`` the kernel's bytes from the cost model (:mod:`cost`); the
**intermediate bytes** of an occurrence are the sum over its ``L − 1`` boundaries — for a chain of
equal elementwise kernels, ``Σ b − (b_1 + b_L) / 2``, the figure :func:`busy_bound.fused_runs`
removes. With any kernel's bytes unknown, the intermediate bytes are **unknown** and no saving is
projected. The **saving** of an occurrence is the time to move its intermediate bytes at the
device's peak bandwidth, never more than the occurrence's own memory-bound kernel time (compute-
bound time does not shrink when traffic does). An upper bound: a tensor that another kernel also
reads later must still be written.

How other tools find sequences, for comparison: Holistic Trace Analysis (HTA)'s frequent CUDA
kernel sequences group the kernels launched under each CPU operator of a given name and count
identical name lists; trainscope counts sequences on the GPU's streams directly (any operator,
any boundary), and prices them with the cost model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import codes
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.cost import KernelCosts
from trainscope.analyzers.trace.kernels import classify_kernel
from trainscope.analyzers.trace.roofline import Roofline
from trainscope.analyzers.trace.roofline import short_kernel_name
from trainscope.traces.model import Trace

# Candidates kept in the result (the document shows the first few); the tiling stops there.
KEEP = 20


@dataclass(frozen=True)
class FusionCandidate:
    """One repeated sequence on one stream, summed over its counted occurrences."""

    kernels: tuple[str, ...]  # kernel names, in launch order
    classes: tuple[str, ...]  # their kernel classes (kernels.classify_kernel)
    shapes: tuple[str | None, ...]  # the launching operator's input dims, None where not recorded
    device: int
    stream: int
    occurrences: int
    total_ms: float  # GPU time of the occurrences' kernels
    memory_ms: float  # of it, memory-bound kernels (roofline): what a fusion can shrink at most
    intermediate_bytes: float | None  # per occurrence (mean): written by one kernel, read by the next; None: unknown
    saved_ms: float | None  # over the occurrences: intermediate bytes at peak bandwidth, ≤ memory_ms; None: unknown
    steps: int  # steps of the window (per-step figures divide by it)

    @property
    def length(self) -> int:
        return len(self.kernels)

    @property
    def ms_per_step(self) -> float:
        return self.total_ms / self.steps

    @property
    def saved_ms_per_step(self) -> float | None:
        return None if self.saved_ms is None else self.saved_ms / self.steps

    @property
    def label(self) -> str:
        """The sequence in one line: short kernel names joined by arrows."""
        return " → ".join(short_kernel_name(n) for n in self.kernels)

    @property
    def bytes_words(self) -> str:
        b = self.intermediate_bytes
        return "unknown" if b is None else _size(b)

    @property
    def saving_words(self) -> str:
        s = self.saved_ms_per_step
        return "unknown (bytes unknown)" if s is None else f"≤ {s:.3g} ms per step"

    def words(self) -> str:
        """The candidate in one sentence: every view and the fusion fix's evidence say it so."""
        return (
            f"{self.label} ×{self.occurrences} on stream {self.stream}: {self.ms_per_step:.3g} ms per step "
            f"({self.memory_ms / self.steps:.3g} memory-bound), intermediate {self.bytes_words} per occurrence, "
            f"fusing saves {self.saving_words}"
        )


@dataclass(frozen=True)
class FusionCandidates:
    candidates: tuple[FusionCandidate, ...]  # ranked by memory-bound time, tiled (disjoint occurrences)
    found: int  # candidates before the cut at KEEP
    steps: int
    bandwidth_gbps: float | None
    max_gap_us: float
    min_repeats: int
    max_length: int

    def evidence(self, top: int = 3) -> list[Evidence]:
        """The heaviest candidates as evidence lines of the fusion fix's finding: the saving bound per
        step as the value (None where the bytes are unknown)."""
        return [
            Evidence(
                "fusion candidate: " + c.words(),
                None if c.saved_ms_per_step is None else round(c.saved_ms_per_step, 4),
                "ms per step",
                "",
                "kernel sequences (fusion.min_repeats, fusion.max_gap_us) + cost model + roofline",
            )
            for c in self.candidates[:top]
        ]

    @property
    def basis(self) -> str:
        bw = f"{self.bandwidth_gbps:g} GB/s" if self.bandwidth_gbps else "peak bandwidth (unknown for this device)"
        return (
            f"sequences of 2–{self.max_length} kernels back to back on one stream (gaps ≤ {self.max_gap_us:g} µs; "
            f"every kernel after the first memory-bound by the roofline) repeated ≥ {self.min_repeats} times, by "
            "kernel name and launching operator's input dims; intermediate bytes = Σ min(b_i, b_i+1) over adjacent "
            f"kernels (cost model); saving = those bytes at {bw}, at most the sequence's memory-bound time"
        )


def fusion_candidates(
    trace: Trace,
    kernel_mask: np.ndarray | None,
    costs: KernelCosts,
    roof: Roofline,
    rules: Rules,
    steps: int = 1,
) -> FusionCandidates:
    """The candidates among the kernels ``kernel_mask`` selects (those the roofline was drawn over)."""
    gap_ns = rules.value("fusion.max_gap_us") * 1e3
    k_min = max(2, int(rules.value("fusion.min_repeats")))
    n_max = max(2, int(rules.value("fusion.max_length")))
    steps = max(1, steps)
    empty = FusionCandidates((), 0, steps, roof.bandwidth_gbps, gap_ns / 1e3, k_min, n_max)
    k = trace.kernels
    sel = np.ones(len(k), bool) if kernel_mask is None else kernel_mask
    idx = np.flatnonzero(sel)
    if len(idx) < 2:
        return empty
    order = idx[np.lexsort((k.ts[idx], k.stream[idx], k.device[idx]))]
    del idx
    n = len(order)
    names = k.name[order]
    memory_names = {r.name for r in roof.rows if r.bound == "memory"}
    is_mem = np.zeros(len(trace.strings), bool)
    is_comm = np.zeros(len(trace.strings), bool)
    for i in codes.distinct(names).tolist():
        nm = trace.strings[i]
        is_mem[i] = nm in memory_names
        is_comm[i] = classify_kernel(nm) == "communication"
    mem, comm = is_mem[names], is_comm[names]
    if not mem.any():
        return empty
    ts = k.ts[order].astype(np.int64)
    dur_ns = k.dur[order].astype(np.int64)
    dur = dur_ns.astype(np.float64) / 1e6  # ms
    byts = costs.bytes[order]
    dev = k.device[order]  # their own types: widened only for the lane code
    stream = k.stream[order]
    ops, oi = trace.cpu_ops, trace.op_inputs
    op = costs.op[order]
    if len(oi.cpu_signature) == len(ops) and len(ops):
        sig = np.where(op >= 0, oi.cpu_signature[np.clip(op, 0, None)], -1).astype(np.int64)
    else:
        sig = np.full(n, -1, np.int64)
    del op

    # one code per kernel identity: (device, stream, name, input dims)
    _, lane = codes.unique_inverse(dev.astype(np.int64) * (1 << 32) + stream.astype(np.int64))
    key = lane.astype(np.int64)
    for col in (names.astype(np.int64), sig + 1):
        _, key = codes.unique_inverse(key * (int(col.max()) + 1) + col)
        key = key.astype(np.int64)
    n_keys = int(key.max()) + 1

    # link i → i+1: same lane, back to back, the next kernel memory-bound, no communication kernel
    link = (lane[1:] == lane[:-1]) & ~comm[:-1] & mem[1:] & (ts[1:] - (ts[:-1] + dur_ns[:-1]) <= gap_ns)
    broken = np.concatenate([[0], np.cumsum(~link)])  # broken links among link[:j]
    del link, lane, ts, dur_ns  # read no more: a million kernels' columns not held through the patterns

    # Patterns by length, each position's code (-1: no counted pattern starts there). A pattern seen
    # fewer than k_min times (overlaps counted: an upper bound) cannot extend to one seen more.
    count1 = np.bincount(key, minlength=n_keys)
    prev = np.where(~comm & (count1[key] >= k_min), key, -1)
    found: list[tuple[int, np.ndarray, np.ndarray]] = []  # (length, occurrence starts, their pattern ids)
    for length in range(2, n_max + 1):
        m = n - length + 1
        if m <= 0:
            break
        valid = (prev[:m] >= 0) & (broken[length - 1 : length - 1 + m] - broken[:m] == 0)
        if not valid.any():
            break
        pos = np.flatnonzero(valid)
        comb = prev[pos].astype(np.int64) * n_keys + key[pos + length - 1]
        _, inv = codes.unique_inverse(comb)
        cnt = np.bincount(inv)
        ok = cnt[inv] >= k_min
        cur = np.full(m, -1, np.int64)
        cur[pos[ok]] = inv[ok]
        prev = cur
        if ok.any():
            found.append((length, *_without_overlap(pos[ok], inv[ok], length)))
    if not found:
        return empty

    # every (length, pattern) with its occurrences' figures, then ranked and tiled
    rows: list[tuple[int, np.ndarray]] = []  # (length, occurrence starts) per candidate
    mem_ms: list[float] = []
    tot_ms: list[float] = []
    dur_mem = np.where(mem, dur, 0.0)
    for length, starts, pid in found:
        o = _by_pattern(pid)
        cnt = np.bincount(pid)
        win = starts[:, None] + np.arange(length)
        occ_mem = dur_mem[win].sum(axis=1)
        occ_tot = dur[win].sum(axis=1)
        p_mem = np.bincount(pid, weights=occ_mem)
        p_tot = np.bincount(pid, weights=occ_tot)
        bounds = np.concatenate([[0], np.cumsum(cnt)])
        for p in np.flatnonzero((cnt >= k_min) & (p_mem > 0)).tolist():
            rows.append((length, starts[o[bounds[p] : bounds[p + 1]]]))
            mem_ms.append(float(p_mem[p]))
            tot_ms.append(float(p_tot[p]))
    rank = sorted(range(len(rows)), key=lambda j: (-mem_ms[j], -tot_ms[j], -rows[j][0], int(rows[j][1][0])))
    claimed = np.zeros(n, bool)
    bw = roof.bandwidth_gbps
    out: list[FusionCandidate] = []
    total = 0
    for j in rank:
        length, starts = rows[j]
        win = starts[:, None] + np.arange(length)
        free = ~claimed[win].any(axis=1)
        if int(free.sum()) < k_min:
            continue
        win = win[free]
        total += 1
        claimed[win.ravel()] = True
        if len(out) >= KEEP:
            continue  # tiled and counted, not kept
        b = byts[win]
        inter = np.minimum(b[:, :-1], b[:, 1:]).sum(axis=1)  # NaN where a kernel's bytes are unknown
        occ_mem = dur_mem[win].sum(axis=1)
        known = not np.isnan(inter).any()
        saved = None
        if known and bw:
            saved = float(np.minimum(inter / (bw * 1e9) * 1e3, occ_mem).sum())
        first = win[0]
        out.append(
            FusionCandidate(
                kernels=tuple(trace.strings[int(names[i])] for i in first),
                classes=tuple(classify_kernel(trace.strings[int(names[i])]) for i in first),
                shapes=tuple(_dims(trace, int(sig[i])) for i in first),
                device=int(dev[first[0]]),
                stream=int(stream[first[0]]),
                occurrences=len(win),
                total_ms=float(dur[win].sum()),
                memory_ms=float(occ_mem.sum()),
                intermediate_bytes=float(inter.mean()) if known else None,
                saved_ms=saved,
                steps=steps,
            )
        )
    return FusionCandidates(tuple(out), total, steps, bw, gap_ns / 1e3, k_min, n_max)


def _by_pattern(pid: np.ndarray) -> np.ndarray:
    """The stable order of occurrences by pattern id (ids below 2**15: a radix pass over 16-bit keys,
    where a 64-bit stable argsort merged runs — the same order)."""
    if len(pid) and int(pid.min()) >= 0 and int(pid.max()) < 1 << 15:
        return np.argsort(pid.astype(np.int16), kind="stable")
    return np.argsort(pid, kind="stable")


def _without_overlap(pos: np.ndarray, pid: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The occurrences (start positions ``pos``, ascending, of patterns ``pid``) counted without
    overlap: the first of each pattern, then each one that starts after the last counted one ended.
    Only a pattern that overlaps itself (``A A`` in ``A A A``) needs the walk; the rest pass whole."""
    o = _by_pattern(pid)  # by pattern, then position (pos is ascending)
    p, s = pid[o], pos[o]
    same = np.concatenate([[False], p[1:] == p[:-1]])
    close = same & (np.diff(s, prepend=s[:1]) < length)
    if not close.any():
        return pos, pid
    keep = np.ones(len(s), bool)
    for q in np.unique(p[close]).tolist():
        at = np.flatnonzero(p == q)
        last = -length
        for i in at.tolist():
            if s[i] - last < length:
                keep[i] = False
            else:
                last = int(s[i])
    back = np.sort(o[keep])  # the kept ones, in position order again
    return pos[back], pid[back]


def _dims(trace: Trace, sig: int) -> str | None:
    """The launching operator's input dims as the trace records them (``[[8, 512], [512]]``), or None."""
    if sig < 0 or sig >= len(trace.op_inputs.signatures):
        return None
    dims = trace.op_inputs.signatures[sig][0]
    s = str([d for d in dims if d not in ([], None, "")])
    return s if len(s) <= 80 else s[:79] + "…"


def _size(b: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"
