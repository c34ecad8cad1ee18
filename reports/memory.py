"""A CUDA memory snapshot or memory timeline as a document ("trainscope.memory/1"), text and Markdown."""

from __future__ import annotations

import os
from typing import Any

from trainscope import __version__
from trainscope.analyzers.snapshot.summary import DeviceSnapshotMemory
from trainscope.analyzers.snapshot.timeline_peak import TimelinePeak
from trainscope.analyzers.trace.verdict import Finding
from trainscope.reports.mdsafe import md_escape
from trainscope.reports.mdsafe import md_table
from trainscope.reports.parts import finding_dict

SCHEMA = "trainscope.memory/1"


def build_memory_document(
    path: str,
    kind: str,
    devices: list[DeviceSnapshotMemory] | None,
    timeline: TimelinePeak | None,
    findings: list[Finding],
    capacity: dict[str, Any] | None,
    warnings: list[str],
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": {"name": "trainscope", "version": __version__},
        "input": {"path": path, "format": kind},
        "capacity": capacity,
        "findings": [finding_dict(f, stake=False) for f in findings],
        "warnings": warnings,
    }
    if devices is not None:
        doc["devices"] = [
            {
                "device": m.device,
                "events": m.events,
                "peak_allocated_bytes": m.peak_allocated,
                "peak_reserved_bytes": m.peak_reserved,
                "peak_allocated_time_us": m.peak_allocated_time_us,
                "peak_phase": m.peak_phase,
                "reserved_at_peak_allocated_bytes": m.reserved_at_peak_allocated,
                "allocated_at_peak_reserved_bytes": m.allocated_at_peak_reserved,
                "fragmentation_pct": round(m.fragmentation_pct, 2),
                "end_allocated_bytes": m.end_allocated,
                "end_reserved_bytes": m.end_reserved,
                "end_inactive_bytes": m.inactive_end_bytes,
                "largest_inactive_block_bytes": m.largest_inactive_block,
                "oom_events": m.oom_events,
                "top_allocations": [{"bytes": a.size, "site": a.site, "time_us": a.time_us} for a in m.top_allocations],
                "sites": [{"site": s.site, "bytes": s.bytes, "count": s.count} for s in m.sites[:15]],
                "notes": m.notes,
                "oom": None
                if m.oom is None
                else {
                    "status": m.oom.status,
                    "ended_in_oom": m.oom.ended_in_oom,
                    "kind": m.oom.kind,
                    "requested_bytes": m.oom.requested,
                    "device_free_bytes": m.oom.device_free,
                    "cached_free_bytes": m.oom.cached_free,
                    "judged_at": m.oom.judged_at,
                    "evidence": m.oom.evidence,
                },
            }
            for m in devices
        ]
    if timeline is not None:
        doc["timeline"] = {
            "peak_bytes": timeline.peak_bytes,
            "peak_time_us": timeline.peak_time_us,
            "duration_us": timeline.duration_us,
            "at_peak_bytes": timeline.at_peak,
            "category_peak_bytes": timeline.category_peaks,
        }
    return doc


def _g(b: int | float) -> str:
    return f"{b / 2**30:.2f} GiB"


def render_memory_text(doc: dict[str, Any]) -> str:
    out: list[str] = []
    w = out.append
    w(f"trainscope memory — {os.path.basename(doc['input']['path'])} ({doc['input']['format']})")
    cap = doc["capacity"]
    if cap:
        w(f"  device  {cap['name']}: {cap['capacity_bytes'] / 2**30:.1f} GiB")
    w("")
    for m in doc.get("devices", []):
        w(f"GPU {m['device']}  ({m['events']:,} allocator events recorded)")
        phase = f", during {m['peak_phase']}" if m["peak_phase"] else ""
        w(f"  peak allocated   {_g(m['peak_allocated_bytes']):>10s}{phase}")
        w(
            f"  peak reserved    {_g(m['peak_reserved_bytes']):>10s}   reserved but unallocated at that peak "
            f"{m['fragmentation_pct']:.1f} % (fragmentation)"
        )
        if cap:
            w(f"  of capacity      {100 * m['peak_reserved_bytes'] / cap['capacity_bytes']:9.1f} %")
        w(
            f"  at the dump      {_g(m['end_allocated_bytes'])} allocated, {_g(m['end_reserved_bytes'])} reserved, "
            f"{_g(m['end_inactive_bytes'])} cached free (largest block {m['largest_inactive_block_bytes'] / 2**20:.0f} MiB)"
        )
        o = m.get("oom")
        if o and o["status"] == "oom":
            w(f"  out of memory:   yes ({m['oom_events']} oom event{'s' * (m['oom_events'] > 1)}) — a {o['kind']} OOM")
        elif o and o["status"] == "at_limit":
            w(f"  out of memory:   at the limit — a {o['kind']} OOM if it failed here (no oom event recorded)")
        elif o:
            w("  out of memory:   no")
        for line in (o or {}).get("evidence", []):
            w(f"    {line}")
        if m["sites"]:
            w("  live at the peak, by allocation site:")
            for s in m["sites"][:8]:
                w(f"    {_g(s['bytes']):>10s}  ×{s['count']:<5d} {s['site'][:90]}")
        if m["top_allocations"]:
            w("  largest live allocations at the peak:")
            for a in m["top_allocations"]:  # as many as --top asked for (the document keeps exactly those)
                w(f"    {a['bytes'] / 2**20:10.1f} MiB  {a['site'][:90]}")
        for n in m["notes"]:
            w(f"  note: {n}")
        w("")
    t = doc.get("timeline")
    if t:
        w(f"Peak {_g(t['peak_bytes'])} over {t['duration_us'] / 1e3:,.1f} ms; by category at the peak:")
        for c, b in sorted(t["at_peak_bytes"].items(), key=lambda x: -x[1]):
            if b:
                w(f"  {c:16s} {_g(b):>10s}   (own peak {_g(t['category_peak_bytes'][c])})")
        w("")
    for f in doc["findings"]:
        w(f"[{f['severity']}] {f['id']}: {f['title']} — {f['detail']}")
        for e in f["evidence"]:
            basis = f"threshold {e['threshold']}; {e['source']}" if e["threshold"] else e["source"]
            w(f"    {e['metric']}: {e['value']} {e['unit']} ({basis})")
    for line in doc["warnings"]:
        w(f"note: {line}")
    return "\n".join(out).rstrip("\n") + "\n"


def render_memory_markdown(doc: dict[str, Any]) -> str:
    out = [f"# trainscope memory report: {md_escape(os.path.basename(doc['input']['path']))}", ""]
    w = out.append
    for m in doc.get("devices", []):
        w(f"## GPU {m['device']}")
        w("")
        w(
            f"- **Peak allocated:** {_g(m['peak_allocated_bytes'])}"
            + (f" during {md_escape(m['peak_phase'])}" if m["peak_phase"] else "")
        )
        w(f"- **Peak reserved:** {_g(m['peak_reserved_bytes'])}; fragmentation {m['fragmentation_pct']:.1f} %")
        w("")
        out += md_table(
            "| bytes live at the peak | allocations | site |",
            "|---:|---:|---|",
            ([_g(s["bytes"]), s["count"], md_escape(s["site"], 120)] for s in m["sites"][:10]),
        )
        w("")
        if m["top_allocations"]:
            out += md_table(
                "| largest live allocations at the peak | site |",
                "|---:|---|",
                ([f"{a['bytes'] / 2**20:.1f} MiB", md_escape(a["site"], 120)] for a in m["top_allocations"]),
            )
            w("")
    t = doc.get("timeline")
    if t:
        w(f"## Peak {_g(t['peak_bytes'])} by category")
        w("")
        out += md_table(
            "| category | at the peak | own peak |",
            "|---|---:|---:|",
            ([c, _g(b), _g(t["category_peak_bytes"][c])] for c, b in t["at_peak_bytes"].items()),
        )
        w("")
    if doc["findings"]:
        w("## Findings")
        w("")
        for f in doc["findings"]:
            w(f"- **{md_escape(f['id'])}** ({f['severity']}): {md_escape(f['title'])}; {md_escape(f['detail'])}")
        w("")
    w(f"<sub>trainscope {doc['tool']['version']} · schema {doc['schema']}</sub>")
    return "\n".join(out) + "\n"
