"""An Nsight Systems export without GPU rows, judged on what it holds (issue 36 item 5).

An export with no kernel, copy or memset cannot say where GPU time goes, but it is not empty: NVTX
ranges, OS runtime calls, CUDA API calls and CPU samples say where the host's time went, and the
export's capture metadata (``META_DATA_CAPTURE``, Nsight's ``DIAGNOSTIC_EVENT`` messages, read by
``collectors/nsys_capture.py`` into ``Trace.metadata["capture"]``) says why no GPU row is there:

- CUDA tracing was on and nothing was captured: the profiled process is not the one that used the
  GPU (a launcher, a server, a child outside the traced process tree), the GPU work ran outside the
  capture range (a trigger or duration that ended first), or the program never reached CUDA (still
  starting up or compiling);
- CUDA calls were traced but no GPU operation ran: the recording ended before the GPU work began;
- CUDA tracing was off (``--trace`` without ``cuda``): only host activity was recorded.

The verdict is INSUFFICIENT GPU EVIDENCE (axis ``insufficient_evidence``, bottleneck
:data:`NO_GPU_ROWS`, benchmark class ``insufficient-gpu-evidence``) with that reason, the host-time
breakdown by range (each range name's time over the window), the heaviest OS runtime and CUDA calls,
the CPU samples by module, and how to record the GPU work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Verdict
from trainscope.analyzers.trace.recommendations import Recommendation
from trainscope.analyzers.trace.steps import PROFILER_STEP
from trainscope.analyzers.trace.steps import host_span
from trainscope.traces.model import RuntimeCalls
from trainscope.traces.model import Trace

NO_GPU_ROWS = "nsys/no-gpu-rows"  # the verdict's "bottleneck": the benchmark class insufficient-gpu-evidence
LABEL_CLASS = "insufficient-gpu-evidence"
_NUMBER = re.compile(r"\d+")
# Leaf modules of CPU samples that are compilers: samples there are JIT compilation.
_COMPILER = re.compile(r"LLVM|nvrtc|nvJitLink|nvptx|ptxas|libclang|jit", re.I)
_TOP = 5


@dataclass(frozen=True)
class HostTime:
    """Host time by name over the window: (name, ns, count), heaviest first."""

    window_ns: int
    ranges: list[tuple[str, int, int]] = field(default_factory=list)  # NVTX / record_function ranges
    range_count: int = 0
    os_calls: list[tuple[str, int, int]] = field(default_factory=list)  # OS runtime (poll, read, ...)
    cuda_calls: list[tuple[str, int, int]] = field(default_factory=list)  # CUDA runtime / driver API
    samples: dict[str, Any] = field(default_factory=dict)  # collectors/nsys_capture.summarize_samples
    capture: dict[str, Any] = field(default_factory=dict)  # collectors/nsys_capture.capture_info

    def pct(self, ns: int) -> float:
        return 100.0 * ns / self.window_ns if self.window_ns else 0.0


def host_time(trace: Trace) -> HostTime | None:
    """The host-time breakdown of an Nsight export without GPU rows (None for any other trace)."""
    if trace.has_gpu_activity or not trace.format.startswith("nsys") or "capture" not in trace.metadata:
        return None
    samples = trace.metadata.get("cpu_samples") or {}
    lo, hi = host_span(trace)
    a, o = trace.annotations, trace.cpu_ops
    umbrella = np.array([bool(PROFILER_STEP.search(s)) for s in trace.strings], bool)
    host_a = (a.device < 0) & ~umbrella[a.name] if len(a) else np.zeros(0, bool)
    rs = np.concatenate([a.ts[host_a], o.ts])
    re_ = np.concatenate([a.end[host_a], o.end])
    names = np.concatenate([a.name[host_a], o.name])
    capture = trace.metadata.get("capture")
    return HostTime(
        hi - lo,
        _by_name(trace, rs, re_, names, numbered=True),
        int(len(rs)),
        _calls(trace, trace.os_runtime),
        _calls(trace, trace.runtime),
        samples if isinstance(samples, dict) else {},
        capture if isinstance(capture, dict) else {},
    )


def _by_name(
    trace: Trace, s: np.ndarray, e: np.ndarray, names: np.ndarray, numbered: bool = False
) -> list[tuple[str, int, int]]:
    """Per name (numbered instances "IO 3", "IO 4" as "IO N"), the time its intervals cover (their
    union: nested or overlapping instances count once) and how many there are, heaviest first."""
    groups: dict[str, list[int]] = {}
    for i, nm in enumerate(names.tolist()):
        key = trace.strings[nm]
        groups.setdefault(_NUMBER.sub("N", key) if numbered else key, []).append(i)
    out = []
    for key, idx in groups.items():
        k = np.asarray(idx, np.int64)
        out.append((key, iv.total(iv.union(s[k], e[k])), len(idx)))
    return sorted(out, key=lambda x: -x[1])[:_TOP]


def _calls(trace: Trace, r: RuntimeCalls) -> list[tuple[str, int, int]]:
    return _by_name(trace, r.ts, r.end, r.name) if len(r) else []


def _reason(h: HostTime, trace: Trace) -> tuple[str, str]:
    """Why the export holds no GPU row, from its capture metadata, and how to record the GPU work."""
    c = h.capture
    cuda_calls = len(trace.runtime)
    record = (
        "record the process that runs the GPU work with `nsys profile --trace=cuda,nvtx,osrt` and a capture "
        "range over the training loop (`--capture-range=cudaProfilerApi` or `--capture-range=nvtx`), after warm-up"
    )
    if c.get("cuda_requested") is None and not c.get("events"):
        return ("the export holds no GPU rows and does not record whether CUDA tracing was on", record)
    if not c.get("cuda_requested"):
        events = ", ".join(c.get("events") or []) or "none listed"
        return (
            f"CUDA tracing was off for this capture (traced: {events}): only host activity was recorded",
            "record again with CUDA tracing on: `nsys profile --trace=cuda,nvtx,osrt`",
        )
    if cuda_calls:
        return (
            f"CUDA tracing was on and {cuda_calls:,} CUDA API calls were captured, but no kernel, copy or memset "
            "ran in the capture: the recording ended before the GPU work began (start-up only), or another "
            "process ran it",
            record,
        )
    why = (
        "CUDA tracing was on but nothing was captured — no CUDA call, kernel, copy or memset. That happens when "
        "the profiled process is not the one that used the GPU (a launcher, a server, a child process outside "
        "the traced tree), when the GPU work ran outside the capture range (a trigger or duration that ended "
        "first), or when the program never reached CUDA while recording (still starting up or compiling)"
    )
    facts = []
    off = [p.get("command") or "?" for p in c.get("processes") or [] if p.get("cuda") is False]
    if off:
        facts.append(f"CUDA trace collection was off for the launched process ({', '.join(off)})")
    if c.get("cuda_scope"):
        facts.append(f"CUDA trace scope {c['cuda_scope']}")
    if c.get("run_duration_ms"):
        facts.append(f"the capture lasted {c['run_duration_ms']:,.0f} ms (stop trigger {c.get('stop_trigger')})")
    if facts:
        why += "; " + "; ".join(facts)
    return (
        why,
        "profile the process that uses the GPU itself (not a launcher; --trace-fork-before-exec=true for forked "
        "workers) with `nsys profile --trace=cuda,nvtx,osrt` and a capture range that holds the training loop "
        "after warm-up (`--capture-range=cudaProfilerApi` or `--capture-range=nvtx`)",
    )


def host_only_verdict(h: HostTime, trace: Trace) -> Verdict:
    """INSUFFICIENT GPU EVIDENCE, with the reason read from the export and what it holds."""
    reason, advice = _reason(h, trace)
    ev: list[Evidence] = []
    held = []
    if h.ranges:
        name, ns, n = h.ranges[0]
        held.append(
            f"{h.range_count:,} host ranges over {h.window_ns / 1e9:.2f} s, '{name}' the longest "
            f"({h.pct(ns):.0f} % of the time)"
        )
        for name, ns, n in h.ranges:
            ev.append(Evidence(f"host range '{name}' ×{n}", round(h.pct(ns), 2), "% of the window", "", "trace: NVTX"))
    if h.os_calls:
        held.append(f"{sum(n for _, _, n in h.os_calls):,} OS runtime calls (heaviest: {h.os_calls[0][0]})")
        for name, ns, n in h.os_calls[:3]:
            ev.append(
                Evidence(f"OS runtime call {name} ×{n}", round(h.pct(ns), 2), "% of the window", "", "trace: OSRT")
            )
    for name, ns, n in h.cuda_calls[:3]:
        ev.append(Evidence(f"CUDA API call {name} ×{n}", round(h.pct(ns), 2), "% of the window", "", "trace: CUDA API"))
    s = h.samples
    if s.get("count"):
        top, k = (s.get("by_module") or [("(unresolved)", 0)])[0]
        share = 100.0 * k / s["count"]
        compiling = bool(_COMPILER.search(top))
        held.append(
            f"{s['count']:,} CPU samples, {share:.0f} % in {top}"
            + (": JIT compilation — profile after warm-up, once the code is compiled" if compiling else "")
        )
        for mod, n in (s.get("by_module") or [])[:3]:
            ev.append(
                Evidence(
                    f"CPU samples in {mod}",
                    round(100.0 * n / s["count"], 2),
                    "% of samples",
                    "",
                    "trace: CPU IP samples",
                )
            )
    for d in (h.capture.get("diagnostics") or [])[:3]:
        ev.append(Evidence(f"Nsight: {d}", None, "", "", "export: DIAGNOSTIC_EVENT"))
    gpus = h.capture.get("gpus") or []
    ev.insert(0, Evidence("GPU rows (kernels, copies, memsets) in the export", 0, "rows", "", "trace"))
    if gpus:
        ev.insert(
            1, Evidence(f"GPUs the target lists: {', '.join(dict.fromkeys(gpus))}", len(gpus), "GPUs", "", "export")
        )
    summary = f"no GPU rows in this Nsight export: {reason}. "
    summary += ("What it holds is host time: " + "; ".join(held) + ". ") if held else ""
    summary += f"To judge the GPU, {advice}"
    return Verdict("insufficient_evidence", 0.0, NO_GPU_ROWS, summary, ev)


def record_gpu_work(h: HostTime, trace: Trace) -> Recommendation:
    """Fix #1 of an export without GPU rows: record the GPU work itself (its reason decides how).
    Recording advice, so no projection: the export holds no GPU time to project a gain from."""
    _, advice = _reason(h, trace)
    return Recommendation(
        "record-gpu-work",
        NO_GPU_ROWS,
        "Record the GPU work itself",
        f"# {advice}\nnsys profile --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi -o steady python train.py",
        None,
        None,
        "recording advice: the export holds no GPU rows to project a gain from",
    )
