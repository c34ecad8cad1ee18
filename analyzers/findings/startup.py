"""One-off costs: a window that holds no steady state (start-up, compilation, capture), and the
start-up ledger's costs, cured by what removes them — stated in seconds once per process, never as a
per-step speed-up (analyzers/trace/one_off.py finds them and chooses the judged window)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import fixed
from trainscope.analyzers.findings.base import verdict_class
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.catalog import catalog_words
from trainscope.analyzers.findings.catalog import entry
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.findings.common import ev
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.trace.analysis import Analysis
    from trainscope.analyzers.trace.one_off import SteadyWindow

NOT_REPRESENTATIVE_AXIS = "not_representative"


def _cost_lines(w: SteadyWindow, n: int = 4) -> list[Evidence]:
    """The ledger's largest costs as evidence lines: what, how long, where (once per process)."""
    lines = []
    for c, inside in w.in_window()[:n]:
        where = c.where + ("" if inside else "; outside the judged window")
        lines.append(ctx(f"{c.kind} ({c.phase}): {c.what}", c.ms, "ms", where))
    return lines


def _ledger_total(w: SteadyWindow) -> list[Evidence]:
    """The ledger's total, where it holds more than one cost (one cost's line is the total already:
    the same figure under a second name)."""
    if len(w.ledger.costs) < 2:
        return []
    return [ctx("one-off costs in the trace, once per process (start-up ledger)", w.ledger.total_ns / 1e6, "ms")]


def _nr_stake(w: SteadyWindow) -> float:
    """The share of the recorded time one-off costs take: of the judged window, or — when they lie
    before it (a start-up the window does not hold) — of the costs and the window together."""
    if w.one_off_ns:
        return w.one_off_pct
    total = w.ledger.total_ns
    return 100.0 * total / (total + w.window_ns) if total + w.window_ns else 0.0


def _not_representative(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    w = obs.steady
    if w is None or w.representative or not obs.has_gpu:
        return None
    stake = _nr_stake(w)
    lines = [
        ev(
            rules,
            "steady.one_off_share",
            "one-off costs (start-up, compilation, capture) in the judged window",
            w.one_off_pct,
        )
    ]
    lines += _cost_lines(w)
    lines += _ledger_total(w)
    phases = " / ".join(w.headline_phases) or "start-up"
    return NOT_REPRESENTATIVE.finding(
        stake,
        lines,
        w.reason or "the window holds one-off costs and no steady state",
        rules,
        title=f"The window holds no steady state: {phases} (one-off costs, paid once per process)",
    )


def _one_off(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    w = obs.steady
    if w is None or not w.ledger.costs or not obs.has_gpu:
        return None
    if w.ledger.total_ns < rules.value("startup.first_call_ms") * 1e6:
        return None
    stake = w.one_off_pct
    lines = [
        ev(rules, "startup.moderate", "one-off costs inside the judged window", stake),
        *_ledger_total(w),
    ]
    lines += _cost_lines(w)
    return ONE_OFF.finding(
        stake,
        lines,
        "paid once per process (or once per shape): a cure removes them from every run, never from a step",
        rules,
    )


# --- wording: the fix from the judged window ---------------------------------------------------


def _recording(c: Context, phases: tuple[str, ...], ranges: list[str], stopped: bool) -> FixText:
    """How to record the steady state, in the options of the tool that made the trace (torch.profiler
    for a Kineto trace, nsys capture ranges for an Nsight export, cudaProfilerStart/Stop natively)."""
    capture = "capture" in phases
    nsys = c.source_format.startswith("nsys")
    lines: list[str] = []
    if capture:
        what = "the graph replays, not the capture"
        lines.append("# the launches in this window are recorded into CUDA/HIP graphs, not run: profile the steps")
        lines.append("# that replay them (cudaGraphLaunch/hipGraphLaunch), after the warm-up captured them")
    elif "compilation" in phases:
        what = "the steady state, after compilation"
        lines.append(
            "# compile (and autotune) before recording: the first calls compile, the later ones run cached code"
        )
    else:
        what = "the steady state, after start-up"
        lines.append("# start recording after start-up: context creation, module loading and first calls happen once")
    if c.native:
        lines = ["//" + x[1:] for x in lines]  # the same words, as C/C++ comments
        lines += [
            "cudaProfilerStart();   // after the warm-up iterations",
            "// ... the timed iterations ...",
            "cudaProfilerStop();",
            "// nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop ./app",
        ]
        if nsys and ranges:
            lines.append(
                f"// or on the NVTX range itself: nsys profile --capture-range=nvtx --nvtx-capture={ranges[0]} ./app"
            )
        if stopped:
            lines.append("// this recording stops before the work began: record longer, past start-up")
        if ranges:
            lines.append(f"// trainscope analyze TRACE --step-range {ranges[0]}   (the steady range of this trace)")
    else:
        if nsys:
            lines += [
                "torch.cuda.profiler.start()   # after a few warm-up iterations",
                "# ... the timed iterations ...",
                "torch.cuda.profiler.stop()",
                "# nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop python script.py",
            ]
            if ranges:
                lines.append(
                    f"# or on the NVTX range itself: nsys profile --capture-range=nvtx --nvtx-capture={ranges[0]} ..."
                )
        else:
            lines += [
                "prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=3, active=5), ...)",
                "for batch in batches:           # the first iterations compile, capture and load: not recorded",
                "    step(batch)",
                "    prof.step()",
            ]
        if stopped:
            lines.append("# this recording stops before the work began: record longer, past start-up")
        if ranges:
            lines.append(f"# trainscope analyze TRACE --step-range {ranges[0]}   (the steady range of this trace)")
    return FixText("profile-steady-state", f"Profile {what}", "\n".join(lines))


def _record_text(c: Context, single: bool, bf16: bool) -> FixText:
    return _recording(c, ("start-up",), [], False)


def _record_words(c: Context, w: SteadyWindow) -> tuple[FixText, float | None]:
    """How to record the steady state this window lacks (the phases it holds, the ranges it offers)."""
    ranges = ([w.steady_range] if w.steady_range else []) + list(w.offered)
    stopped = not w.window_ns or w.reason.startswith("the window holds only")
    return _recording(c, w.headline_phases, ranges, stopped), None


# The one-off kinds each cure removes from a run (or, for a capture, from its timed window).
_PERSISTENT = ("context creation", "first use", "weight upload", "teardown", "module loading")
_WARM_UP = ("lazy loading", "first call", "warm-up step")


def _cure_words(c: Context, w: SteadyWindow) -> tuple[FixText, float | None]:
    """What removes the ledger's largest kind of one-off cost, and the seconds it removes once per
    process (the union of the costs it covers)."""

    by_kind: dict[str, int] = {}
    for cost in w.ledger.costs:
        by_kind[cost.kind] = by_kind.get(cost.kind, 0) + cost.ns
    top = max(by_kind, key=lambda k: by_kind[k])
    if top == "compilation":
        kinds: tuple[str, ...] = ("compilation",)
        if c.native:
            text = FixText(
                "compile-cache",
                "Compile once: cache the compiled kernels, or build them ahead of time",
                "// keep the NVRTC/hipRTC output (cubin/code object) on disk and load it with cuModuleLoadData;\n"
                "// or compile ahead of time for the GPU's architecture (nvcc -gencode arch=compute_90,code=sm_90)",
            )
        else:
            text = FixText(
                "compile-cache",
                "Compile once: persistent compile caches, compilation outside the timed loop",
                "export TORCHINDUCTOR_CACHE_DIR=/persistent/inductor-cache   # Inductor/Triton kernels reused across runs\n"
                "torch._inductor.config.fx_graph_cache = True    # FX graph cache (on by default in recent PyTorch)\n"
                "export TORCHINDUCTOR_AUTOGRAD_CACHE=1          # AOTAutograd cache\n"
                "# JIT compilers (nvFuser, TorchScript, NVRTC): run the first call before the timed loop, in a\n"
                "# process that stays alive, so later calls reuse the compiled kernels",
            )
    elif top in ("graph capture", "graph instantiation"):
        kinds = ("graph capture", "graph instantiation")
        text = FixText(
            "capture-once",
            "Capture the graphs once, before the timed work, and replay them",
            "# capture at start-up (the server's warm-up / torch.cuda.graph), then replay in every step;\n"
            "# keep the process alive so the captures are not repeated for each run"
            if not c.native
            else "// cudaStreamBeginCapture/EndCapture and cudaGraphInstantiate once at start-up;\n"
            "// cudaGraphLaunch in every iteration",
        )
    elif top == "module loading":
        kinds = ("module loading", "lazy loading")
        text = FixText(
            "lazy-loading",
            "Load only the kernels the job uses (CUDA lazy loading), and warm up before timing",
            "export CUDA_MODULE_LOADING=LAZY   # the default since CUDA 12.2: modules load on first use\n"
            "# then launch each kernel once before the timed loop (its first launch loads it)",
        )
    elif top in _WARM_UP:
        kinds = _WARM_UP
        text = FixText(
            "warm-up-outside-timing",
            "Warm up outside the timed loop: first launches and first calls load and tune code",
            "for _ in range(3):    # untimed: first launches load kernels, cuDNN/Triton tune, caches fill\n"
            "    step(batch)\n"
            "torch.cuda.synchronize()   # then time (or profile) the steady iterations"
            if not c.native
            else "// launch every kernel once (or load its module) before the timed iterations",
        )
    else:
        kinds = _PERSISTENT
        text = FixText(
            "persistent-process",
            "Pay start-up once: a persistent process, allocations made up front",
            "# context creation, library initialization and the weight upload happen once per process:\n"
            "# keep one process alive for many runs (a server, a long-lived worker) instead of one per job;\n"
            "# allocate the working memory before the loop (the caching allocator keeps it)"
            if not c.native
            else "// create the context (cudaFree(0)), allocate buffers and load weights once per process;\n"
            "// reuse the process for many runs instead of starting one per job",
        )
    covered = [cost.intervals for cost in w.ledger.costs if cost.kind in kinds and len(cost.intervals[0])]
    seconds = iv.total(iv.union_sets(covered)) / 1e9 if covered else 0.0
    return text, round(seconds, 3)


def _cure_text(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "cure-one-off",
            "Remove the one-off costs from every run (cached code, warm-up, a persistent process)",
            entry("cure-one-off").native,
        )
    return catalog_words("cure-one-off", native=False)


def _nr_share(a: Analysis) -> float | None:
    w = a.steady
    return _nr_stake(w) if w is not None and not w.representative else 0.0


def _one_off_ms(a: Analysis) -> float | None:
    w = a.steady
    return w.one_off_ns / 1e6 if w is not None else None


NOT_REPRESENTATIVE = FindingSpec(
    id="startup/not-representative",
    axis=NOT_REPRESENTATIVE_AXIS,
    title="The window holds no steady state (one-off costs)",
    measure=_not_representative,
    can_be_primary=False,  # decided before the sinks are ranked (verdict.classify), never a sink
    severity=fixed("high"),
    fix=catalog_fix("profile-steady-state", projection="none", text=_record_text, situated=_record_words),
    diff_measure=DiffMeasure("one-off share of the judged window (not representative)", "%", _nr_share),
    **verdict_class("not-representative"),
    describes="a window whose one-off costs (start-up, compilation, capture) leave no steady state to judge",
    thresholds=("steady.one_off_share",),
)

ONE_OFF = FindingSpec(
    id="startup/one-off",
    axis=NOT_REPRESENTATIVE_AXIS,
    title="One-off costs: start-up, compilation, capture (once per process)",
    measure=_one_off,
    can_be_primary=False,
    severity=by_stake("startup.moderate", "steady.one_off_share"),
    fix=catalog_fix("cure-one-off", projection="none", text=_cure_text, situated=_cure_words),
    diff_measure=DiffMeasure("one-off costs inside the judged window", "ms", _one_off_ms),
    critical_path="host",
    headline="ONE-OFF COSTS",
    describes="start-up, compilation, capture, weight upload and teardown: costs paid once per process",
    thresholds=("startup.first_call_ms",),
)

SPECS = (NOT_REPRESENTATIVE, ONE_OFF)
