"""Fixes for the findings, ranked by projected gain computed from the measured breakdown.

Every projection is an upper bound and says so. Removing a cause that idles the GPU cannot make
the step shorter than the GPU's own busy time, so idle-cause projections are
``T / max(T − removed, T_busy)``. Mixed precision on a GEMM share ``g`` with tensor-core speedup
``s`` gives ``1 / ((1 − g) + g / s)`` (docs/diagnosis.md §4, Amdahl's law).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainscope.analyzers import findings as registry
from trainscope.analyzers.devices import DeviceSpec
from trainscope.analyzers.findings import fix_text
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import Fix
from trainscope.analyzers.findings.base import in_context
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.breakdown import Breakdown
from trainscope.analyzers.trace.busy_bound import BusyBound
from trainscope.analyzers.trace.context import Context
from trainscope.analyzers.trace.host_idle import COLD_START_DETAIL
from trainscope.analyzers.trace.one_off import SteadyWindow


@dataclass(frozen=True)
class Recommendation:
    id: str
    finding: str
    title: str
    change: str  # the concrete code or flag
    projected_speedup: float | None  # upper bound, ×; None when no projection is possible
    projected_step_ms: float | None
    basis: str  # the formula with the measured numbers
    # A one-off cost's fix: the seconds it removes once per process (never a per-step speed-up).
    once_s: float | None = None

    @property
    def projection_text(self) -> str:
        if self.once_s is not None:
            return once_text(self.once_s)
        if self.projected_speedup is None:
            return "no projection"
        return f"up to {self.projected_speedup:.2f}× faster (step ≥ {self.projected_step_ms:.1f} ms)"


def once_text(seconds: float) -> str:
    """A one-off gain in words: seconds once per process, not per step."""
    amount = f"{seconds:,.2f} s" if seconds >= 0.1 else f"{seconds * 1e3:,.1f} ms"
    return f"saves up to {amount} once per process (not per step)"


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


def steady_caps(b: Breakdown, steady: SteadyWindow | None) -> tuple[float | None, float]:
    """What the one-off costs inside the judged window take from what a steady-state fix can remove:
    (the GPU idle % left after them — None when they hold none —, the % of step time in one-off
    copies). torch.compile cannot remove a context creation; pinned memory cannot speed up a
    one-time weight upload."""
    if steady is None:
        return None, 0.0
    idle = None
    if steady.one_off_idle_ns:
        idle = max(0.0, 100.0 - b.gpu_busy_pct - steady.one_off_idle_pct)
    return idle, steady.one_off_copy_pct


def removable(
    f: Finding, fx: Fix, b: Breakdown, bound: BusyBound | None = None, steady: SteadyWindow | None = None
) -> tuple[float, float] | None:
    """(idle %, busy %) of step time fix ``fx`` removes for finding ``f`` at most — the one lever that
    the recommendation's projection and the what-if share; None for a fix whose gain is not a share of
    the step (mixed precision: a speed-up of its stake; a one-off cost; recording advice)."""
    idle_cap, one_off_copy = steady_caps(b, steady)
    if fx.projection == "idle":
        return (f.stake_pct if idle_cap is None else min(f.stake_pct, idle_cap)), 0.0
    if fx.projection == "data-wait":
        wait = data_wait_pct(f, b)
        return (wait if idle_cap is None else min(wait, idle_cap)), 0.0
    if fx.projection == "busy":
        decl = registry.spec(f.id)
        copies = decl is not None and "copy" in decl.breakdown
        return 0.0, max(0.0, f.stake_pct - one_off_copy) if copies else f.stake_pct
    if fx.projection == "roofline":
        removed = roofline_removable_pct(f, bound)
        return None if removed is None else (0.0, removed)
    return None


def project(
    f: Finding,
    fx: Fix,
    b: Breakdown,
    spec: DeviceSpec | None,
    device_name: str | None,
    bound: BusyBound | None = None,
    steady: SteadyWindow | None = None,
) -> tuple[float | None, str]:
    """The projected speedup bound of fix ``fx`` for finding ``f``, and its basis with the numbers.
    No projection removes more than the time the fix can remove: the finding's stake, less the
    one-off costs inside the judged window (``steady``)."""
    stake = f.stake_pct
    lever = removable(f, fx, b, bound, steady)
    capped = ""
    if lever is not None and fx.projection in ("idle", "data-wait") and steady is not None and steady.one_off_idle_ns:
        full = stake if fx.projection == "idle" else data_wait_pct(f, b)
        if lever[0] < full - 1e-9:
            capped = (
                f" (capped at the {lever[0]:.1f} % GPU idle left after {steady.one_off_idle_pct:.1f} % one-off costs)"
            )
            stake = lever[0]
    if lever is not None and fx.projection == "busy" and lever[1] < stake - 1e-9:
        capped = f" (capped at {lever[1]:.1f} %: the copies left after the one-off upload)"
        stake = lever[1]
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
        wait = stake if capped else data_wait_pct(f, b)
        s, basis = _remove(b, wait / 100)
        return s, f"{fx.basis.format(stake=stake, wait=wait)}{capped}: {basis}"
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
    return s, f"{fx.basis.format(stake=stake, wait=stake)}{capped}: {basis}"


def _situated(finding_id: str) -> bool:
    """Whether the finding's fix is worded from the start-up ledger (a one-off cost's fix)."""
    decl = registry.spec(finding_id)
    return decl is not None and decl.fix is not None and decl.fix.situated is not None


def code_lines(change: str) -> frozenset[str]:
    """A fix's code without comments or blank lines — two fixes with the same code are one fix; a fix
    that is only comments (advice in words) is its whole text."""
    out = set()
    for line in change.splitlines():
        for mark in ("#", "//"):
            cut = line.find(mark)
            if cut >= 0 and not (mark == "//" and line[:cut].rstrip().endswith(":")):
                line = line[:cut]
        line = " ".join(line.split())
        if line and line not in ("...",):
            out.add(line)
    return frozenset(out) if out else frozenset({" ".join(change.split())})


def recommend(
    found: list[Finding],
    b: Breakdown,
    spec: DeviceSpec | None,
    device_name: str | None,
    ctx: Context | None = None,
    rules: Rules | None = None,
    bound: BusyBound | None = None,
    single_loader: bool = False,
    steady: SteadyWindow | None = None,
) -> list[Recommendation]:
    """The fix of every finding that has one (from the registry), ranked by projected gain. ``ctx``
    (the run's context) picks the wording and code of each fix; None reads as PyTorch training. A fix
    projected below ``fix.min_speedup`` is left out: its finding stays, a ranked fix would be noise.
    ``single_loader``: the trace's DataLoader runs in the training process (``num_workers=0``), an
    observation of the trace (:class:`DiagnosisInput`), which the loader fixes' wording follows.
    ``steady``: the judged window and its start-up ledger — a one-off cost's fix is worded from it and
    states its gain in seconds once per process; no steady-state fix projects the one-off time.
    The same fix never appears twice: a fix whose code is another's ranked higher is left out."""
    rules = rules or Rules()
    min_gain = rules.value("fix.min_speedup")
    ids = {f.id for f in found}
    step = b.step_ms.mean
    bf16 = spec is not None and spec.has_tensor_cores("bf16")  # no bf16 tensor cores on V100, T4, Turing
    recs: list[Recommendation] = []
    seen: set[str] = set()
    ledgered = steady is not None and any(_situated(f.id) for f in found)
    for f in found:
        decl = registry.spec(f.id)
        fx = decl.fix_for(ctx) if decl is not None else None
        if fx is None or fx.rec_id in seen or any(x in ids for x in fx.superseded_by):
            continue
        once: float | None = None
        if fx.situated is not None:
            if steady is None:
                continue  # worded from the judged window only
            ctx_words, once = fx.situated(in_context(ctx), steady)
            speedup = None
            basis = (
                f"{fx.basis}: {once_text(once)} — the one-off costs it removes, from the start-up ledger"
                if once is not None
                else fx.basis
            )
            seen.add(fx.rec_id)
            recs.append(
                Recommendation(ctx_words.rec_id, f.id, ctx_words.title, ctx_words.change, None, None, basis, once)
            )
            continue
        speedup, basis = project(f, fx, b, spec, device_name, bound, steady)
        cold = f.detail == COLD_START_DETAIL  # first-call loading: paid once per process, not per step
        if cold and ledgered:
            continue  # the start-up ledger's own fix removes it, in seconds once per process
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
    # The same fix under two titles (pinned memory for the copies and for the pageable copies) is
    # one fix: the one ranked higher stays.
    out: list[Recommendation] = []
    codes: list[frozenset[str]] = []
    for r in recs:
        mine = code_lines(r.change)
        if mine and mine in codes:
            continue
        codes.append(mine)
        out.append(r)
    return out
