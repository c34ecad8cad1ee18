"""Findings on the module tree (analyzers/trace/module_tree.py): where in the model the time is lost.

- **A dominating region far below its roofline** (``machine/slow-region`` when its kernels are
  memory-bound, ``algorithm/slow-region`` when compute-bound): a node — not a phase, not
  ``(outside any range)`` — holding ``tree.region_share`` of the window's GPU time whose kernels run
  below ``tree.low_pct_of_roof`` of their roofline bound. Its stake is the time its kernels would save
  at ``tree.attainable_pct_of_roof``: ``T × (1 − p / A)`` over the kernel time ``T`` whose % of roof
  ``p`` is known. The roof is the floor (``A`` ≤ 100 %), so the stake never exceeds the region's own
  time. Of nested regions that qualify, the innermost are named (their stakes do not overlap).
- **One instance of a repeated block slower than its siblings** (``algorithm/slow-instance``): a
  folded node of at least 3 instances whose slowest instance takes ``tree.instance_ratio`` × their
  median GPU time. Its stake is ``(max − median)`` × the slowest instance's occurrences per window,
  as a share of the window. Autograd's backward nodes are left out: two ``MulBackward0`` are two
  operators on different tensors, not two instances of one block.
- **Backward against forward** (``algorithm/backward-ratio``): with both phases' GPU time in the
  trace, backward's (communication kernels left out) against forward's, outside
  ``tree.bwd_fwd_low`` … ``tree.bwd_fwd_high`` around the expected ≈ 2×. An observation with no
  projected gain: the ratio says where to look, not what a fix removes.

No names of models or modules are read: regions, instances and phases are the tree's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import Fix
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import Measure
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import fixed
from trainscope.analyzers.findings.base import stake_ms
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.findings.common import ev
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context
from trainscope.analyzers.trace.module_tree import OUTSIDE
from trainscope.analyzers.trace.module_tree import ModuleTree
from trainscope.analyzers.trace.module_tree import Node

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.findings.observations import DiagnosisInput
    from trainscope.analyzers.trace.analysis import Analysis

_STAKE_SEV = by_stake("stake.moderate", "stake.high")
MIN_INSTANCES = 3  # a median of two instances is their mean: one of them is always "above" it
_ROOF_WORD = {"memory": "bandwidth", "compute": "compute"}


def _label(n: Node) -> str:
    return " › ".join(n.path)


def _short(n: Node, keep: int = 3) -> str:
    """The node's path for a headline: its last ``keep`` names (the detail and evidence hold it whole)."""
    return " › ".join(n.path) if len(n.path) <= keep else "… › " + " › ".join(n.path[-keep:])


def _regions(n: Node) -> bool:
    """A node that can be a region or a block: not a phase, not the work outside every range."""
    return n.kind not in ("phase", "outside") and n.name != OUTSIDE


def _innermost(flagged: list[Node]) -> list[Node]:
    """The flagged nodes none of whose descendants is flagged (their stakes do not overlap)."""
    paths = [n.path for n in flagged]
    return [n for n in flagged if not any(len(p) > len(n.path) and p[: len(n.path)] == n.path for p in paths)]


# --- (a) a dominating region far below its roofline -----------------------------------------------------


def region_saving_ns(n: Node, attainable_pct: float) -> float:
    """GPU time the node's kernels would save at ``attainable_pct`` of their roof: the kernel time
    whose % of roof is known, less that time scaled to the attainable share (0 at or above it)."""
    p = n.share_of_peak_pct
    if p is None or n.roof_ns <= 0 or p >= attainable_pct:
        return 0.0
    return n.roof_ns * (1.0 - p / attainable_pct)


def _slow_regions(obs: DiagnosisInput, rules: Rules, bound: str) -> list[Finding]:
    t = obs.tree
    total = obs.breakdown.total_ns
    if not obs.has_gpu or t is None or not t.gpu_ns or not total:
        return []
    share_min = rules.value("tree.region_share")
    low = rules.value("tree.low_pct_of_roof")
    target = rules.value("tree.attainable_pct_of_roof")
    spec = SLOW_MEMORY_REGION if bound == "memory" else SLOW_COMPUTE_REGION
    flagged = [
        n
        for _, n in t.walk()
        if _regions(n)
        and n.bound in _ROOF_WORD  # either bound: a region of one nested in one of the other is named alone
        and n.share_of_peak_pct is not None
        and 100.0 * n.gpu_ns_inclusive / t.gpu_ns >= share_min
        and n.share_of_peak_pct < low
    ]
    out = []
    windows = max(1, t.windows)
    for n in (m for m in _innermost(flagged) if m.bound == bound):
        saved = min(region_saving_ns(n, target), float(n.gpu_ns_inclusive))
        stake = 100.0 * saved / total
        if spec.severity.grade(stake, rules) == "info":
            continue  # a few µs at stake: not a finding worth a line
        share = 100.0 * n.gpu_ns_inclusive / t.gpu_ns
        assert n.share_of_peak_pct is not None  # flagged above
        roof = _ROOF_WORD[bound]
        achieved = (
            ctx("achieved bandwidth of its kernels", n.gbps, "GB/s", "cost model: bytes ÷ kernel time")
            if bound == "memory"
            else ctx("achieved throughput of its kernels", n.tflops, "TFLOP/s", "cost model: FLOPs ÷ kernel time")
        )
        lines = [
            ev(rules, "tree.region_share", f"GPU time in {_label(n)}, share of the window's GPU time", share),
            ev(
                rules,
                "tree.low_pct_of_roof",
                f"its kernels' share of the {roof} roof (time-weighted)",
                n.share_of_peak_pct,
                "<",
            ),
            achieved,
            ctx(
                "its bound (most kernel time)",
                100.0 * n.bound_ns.get(bound, 0) / n.gpu_ns_inclusive if n.gpu_ns_inclusive else None,
                f"% {bound}-bound",
                "roofline",
            ),
            ctx(
                f"time saved at {target:g} % of roof (tree.attainable_pct_of_roof), per window",
                saved / 1e6 / windows,
                "ms",
                f"{n.roof_ns / 1e6 / windows:.3f} ms of kernels with a known roof × (1 − {n.share_of_peak_pct:.1f} / {target:g})",
            ),
        ]
        if n.top_kernels:
            k, calls, ns = n.top_kernels[0]
            lines.append(ctx(f"heaviest kernel: {k[:90]} ({calls} calls)", ns / 1e6 / windows, "ms per window"))
        if n.folded:
            lines.append(ctx("instances of this block", n.instances, "instances", "module tree (folded)"))
        detail = (
            f"{_label(n)} holds {share:.1f} % of the window's GPU time and its {bound}-bound kernels run at "
            f"{n.share_of_peak_pct:.0f} % of the {roof} roof; at {target:g} % they would save "
            f"{saved / 1e6 / windows:.2f} ms per window"
        )
        out.append(
            spec.finding(
                stake,
                lines,
                detail,
                rules,
                title=f"{_short(n)}: {bound}-bound kernels at {n.share_of_peak_pct:.0f} % of the {roof} roof",
            )
        )
    return out


def _slow_memory_region(obs: DiagnosisInput, rules: Rules) -> list[Finding]:
    return _slow_regions(obs, rules, "memory")


def _slow_compute_region(obs: DiagnosisInput, rules: Rules) -> list[Finding]:
    return _slow_regions(obs, rules, "compute")


# --- (b) one instance of a repeated block slower than its siblings -------------------------------------


def instance_excess_ns(n: Node, windows: int) -> float:
    """GPU time per window the slowest instance takes beyond the median instance: (max − median) ×
    the occurrences of one instance per window (a block's ranges spread evenly over its instances)."""
    if n.spread_ns is None or n.instances < 2:
        return 0.0
    _, med, mx = n.spread_ns
    per_window = n.count / n.instances / max(1, windows)
    return (mx - med) * max(1.0, per_window)


def _blocks(t: ModuleTree) -> list[Node]:
    """The nodes whose instances are instances of one block: not a phase or the outside node, not an
    autograd node nor below one (an operator's name repeats over different tensors), not
    communication (a collective's time is the slowest peer's, not the block's work)."""
    out: list[Node] = []

    def rec(n: Node, under_op: bool) -> None:
        op = under_op or n.autograd
        if _regions(n) and not op and n.bound != "communication":
            out.append(n)
        for c in n.children:
            rec(c, op)

    for r in t.roots:
        rec(r, False)
    return out


def _slow_instance(obs: DiagnosisInput, rules: Rules) -> list[Finding]:
    t = obs.tree
    total = obs.breakdown.total_ns
    if not obs.has_gpu or t is None or not total:
        return []
    ratio_min = rules.value("tree.instance_ratio")
    windows = max(1, t.windows)
    flagged = [
        n
        for n in _blocks(t)
        if n.instances >= MIN_INSTANCES
        and n.spread_ns is not None
        and n.spread_ns[1] > 0
        and n.spread_ns[2] >= ratio_min * n.spread_ns[1]
    ]
    out = []
    for n in _innermost(flagged):
        assert n.spread_ns is not None  # flagged above
        lo, med, mx = n.spread_ns
        excess = instance_excess_ns(n, windows)
        stake = 100.0 * excess / (total / windows)
        if SLOW_INSTANCE.severity.grade(stake, rules) == "info":
            continue
        slowest = n.slowest or "?"
        lines = [
            ev(
                rules,
                "tree.instance_ratio",
                f"slowest instance {slowest} against the median of {n.instances}",
                mx / med,
            ),
            ctx(f"GPU time of {slowest}", mx / 1e6, "ms per occurrence", "module tree"),
            ctx("median instance", med / 1e6, "ms per occurrence", "module tree"),
            ctx("fastest instance", lo / 1e6, "ms per occurrence", "module tree"),
            ctx("time beyond the median, per window", excess / 1e6, "ms", "(max − median) × occurrences per window"),
        ]
        detail = (
            f"{slowest} takes {mx / 1e6:.3f} ms against a median of {med / 1e6:.3f} ms over the {n.instances} "
            f"instances of {_label(n)}: {mx / med:.1f}×"
        )
        out.append(
            SLOW_INSTANCE.finding(
                stake,
                lines,
                detail,
                rules,
                title=f"{_short(n)}: instance {slowest} takes {mx / med:.1f}× the median instance",
            )
        )
    return out


# --- (c) backward against forward ----------------------------------------------------------------------


def _phase(t: ModuleTree, name: str) -> Node | None:
    return next((r for r in t.roots if r.kind == "phase" and r.name == name), None)


def compute_ns(n: Node) -> int:
    """GPU time of a node less its communication kernels (collectives launched from backward hooks
    are not backward's arithmetic)."""
    return n.gpu_ns_inclusive - n.bound_ns.get("communication", 0)


def recomputed_ns(backward: Node) -> int:
    """GPU time of ``nn.Module`` ranges run inside backward: forward modules executed again while
    gradients are computed (activation checkpointing), the outermost such nodes only."""

    def rec(n: Node) -> int:
        if n.kind == "module":
            return n.gpu_ns_inclusive
        return sum(rec(c) for c in n.children)

    return sum(rec(c) for c in backward.children)


def unattributed_ns(t: ModuleTree) -> int:
    """GPU time (less communication) of the work outside every range: it may be forward's or
    backward's, so a ratio is judged only where it could not move the ratio back into the band."""
    out = next((r for r in t.roots if r.kind == "outside"), None)
    return compute_ns(out) if out is not None else 0


def backward_ratio(t: ModuleTree | None) -> tuple[float, int, int] | None:
    """(backward ÷ forward, forward ns, backward ns) of GPU time less communication, when the tree
    holds both phases with GPU time; None otherwise."""
    if t is None:
        return None
    fwd, bwd = _phase(t, "forward"), _phase(t, "backward")
    if fwd is None or bwd is None:
        return None
    f, b = compute_ns(fwd), compute_ns(bwd)
    if f <= 0 or b <= 0:
        return None
    return b / f, f, b


def _ratio_distance(a: Analysis) -> float | None:
    got = backward_ratio(a.tree)
    return None if got is None else abs(got[0] - 2.0)


def _backward_ratio(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    t = obs.tree
    got = backward_ratio(t) if obs.has_gpu else None
    if got is None or t is None:
        return None
    ratio, f, b = got
    lo, hi = rules.value("tree.bwd_fwd_low"), rules.value("tree.bwd_fwd_high")
    o = unattributed_ns(t)
    # The work outside every range could be either phase's: the ratio is far from 2× only if it stays
    # outside the band with all of it given to forward (high) or to backward (low).
    high = b / (f + o) > hi
    low = (b + o) / f < lo
    if not (high or low):
        return None
    windows = max(1, t.windows)
    fwd, bwd = _phase(t, "forward"), _phase(t, "backward")
    assert fwd is not None and bwd is not None  # backward_ratio found them
    lines = [
        ev(
            rules,
            "tree.bwd_fwd_high" if high else "tree.bwd_fwd_low",
            "backward GPU time ÷ forward GPU time (communication kernels left out)",
            ratio,
            "≥" if high else "<",
        ),
        ctx("forward GPU time per window", f / 1e6 / windows, "ms", "module tree"),
        ctx("backward GPU time per window", b / 1e6 / windows, "ms", "module tree"),
    ]
    comm = bwd.bound_ns.get("communication", 0) + fwd.bound_ns.get("communication", 0)
    if comm:
        lines.append(ctx("communication kernels left out of both", comm / 1e6 / windows, "ms per window", "roofline"))
    if o:
        lines.append(
            ctx(
                "GPU work outside every range (either phase's; the ratio holds with all of it on either side)",
                o / 1e6 / windows,
                "ms per window",
                "module tree",
            )
        )
    again = recomputed_ns(bwd)
    if again:
        lines.append(
            ctx(
                "forward modules run again inside backward (recomputation)",
                again / 1e6 / windows,
                "ms per window",
                "module tree: nn.Module ranges under backward",
            )
        )
    heavy = max(bwd.children, key=compute_ns, default=None)
    if heavy is not None and compute_ns(heavy) >= 0.1 * b:  # a node worth naming, not a sliver
        lines.append(ctx(f"heaviest backward node: {heavy.name[:80]}", 100.0 * compute_ns(heavy) / b, "% of backward"))
    if high:
        why = (
            "the forward runs again inside backward (activation checkpointing): ≈ 3× is its cost"
            if again
            else "recomputation (activation checkpointing, ≈ 3×), a slow op's backward, or per-parameter "
            "gradient work launched in backward"
        )
    else:
        why = "frozen parameters skip weight gradients, or part of the forward has no backward (no_grad)"
    detail = f"backward takes {ratio:.2f}× forward's GPU time (expected ≈ 2×): {why}"
    return BACKWARD_RATIO.finding(
        0.0, lines, detail, rules, title=f"Backward takes {ratio:.1f}× forward (expected ≈ 2×)"
    )


# --- wording: the fix in the run's words (its Context) ----------------------------------------


def _memory_region_words(c: Context, single: bool, bf16: bool) -> FixText:
    title = "Cut the bytes the slow region moves (fuse its memory-bound kernels)"
    if c.native:
        return FixText("region-memory-traffic", title, SLOW_MEMORY_REGION_FIX.native)
    if c.compiled:
        return FixText(
            "region-memory-traffic",
            title,
            "# already compiled: the region's memory-bound kernels are outside Inductor's fusions —\n"
            "# a custom fused kernel (Triton) for its chain, bf16/fp8 activations, contiguous layouts",
        )
    return FixText("region-memory-traffic", title, SLOW_MEMORY_REGION_FIX.pytorch)


def _compute_region_words(c: Context, single: bool, bf16: bool) -> FixText:
    title = "Fill the compute roof in the slow region (tensor cores, fuller tiles)"
    if c.native:
        return FixText("region-compute-efficiency", title, SLOW_COMPUTE_REGION_FIX.native)
    dtype = "torch.bfloat16" if bf16 else "torch.float16"
    return FixText(
        "region-compute-efficiency",
        title,
        "torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls on TF32 tensor cores\n"
        "torch.backends.cudnn.allow_tf32 = True\n"
        f'with torch.autocast(device_type="cuda", dtype={dtype}):  # or the region in reduced precision\n'
        "    out = region(x)\n"
        "# larger batch / sequence per launch, dimensions in multiples of 8 (bf16/fp16) so tiles fill every SM",
    )


def _backward_words(c: Context, single: bool, bf16: bool) -> FixText:
    f = BACKWARD_RATIO.fix
    assert f is not None  # declared below
    if c.inference:  # never raised without both phases; worded for a run that computes no gradients
        return FixText(
            f.rec_id,
            "Compare the gradient phase's kernels with the forward pass's",
            "// the phases compared are the forward pass and the gradient pass: the heaviest node of the\n"
            "// gradient pass against the same layer's forward kernels"
            if c.native
            else "# the phases compared are the forward pass and the gradient pass: the heaviest node of the\n"
            "# gradient pass in `trainscope tree` against the same layer's forward kernels",
        )
    return FixText(f.rec_id, f.title, f.native if c.native else f.pytorch)


SLOW_MEMORY_REGION_FIX = catalog_fix("region-memory-traffic", projection="busy", text=_memory_region_words)

SLOW_COMPUTE_REGION_FIX = catalog_fix("region-compute-efficiency", projection="busy", text=_compute_region_words)


def _slow_region(axis: str, bound: str, roof: str, measure: Measure, fix: Fix, whatif_pool: str) -> FindingSpec:
    """The slow-region finding for one roof: a region whose ``bound`` kernels run far below the
    ``roof`` roof (one declaration for both; they differ only in the bound, its roof and its fix)."""
    spec_id = f"{axis}/slow-region"
    return FindingSpec(
        id=spec_id,
        axis=axis,
        title=f"A dominating region's {bound} kernels run far below the {roof} roof",
        measure=measure,
        can_be_primary=False,
        severity=_STAKE_SEV,
        fix=fix,
        whatif_pool=whatif_pool,
        diff_measure=DiffMeasure(
            "time the slow regions would save at the attainable share of roof",
            "ms per step",
            stake_ms(spec_id),
        ),
        critical_path="gpu-compute",
        headline=f"SLOW REGION ({bound}, below roof)",
        breakdown=("compute",),
        describes=f"a region of the module tree with a large share of GPU time whose {bound} kernels run at a "
        "low share of their roofline bound; stake: the time saved at an attainable share",
        thresholds=("tree.region_share", "tree.low_pct_of_roof", "tree.attainable_pct_of_roof"),
    )


SLOW_MEMORY_REGION = _slow_region(
    "machine", "memory-bound", "bandwidth", _slow_memory_region, SLOW_MEMORY_REGION_FIX, "memory-bound"
)
SLOW_COMPUTE_REGION = _slow_region(
    "algorithm", "compute-bound", "compute", _slow_compute_region, SLOW_COMPUTE_REGION_FIX, "tensor-cores"
)

SLOW_INSTANCE = FindingSpec(
    id="algorithm/slow-instance",
    axis="algorithm",
    title="One instance of a repeated block is slower than its siblings",
    measure=_slow_instance,
    can_be_primary=False,
    severity=_STAKE_SEV,
    fix=catalog_fix("even-out-instance", projection="busy"),
    whatif_pool="memory-bound",
    diff_measure=DiffMeasure(
        "time the slowest instance takes beyond the median", "ms per step", stake_ms("algorithm/slow-instance")
    ),
    critical_path="gpu-compute",
    headline="SLOW INSTANCE (repeated block)",
    breakdown=("compute",),
    describes="one instance of a folded (repeated) block of the module tree well above its siblings' median "
    "GPU time; stake: (max − median) per window",
    thresholds=("tree.instance_ratio",),
)

BACKWARD_RATIO = FindingSpec(
    id="algorithm/backward-ratio",
    axis="algorithm",
    title="Backward against forward is far from the expected ≈ 2×",
    measure=_backward_ratio,
    can_be_primary=False,
    severity=fixed("info"),
    fix=catalog_fix("check-backward", projection="none", text=_backward_words),
    diff_measure=DiffMeasure("backward ÷ forward GPU time, distance from 2×", "×", _ratio_distance),
    critical_path="gpu-compute",  # the phases' GPU compute time (never the verdict: nothing to reconcile)
    headline="BACKWARD/FORWARD RATIO",
    describes="backward's GPU time against forward's (communication left out), outside the band around the "
    "expected ≈ 2× (an observation: no stake)",
    thresholds=("tree.bwd_fwd_low", "tree.bwd_fwd_high"),
)

SPECS = (SLOW_MEMORY_REGION, SLOW_COMPUTE_REGION, SLOW_INSTANCE, BACKWARD_RATIO)

__all__ = ["SPECS", "backward_ratio", "region_saving_ns", "instance_excess_ns", "recomputed_ns"]
