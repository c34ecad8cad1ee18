"""The Markdown rendering of a diff document, for a pull request ("what did this change do?")."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from trainscope.reports.diff_text import movers
from trainscope.reports.diff_text import node_path
from trainscope.reports.diff_text import not_kept_line
from trainscope.reports.diff_text import tree_shown
from trainscope.reports.mdsafe import md_bullets
from trainscope.reports.mdsafe import md_escape
from trainscope.reports.mdsafe import md_table

KERNEL_ROWS = 10


def _cell(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def _work(w: Callable[[str], object], work: dict[str, Any], kernels: dict[str, Any] | None) -> None:
    """Work per window, every rank summed: the measure of fixed capture windows (their length is the capture's)."""
    km, kn, fl, wm = work["kernel_ms"], work["kernels"], work["flops"], work["window_ms"]

    def pct(b: float, a: float) -> str:
        return _cell(100 * (a - b) / b if b else None, "{:+.1f} %")

    w("## Work per window")
    w("")
    if work["fixed_windows"]:
        w(
            "Fixed capture windows without step markers: a window lasts as long as the capture, so the work it holds "
            "is compared, not its length (no step-time speedup is quoted)."
        )
        w("")
    w("| every rank summed | before | after | change |")
    w("|---|---:|---:|---:|")
    w(f"| GPU kernel time | {km['before']:.2f} ms | {km['after']:.2f} ms | {pct(km['before'], km['after'])} |")
    w(f"| kernels | {kn['before']:.0f} | {kn['after']:.0f} | {pct(kn['before'], kn['after'])} |")
    if fl["before"] is not None and fl["after"] is not None:
        w(f"| recorded FLOPs | {fl['before']:.3g} | {fl['after']:.3g} | {pct(fl['before'], fl['after'])} |")
    else:
        w(
            "| recorded FLOPs | not recorded | | |"
            if fl["before"] is None
            else f"| recorded FLOPs | {fl['before']:.3g} | not recorded | |"
        )
    for p in work["rank_pairs"]:
        w(
            f"| rank {p['rank']}: kernel time | {p['before_kernel_ms_per_window']:.2f} ms | "
            f"{p['after_kernel_ms_per_window']:.2f} ms | {pct(p['before_kernel_ms_per_window'], p['after_kernel_ms_per_window'])} |"
        )
    if work["fixed_windows"]:
        w(f"| window length (the capture's) | {wm['before']:.2f} ms | {wm['after']:.2f} ms | |")
    w("")
    top = movers(kernels, 5) if kernels else []
    if top:
        w("Biggest kernel-time movers (compared rank, ms per window):")
        w("")
        for r in top:
            w(
                f"- {r['change_ms_per_step']:+.2f} ms ({r['before_ms_per_step']:.2f} → {r['after_ms_per_step']:.2f}), "
                f"{md_escape(r['class'])}: {md_escape(r['label'], 100)}"
            )
        w("")


def render_diff_markdown(doc: dict[str, Any]) -> str:
    b, a, v = doc["before"], doc["after"], doc["verdict"]
    out: list[str] = []
    w = out.append

    def name(s: dict[str, Any]) -> str:
        return md_escape(os.path.basename(s["path"].rstrip("/")) or s["path"])

    w(f"# trainscope diff: {name(b)} → {name(a)}")
    w("")
    w("| | before | after |")
    w("|---|---|---|")
    w(f"| input | {name(b)} | {name(a)} |")
    w(f"| device | {md_escape(b['device'] or 'no GPU activity')} | {md_escape(a['device'] or 'no GPU activity')} |")
    w(f"| steps | {b['steps']} | {a['steps']} |")
    w(
        f"| verdict | {md_escape(v['before']['headline'])} ({v['before']['confidence']:.2f}) | "
        f"{md_escape(v['after']['headline'])} ({v['after']['confidence']:.2f}) |"
    )
    w("")
    differ = [c for c in doc["comparability"] if c["status"] != "same"]
    if differ:
        w(
            "> **Comparability:** "
            + ("the runs are **not comparable**:" if not doc["comparable"] else "some properties could not be checked:")
        )
        for c in differ:
            w(
                f"> - **{md_escape(c['check'])}** ({c['status']}): {md_escape(c['before'])} → {md_escape(c['after'])}. "
                f"{md_escape(c['note'])}"
            )
        w("")
    w(f"**Verdict {'changed' if v['changed'] else 'unchanged'}.** After: {md_escape(v['after']['summary'])}")
    w("")
    work = doc.get("work")
    fixed = bool(work and work["fixed_windows"])
    if fixed and work is not None:
        _work(w, work, doc["kernels"])
    else:
        w("## Step time")
        w("")
        w("| statistic | before ms | after ms | change | speedup |")
        w("|---|---:|---:|---:|---:|")
        for stat, st in doc["step_time_ms"].items():
            w(
                f"| {stat} | {st['before']:.2f} | {st['after']:.2f} | {_cell(st['change_pct'], '{:+.1f} %')} | "
                f"{_cell(st['speedup'], '{:.2f}×')} |"
            )
        w("")
        if work and work["rank_pairs"]:
            _work(w, work, None)
    w("## Where step time goes")
    w("")
    w("| share of step time | before | after | change |")
    w("|---|---:|---:|---:|")
    for s in [doc["gpu_busy"], doc["data_wait"]] + list(doc["categories"].values()):
        w(
            f"| {md_escape(s['label'])} | {s['before_pct']:.1f} % | {s['after_pct']:.1f} % | {s['change_pts']:+.1f} pts |"
        )
    w("")
    if doc["kernel_classes"]:
        out += md_table(
            "| kernel class | before ms/step | after ms/step | change |",
            "|---|---:|---:|---:|",
            (
                [
                    md_escape(cname),
                    f"{c['before_ms_per_step']:.2f}",
                    f"{c['after_ms_per_step']:.2f}",
                    f"{c['after_ms_per_step'] - c['before_ms_per_step']:+.2f}",
                ]
                for cname, c in doc["kernel_classes"].items()
            ),
        )
        w("")
    k = doc["kernels"]
    mc = k["match_counts"]
    if any(mc.values()):
        w("## Kernels")
        w("")
        w(
            f"Per step. Matched {mc['exact']} by exact name, {mc['arch']} across GPU architectures (`arch`), "
            f"{mc['family']} by family (`family`: same kernel, other tile/template numbers); "
            f"{mc['appeared']} appeared, {mc['disappeared']} disappeared."
        )
        w("")
        for group, title in (
            ("grew", "Grew the most"),
            ("shrank", "Shrank the most"),
            ("appeared", "Appeared"),
            ("disappeared", "Disappeared"),
        ):
            if not k[group]:
                continue
            w(f"### {title}")
            w("")
            w("| change ms/step | before | after | match | class | kernel |")
            w("|---:|---:|---:|---|---|---|")
            for r in k[group][:KERNEL_ROWS]:
                w(
                    f"| {r['change_ms_per_step']:+.3f} | {r['before_ms_per_step']:.3f} | {r['after_ms_per_step']:.3f} | "
                    f"{r['match']} | {r['class']} | {md_escape(r['label'], 140)} |"
                )
            w("")
    t = doc.get("tree")
    if t:
        tree_markdown(w, t, "window" if fixed else "step")
    m = doc["memory"]
    if m:
        w("## Memory")
        w("")
        ch = "" if m["change_pct"] is None else f" ({m['change_pct']:+.1f} %)"
        w(
            f"Peak allocated {m['before_peak_bytes'] / 2**30:.2f} GiB → {m['after_peak_bytes'] / 2**30:.2f} GiB{ch} "
            f"(basis: {m['before_basis']} → {m['after_basis']})."
        )
        w("")
    w("## Earlier recommendations")
    w("")
    if not doc["recommendations"]:
        w(f"None: the BEFORE verdict was {md_escape(v['before']['headline'].lower())}, with no ranked fixes.")
        w("")
    else:
        w("| fix | status | metric | before | after | note |")
        w("|---|---|---|---:|---:|---|")
        for r in doc["recommendations"]:
            w(
                f"| {md_escape(r['title'])} | **{r['status']}** | {md_escape(r['metric'])} ({md_escape(r['unit'])}) | "
                f"{_cell(r['before'], '{:.1f}')} | {_cell(r['after'], '{:.1f}')} | {md_escape(r['note'])} |"
            )
        w("")
    achieved = [f["line"] for f in doc.get("fixes_achieved") or [] if f["line"]]
    out += md_bullets("**Projected against achieved** (mean step before ÷ after):", achieved)
    gate_markdown(w, doc)
    out += md_bullets("## Notes", [f"before: {x}" for x in b["warnings"]] + [f"after: {x}" for x in a["warnings"]])
    w(f"<sub>trainscope {doc['tool']['version']} · schema {doc['schema']}</sub>")
    return "\n".join(out) + "\n"


def gate_markdown(w: Callable[[str], object], doc: dict[str, Any]) -> None:
    """The gate's outcome (``diff --gate``): the metric's, then each node budget's."""
    g = doc.get("gate")
    if g:
        w(f"**Gate ({md_escape(g['metric'])}):** {md_escape(g['reason'])}")
        w("")
    for ng in (doc.get("tree") or {}).get("gates") or []:
        w(f"**Gate ({md_escape(ng['budget'])}):** {md_escape(ng['reason'])}")
        w("")


def tree_markdown(w: Callable[[str], object], t: dict[str, Any], unit: str) -> None:
    """The section "Where in the model" of a diff document's ``tree`` (two traces, or stored runs)."""
    if not tree_shown(t):
        return
    w("## Where in the model")
    w("")
    w(
        f"GPU time per {unit} by the trace's own ranges: "
        f"{t['before_gpu_ms']:.2f} → {t['after_gpu_ms']:.2f} ms. Nodes matched by path "
        f"({t['counts']['matched']} matched, {t['counts']['renamed']} renamed, {t['counts']['added']} added, "
        f"{t['counts']['removed']} removed)."
    )
    w("")
    w("| node | before ms | after ms | change ms | change |")
    w("|---|---:|---:|---:|---:|")
    for n in t["first_level"]:
        w(
            f"| **{md_escape(n['path'][-1])}** | {_cell(n['before_ms'])} | {_cell(n['after_ms'])} | "
            f"{n['change_ms']:+.2f} | {_cell(n['change_pct'], '{:+.1f} %')} |"
        )
    for n in t["changed_most"]:
        w(
            f"| {md_escape(node_path(n['after_path'] or n['path']), 140)} | {_cell(n['before_ms'])} | "
            f"{_cell(n['after_ms'])} | {n['change_ms']:+.2f} | {_cell(n['change_pct'], '{:+.1f} %')} |"
        )
    for group in ("renamed", "added", "removed"):
        for n in t[group]:
            to = f" → {md_escape(n['after_path'][-1])}" if group == "renamed" else ""
            w(
                f"| {group}: {md_escape(node_path(n['path']), 120)}{to} | {_cell(n['before_ms'])} | "
                f"{_cell(n['after_ms'])} | {n['change_ms']:+.2f} | |"
            )
    w("")
    if t.get("partial"):
        w(md_escape(not_kept_line(t)) + ".")
        w("")
