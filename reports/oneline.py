"""One line per result, for ``repr()`` in a Python session: what the result is and its verdict,
never the whole dataclass tree (a diff's tree runs to hundreds of kilobytes)."""

from __future__ import annotations

import os
from typing import Any

from trainscope.reports.diff_document import verdict_headline
from trainscope.traces.safe_text import visible

MAX = 400  # characters: a repr is a line, not a report


def _base(path: object) -> str:
    return os.path.basename(str(path).rstrip("/")) or str(path)


def _cut(s: str) -> str:
    # names from traces: controls, bidi and separators spelled out (traces/safe_text.py), then any
    # other invisible character (zero-width, private use) as "?"
    s = " ".join(visible(s).split())
    s = "".join(ch if ch.isprintable() else "?" for ch in s)
    return s if len(s) <= MAX else s[: MAX - 1] + "…"


def _headline(axis: str, bottleneck: str | None, summary: str = "") -> str:
    return verdict_headline(axis, bottleneck, summary)


def report_line(source: str, verdict: Any, steps: int, step_p50_ms: float | None, findings: int, ranks: int) -> str:
    conf = "" if verdict.axis == "insufficient_evidence" else f" ({verdict.confidence:.2f})"
    parts = [
        f"{_headline(verdict.axis, verdict.bottleneck, verdict.summary)}{conf}",
        f"{steps} step{'' if steps == 1 else 's'}",
    ]
    if step_p50_ms:
        parts.append(f"step p50 {step_p50_ms:.2f} ms")
    parts.append(f"{findings} finding{'' if findings == 1 else 's'}")
    if ranks > 1:
        parts.append(f"{ranks} ranks")
    return _cut(f"<Report {_base(source)}: " + " · ".join(parts) + ">")


def diff_line(d: Any, gate: Any, fixes: list[Any]) -> str:
    """Before → after, the verdict change, the headline number (work per window for fixed capture
    windows, else step p50) and the gate."""
    v = d.verdict
    before, after = (d.before, d.after)
    names = (
        f"{_base(getattr(before, 'path', None) or getattr(before, 'source', ''))} → "
        f"{_base(getattr(after, 'path', None) or getattr(after, 'source', ''))}"
    )
    verdict = _headline(v.before_axis, v.before_bottleneck, v.before_summary)
    verdict += f" → {_headline(v.after_axis, v.after_bottleneck, v.after_summary)}" if v.changed else " (unchanged)"
    work = getattr(d, "work", None)
    if work is not None and work.fixed_windows and work.before_kernel_ms > 0:
        ch = 100 * (work.after_kernel_ms - work.before_kernel_ms) / work.before_kernel_ms
        head = (
            f"kernel time per window {work.before_kernel_ms:.2f} → {work.after_kernel_ms:.2f} ms ({ch:+.1f} %), "
            f"kernels {work.before_kernels:.0f} → {work.after_kernels:.0f}"
        )
    else:
        p = d.p50
        sp = p.speedup
        speed = "" if sp is None else f", {sp:.2f}× faster" if sp >= 1 else f", {1 / sp:.2f}× slower"
        head = f"step p50 {p.before_ms:.2f} → {p.after_ms:.2f} ms{speed}"
    parts = [head, verdict]
    if not d.comparable:
        parts.append("not comparable: " + ", ".join(c.check for c in d.comparability if c.status == "differ"))
    addressed = sum(1 for f in fixes if getattr(f, "status", "") in ("resolved", "improved"))
    if fixes:
        parts.append(f"{addressed}/{len(fixes)} earlier fixes addressed")
    if gate is not None:
        parts.append("gate refused" if gate.refused else "gate FAILED" if gate.regressed else "gate passed")
    return _cut(f"<DiffResult {names}: " + " · ".join(parts) + ">")


def plan_line(fit: Any, options: list[Any]) -> str:
    state = "does not fit" if not fit.fits else "fits, tight" if fit.tight else "fits"
    floor = " (static floor only: activations unknown)" if fit.static_only else ""
    opts = (
        f" · {len(options)} option{'' if len(options) == 1 else 's'} to fit"
        if options and not fit.fits
        else (f" · {len(options)} option{'' if len(options) == 1 else 's'}" if options else "")
    )
    return _cut(
        f"<PlanResult {state}: {fit.used_bytes / 2**30:.2f} GiB of {fit.capacity_bytes / 2**30:.1f} GiB "
        f"{fit.device} ({fit.pct:.0f} %){floor}{opts}>"
    )


def memory_line(path: str, kind: str, doc: dict[str, Any], findings: list[Any]) -> str:
    parts = []
    for d in doc.get("devices") or []:
        parts.append(
            f"GPU {d['device']} peak allocated {d['peak_allocated_bytes'] / 2**30:.2f} GiB, reserved "
            f"{d['peak_reserved_bytes'] / 2**30:.2f} GiB" + (f", {d['oom_events']} OOM" if d["oom_events"] else "")
        )
    if doc.get("timeline"):
        parts.append(f"peak {doc['timeline']['peak_bytes'] / 2**30:.2f} GiB")
    if len(parts) > 3:
        parts = parts[:3] + [f"… {len(parts) - 3} more devices"]
    parts.append(
        f"{len(findings)} finding{'' if len(findings) == 1 else 's'}"
        + (": " + ", ".join(f.id for f in findings[:3]) if findings else "")
    )
    return _cut(f"<MemoryReport {_base(path)} ({kind}): " + " · ".join(parts) + ">")
