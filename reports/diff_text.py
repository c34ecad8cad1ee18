"""The terminal rendering of a diff document: verdict before → after, step time and speedup,
shares side by side, kernel changes, memory, and what became of the earlier recommendations."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from typing import Any

from trainscope.reports.document import path_label

KERNEL_LINES = 6
_STATUS_MARK = {"resolved": "✔", "improved": "✔", "unchanged": "·", "worse": "✘", "unknown": "?"}


def _short(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _base(path: str) -> str:
    return os.path.basename(path.rstrip("/")) or path


def _side_line(s: dict[str, Any]) -> str:
    dev = s["device"] or "no GPU activity"
    rank = f", rank {s['rank']}" if s["rank"] is not None else ""
    ranks = ""
    if s["traces"] > 1:
        ranks = (
            f" (the same rank as BEFORE; {s['traces']} ranks)"
            if s.get("compared") == "same rank as BEFORE"
            else f" (slowest of {s['traces']} ranks)"
        )
    return f"{dev}{rank}{ranks}, {s['steps']} step{'' if s['steps'] == 1 else 's'}"


def _pts(x: float) -> str:
    return f"{x:+.1f} pts" if abs(x) >= 0.05 else "  0.0 pts"


def _speed(st: dict[str, Any]) -> str:
    sp = st["speedup"]
    if sp is None:
        return ""
    return f"{sp:.2f}× faster" if sp >= 1 else f"{1 / sp:.2f}× slower"


def _mib(b: int) -> str:
    return f"{b / 2**30:.2f} GiB" if abs(b) >= 2**30 else f"{b / 2**20:.1f} MiB"


def _pct(before: float, after: float) -> str:
    return f"{100 * (after - before) / before:+.1f} %" if before else ""


def movers(kernels: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The matched kernels whose time moved the most either way, largest move first."""
    rows = list(kernels["grew"]) + list(kernels["shrank"])
    rows.sort(key=lambda r: -abs(r["change_ms_per_step"] or 0.0))
    return rows[:n]


def _work_lines(
    w: Callable[[str], object], bold: Callable[[str], str], work: dict[str, Any], kernels: dict[str, Any] | None = None
) -> None:
    fixed = work["fixed_windows"]
    km, kn, fl = work["kernel_ms"], work["kernels"], work["flops"]
    title = "Work per window" + ("  (fixed capture windows: the work they hold is the measure)" if fixed else "")
    w(bold(title))
    w(f"  {'every rank summed':30s} {'before':>13s} {'after':>13s} {'change':>9s}")
    w(f"  {'GPU kernel time':30s} {km['before']:10.2f} ms {km['after']:10.2f} ms {_pct(km['before'], km['after']):>9s}")
    w(f"  {'kernels':30s} {kn['before']:13.0f} {kn['after']:13.0f} {_pct(kn['before'], kn['after']):>9s}")
    if fl["before"] is not None and fl["after"] is not None:
        w(f"  {'recorded FLOPs':30s} {fl['before']:13.3g} {fl['after']:13.3g} {_pct(fl['before'], fl['after']):>9s}")
    else:
        missing = " and ".join(s for s, k in (("BEFORE", "before"), ("AFTER", "after")) if fl[k] is None)
        w(f"  {'recorded FLOPs':30s}  not recorded by {missing} (Kineto: with_flops=True)")
    for p in work["rank_pairs"]:
        w(
            f"  rank {p['rank']!s:<5s} kernel time {p['before_kernel_ms_per_window']:9.2f} ms → "
            f"{p['after_kernel_ms_per_window']:9.2f} ms, kernels {p['before_kernels_per_window']:.0f} → "
            f"{p['after_kernels_per_window']:.0f}"
        )
    if fixed:
        wm = work["window_ms"]
        w(
            f"  {'window length':30s} {wm['before']:10.2f} ms {wm['after']:10.2f} ms   (the capture's, not the work's:"
            " no speedup)"
        )
        top = movers(kernels, 5) if kernels else []
        if top:
            w("  biggest kernel-time movers (compared rank, ms per window)")
            for r in top:
                w(
                    f"    {r['change_ms_per_step']:+8.2f} ms  {r['before_ms_per_step']:7.2f} → {r['after_ms_per_step']:7.2f}  "
                    f"{r['class']:13s} {_short(r['label'], 60)}"
                )
    w("")


TREE_LINES = 8


def tree_shown(t: dict[str, Any] | None) -> bool:
    """Whether the diff's tree section has anything to show: GPU time in either run, and a range or a
    renamed, added or removed node."""
    if not t or not (t["before_gpu_ms"] or t["after_gpu_ms"]):
        return False
    return any(n["kind"] != "outside" for n in t["first_level"]) or bool(t["added"] or t["removed"] or t["renamed"])


def node_path(path: list[str]) -> str:
    return path_label(path)


def tree_lines(w: Callable[[str], object], bold: Callable[[str], str], t: dict[str, Any], unit: str) -> None:
    """The section "Where in the model" of a diff document's ``tree`` (two traces, or stored runs)."""
    w(
        bold("Where in the model")
        + f"  (GPU time per {unit} by the trace's own ranges: {t['before_gpu_ms']:.2f} → {t['after_gpu_ms']:.2f} ms)"
    )
    w(f"  {'first level':44s} {'before':>10s} {'after':>10s} {'change':>11s}")

    def ms(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f} ms"

    def pct(x: float | None) -> str:
        return "" if x is None else f"{x:+.1f} %"

    for n in t["first_level"]:
        w(
            f"  {_short(n['path'][-1], 44):44s} {ms(n['before_ms']):>10s} {ms(n['after_ms']):>10s} {n['change_ms']:+8.2f} ms {pct(n['change_pct'])}"
        )
    if t["changed_most"]:
        w(f"  changed most (ms per {unit}; a node whose change is one child's is shown by that child)")
        for n in t["changed_most"][:TREE_LINES]:
            w(
                f"    {n['change_ms']:+8.2f} ms {pct(n['change_pct']):>8s}  {n['before_ms']:7.2f} → {n['after_ms']:7.2f}  "
                f"{_short(node_path(n['after_path'] or n['path']), 56)}"
            )
    for n in t["renamed"][:TREE_LINES]:
        w(f"  renamed   {_short(node_path(n['path']), 36)} → {_short(n['after_path'][-1], 30)}")
    for group in ("added", "removed"):
        for n in t[group][:TREE_LINES]:
            size = f" ({n['nodes']} nodes)" if n["nodes"] > 1 else ""
            val = n["after_ms"] if group == "added" else n["before_ms"]
            w(f"  {group:9s} {_short(node_path(n['path']), 56)}{size}  {ms(val)}")
    if t.get("partial"):
        w(f"  {not_kept_line(t)}")
    w("")


def not_kept_line(t: dict[str, Any]) -> str:
    """What a comparison of stored trees cannot see (a stored run keeps the tree's top levels)."""
    n = t["not_kept"]
    return f"stored runs keep the tree's top levels ({t['kept']})" + (
        f": {n} node{'s' if n != 1 else ''} of one run {'are' if n != 1 else 'is'} not in the other's stored tree"
        if n
        else ""
    )


def comparability_lines(w: Callable[[str], object], checks: list[dict[str, Any]]) -> None:
    """Each comparability check that did not find the runs alike (! differ, ? unknown) with its note."""
    for c in checks:
        w(f"  {'!' if c['status'] == 'differ' else '?'} {c['check']}: {c['before']} → {c['after']}")
        for line in textwrap.wrap(c["note"], 88):
            w(f"      {line}")


def verdict_change_line(v: dict[str, Any], bold: Callable[[str], str]) -> str:
    """The verdict before → after (a diff document's ``verdict``), with each side's confidence."""
    arrow = "→" if v["changed"] else "→ (unchanged)"
    return (
        bold("VERDICT") + f"  {v['before']['headline']} ({v['before']['confidence']:.2f})  {arrow}  "
        f"{v['after']['headline']} ({v['after']['confidence']:.2f})"
    )


def step_time_lines(w: Callable[[str], object], bold: Callable[[str], str], doc: dict[str, Any]) -> None:
    """Step time before and after, by statistic, with the change and the speedup."""
    w(bold("Step time") + "           before       after     change")
    for stat, st in doc["step_time_ms"].items():
        ch = "" if st["change_pct"] is None else f"{st['change_pct']:+.1f} %"
        w(f"  {stat:<14s} {st['before']:9.2f} ms {st['after']:9.2f} ms {ch:>9s}   {_speed(st)}")
    w("")


def gate_lines(w: Callable[[str], object], bold: Callable[[str], str], doc: dict[str, Any]) -> None:
    """The gate's outcome (``diff --gate``): the metric's, then each node budget's."""
    g = doc.get("gate")
    if g:
        w("")
        w(bold("Gate") + f"  {g['reason']}")
    for ng in (doc.get("tree") or {}).get("gates") or []:
        w("")
        w(bold("Gate") + f"  {ng['reason']}")


def render_diff_text(doc: dict[str, Any], color: bool = False) -> str:
    bold = (lambda s: f"\033[1m{s}\033[0m") if color else (lambda s: s)
    out: list[str] = []
    w = out.append
    b, a = doc["before"], doc["after"]
    w(bold(f"trainscope diff — {_base(b['path'])} → {_base(a['path'])}"))
    w(f"  before  {_side_line(b)}")
    w(f"  after   {_side_line(a)}")
    differ = [c for c in doc["comparability"] if c["status"] == "differ"]
    unknown = [c for c in doc["comparability"] if c["status"] == "unknown" and c["check"] == "batch_shapes"]
    if differ:
        w("")
        w(bold("NOT COMPARABLE") + " — the runs differ in more than the change under test:")
    same = [c for c in doc["comparability"] if c["status"] == "same"]
    if same and not differ:
        lines = textwrap.wrap("comparable: " + "; ".join(c["note"] for c in same), 92)
        w("  " + "\n    ".join(lines))
    comparability_lines(w, differ + unknown)
    w("")

    v = doc["verdict"]
    w(verdict_change_line(v, bold))
    if v["changed"]:
        for line in textwrap.wrap(f"after: {v['after']['summary']}", 92):
            w(f"  {line}")
    w("")

    work = doc.get("work")
    if work and work["fixed_windows"]:
        # A capture window's length is the capture's: lead with the work it holds, no step-time speedup.
        _work_lines(w, bold, work, doc["kernels"])
    else:
        step_time_lines(w, bold, doc)
        if work and work["rank_pairs"]:
            _work_lines(w, bold, work)
    unit = "window" if work and work["fixed_windows"] else "step"
    w(
        bold(f"Where {unit} time goes")
        + (f"  (% of summed {unit} time)" + " " * (6 - 2 * (len(unit) - 4)) + "before    after    change")
    )
    rows = [doc["gpu_busy"], doc["data_wait"]] + [
        c for k, c in doc["categories"].items() if c["before_pct"] or c["after_pct"]
    ]
    for i, s in enumerate(rows):
        if i == 2:
            w("  " + "·" * 76)
        w(f"  {_short(s['label'], 44):44s} {s['before_pct']:6.1f} % {s['after_pct']:6.1f} %  {_pts(s['change_pts'])}")
    if not (b["has_gpu"] or a["has_gpu"]):
        w("  (no GPU in either run: the 'GPU idle' rows are host time — data wait, framework ops, other)")
    w("")

    kc = doc["kernel_classes"]
    if kc:
        w(
            bold("Kernel time by class")
            + f"  (ms per {unit})"
            + " " * (10 - 2 * (len(unit) - 4))
            + "before     after    change"
        )
        for name, c in kc.items():
            w(
                f"  {name:40s} {c['before_ms_per_step']:9.2f} {c['after_ms_per_step']:9.2f} "
                f"{c['after_ms_per_step'] - c['before_ms_per_step']:+9.2f}"
            )
        w("")

    k = doc["kernels"]
    mc = k["match_counts"]
    if any(mc.values()):
        w(
            bold("Kernels") + f"  (per {unit}; matched {mc['exact']} by name, {mc['arch']} across GPU architectures, "
            f"{mc['family']} by family; {mc['appeared']} appeared, {mc['disappeared']} disappeared)"
        )
        for group, title in (
            ("grew", "grew the most"),
            ("shrank", "shrank the most"),
            ("appeared", "appeared"),
            ("disappeared", "disappeared"),
        ):
            rows = k[group][:KERNEL_LINES]
            if not rows:
                continue
            w(f"  {title}")
            for r in rows:
                how = "" if r["match"] in ("exact", "appeared", "disappeared") else f"[{r['match']}] "
                w(
                    f"    {r['change_ms_per_step']:+8.2f} ms  {r['before_ms_per_step']:7.2f} → {r['after_ms_per_step']:7.2f}  "
                    f"{r['class']:13s} {how}{_short(r['label'], 64 - len(how))}"
                )
        w("")

    t = doc.get("tree")
    if t and tree_shown(t):
        tree_lines(w, bold, t, unit)

    m = doc["memory"]
    if m:
        rel = " (growth since profiling started)" if "relative" in (m["before_basis"], m["after_basis"]) else ""
        ch = "" if m["change_pct"] is None else f" ({m['change_pct']:+.1f} %)"
        w(bold("Memory") + f"  peak allocated {_mib(m['before_peak_bytes'])} → {_mib(m['after_peak_bytes'])}{ch}{rel}")
        if m["before_basis"] != m["after_basis"]:
            w("  note: one trace has allocator totals and the other only deltas: the peaks are not measured alike")
        w("")

    elif b["memory_recorded"] != a["memory_recorded"]:
        missing = "AFTER" if b["memory_recorded"] else "BEFORE"
        w(bold("Memory") + f"  not compared: {missing} recorded no allocator events (profile_memory=True)")
        w("")

    recs = doc["recommendations"]
    w(bold("Earlier recommendations"))
    if not recs:
        w(f"  none: BEFORE's verdict was {v['before']['headline'].lower()}, with no ranked fixes")
    for r in recs:
        w(f"  {_STATUS_MARK[r['status']]} {r['status']:<9s} {r['title']}")
        vals = (
            ""
            if r["before"] is None or r["after"] is None
            else f"{r['metric']}: {r['before']:.2f} → {r['after']:.2f} {r['unit']}; "
        )
        for line in textwrap.wrap(vals + r["note"], 84):
            w(f"              {line}")
    achieved = [f["line"] for f in doc.get("fixes_achieved") or [] if f["line"]]
    if achieved:
        w("")
        w(bold("Projected against achieved") + "  (mean step before ÷ after)")
        for line in achieved:
            w(f"  {line}")
    gate_lines(w, bold, doc)
    notes = [f"before: {x}" for x in b["warnings"]] + [f"after: {x}" for x in a["warnings"]]
    if notes:
        w("")
        for line in notes:
            w(f"note: {line}")
    return "\n".join(out) + "\n"
