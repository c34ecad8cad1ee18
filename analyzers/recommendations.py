"""Fixes for the findings, ranked by projected gain computed from the measured breakdown.

Every projection is an upper bound and says so. Removing a cause that idles the GPU cannot make
the step shorter than the GPU's own busy time, so idle-cause projections are
``T / max(T − removed, T_busy)``. Mixed precision on a GEMM share ``g`` with tensor-core speedup
``s`` gives ``1 / ((1 − g) + g / s)`` (docs/diagnosis.md §4, Amdahl's law).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainscope.analyzers.breakdown import Breakdown
from trainscope.analyzers.busy_bound import BusyBound
from trainscope.analyzers.context import Context
from trainscope.analyzers.devices import DeviceSpec
from trainscope.analyzers import findings as registry
from trainscope.analyzers.findings.base import Finding, Fix
from trainscope.analyzers.findings import fix_text
from trainscope.analyzers.host_idle import COLD_START_DETAIL
from trainscope.analyzers.rules import Rules


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


def data_wait_pct(f: Finding, b: Breakdown) -> float:
    """The input time a loader fix can remove: the host's measured DataLoader wait, or the GPU idle
    the input sink holds (host preprocessing counts there too), whichever is larger."""
    return max(b.data_wait_pct, f.stake_pct)


def roofline_removable_pct(f: Finding, bound: BusyBound | None) -> float | None:
    """The share of step time a kernel-level fix can remove from finding ``f``'s memory-bound stake,
    bounded by the roofline (:mod:`busy_bound`); None without a per-kernel roofline."""
    if bound is None or bound.memory_ms <= 0:
        return None
    return f.stake_pct * bound.removable_fraction


def project(
    f: Finding, fx: Fix, b: Breakdown, spec: DeviceSpec | None, device_name: str | None, bound: BusyBound | None = None
) -> tuple[float | None, str]:
    """The projected speedup bound of fix ``fx`` for finding ``f``, and its basis with the numbers."""
    stake = f.stake_pct
    if fx.projection == "roofline":
        removed = roofline_removable_pct(f, bound)
        if removed is None or bound is None:  # removed is None whenever bound is; the second test narrows its type
            return None, "no projection: no per-kernel roofline (bytes and FLOPs) to bound what fusion can remove"
        s, basis = _remove(b, removed / 100, busy_time=True)
        return s, f"{bound.basis(stake)}: {basis}"
    if fx.projection == "idle":
        s, basis = _remove(b, stake / 100)
    elif fx.projection == "busy":
        s, basis = _remove(b, stake / 100, busy_time=True)
    elif fx.projection == "data-wait":
        wait = data_wait_pct(f, b)
        s, basis = _remove(b, wait / 100)
        return s, f"{fx.basis.format(stake=stake, wait=wait)}: {basis}"
    elif fx.projection == "amdahl":
        if spec is None:
            return None, f"no projection: {device_name or 'the device'} is not in the device table"
        g = stake / 100
        ratio = spec.tensor_tflops / spec.fp32_tflops
        return 1.0 / ((1 - g) + g / ratio), (
            f"1 / ((1 − g) + g / s) with g = {g:.3f} (non-tensor-core GEMM/conv share of step time) and "
            f"s = {spec.tensor_tflops:g} / {spec.fp32_tflops:g} TFLOP/s = {ratio:.1f} ({spec.key} peaks)"
        )
    else:
        return None, fx.basis
    return s, f"{fx.basis.format(stake=stake, wait=stake)}: {basis}"


def recommend(
    found: list[Finding],
    b: Breakdown,
    spec: DeviceSpec | None,
    device_name: str | None,
    ctx: Context | None = None,
    rules: Rules | None = None,
    bound: BusyBound | None = None,
    single_loader: bool = False,
) -> list[Recommendation]:
    """The fix of every finding that has one (from the registry), ranked by projected gain. ``ctx``
    (the run's context) picks the wording and code of each fix; None reads as PyTorch training. A fix
    projected below ``fix.min_speedup`` is left out: its finding stays, a ranked fix would be noise.
    ``single_loader``: the trace's DataLoader runs in the training process (``num_workers=0``), an
    observation of the trace (:class:`DiagnosisInput`), which the loader fixes' wording follows."""
    rules = rules or Rules()
    min_gain = rules.value("fix.min_speedup")
    ids = {f.id for f in found}
    step = b.step_ms.mean
    bf16 = spec is not None and spec.has_tensor_cores("bf16")  # no bf16 tensor cores on V100, T4, Turing
    recs: list[Recommendation] = []
    seen: set[str] = set()
    for f in found:
        decl = registry.spec(f.id)
        fx = decl.fix_for(ctx) if decl is not None else None
        if fx is None or fx.rec_id in seen or any(x in ids for x in fx.superseded_by):
            continue
        speedup, basis = project(f, fx, b, spec, device_name, bound)
        cold = f.detail == COLD_START_DETAIL  # first-call loading: paid once per process, not per step
        if cold:
            speedup, basis = (
                None,
                f"no projection: {f.stake_pct:.1f} % of this window is first-call loading, paid once per process",
            )
        if speedup is not None and speedup < min_gain:
            continue
        rec_id = fx.rec_id
        title, change = fx.render(ctx, single_loader=single_loader, bf16=bf16)
        if cold and (ft := fix_text(f.id, ctx, cold_start=True)) is not None:
            rec_id, title, change = ft.rec_id, ft.title, ft.change  # warm up before profiling
        seen.add(fx.rec_id)
        recs.append(
            Recommendation(
                rec_id,
                f.id,
                title,
                change,
                None if speedup is None else round(speedup, 3),
                None if speedup is None else round(step / speedup, 2),
                basis,
            )
        )
    recs.sort(key=lambda r: -(r.projected_speedup or 0.0))
    return recs
