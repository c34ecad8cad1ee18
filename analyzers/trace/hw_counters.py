"""Hardware FP counters per kernel (Kineto's CUPTI-profiler mode) as evidence, and as ground truth
for the cost model.

In that mode (``torch.profiler`` with ``experimental_config=_ExperimentalConfig(profiler_metrics=
[…])``) CUPTI replays every kernel once per counter pass and Kineto writes one
``cuda_profiler_range`` per kernel with the counters ``smsp__sass_thread_inst_executed_op_
{d,f,h}{add,mul,fma}_pred_on.sum``: FP instructions executed per precision. FLOPs = add + mul + 2·fma
per precision. What the trace then gives and does not give:

* measured FLOPs per kernel — counted, not modeled (CUDA-core math only: tensor-core HMMA
  instructions are not in these counters, so a tensor-core GEMM counts near zero);
* no kernel timing — the ranges are replays, so their durations are not kernel times: no busy time,
  no roofline, no MFU.

Each range is one kernel launch, in launch order, so the i-th range pairs with the i-th kernel launch
call of the trace when the counts agree; the operator around that launch names the work and, where
it recorded shapes (``record_shapes=True``), the cost model's FLOPs for it (:mod:`op_formulas`) can
be compared with the counters kernel by kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

import numpy as np

from trainscope.analyzers.findings.base import Verdict
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.trace.kernels import classify_kernel
from trainscope.analyzers.trace.kernels import operator_class
from trainscope.analyzers.trace.op_formulas import op_cost
from trainscope.analyzers.trace.roofline import short_kernel_name
from trainscope.traces.model import Trace

if TYPE_CHECKING:
    from trainscope.analyzers.findings.base import Verdict

COUNTER_PRECISIONS = ("fp64", "fp32", "fp16")
_PAIR_BUDGET = 50_000_000  # launches × operators scanned when pairing ranges with their operators
_LAUNCH = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernelEx",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
    "cudaLaunchCooperativeKernel",
)


@dataclass(frozen=True)
class CounterKernel:
    """One kernel name's measured FLOPs, summed over its counter ranges."""

    name: str
    kernel_class: str  # from the launching operator where linked, else the name
    ranges: int
    flops: float
    by_precision: dict[str, float]
    share_pct: float  # of all counted FLOPs
    model_flops: float | None = None  # the cost model's FLOPs from the operators' shapes, where recorded
    operator: str | None = None  # the operator that launched most of its ranges


@dataclass(frozen=True)
class ClassAgreement:
    kernel_class: str
    kernels: int
    counted_flops: float
    model_flops: float

    @property
    def ratio(self) -> float | None:
        """model ÷ counted (1.0 = the formula predicts what the hardware executed)."""
        return self.model_flops / self.counted_flops if self.counted_flops > 0 else None


@dataclass
class HwCounterReport:
    kernels: list[CounterKernel]  # most FLOPs first
    total_flops: float
    by_precision: dict[str, float]
    by_class: dict[str, float]
    ranges: int
    linked_ranges: int  # ranges paired with a kernel launch (and its operator)
    cannot_give: str  # what the counters cannot say
    agreement: list[ClassAgreement] = field(default_factory=list)
    agreement_note: str = ""  # how the agreement was measured, or why it could not be

    def summary(self) -> str:
        top = self.kernels[0] if self.kernels else None
        prec = ", ".join(
            f"{p} {100 * v / self.total_flops:.0f} %"
            for p, v in self.by_precision.items()
            if self.total_flops and v > 0
        )
        head = (
            f"hardware FP counters (CUPTI profiler) measured {self.total_flops:.3g} FLOPs in {self.ranges} kernel "
            f"ranges of {len(self.kernels)} kernel names ({prec})"
        )
        if top is not None and self.total_flops:
            head += f"; {top.share_pct:.0f} % in {_short(top.name)}"
        return head


def _short(name: str) -> str:
    return short_kernel_name(name)[:60]


def _launch_ops(trace: Trace, n: int) -> list[int] | None:
    """The cpu_ops row around each of the trace's kernel launch calls in time order, when there are
    exactly ``n`` of them (-1 where no operator encloses the launch); None when the counts differ."""
    r = trace.runtime
    if not len(r):
        return None
    names = np.array(trace.strings, dtype=object)[r.name] if len(r) else np.empty(0, object)
    is_launch = np.isin(names, _LAUNCH)
    rows = np.flatnonzero(is_launch)
    if len(rows) != n:
        return None
    rows = rows[np.argsort(r.ts[rows], kind="stable")]
    ops = trace.cpu_ops
    if len(rows) * max(1, len(ops)) > _PAIR_BUDGET:  # counter-mode traces are small; a huge one is not paired
        return None
    out: list[int] = []
    for i in rows.tolist():
        on = (ops.thread == r.thread[i]) & (ops.ts <= r.ts[i]) & (ops.end >= r.ts[i])
        cand = np.flatnonzero(on)
        out.append(int(cand[np.argmin(ops.dur[cand])]) if len(cand) else -1)  # the innermost
    return out


def hw_counter_report(trace: Trace) -> HwCounterReport | None:
    ranges = trace.op_inputs.hw_ranges
    if not ranges:
        return None
    op_rows = _launch_ops(trace, len(ranges))
    oi, ops = trace.op_inputs, trace.cpu_ops
    has_sig = len(oi.cpu_signature) == len(ops)
    per: dict[str, dict[str, Any]] = {}
    shaped = 0
    for j, (name, _ts, f64, f32, f16) in enumerate(ranges):
        d = per.setdefault(name, {"n": 0, "p": np.zeros(3), "ops": {}, "model": 0.0, "modeled": 0})
        d["n"] += 1
        d["p"] += (f64, f32, f16)
        row = op_rows[j] if op_rows is not None else -1
        if row >= 0:
            op = trace.strings[ops.name[row]]
            d["ops"][op] = d["ops"].get(op, 0) + 1
            sig = int(oi.cpu_signature[row]) if has_sig else -1
            if sig >= 0:
                dims, types, conc = oi.signatures[sig]
                try:
                    c = op_cost(op, dims, types, conc)
                except (TypeError, ValueError, IndexError, ZeroDivisionError, OverflowError):
                    c = None
                if c is not None:
                    d["model"] += c.flops
                    d["modeled"] += 1
                    shaped += 1
    total = float(sum(d["p"].sum() for d in per.values()))
    kernels: list[CounterKernel] = []
    for name, d in per.items():
        op = max(d["ops"], key=d["ops"].get) if d["ops"] else None
        ocls = operator_class(op) if op else None
        ncls = classify_kernel(name)
        cls = ocls if ocls is not None and ncls == "other" else ncls  # '__missing__' names: the operator says
        fl = float(d["p"].sum())
        kernels.append(
            CounterKernel(
                name=name,
                kernel_class=cls,
                ranges=d["n"],
                flops=fl,
                by_precision={p: float(v) for p, v in zip(COUNTER_PRECISIONS, d["p"])},
                share_pct=100.0 * fl / total if total else 0.0,
                model_flops=d["model"] if d["modeled"] == d["n"] else None,
                operator=op,
            )
        )
    kernels.sort(key=lambda k: (-k.flops, k.name))
    by_prec = {p: float(sum(k.by_precision[p] for k in kernels)) for p in COUNTER_PRECISIONS}
    by_class: dict[str, float] = {}
    for k in kernels:
        by_class[k.kernel_class] = by_class.get(k.kernel_class, 0.0) + k.flops
    linked = sum(1 for r in (op_rows or []) if r >= 0)
    agreement: list[ClassAgreement] = []
    if op_rows is None:
        note = (
            f"the cost model could not be checked against the counters: the {len(ranges)} counter ranges could "
            "not be paired one to one with kernel launch calls (their counts differ, or the trace is too large "
            "to pair), so the ranges' operators are unknown"
        )
    elif not shaped:
        note = (
            f"the cost model could not be checked against the counters: the {linked} ranges pair with their "
            "kernel launches and operators, but the operators carry no shapes (record with "
            "torch.profiler.profile(record_shapes=True) to compare FLOPs from shapes with the counters)"
        )
    else:
        groups: dict[str, list[CounterKernel]] = {}
        for k in kernels:
            if k.model_flops is not None:
                groups.setdefault(k.kernel_class, []).append(k)
        agreement = [
            ClassAgreement(c, len(ks), sum(k.flops for k in ks), sum(k.model_flops or 0.0 for k in ks))
            for c, ks in sorted(groups.items())
        ]
        note = (
            f"cost model against counters on {shaped} of {len(ranges)} ranges whose operators carry shapes "
            "(model ÷ counted per kernel class; tensor-core math is invisible to these counters)"
        )
    cannot = (
        "no kernel timing: CUPTI replays each kernel once per counter pass, so the ranges' durations are "
        "replays, not kernel times — busy time, the roofline and MFU need a trace recorded without counters"
    )
    return HwCounterReport(kernels, total, by_prec, by_class, len(ranges), linked, cannot, agreement, note)


def counters_only_verdict(report: HwCounterReport) -> Verdict:
    """The verdict of a GPU trace recorded in counter mode: a GPU trace, its FLOPs measured, and no
    kernel timing to say where the time goes."""

    top = report.kernels[0] if report.kernels else None
    return Verdict(
        "insufficient_evidence",
        0.0,
        None,
        f"a GPU trace recorded in CUPTI counter mode: {report.ranges} kernel ranges with hardware FP counters "
        f"({report.total_flops:.3g} FLOPs measured), but {report.cannot_give}",
        [
            ctx("kernel ranges with hardware FP counters", report.ranges, "ranges", "trace: cuda_profiler_range"),
            ctx("FLOPs measured by the counters", report.total_flops, "FLOPs", "hardware counters (add + mul + 2·fma)"),
            *([ctx(f"largest: {_short(top.name)}", top.share_pct, "% of FLOPs", "hardware counters")] if top else []),
            ctx("kernel events with timing", 0, "kernels", "trace: ranges are replays"),
        ],
    )


def counters_mfu_reason(report: HwCounterReport) -> str:
    return (
        f"unknown: {report.total_flops:.3g} FLOPs measured by hardware counters, but the counter ranges "
        "were replayed, so there is no kernel or step time to divide them by"
    )
