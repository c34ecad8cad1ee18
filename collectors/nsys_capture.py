"""What an Nsight Systems export says about its own capture, and its CPU samples: read for an export
that holds no GPU rows, so trainscope can say why (``META_DATA_CAPTURE``: what was traced, for which
process, how the capture started and stopped; ``DIAGNOSTIC_EVENT``: what Nsight itself reported,
e.g. "No CUDA events collected. Does the process use CUDA?") and analyze what it does hold (the CPU
IP samples of ``COMPOSITE_EVENTS`` with the leaf frame of each in ``SAMPLING_CALLCHAINS``).

``src`` is the reader's source (:class:`trainscope.collectors.nsys._SqliteSource` or its Arrow
twin): ``tables``, ``columns``, ``small`` and ``rows``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

_CAPTURE = "META_DATA_CAPTURE"
_PROCESS_KEY = re.compile(r"^PROCESS_(\d+):(COMMAND|COLLECT_CUDA_TRACE|COLLECT_NVTX_TRACE)$")
# Nsight's own diagnostics worth repeating to a user whose export lacks GPU rows: its warnings about
# CUDA ("No CUDA events collected. Does the process use CUDA?") and how the capture range began and ended.
_RANGE = re.compile(r"profiling session using|capture range", re.I)
_MAX_DIAGNOSTICS = 6


def _true(value: object) -> bool | None:
    v = str(value).strip().lower()
    return True if v in ("true", "1", "yes") else False if v in ("false", "0", "no") else None


def capture_info(src: Any) -> dict[str, Any]:
    """The capture settings an export records (empty where it records none): ``events`` (the
    ``CAPTURE_EVENT_TYPE`` values: Cuda, NvtxEvents, OSRuntime...), ``cuda_requested`` (CUDA tracing
    asked for: a Cuda event type or a process collecting CUDA trace), ``processes`` (each launched
    command with whether CUDA and NVTX trace were collected for it), ``cuda_scope``,
    ``start_trigger``/``stop_trigger``, ``run_duration_ms``, ``diagnostics`` (Nsight's messages
    about CUDA and the capture range) and ``gpus`` (the GPUs the target lists)."""
    out: dict[str, Any] = {}
    if _CAPTURE in src.tables and {"name", "value"} <= src.columns(_CAPTURE):
        rows = [(str(n), v) for n, v in src.small(_CAPTURE, ["name", "value"]) if n is not None]
        events = [str(v) for n, v in rows if n == "CAPTURE_EVENT_TYPE"]
        single = dict(rows)
        procs: dict[int, dict[str, Any]] = {}
        for n, v in rows:
            m = _PROCESS_KEY.match(n)
            if m:
                key = {"COMMAND": "command", "COLLECT_CUDA_TRACE": "cuda", "COLLECT_NVTX_TRACE": "nvtx"}[m[2]]
                procs.setdefault(int(m[1]), {})[key] = str(v) if key == "command" else _true(v)
        cuda_events = any(e.lower() == "cuda" for e in events)
        out.update(
            events=events,
            cuda_requested=cuda_events or any(p.get("cuda") for p in procs.values()),
            processes=[procs[k] for k in sorted(procs)],
            cuda_scope=single.get("CUDA_TRACE_SCOPE"),
            start_trigger=single.get("START_TRIGGER"),
            stop_trigger=single.get("STOP_TRIGGER"),
            run_duration_ms=_number(single.get("RUN_DURATION_MS")),
        )
    if "DIAGNOSTIC_EVENT" in src.tables and "text" in src.columns("DIAGNOSTIC_EVENT"):
        seen: list[str] = []
        for text, severity in src.small("DIAGNOSTIC_EVENT", ["text", "severity"]):
            t = " ".join(str(text or "").split())
            # warnings and errors (severity 2, 3) about CUDA; the capture range's start and stop
            warn = isinstance(severity, int) and severity in (2, 3) and "CUDA" in t
            if t and (warn or _RANGE.search(t)) and t not in seen:
                seen.append(t)
        if seen:
            out["diagnostics"] = seen[:_MAX_DIAGNOSTICS]
    if "TARGET_INFO_GPU" in src.tables and "name" in src.columns("TARGET_INFO_GPU"):
        out["gpus"] = [str(n) for (n,) in src.small("TARGET_INFO_GPU", ["name"]) if n]
    return out


def _number(v: object) -> float | None:
    try:
        return float(str(v))
    except ValueError:
        return None


def cpu_samples(src: Any) -> dict[str, np.ndarray] | None:
    """The export's CPU IP samples (``COMPOSITE_EVENTS``), each with its leaf frame's module and
    function string ids (``SAMPLING_CALLCHAINS`` at stack depth 0; -1 where none): ``start``,
    ``globalTid``, ``module``, ``symbol``. None where the export holds no samples."""
    if "COMPOSITE_EVENTS" not in src.tables:
        return None
    ev = src.rows("COMPOSITE_EVENTS", {"id": None, "start": None, "globalTid": "0"}).cols
    if not ev or not len(ev["id"]):
        return None
    module = np.full(len(ev["id"]), -1, np.int64)
    symbol = np.full(len(ev["id"]), -1, np.int64)
    if "SAMPLING_CALLCHAINS" in src.tables and "stackDepth" in src.columns("SAMPLING_CALLCHAINS"):
        cc = src.rows(
            "SAMPLING_CALLCHAINS",
            {"id": None, "symbol": "-1", "module": "-1"},
            one_of=("stackDepth", (0,)),
        ).cols
        if cc and len(cc["id"]):
            order = np.argsort(cc["id"], kind="stable")
            ids = cc["id"][order]
            pos = np.minimum(np.searchsorted(ids, ev["id"]), len(ids) - 1)
            hit = ids[pos] == ev["id"]
            module[hit] = cc["module"][order][pos[hit]]
            symbol[hit] = cc["symbol"][order][pos[hit]]
    return {"start": ev["start"], "globalTid": ev["globalTid"], "module": module, "symbol": symbol}


def summarize_samples(
    samples: dict[str, np.ndarray], sel: np.ndarray, strings_raw: dict[int, str], origin: int, top: int = 6
) -> dict[str, Any]:
    """The ``sel`` samples in a few numbers: how many, their span (ns from ``origin``), threads, and
    the leaf modules and functions most samples fall in (name, samples)."""
    ts = samples["start"][sel]
    if not len(ts):
        return {}

    def ranked(col: str, base: bool) -> list[tuple[str, int]]:
        ids, counts = np.unique(samples[col][sel], return_counts=True)
        named: dict[str, int] = {}
        for i, c in zip(ids.tolist(), counts.tolist()):
            name = strings_raw.get(int(i), "") if i >= 0 else ""
            name = (name.rsplit("/", 1)[-1] if base else name) or "(unresolved)"
            named[name] = named.get(name, 0) + int(c)
        return sorted(named.items(), key=lambda x: -x[1])[:top]

    return {
        "count": int(len(ts)),
        "start_ns": int(ts.min()) - origin,
        "end_ns": int(ts.max()) - origin,
        "threads": int(len(np.unique(samples["globalTid"][sel]))),
        "by_module": ranked("module", True),
        "by_function": ranked("symbol", False),
    }
