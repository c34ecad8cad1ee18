"""The run history's renderings: a diff of stored summaries ("trainscope.diff/1" with
``"basis": "summaries"``), and the list of saved runs."""

from __future__ import annotations

from typing import Any

from trainscope import __version__
from trainscope.analyzers.compare.diff import GateResult
from trainscope.analyzers.compare.history import RunSummary
from trainscope.analyzers.compare.history import SummaryDiff
from trainscope.analyzers.compare.tree_diff import NodeGateResult
from trainscope.analyzers.kernel_match import KernelChange
from trainscope.analyzers.trace.sinks import SINK_LABELS
from trainscope.reports.diff_document import SCHEMA
from trainscope.reports.diff_document import comparability_list
from trainscope.reports.diff_document import fixes_list
from trainscope.reports.diff_document import gate_dict
from trainscope.reports.diff_document import step_time_dict
from trainscope.reports.diff_document import tree_diff_dict
from trainscope.reports.diff_document import verdict_change_dict
from trainscope.reports.diff_markdown import gate_markdown
from trainscope.reports.diff_markdown import tree_markdown
from trainscope.reports.diff_text import comparability_lines
from trainscope.reports.diff_text import gate_lines
from trainscope.reports.diff_text import step_time_lines
from trainscope.reports.diff_text import tree_lines
from trainscope.reports.diff_text import tree_shown
from trainscope.reports.diff_text import verdict_change_line
from trainscope.reports.mdsafe import md_escape
from trainscope.reports.parts import rounded as _r

KERNEL_ROWS = 8


def _side(s: RunSummary, label: str, run: Any) -> dict[str, Any]:
    return {
        "label": label,
        "run": None if run is None else run.to_dict(),
        "path": s.source,
        "format": s.format,
        "rank": s.rank,
        "traces": s.ranks,
        "device": s.device,
        "has_gpu": s.has_gpu,
        "steps": s.steps,
        "steps_method": s.steps_method,
        "fixed_window": s.fixed_window,
        "batch_leading_dim": s.shapes.batch_dim,
        "shapes_recorded": s.shapes.recorded,
        "memory_peak_bytes": s.memory_peak_bytes,
        "warnings": list(s.warnings),
    }


def _kernel(k: KernelChange) -> dict[str, Any]:
    return {
        "label": k.label,
        "match": k.match,
        "class": k.kernel_class,
        "before_ms_per_step": _r(k.before_ms_per_step, 3),
        "after_ms_per_step": _r(k.after_ms_per_step, 3),
        "change_ms_per_step": _r(k.delta_ms_per_step, 3),
    }


def build_summary_diff_document(
    d: SummaryDiff,
    gate: GateResult | None = None,
    before_run: Any = None,
    after_run: Any = None,
    node_gates: list[NodeGateResult] | None = None,
) -> dict[str, Any]:
    v = d.verdict
    return {
        "schema": SCHEMA,
        "tool": {"name": "trainscope", "version": __version__},
        "basis": "summaries: at least one side is a stored run (the history keeps summaries, not traces): verdict, "
        "every step's time, shares, sinks, the top kernels of each run, the fixes and the module tree's top levels",
        "before": _side(d.before, d.labels[0], before_run),
        "after": _side(d.after, d.labels[1], after_run),
        "comparable": d.comparable,
        "comparability": comparability_list(d.comparability),
        "verdict": verdict_change_dict(v),
        "step_time_ms": step_time_dict(d.step_time),
        "shares": {
            s.name: {
                "label": s.label,
                "before_pct": _r(s.before_pct),
                "after_pct": _r(s.after_pct),
                "change_pts": _r(s.change_pts),
            }
            for s in d.shares
        },
        "sinks": {
            s.name: {
                "label": s.label,
                "before_pct": _r(s.before_pct),
                "after_pct": _r(s.after_pct),
                "change_pts": _r(s.change_pts),
                "before_ms_per_step": _r(s.before_ms_per_step, 3),
                "after_ms_per_step": _r(s.after_ms_per_step, 3),
            }
            for s in d.sinks
        },
        "top_kernels": {
            "basis": "each run's top kernels (by time in the analyzed steps), matched by name, across GPU "
            "architectures and by family; times per step",
            "changes": [_kernel(k) for k in sorted(d.kernels, key=lambda k: -abs(k.delta_ms_per_step))],
        },
        "fixes_achieved": fixes_list(d.fixes),
        "gate": gate_dict(gate),
        "tree": tree_diff_dict(d.tree, node_gates),
    }


def _unit(doc: dict[str, Any]) -> str:
    """What the tree's times are per: a step, or a capture window where a run has no steps."""
    return "window" if doc["before"].get("fixed_window") or doc["after"].get("fixed_window") else "step"


def _who(s: dict[str, Any]) -> str:
    run = s["run"]
    where = f"{s['label']}"
    if run:
        commit = f", commit {run['git_commit'][:10]}{'+dirty' if run['git_dirty'] else ''}" if run["git_commit"] else ""
        where += f" ({run['created']}{commit})"
    dev = s["device"] or "no GPU activity"
    return f"{where}: {dev}, {s['traces']} rank{'s' if s['traces'] != 1 else ''}, {s['steps']} step{'s' if s['steps'] != 1 else ''}"


def render_summary_diff_text(doc: dict[str, Any], color: bool = False) -> str:
    bold = (lambda s: f"\033[1m{s}\033[0m") if color else (lambda s: s)
    out: list[str] = []
    w = out.append
    b, a = doc["before"], doc["after"]
    w(bold(f"trainscope diff — {b['label']} → {a['label']}") + "  (stored summaries)")
    w(f"  before  {_who(b)}")
    w(f"  after   {_who(a)}")
    differ = [c for c in doc["comparability"] if c["status"] == "differ"]
    if differ:
        w("")
        w(bold("NOT COMPARABLE") + " — the runs differ in more than the change under test:")
        comparability_lines(w, differ)
    w("")
    v = doc["verdict"]
    w(verdict_change_line(v, bold))
    w("")
    step_time_lines(w, bold, doc)
    rows = [(k, s) for k, s in doc["sinks"].items() if s["before_pct"] or s["after_pct"]]
    if rows:
        w(bold("Sinks") + "  (% of step time, ms per step)   before               after")
        for k, s in rows:
            w(
                f"  {k:32s} {s['before_pct']:6.1f} % {s['before_ms_per_step']:9.2f}   "
                f"{s['after_pct']:6.1f} % {s['after_ms_per_step']:9.2f}"
            )
        w("")
    changes = [k for k in doc["top_kernels"]["changes"] if k["change_ms_per_step"]][:KERNEL_ROWS]
    if changes:
        w(bold("Top kernels") + "  (per step; each run's top kernels)")
        for k in changes:
            how = "" if k["match"] == "exact" else f"[{k['match']}] "
            w(
                f"    {k['change_ms_per_step']:+8.2f} ms  {k['before_ms_per_step']:7.2f} → {k['after_ms_per_step']:7.2f}  "
                f"{how}{k['label'][:60]}"
            )
        w("")
    t = doc.get("tree")
    if t and tree_shown(t):
        tree_lines(w, bold, t, _unit(doc))
    w(bold("Earlier fixes"))
    if not doc["fixes_achieved"]:
        w(f"  none: BEFORE's verdict was {v['before']['headline'].lower()}, with no ranked fixes")
    for f in doc["fixes_achieved"]:
        vals = (
            ""
            if f["before"] is None or f["after"] is None
            else f" — {f['metric']}: {f['before']:.2f} → {f['after']:.2f} {f['unit']}"
        )
        w(f"  {f['status']:<9s} {f['title']}{vals}")
        if f["line"]:
            w(f"            {f['line']}")
    gate_lines(w, bold, doc)
    return "\n".join(out) + "\n"


def render_summary_diff_markdown(doc: dict[str, Any]) -> str:
    b, a, v = doc["before"], doc["after"], doc["verdict"]
    out: list[str] = []
    w = out.append
    w(f"# trainscope diff: {md_escape(b['label'])} → {md_escape(a['label'])}")
    w("")
    w("Compared by their stored summaries.")
    w("")
    w("| | before | after |")
    w("|---|---|---|")
    w(f"| run | {md_escape(_who(b))} | {md_escape(_who(a))} |")
    w(
        f"| verdict | {md_escape(v['before']['headline'])} ({v['before']['confidence']:.2f}) | "
        f"{md_escape(v['after']['headline'])} ({v['after']['confidence']:.2f}) |"
    )
    for stat, st in doc["step_time_ms"].items():
        ch = "" if st["change_pct"] is None else f" ({st['change_pct']:+.1f} %)"
        w(f"| step {stat} | {st['before']:.2f} ms | {st['after']:.2f} ms{ch} |")
    w("")
    differ = [c for c in doc["comparability"] if c["status"] == "differ"]
    if differ:
        w("> **Not comparable:**")
        for c in differ:
            w(
                f"> - **{md_escape(c['check'])}**: {md_escape(c['before'])} → {md_escape(c['after'])}. {md_escape(c['note'])}"
            )
        w("")
    if doc["fixes_achieved"]:
        w("## Earlier fixes")
        w("")
        w("| fix | status | projected | achieved |")
        w("|---|---|---:|---:|")
        for f in doc["fixes_achieved"]:
            p = "—" if f["projected_speedup"] is None else f"up to {f['projected_speedup']:.2f}×"
            ach = "—" if f["achieved_speedup"] is None else f"{f['achieved_speedup']:.2f}×"
            w(f"| {md_escape(f['title'])} | **{f['status']}** | {p} | {ach} |")
        w("")
    t = doc.get("tree")
    if t:
        tree_markdown(w, t, _unit(doc))
    gate_markdown(w, doc)
    w(f"<sub>trainscope {doc['tool']['version']} · schema {doc['schema']} (summaries)</sub>")
    return "\n".join(out) + "\n"


def render_runs_text(runs: list[dict[str, Any]], store: str) -> str:
    """The `trainscope runs` table: newest first."""
    if not runs:
        return f"no saved runs in {store} (save one with `trainscope analyze TRACE --save`)\n"
    out = [f"{'id':>5}  {'saved':20s} {'tag':16s} {'commit':10s} {'gpu':22s} {'steps':>5} {'p50 ms':>9}  verdict"]
    for r in runs:
        v = r["verdict"]
        verdict = v["bottleneck"] or v["axis"]
        base = (
            "  ← baseline"
            + (
                f" of {', '.join(t or '(untagged)' for t in r['baseline_for'])}"
                if r["baseline_for"] != [r["tag"] or ""]
                else ""
            )
            if r["baseline_for"]
            else ""
        )
        commit = (r["git_commit"] or "")[:8] + ("+" if r["git_dirty"] else "")
        out.append(
            f"{r['id']:>5}  {r['created'][:19]:20s} {(r['tag'] or '—')[:16]:16s} {commit or '—':10s} "
            f"{(r['gpu'] or 'no GPU')[:22]:22s} {r['steps']:>5} {r['step_time_ms']['p50']:9.2f}  "
            f"{verdict} ({v['confidence']:.2f}){base}"
        )
    out.append(f"({len(runs)} run{'s' if len(runs) != 1 else ''} from {store})")
    return "\n".join(out) + "\n"


def render_run_text(run: dict[str, Any], store: str) -> str:
    """`trainscope runs ID`: the listing row, then what the run's saved summary holds — the verdict
    and its summary, the step times, the sinks, the fixes with their projections, the top kernels."""
    out = [render_runs_text([run], store).rstrip("\n").rsplit("\n", 1)[0], ""]
    w = out.append
    s = run.get("summary") or {}
    w(f"source     {run['source']}  ({s.get('format') or '?'}, saved by {run['saved_by']} on {run['host'] or '?'})")
    if run["git_commit"]:
        w(f"commit     {run['git_commit']}{' (uncommitted changes)' if run['git_dirty'] else ''}")
    v = s.get("verdict") or run["verdict"]
    w(f"verdict    {v['bottleneck'] or v['axis']} ({v['confidence']:.2f})")
    if v.get("summary"):
        w(f"           {v['summary']}")
    st = run["step_time_ms"]
    w(
        f"steps      {run['steps']} ({s.get('steps_method') or '?'}): p50 {st['p50']:.2f} ms, p95 {st['p95']:.2f} ms, mean {st['mean']:.2f} ms"
    )
    sinks = sorted(
        ((k, x) for k, x in (s.get("sinks") or {}).items() if x["pct"] >= 0.05), key=lambda kv: -kv[1]["pct"]
    )
    if sinks:
        w("sinks      (share of step time, ms per step)")
        for k, x in sinks:
            w(f"  {x['pct']:6.1f} % {x['ms_per_step']:10.2f} ms  {SINK_LABELS.get(k, k)}")
    fixes = s.get("fixes") or run["fixes"]
    if fixes:
        w("fixes      (projected upper bounds, as saved)")
        for i, f in enumerate(fixes, 1):
            gain = "no projection" if f.get("projected_speedup") is None else f"up to {f['projected_speedup']:.2f}×"
            w(f"  {i}. {f.get('title') or f['id']} [{f['id']}] — {gain}")
    kernels = s.get("top_kernels") or []
    if kernels:
        w("top kernels (total ms, calls)")
        for k in kernels[:5]:
            name = k["name"] if len(k["name"]) <= 70 else k["name"][:44] + "…" + k["name"][-25:]
            w(f"  {k['total_ns'] / 1e6:10.2f} ms {k['count']:>7}  {name}")
    for line in s.get("warnings") or []:
        w(f"warning    {line}")
    w(f"(run {run['id']} from {store}; the whole summary: --format json)")
    return "\n".join(out) + "\n"


def render_fixes_text(rows: list[dict[str, Any]]) -> str:
    """`trainscope runs --fixes`: every recorded fix outcome, projected against achieved."""
    if not rows:
        return "no fix outcomes recorded (`trainscope diff BEFORE AFTER --save` records them)\n"
    out = []
    for r in rows:
        p = "no projection" if r["projected_speedup"] is None else f"projected up to {r['projected_speedup']:.2f}×"
        ach = "—" if r["achieved_speedup"] is None else f"achieved {r['achieved_speedup']:.2f}×"
        out.append(
            f"run {r['before_run']} → run {r['after_run']}  fix {r['recommendation']} ({r['status']}): {p}, {ach}"
        )
    return "\n".join(out) + "\n"
