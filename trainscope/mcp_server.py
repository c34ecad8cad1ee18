"""``trainscope mcp``: the Model Context Protocol server (stdio) a coding agent calls.

Every tool is a call of :mod:`trainscope.api` with a typed result: the numbers and the sources the
report prints (evidence lines carry their citation, fixes their projection and its basis), never a
free-form guess. The server reads only paths under the ``--root`` directories (symbolic links
resolved first; a directory of rank traces is checked file by file), opens the run history
read-only, and writes nothing. Needs the ``mcp`` extra (``pip install 'trainscope-dam[mcp]'``).
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable, Optional

from pydantic import BaseModel, Field

from trainscope import __version__

INSTRUCTIONS = (
    "trainscope diagnoses why a deep-learning training or inference run is slow from its profiler trace "
    "(PyTorch/Kineto .json/.json.gz, a directory of rank traces, Nsight Systems .sqlite): a D·A·M verdict "
    "(data-, algorithm- or machine-bound) with measured evidence, where step time goes, the top kernels and "
    "fixes ranked by a projected gain that is an upper bound. Start with analyze_trace; use explain_finding "
    "for one finding, list_kernels / list_steps / timeline_window to look closer, diff_runs to compare two "
    "runs (traces or stored runs: 12, latest, baseline:TAG), memory_snapshot for a CUDA memory snapshot, and "
    "list_runs for the run history. Quote the numbers and sources the tools return; do not extrapolate beyond "
    "them. Paths must lie under the server's --root."
)


# -- typed results ---------------------------------------------------------------------------------


class Evidence(BaseModel):
    metric: str
    value: Optional[float] = None
    unit: str = ""
    threshold: str = ""
    source: str = Field("", description="where the number or its threshold comes from")
    meets: Optional[bool] = None


class Finding(BaseModel):
    id: str
    axis: str
    severity: str
    title: str
    stake_pct: float = Field(description="share of step time this cause accounts for")
    detail: str = ""
    evidence: list[Evidence] = []


class Verdict(BaseModel):
    axis: str = Field(description="data | algorithm | machine | balanced | insufficient_evidence")
    bottleneck: Optional[str] = Field(None, description="the primary finding's id")
    confidence: float
    headline: str
    summary: str
    evidence: list[Evidence] = []
    runner_up: Optional[str] = None


class Sink(BaseModel):
    sink: str
    pct: float = Field(description="% of step time")
    ms_per_step: float
    can_be_primary: bool
    source: str


class Kernel(BaseModel):
    name: str
    kernel_class: str
    count: int
    total_ms: float
    mean_us: float
    share_pct: float = Field(description="% of kernel time in the analyzed steps")
    tensor_core: Optional[bool] = None
    bound: Optional[str] = Field(None, description="roofline: memory | compute | unknown")


class Fix(BaseModel):
    rank: int
    id: str
    finding: str
    title: str
    change: str = Field(description="the code or flag to change")
    projected_speedup: Optional[float] = Field(None, description="upper bound, ×")
    projected_step_ms: Optional[float] = None
    bound: Optional[str] = None
    basis: str = Field("", description="the formula with the measured numbers")


class StepTimes(BaseModel):
    p50: float
    p95: float
    mean: float


class Analysis(BaseModel):
    source: str
    format: str
    rank: Optional[int] = None
    ranks: int
    device: Optional[str] = None
    steps: int
    steps_method: str
    step_time_ms: StepTimes
    gpu_busy_pct: float
    data_wait_pct: float
    verdict: Verdict
    findings: list[Finding]
    sinks_basis: str = ""
    sinks: list[Sink]
    top_kernels: list[Kernel]
    fixes: list[Fix]
    warnings: list[str]
    command_line: str = Field(description="the trainscope command that prints the same report")


class Explanation(BaseModel):
    source: str
    rank: Optional[int] = None
    finding: Finding
    role: str = Field(description="primary (the verdict) | runner-up | secondary")
    verdict: dict[str, Any]
    headline: str
    graded_by: list[dict[str, Any]] = Field(description="thresholds that grade it: name, value, unit, source")
    fixes: list[Fix]
    timeline: Optional[dict[str, Any]] = Field(None, description="the step and interval that show it most")


class KernelTable(BaseModel):
    source: str
    rank: Optional[int] = None
    device: Optional[str] = None
    basis: str
    total_kernel_ms: float
    kernel_count: int
    steps: int
    matched: int
    kernels: list[dict[str, Any]]


class StepTable(BaseModel):
    source: str
    rank: Optional[int] = None
    steps_method: str
    steps_note: str
    step_time_ms: dict[str, float]
    matched: int
    steps: list[dict[str, Any]]


class TimelineWindow(BaseModel):
    source: str
    rank: Optional[int] = None
    start_ms: float
    end_ms: float
    steps: list[str]
    matched: int
    shown: int
    busy_ms: dict[str, float]
    events: list[dict[str, Any]]


class FixAchieved(BaseModel):
    id: str
    finding: str
    title: str
    status: str
    projected_speedup: Optional[float] = None
    achieved_speedup: Optional[float] = None
    line: Optional[str] = None


class Diff(BaseModel):
    before: str
    after: str
    basis: str = Field(description="traces (full comparison) or summaries (a side is a stored run)")
    comparable: bool
    comparability: list[dict[str, Any]]
    verdict: dict[str, Any]
    step_time_ms: dict[str, dict[str, Optional[float]]]
    fixes: list[FixAchieved]
    gate: Optional[dict[str, Any]] = None
    document: dict[str, Any] = Field(description="the whole trainscope.diff/1 document")


class MemoryDevice(BaseModel):
    device: int
    peak_allocated_bytes: int
    reserved_at_peak_bytes: int
    peak_time_us: Optional[int] = None
    phase: Optional[str] = None
    events: int
    live_at_peak: list[dict[str, Any]] = Field(description="allocations live at the peak, largest first")
    live_count: int
    notes: list[str]


class Memory(BaseModel):
    source: str
    kind: str
    devices: list[MemoryDevice]
    findings: list[dict[str, Any]]
    warnings: list[str]
    document: dict[str, Any] = Field(description="the whole trainscope.memory/1 document")


class Runs(BaseModel):
    store: str
    runs: list[dict[str, Any]]


# -- paths ---------------------------------------------------------------------------------------------


class Roots:
    """The directories the server may read. A path is resolved (symbolic links followed) and must lie
    in one of them; a directory must hold nothing that resolves outside."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = [os.path.realpath(r) for r in roots]

    def inside(self, real: str) -> bool:
        return any(real == r or os.path.commonpath([real, r]) == r for r in self.roots)

    def resolve(self, path: str) -> str:
        from trainscope.api import BadInput

        if not isinstance(path, str) or not path or "\0" in path:
            raise BadInput("give a path")
        if any(c in path for c in "*?["):
            raise BadInput(f"{path}: glob patterns are not accepted here; give a file or a directory")
        full = path if os.path.isabs(path) else os.path.join(self.roots[0], path)
        real = os.path.realpath(full)
        if not self.inside(real):
            raise BadInput(f"{path}: refused — outside the allowed roots ({', '.join(self.roots)})")
        if not os.path.exists(real):
            raise BadInput(f"{path}: no such file or directory")
        if os.path.isdir(real):
            for top, dirs, files in os.walk(real):
                for name in dirs + files:
                    if not self.inside(os.path.realpath(os.path.join(top, name))):
                        raise BadInput(f"{path}: refused — {os.path.join(top, name)} leads outside the allowed roots")
        return real


# -- the server ---------------------------------------------------------------------------------------


def _finding(f: dict) -> Finding:
    return Finding(
        **{k: f.get(k) for k in ("id", "axis", "severity", "title", "stake_pct")},
        detail=f.get("detail") or "",
        evidence=[Evidence(**e) for e in f.get("evidence", [])],
    )


def _fix(r: dict) -> Fix:
    return Fix(
        **{
            k: r.get(k)
            for k in ("rank", "id", "finding", "title", "change", "projected_speedup", "projected_step_ms", "bound")
        },
        basis=r.get("basis") or "",
    )


def analysis_result(report: Any, path: str) -> Analysis:
    from trainscope.reports.document import headline

    d = report.to_dict()
    v = d["verdict"]
    b = d["breakdown"]
    sinks = d.get("sinks") or {}
    return Analysis(
        source=path,
        format=d["input"]["format"],
        rank=d.get("rank"),
        ranks=d["input"]["traces"],
        device=(d.get("device") or {}).get("name"),
        steps=len(d["steps"]),
        steps_method=d["steps_method"],
        step_time_ms=StepTimes(**b["step_time_ms"]),
        gpu_busy_pct=b["gpu_busy_pct"],
        data_wait_pct=b["data_wait_pct"],
        verdict=Verdict(
            axis=v["axis"],
            bottleneck=v["bottleneck"],
            confidence=v["confidence"],
            headline=headline(d),
            summary=v["summary"],
            evidence=[Evidence(**e) for e in v["evidence"]],
            runner_up=v.get("runner_up"),
        ),
        findings=[_finding(f) for f in d["findings"]],
        sinks_basis=sinks.get("basis", ""),
        sinks=sorted(
            (
                Sink(sink=k, **{f: s[f] for f in ("pct", "ms_per_step", "can_be_primary", "source")})
                for k, s in (sinks.get("by_sink") or {}).items()
            ),
            key=lambda s: -s.pct,
        ),
        top_kernels=[
            Kernel(
                name=k["name"],
                kernel_class=k["class"],
                count=k["count"],
                total_ms=k["total_ms"],
                mean_us=k["mean_us"],
                share_pct=k["share_pct"],
                tensor_core=k.get("tensor_core"),
                bound=k.get("bound"),
            )
            for k in d["kernels"]["top"]
        ],
        fixes=[_fix(r) for r in d["recommendations"]],
        warnings=list(d["warnings"]),
        command_line=f"trainscope analyze {path} --format json",
    )


def build_server(roots: list[str], store: str | None = None):
    """The MCP server over ``roots`` (and the run history at ``store``, read-only)."""
    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    from trainscope import api

    guard = Roots(roots)
    server = MCPServer("trainscope", instructions=INSTRUCTIONS, version=__version__)
    read_only = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
    lock = threading.Lock()  # one analysis at a time: traces are large and this machine may be small

    @functools.lru_cache(maxsize=4)
    def _analyzed(real: str, stamp: tuple, thresholds: tuple, step_range: str | None):
        return api.analyze(real, thresholds=dict(thresholds), step_range=step_range, jobs=1)

    def report(path: str, thresholds: dict[str, float] | None = None, step_range: str | None = None):
        real = guard.resolve(path)
        st = os.stat(real)
        with lock:
            return _analyzed(real, (st.st_mtime_ns, st.st_size), tuple(sorted((thresholds or {}).items())), step_range)

    def tool(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 (every failure is one line for the agent)
                message, _ = api.describe(e)
                raise ToolError(message) from None

        return server.tool(annotations=read_only)(wrapper)

    @tool
    def analyze_trace(
        path: str, thresholds: Optional[dict[str, float]] = None, step_range: Optional[str] = None
    ) -> Analysis:
        """Diagnose a recorded profiler trace (file or directory of rank traces under the root): the D·A·M
        verdict with its evidence, step time, the sinks of step time, the top kernels and the fixes ranked
        by projected gain (upper bounds). The same analysis as `trainscope analyze PATH --format json`.
        thresholds overrides diagnostic thresholds by name (see `trainscope thresholds`)."""
        return analysis_result(report(path, thresholds, step_range), path)

    @tool
    def explain_finding(path: str, finding: str, rank: Optional[int] = None) -> Explanation:
        """One finding of a trace's analysis (e.g. data/input-wait): its grade and stake, every evidence line
        with its source, its role in the verdict, the thresholds that grade it, the fixes for it with their
        projections, and the step and interval of the timeline that show it most."""
        e = api.explain_finding(report(path), finding, rank=rank)
        return Explanation(
            source=path,
            rank=e["rank"],
            finding=_finding(e["finding"]),
            role=e["role"],
            verdict=e["verdict"],
            headline=e["headline"],
            graded_by=e["graded_by"],
            fixes=[_fix(r) for r in e["fixes"]],
            timeline=e["timeline"],
        )

    @tool
    def list_kernels(
        path: str,
        name_contains: Optional[str] = None,
        kernel_class: Optional[str] = None,
        min_total_ms: Optional[float] = None,
        limit: int = 30,
        rank: Optional[int] = None,
        sort: str = "total",
    ) -> KernelTable:
        """Every kernel that ran in the analyzed steps on the analyzed GPU, filtered by name substring, class
        (gemm, convolution, attention, elementwise, normalization, softmax, reduction, embedding,
        communication, other) and least total time; largest total time first, or with sort="pct_of_roof"
        the kernels furthest from their own roofline roof first."""
        return KernelTable(
            **api.kernel_table(
                report(path),
                name_contains=name_contains,
                kernel_class=kernel_class,
                min_total_ms=min_total_ms,
                limit=max(1, min(limit, 1000)),
                rank=rank,
                sort=sort,
            )
        )

    @tool
    def list_steps(
        path: str,
        min_duration_ms: Optional[float] = None,
        outliers_only: bool = False,
        limit: int = 200,
        rank: Optional[int] = None,
    ) -> StepTable:
        """The analyzed steps: start (ms, the clock timeline_window uses), duration, GPU busy and data-wait
        shares, time per breakdown category, and whether the step is an outlier; filtered."""
        return StepTable(
            **api.step_table(
                report(path),
                min_duration_ms=min_duration_ms,
                outliers_only=outliers_only,
                limit=max(1, min(limit, 10000)),
                rank=rank,
            )
        )

    @tool
    def timeline_window(
        path: str,
        start_ms: float,
        end_ms: float,
        kinds: Optional[list[str]] = None,
        name_contains: Optional[str] = None,
        limit: int = 200,
        rank: Optional[int] = None,
    ) -> TimelineWindow:
        """Every event overlapping [start_ms, end_ms) — kernels, copies, memsets, cpu ops, annotations,
        runtime calls (kinds filters them) — by start time, with its lane and step, and the busy time per
        kind in the window. Times are on the clock of list_steps' start_ms."""
        return TimelineWindow(
            **api.timeline_window(
                report(path),
                start_ms,
                end_ms,
                kinds=kinds,
                name_contains=name_contains,
                limit=max(1, min(limit, 5000)),
                rank=rank,
            )
        )

    @tool
    def diff_runs(
        before: str,
        after: str,
        metric: str = "step_p50",
        fail_if_slower: Optional[float] = None,
        gate_anyway: bool = False,
    ) -> Diff:
        """Compare two runs — traces under the root, or stored runs of the history (12, latest[:TAG],
        baseline[:TAG]) — as `trainscope diff` does: verdict, step time, comparability, each earlier fix's
        projected against achieved gain, and with fail_if_slower the statistical gate (Mann-Whitney test
        over the steps, p-value, the change with its interval)."""
        sides = [s if api.is_run_ref(s) else guard.resolve(s) for s in (before, after)]
        st = api.open_store(store, read_only=True) if any(api.is_run_ref(s) for s in sides) else None
        with lock:
            r = api.diff(
                sides[0], sides[1], metric=metric, fail_if_slower=fail_if_slower, store=st, gate_anyway=gate_anyway
            )
        d = r.to_dict()
        return Diff(
            before=before,
            after=after,
            basis="summaries" if r.from_summaries else "traces",
            comparable=d["comparable"],
            comparability=d["comparability"],
            verdict=d["verdict"],
            step_time_ms=d["step_time_ms"],
            gate=d["gate"],
            fixes=[FixAchieved(**{k: f[k] for k in FixAchieved.model_fields}) for f in d["fixes_achieved"]],
            document=d,
        )

    @tool
    def memory_snapshot(path: str, top: int = 10) -> Memory:
        """A CUDA memory snapshot (torch.cuda.memory._dump_snapshot, .pickle[.gz]; read with a restricted
        unpickler) or a memory timeline: per device the peak allocated and reserved memory, when and in which
        phase, and the allocations live at the peak with their sites; capacity findings."""
        real = guard.resolve(path)
        with lock:
            m = api.memory(real, top=max(1, min(top, 100)))
            peaks = m.peaks()
        doc = m.to_dict()
        devices = [
            MemoryDevice(
                device=p.device,
                peak_allocated_bytes=p.peak_bytes,
                reserved_at_peak_bytes=p.reserved_at_peak,
                peak_time_us=p.peak_time_us,
                phase=p.phase,
                events=p.events,
                live_count=len(p.allocations),
                notes=list(p.notes),
                live_at_peak=[
                    {
                        "size_bytes": a.size,
                        "share_of_peak_pct": round(a.share_of(p.peak_bytes), 2),
                        "site": a.site,
                        "origin": a.origin,
                        "stack": [f"{fr.filename}:{fr.line} ({fr.name})" for fr in a.stack[:12]],
                    }
                    for a in p.allocations[:top]
                ],
            )
            for p in peaks
        ]
        return Memory(
            source=path,
            kind=m.kind,
            devices=devices,
            findings=doc.get("findings", []),
            warnings=doc.get("warnings", []),
            document=doc,
        )

    @tool
    def list_runs(
        tag: Optional[str] = None, verdict: Optional[str] = None, gpu: Optional[str] = None, limit: int = 20
    ) -> Runs:
        """The runs saved in the run history (analyze --save, watch --save, the on_trace_ready hook), newest
        first: id, when, tag, git commit, GPU, steps, step time, verdict, fixes with their projections, and
        which are baselines; filtered by tag, verdict (axis or finding id) and GPU name."""
        path = store or api.default_store_path()
        if not os.path.exists(path):
            return Runs(store=path, runs=[])
        with api.open_store(path, read_only=True) as st:
            return Runs(
                store=path,
                runs=[r.to_dict() for r in st.runs(tag=tag, verdict=verdict, gpu=gpu, limit=max(1, min(limit, 500)))],
            )

    return server


def serve(roots: list[str], store: str | None = None) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    import logging

    logging.getLogger("mcp").setLevel(logging.WARNING)
    build_server(roots, store).run("stdio")
