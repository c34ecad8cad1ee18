"""Machine axis, communication: collectives that run with no compute beside them."""

from __future__ import annotations

from trainscope.analyzers.findings.base import DiffMeasure, Finding, FindingSpec, Fix, by_stake, ms_per_step
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.findings.common import ctx, ev, raised, sink_line
from trainscope.analyzers import fix_text
from trainscope.analyzers.rules import Rules

_SEV = by_stake("comm.moderate", "comm.high")


def _unoverlapped(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    if not obs.has_gpu or obs.sinks is None or not raised(obs, rules, "comm", _SEV):
        return None
    stake = obs.sinks.pct("comm")
    sev = _SEV.grade(stake, rules)
    lines = [
        ev(rules, f"comm.{'high' if sev == 'high' else 'moderate'}", "communication with no compute running", stake),
        ctx("communication kernels, share of kernel time", obs.kernels.class_share_pct("communication"), "%"),
        sink_line(obs, "comm"),
    ]
    kinds = getattr(obs.context, "collectives", None)
    if kinds:
        lines.append(
            ctx(
                "collectives: " + ", ".join(f"{k} {v:.1f} ms" for k, v in kinds.items()),
                None,
                "",
                "trace: communication kernel names",
            )
        )
    return UNOVERLAPPED.finding(
        stake,
        lines,
        fix_text.detail(UNOVERLAPPED.id, obs.context, "collectives run while no compute kernel does"),
        rules,
        title=fix_text.title(UNOVERLAPPED.id, obs.context, UNOVERLAPPED.title),
    )


UNOVERLAPPED = FindingSpec(
    id="comm/unoverlapped",
    axis="machine",
    title="Communication not overlapped with compute",
    measure=_unoverlapped,
    can_be_primary=True,
    severity=_SEV,
    fix=Fix(
        "overlap-communication",
        "Overlap gradient communication with the backward pass",
        "model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)\n"
        "# with gradient accumulation: `with model.no_sync():` on all but the last micro-step",
        "// launch ncclAllReduce per gradient bucket on a communication stream as soon as the bucket's\n"
        "// backward kernels finish (event wait), not one all-reduce after the whole backward pass",
        projection="busy",
        basis="hiding the {stake:.1f} % unoverlapped communication",
        whatif_label="communication fully overlapped",
        text=fix_text._comm,
    ),
    whatif_pool="comm",
    diff_measure=DiffMeasure("communication with no compute running", "ms per step", ms_per_step("communication")),
    critical_path="communication",
    headline="COMMUNICATION-BOUND",
    label_class="comm",
    sink="comm",
    breakdown=("communication",),
    describes="communication kernels running with no compute kernel beside them",
)

SPECS = (UNOVERLAPPED,)
