"""Fixes for the findings, ranked by projected gain computed from the measured breakdown.

Every projection is an upper bound and says so. Removing a cause that idles the GPU cannot make
the step shorter than the GPU's own busy time, so idle-cause projections are
``T / max(T − removed, T_busy)``. Mixed precision on a GEMM share ``g`` with tensor-core speedup
``s`` gives ``1 / ((1 − g) + g / s)`` (DIAGNOSIS.md §4, Amdahl's law).
"""
from __future__ import annotations

from dataclasses import dataclass

from trainscope.analyzers.breakdown import Breakdown
from trainscope.analyzers.context import Context
from trainscope.analyzers.devices import DeviceSpec
from trainscope.analyzers.fix_text import fix_text
from trainscope.analyzers.host_idle import COLD_START_DETAIL
from trainscope.analyzers.verdict import Finding


@dataclass(frozen=True)
class Recommendation:
    id: str
    finding: str
    title: str
    change: str  # the concrete code or flag
    projected_speedup: float | None  # upper bound, ×; None when no projection is possible
    projected_step_ms: float | None
    basis: str  # the formula with the measured numbers

    @property
    def projection_text(self) -> str:
        if self.projected_speedup is None:
            return "no projection"
        return f"up to {self.projected_speedup:.2f}× faster (step ≥ {self.projected_step_ms:.1f} ms)"


def _remove(b: Breakdown, removed_frac: float, busy_time: bool = False) -> tuple[float, str]:
    """Speedup bound when ``removed_frac`` of the step disappears. Idle time removed leaves the
    GPU's busy time as a floor; busy time removed (``busy_time``) lowers that floor with it."""
    busy = b.gpu_busy_pct / 100
    floor = busy - removed_frac if busy_time else busy
    left = max(1.0 - removed_frac, floor, 1e-9)
    if busy_time:
        return 1.0 / left, f"1 / (1 − {removed_frac:.3f})"
    return 1.0 / left, f"1 / max(1 − {removed_frac:.3f}, GPU busy {busy:.3f})"


def recommend(found: list[Finding], b: Breakdown, spec: DeviceSpec | None, device_name: str | None,
              ctx: Context | None = None) -> list[Recommendation]:
    """``ctx`` (the run's context) picks the wording and code of each fix; None reads as PyTorch training."""
    by_id = {f.id: f for f in found}
    step = b.step_ms.mean
    recs: list[Recommendation] = []
    single = any("num_workers=0" in e.metric for f in found if f.id == "data/input-wait" for e in f.evidence)
    bf16 = spec is not None and spec.key not in ("V100", "RTX 2080 Ti")

    def add(fid: str, speedup: float | None, basis: str) -> None:
        fx = fix_text(fid, ctx, single_loader=single, bf16=bf16, cold_start=by_id[fid].detail == COLD_START_DETAIL)
        if fx is None:  # every finding recommend() handles has its text in fix_text
            raise KeyError(f"no fix text for {fid}")
        recs.append(Recommendation(fx.rec_id, fid, fx.title, fx.change, None if speedup is None else round(speedup, 3),
                                   None if speedup is None else round(step / speedup, 2), basis))

    if f := by_id.get("data/input-wait"):
        # DataLoader wait where the loop records one, else the GPU idle during input preparation
        wait = b.data_wait_pct if b.data_wait_pct else f.stake_pct
        s, basis = _remove(b, wait / 100)
        add(f.id, s, f"removing the {wait:.1f} % data wait: {basis}")
    if f := by_id.get("data/copies"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add(f.id, s, f"hiding the {f.stake_pct:.1f} % copy-only time: {basis}")
    if f := by_id.get("data/pageable-copies"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add(f.id, s, f"if the {f.stake_pct:.1f} % pageable-copy time were hidden behind compute: {basis}")
    if f := by_id.get("host/blocking-sync"):
        s, basis = _remove(b, f.stake_pct / 100)
        add(f.id, s, f"removing the {f.stake_pct:.1f} % GPU idle after syncs: {basis}")
    if f := by_id.get("machine/unfused-attention"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add(f.id, s, f"if the {f.stake_pct:.1f} % memory-bound attention time vanished (fused kernels still do the "
                     f"matmuls, so real gains are smaller): {basis}")
    if f := by_id.get("host/launch-overhead"):
        s, basis = _remove(b, f.stake_pct / 100)
        if f.detail == COLD_START_DETAIL:  # a one-time cost: gone from steady-state steps, not a speedup of them
            s, basis = None, f"no projection: {f.stake_pct:.1f} % of this window is first-call loading, paid once per process"
        add(f.id, s, f"removing the {f.stake_pct:.1f} % GPU idle during host work: {basis}" if s else basis)
    if f := by_id.get("host/sync"):
        s, basis = _remove(b, f.stake_pct / 100)
        add(f.id, s, f"removing the {f.stake_pct:.1f} % GPU idle during syncs: {basis}")
    if f := by_id.get("comm/unoverlapped"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add(f.id, s, f"hiding the {f.stake_pct:.1f} % unoverlapped communication: {basis}")
    if f := by_id.get("algorithm/no-tensor-cores"):
        g = f.stake_pct / 100
        if spec is not None:
            ratio = spec.tensor_tflops / spec.fp32_tflops
            s = 1.0 / ((1 - g) + g / ratio)
            basis = (f"1 / ((1 − g) + g / s) with g = {g:.3f} (non-tensor-core GEMM/conv share of step time) and "
                     f"s = {spec.tensor_tflops:g} / {spec.fp32_tflops:g} TFLOP/s = {ratio:.1f} ({spec.key} peaks)")
        else:
            s, basis = None, f"no projection: {device_name or 'the device'} is not in the device table"
        add(f.id, s, basis)
    if f := by_id.get("machine/bandwidth"):
        s, basis = _remove(b, f.stake_pct / 100, busy_time=True)
        add(f.id, s, f"if the {f.stake_pct:.1f} % memory-bound kernel time vanished entirely (fusion shrinks it, "
                     f"so real gains are smaller): {basis}")
    if f := by_id.get("algorithm/compute-bound"):
        if "algorithm/no-tensor-cores" not in by_id:
            add(f.id, None, "no projection: compute-bound on tensor cores; gains depend on kernel efficiency (see MFU)")
    if f := by_id.get("machine/capacity"):
        add(f.id, None, "no speed projection: frees memory for larger batches (recomputation costs ~⅓ more forward time)"
            if ctx is None or ctx.training else "no speed projection: frees memory for larger batches")
    recs.sort(key=lambda r: -(r.projected_speedup or 0.0))
    return recs
