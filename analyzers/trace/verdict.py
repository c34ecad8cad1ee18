"""Findings and the D·A·M verdict (docs/diagnosis.md §1–§4).

Findings come from the registry (:mod:`trainscope.analyzers.findings`): each declaration's
``measure`` reads the observations the pipeline gathered once and names a cause with its evidence
and its stake (share of step time), graded by that stake. The verdict is the **largest measured
sink of step time** (:mod:`trainscope.analyzers.trace.sinks`) among those that can be primary — input
waits, launch/CPU overhead, blocking syncs, unoverlapped communication, host-device copies,
memory-bound and compute-bound busy time (the roofline decides which kernel time is which), rank
imbalance — named by its finding; confidence says how clear its lead over the runner-up is, and the
runner-up is named. A verdict the evidence cannot
support is ``insufficient_evidence``: no GPU activity, too few kernels, or GPU idle that no
recorded host activity explains outweighing every cause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainscope.analyzers import findings as registry
from trainscope.analyzers.findings.base import AXES as AXES  # re-exported
from trainscope.analyzers.findings.base import Evidence as Evidence
from trainscope.analyzers.findings.base import Finding as Finding
from trainscope.analyzers.findings.base import Verdict as Verdict  # re-exported
from trainscope.analyzers.findings.common import ctx as _ctx
from trainscope.analyzers.findings.common import ev as _ev
from trainscope.analyzers.findings.graphs import GRAPH_REPLAYS
from trainscope.analyzers.findings.graphs import UNKNOWN_BOUND
from trainscope.analyzers.findings.observations import DiagnosisInput as DiagnosisInput  # re-exported
from trainscope.analyzers.findings.startup import NOT_REPRESENTATIVE as _NOT_REPRESENTATIVE
from trainscope.analyzers.findings.startup import NOT_REPRESENTATIVE_AXIS
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.gpu_gaps import INFERRED
from trainscope.analyzers.trace.gpu_gaps import LABELS as GAP_LABELS
from trainscope.analyzers.trace.gpu_gaps import LAUNCH_CALL

if TYPE_CHECKING:
    from trainscope.analyzers.trace.gpu_gaps import GpuGaps
    from trainscope.analyzers.trace.sinks import Sink
    from trainscope.analyzers.trace.sinks import Sinks

_GRADE = {"high": 0, "moderate": 1, "info": 2}

# The verdict of a window that holds no steady state (analyzers/trace/one_off.py): not a D·A·M axis.
NOT_REPRESENTATIVE = NOT_REPRESENTATIVE_AXIS


def not_steady(f: Finding) -> bool:
    """Whether ``f`` is a one-off cost's finding (start-up, compilation, capture), whose fixes are
    the only ones a window without a steady state gets."""
    s = registry.spec(f.id)
    return s is not None and s.axis == NOT_REPRESENTATIVE


# Sinks of GPU idle with a recorded cause: with fewer GPU operations than evidence.min_kernels they can
# still carry a verdict (the idle is measured directly); kernel-work sinks cannot.
IDLE_CAUSES = ("input", "launch", "sync", "allocator", "host-ranges")
# Sinks measured directly by the few operations themselves (each copy's own duration): they too carry
# a capped verdict with few operations, busy or not.
MEASURED_BUSY = ("copies",)
# The share of step time a sink needs to lead a window of few operations clearly.
CLEAR_LEAD_PCT = 50.0


def _measured(finding_id: str, inp: DiagnosisInput, rules: Rules) -> list[Finding]:
    """What the declared finding ``finding_id`` measures on ``inp``, as a list (empty: not raised)."""
    measure = registry.REGISTRY[finding_id].measure
    got = measure(inp, rules) if measure is not None else None
    return [got] if isinstance(got, Finding) else list(got or [])


def findings(inp: DiagnosisInput, rules: Rules) -> list[Finding]:
    """All findings the evidence supports, by severity, then stake."""
    if not inp.has_gpu:
        out = _measured("data/input-wait", inp, rules)  # the step-exact wait on a CPU run
        if inp.sinks is not None:  # rank imbalance on host collectives needs no GPU
            out += _measured("ranks/imbalance", inp, rules)
        out.sort(key=finding_order)
        return out
    out = registry.evaluate(inp, rules)
    out.sort(key=finding_order)
    return out


def primary_first(found: list[Finding], verdict: Verdict) -> list[Finding]:
    """The verdict's own finding first, then the others in :func:`finding_order` (a reader looks
    for the evidence of the verdict at the top)."""
    return sorted(found, key=lambda f: (f.id != verdict.bottleneck, *finding_order(f)))


def finding_order(f: Finding) -> tuple[int, float]:
    """Findings sort by severity, then by the share of step time at stake."""
    return (_GRADE[f.severity], -f.stake_pct)


def primary_finding(sink: str, found: list[Finding]) -> Finding | None:
    """The finding that names ``sink``: the precise one (pageable copies, blocking syncs, unfused
    attention) when it holds at least half of the sink, else the broad one."""
    mine = [f for f in found if (s := registry.spec(f.id)) is not None and s.sink == sink and s.can_be_primary]
    broad = next((f for f in mine if registry.REGISTRY[f.id].refines is None), None)
    fine = sorted((f for f in mine if registry.REGISTRY[f.id].refines is not None), key=lambda f: -f.stake_pct)
    sink_pct = broad.stake_pct if broad else 0.0
    if fine and fine[0].stake_pct >= 0.5 * sink_pct:
        return fine[0]
    return broad or (fine[0] if fine else None)


def classify(inp: DiagnosisInput, found: list[Finding], rules: Rules) -> Verdict:
    """The primary D·A·M axis, a confidence in [0, 1], and the evidence behind it."""
    b = inp.breakdown
    if not inp.has_gpu:
        imb = next((f for f in found if f.id == "ranks/imbalance"), None)
        data = next((f for f in found if f.id == "data/input-wait"), None)
        if imb is not None and (data is None or imb.stake_pct > data.stake_pct):
            # Measured on host collectives aligned across ranks: needs no GPU. Lower ceiling, as for input.
            conf = 0.75 - (0.1 if len(inp.segmentation.steps) < 3 else 0.0) - (0.1 if imb.severity != "high" else 0.0)
            return Verdict(
                imb.axis,
                round(conf, 2),
                imb.id,
                f"{imb.title} — {imb.stake_pct:.1f} % of step time; {imb.detail}",
                imb.evidence,
            )
        if data is not None and data.severity == "high":
            # One kind of evidence and no device to cross-check it with: a lower ceiling than on a GPU.
            conf = 0.75 - (0.1 if len(inp.segmentation.steps) < 3 else 0.0)
            return Verdict("data", round(conf, 2), data.id, f"{data.title} — {data.detail}", data.evidence)
        described = inp.extra.get("gpus_described", 0) if inp.extra else 0
        # A trace that describes a GPU but holds no GPU event was recorded without device activity, or
        # lost it (a truncated file keeps the events before the damage): not a CPU-only job.
        what = (
            "the trace describes a GPU but no GPU activity was read from it (no kernels, copies or memsets): "
            "without GPU events trainscope"
            if isinstance(described, int) and described > 0
            else "the trace has no GPU activity (no kernels, copies or memsets): on a CPU-only trace trainscope"
        )
        return Verdict(
            "insufficient_evidence",
            0.0,
            None,
            f"{what} diagnoses only input waits (DataLoader time within the steps), and none crosses "
            f"data_wait.high ({rules.value('data_wait.high'):g} %)",
            [_ctx("GPU kernels in trace", 0, "kernels", "trace")],
        )
    nr = next((f for f in found if f.id == _NOT_REPRESENTATIVE.id), None)
    if nr is not None and inp.steady is not None:
        # Phases before verdicts: a window that holds no steady state is not judged as if it did.
        w = inp.steady
        phases = " / ".join(w.headline_phases) or "start-up"
        conf = round(min(0.95, 0.5 + 0.45 * min(1.0, nr.stake_pct / 100)), 2)
        top = ", ".join(f"{c.kind} {c.ms:,.1f} ms" for c, _ in w.in_window()[:3])
        return Verdict(
            NOT_REPRESENTATIVE,
            conf,
            nr.id,
            f"not representative ({phases}): {nr.detail}; judged {w.judged}"
            + (f"; one-off costs: {top}" if top else "")
            + " — paid once per process, so no per-step fix applies; record the steady state (fix 1)",
            nr.evidence,
        )
    min_k = rules.value("evidence.min_kernels")
    # Copies and memsets are GPU work too: a window of copies is judged on its copies.
    ops = inp.copy_traffic.ops if inp.copy_traffic is not None else inp.kernels.count
    # A handful of operations cannot establish what bounds kernel work, but the idle between them is
    # measured directly, and so are copies: a GPU idle most of the step for a cause the trace records
    # (host issue, synchronization, allocator calls, input, named host work), or copying most of it,
    # is a verdict even with few operations, at a capped confidence. Anything else stays
    # insufficient evidence.
    few = ops < min_k
    first = inp.sinks.leader if inp.sinks is not None else None
    clear_lead = (
        first is not None
        and first.pct >= CLEAR_LEAD_PCT
        and (
            (first.key in IDLE_CAUSES and inp.breakdown.gpu_busy_pct < rules.value("gpu_busy.saturated"))
            or first.key in MEASURED_BUSY
        )
    )
    if few and not clear_lead:
        return Verdict(
            "insufficient_evidence",
            0.0,
            None,
            f"only {ops} GPU operation{'s' * (ops != 1)} (kernels, copies, memsets) ran inside the analyzed "
            "steps: too little to tell where the time goes (profile more steps)",
            [_few_operations(rules, ops)],
        )
    b = inp.breakdown
    busy = b.gpu_busy_pct
    saturated = busy >= rules.value("gpu_busy.saturated")
    busy_ev = _ev(rules, "gpu_busy.saturated", "GPU busy (kernels, copies, memsets)", busy, "≥" if saturated else "<")
    sinks = inp.sinks
    if sinks is None:  # the pipeline measures the sinks of every trace with GPU work
        raise ValueError("classify: a trace with GPU work needs its sinks of step time (DiagnosisInput.sinks)")
    lead, runner = sinks.leader, sinks.runner_up
    unexplained = sinks.by_key["idle-unexplained"]
    # Never guess: GPU idle that nothing orders against the host (no launch call recorded for the work
    # that ends it), outweighing every cause there is. Idle whose next operation was issued before the
    # gap (a GPU-side dependency) is ordered: it stays unexplained but blocks no verdict.
    gaps = inp.gaps
    blind = min(unexplained.ns, gaps.ns.get("unordered", 0)) if gaps is not None else unexplained.ns
    if blind > sinks.explained_ns:
        return Verdict(
            "insufficient_evidence",
            0.0,
            None,
            f"the GPU is idle {100 - busy:.0f} % of step time, but the trace records no host activity "
            "(data wait, preprocessing, synchronization, launches) and no launch calls that explain most "
            "of it: nothing orders the host's events against the GPU's",
            [busy_ev, _ctx("GPU idle with no host activity recorded", unexplained.pct, "%")],
        )
    graphs = next((f for f in found if f.id in (GRAPH_REPLAYS.id, UNKNOWN_BOUND.id)), None)
    unknown = sinks.by_key["busy-unknown"]
    if graphs is not None and saturated and unknown.ns > (lead.ns if lead else 0):
        # Saturated by graph replays or kernels whose bound the trace cannot establish: GPU-bound, bound unknown.
        conf = round(max(0.3, 0.75 - 0.45 * ((lead.ns / unknown.ns) if lead else 0.0)), 2)
        return Verdict(
            graphs.axis,
            conf,
            graphs.id,
            f"{graphs.title} — {graphs.stake_pct:.1f} % of step time; {graphs.detail}",
            [busy_ev, *graphs.evidence[:2]],
            runner_up=(primary_finding(lead.key, found) or graphs).id if lead else None,
        )
    # Idle that no recorded cause claims, larger than every sink: balanced, saying how the GPU waits.
    host_work = sinks.by_key.get("host-work")
    if lead is None and gaps is not None:
        if unexplained.ns and gaps.ns.get("queued", 0) >= 0.5 * unexplained.ns and _largest(unexplained, sinks):
            return _unclaimed_idle(
                f"the GPU idles {unexplained.pct:.1f} % of step time with its next work already issued: it "
                "waits on a dependency the trace does not show (another stream, device or rank), not on the "
                "host; no cause the trace records reaches the grade of a bottleneck",
                busy_ev,
                gaps,
                sinks,
            )
        if host_work is not None and host_work.ns and _largest(host_work, sinks):
            return _unclaimed_idle(
                f"the GPU idles {host_work.pct:.1f} % of step time while the host works with no GPU work "
                "issued — between steps (input or other host work) or unrecorded in a sampled trace; the "
                "trace does not say what that work is, and no cause it records reaches the grade of a "
                "bottleneck",
                busy_ev,
                gaps,
                sinks,
            )
    if lead is None:
        return Verdict(
            "balanced",
            0.5,
            None,
            "no sink of step time reaches the grade of a bottleneck: "
            + ", ".join(f"{s.key} {s.pct:.1f} %" for s in sinks.ranked(primary_only=False)[:3]),
            [busy_ev],
        )
    primary = primary_finding(lead.key, found)
    if primary is None:  # a sink with no declared finding cannot happen; say so rather than guess
        return Verdict("balanced", 0.5, None, f"the largest sink ({lead.label}) has no finding to name it", [busy_ev])
    # Confidence: how clear the lead is over the runner-up, less for weak step structure.
    conf = 0.5 + 0.45 * (1.0 - (runner.ns / lead.ns if runner else 0.0))
    if inp.segmentation.method == "whole_trace":
        conf -= 0.15
    elif len(inp.segmentation.steps) < 3:
        conf -= 0.1
    if sinks.by_key["busy-unknown"].ns > lead.ns:
        conf -= 0.15  # more busy time than the lead is of unknown bound
    if unexplained.ns > lead.ns:
        conf -= 0.15  # more idle than the lead is queued behind a dependency nothing recorded explains
    if gaps is not None and lead.ns:
        # the part of the lead inferred from positions, not from recorded host activity, counts for less
        conf -= 0.15 * min(1.0, gaps.inferred_ns(lead.key) / lead.ns)
    conf = round(min(0.97, max(0.05, conf)), 2)
    if few:
        conf = min(conf, 0.5)  # few operations: the idle is measured, but one step of a handful of kernels
    runner_f = primary_finding(runner.key, found) if runner else None
    # The shares as the evidence holds them (2 decimals), then printed at 1: rounding the raw share
    # straight to 1 decimal gave 27.8 % here and 27.9 % in the evidence for one quantity.
    runner_txt = f"; runner-up: {runner.label} {round(runner.pct, 2):.1f} %" if runner else "; no other sink"
    summary = (
        f"{primary.title} — {round(lead.pct, 2):.1f} % of step time ({sinks.ms_per_step(lead.key):.2f} ms per step)"
        f"{runner_txt}" + (f"; {primary.detail}" if primary.detail else "")
    )
    evidence = [Evidence(f"largest sink of step time: {lead.label}", round(lead.pct, 2), "%", "", lead.source, None)]
    if runner:
        evidence.append(Evidence(f"runner-up sink: {runner.label}", round(runner.pct, 2), "%", "", runner.source, None))
    evidence += [e for e in primary.evidence if not e.metric.endswith("sink: ms per step")]
    if not any(e.metric.startswith("GPU busy") for e in evidence):
        evidence.append(busy_ev)
    if gaps is not None and gaps.considered_ns:
        evidence += _gap_evidence(gaps, sinks, frozenset(e.metric for e in evidence))
    if few:
        evidence.append(_few_operations(rules, ops))
        measured = "the copies' own durations" if lead.key in MEASURED_BUSY else "the measured idle between them"
        summary += (
            f" (only {ops} GPU operation{'s' * (ops != 1)} in the steps: the verdict rests on {measured}; "
            "confidence capped at 0.5)"
        )
    return Verdict(
        primary.axis,
        conf,
        primary.id,
        summary,
        evidence,
        runner_up=runner_f.id if runner_f else (runner.key if runner else None),
    )


def _few_operations(rules: Rules, ops: int) -> Evidence:
    """The evidence line of a window with fewer GPU operations than a verdict needs."""
    return _ev(
        rules, "evidence.min_kernels", "GPU operations (kernels, copies, memsets) in the analyzed steps", ops, "<"
    )


def _largest(sink: Sink, sinks: Sinks) -> bool:
    """Whether ``sink`` holds at least as much step time as every sink, primary or not."""
    return sink.ns >= max(s.ns for s in sinks.ranked(primary_only=False))


def _unclaimed_idle(words: str, busy_ev: Evidence, gaps: GpuGaps, sinks: Sinks) -> Verdict:
    """The balanced verdict for idle no recorded cause claims: ``words`` say how the GPU waits."""
    return Verdict("balanced", 0.3, None, words, [busy_ev, *_gap_evidence(gaps, sinks)])


def _gap_evidence(gaps: GpuGaps, sinks: Sinks, stated: frozenset[str] = frozenset()) -> list[Evidence]:
    """What the GPU timeline and runtime calls say about the idle no host event explains, less the
    figures the verdict's evidence already states (``stated``: their metrics)."""
    out: list[Evidence] = []
    for cls in GAP_LABELS:
        if gaps.pct(cls) >= 0.5 and gaps.metric(cls) not in stated:  # a figure the finding gave already: once
            out.append(Evidence(gaps.metric(cls), round(gaps.pct(cls), 2), "%", "", INFERRED, None))
    if gaps.launch_call_us is not None and gaps.late_gaps and not any(m.startswith(LAUNCH_CALL) for m in stated):
        out.append(
            Evidence(
                f"{LAUNCH_CALL} (median; {gaps.late_gaps} of {gaps.gaps} gaps issued late)",
                round(gaps.launch_call_us, 2),
                "µs",
                "",
                f"runtime calls; issue interval median {gaps.issue_interval_us or 0:.1f} µs",
                None,
            )
        )
    if gaps.sampled:
        out.append(
            Evidence(
                "runtime calls that issue no GPU work (synchronizations, event records, queries): none — "
                "the trace is event-sampled, its host record filtered",
                gaps.non_issuing_calls,
                "calls",
                "",
                f"trace: {gaps.runtime_calls:,} runtime calls",
                None,
            )
        )
    if gaps.sparse_host and gaps.host_coverage is not None:  # sparse_host implies a coverage
        out.append(
            Evidence(
                "GPU idle between launches covered by a recorded host event (the trace's host events are "
                "sparse or sampled: what the host did in the other gaps is not recorded)",
                round(100 * gaps.host_coverage, 1),
                "%",
                "",
                "trace: operators and runtime calls",
                None,
            )
        )
    for name, ns in sorted(gaps.ranges.items(), key=lambda x: -x[1])[:3]:
        out.append(
            Evidence(
                f"GPU idle inside host range '{name}' (issues no GPU work)",
                round(ns / 1e6, 2),
                "ms",
                "",
                "trace: host ranges",
                None,
            )
        )
    if gaps.untraced_graph_launches:
        out.append(
            Evidence(
                "graph launches with no GPU operation recorded (their GPU time is missing: idle may be "
                "graph replays; record the graphs' kernels)",
                gaps.untraced_graph_launches,
                "launches",
                "",
                "trace: cudaGraphLaunch/hipGraphLaunch runtime calls",
                None,
            )
        )
    return out
