"""The training-memory ledger as a document ("trainscope.plan/1"), a terminal table and Markdown."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from trainscope import __version__
from trainscope.analyzers.plan.gpu_memory import GpuMemory
from trainscope.analyzers.plan.ledger import GB
from trainscope.analyzers.plan.ledger import OPTIMIZERS
from trainscope.analyzers.plan.ledger import PRECISIONS
from trainscope.analyzers.plan.ledger import Fit
from trainscope.analyzers.plan.ledger import FitOption
from trainscope.analyzers.plan.ledger import Ledger
from trainscope.reports.mdsafe import md_escape
from trainscope.reports.mdsafe import md_table

SCHEMA = "trainscope.plan/1"


def _gb(x: float | None) -> float | None:
    return None if x is None else round(x / GB, 3)


def ledger_dict(lg: Ledger) -> dict[str, Any]:
    cfg = lg.config
    return {
        "config": asdict(cfg),
        "params": lg.params,
        "params_source": lg.params_source,
        "micro_batch": cfg.micro_batch,
        "items": [
            {
                "key": i.key,
                "label": i.label,
                "bytes": None if i.bytes is None else round(i.bytes),
                "gb": _gb(i.bytes),
                "formula": i.formula,
                "source": i.source,
            }
            for i in lg.items
        ],
        "activations": {
            "method": lg.activations.method,
            "bytes": None if lg.activations.bytes is None else round(lg.activations.bytes),
            "before_checkpointing_bytes": None
            if lg.activations.full_bytes is None
            else round(lg.activations.full_bytes),
            "formula": lg.activations.formula,
            "source": lg.activations.source,
        },
        "static_bytes": round(lg.static_bytes),
        "static_gb": _gb(lg.static_bytes),
        "total_bytes": round(lg.total_bytes),
        "total_gb": _gb(lg.total_bytes),
        "complete": lg.complete,
        "recompute_overhead_pct": lg.recompute_pct,
        "recompute_source": lg.recompute_source,
        "notes": lg.notes,
    }


def fit_dict(f: Fit) -> dict[str, Any]:
    return {
        "fits": f.fits,
        "tight": f.tight,
        "used_pct": round(f.pct, 2),
        "threshold_pct": f.threshold_pct,
        "static_only": f.static_only,
    }


def option_dict(o: FitOption) -> dict[str, Any]:
    return {
        "changes": [asdict(c) for c in o.changes],
        "total_bytes": round(o.ledger.total_bytes),
        "total_gb": _gb(o.ledger.total_bytes),
        "fit": fit_dict(o.fit),
        "cost": {"summary": o.cost.summary, **asdict(o.cost)},
    }


def build_plan_document(lg: Ledger, device: GpuMemory, f: Fit, options: list[FitOption]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "tool": {"name": "trainscope", "version": __version__},
        "unit": "GB = 10^9 bytes (the sources' unit); device capacities are GiB as sold",
        "ledger": ledger_dict(lg),
        "device": {
            "key": device.key,
            "name": device.name,
            "capacity_bytes": device.capacity_bytes,
            "capacity_gb": _gb(device.capacity_bytes),
            "source": device.source,
        },
        "fit": fit_dict(f),
        "options": [option_dict(o) for o in options],
    }


def _setup_line(cfg: dict[str, Any]) -> str:
    parts = [f"{PRECISIONS[cfg['precision']].label}", OPTIMIZERS[cfg["optimizer"]].label, f"batch {cfg['batch']}"]
    if cfg["grad_accum"] > 1:
        parts.append(f"{cfg['grad_accum']} micro-batches of {cfg['batch'] // cfg['grad_accum']}")
    if cfg["seq"]:
        parts.append(f"seq {cfg['seq']}")
    if cfg["checkpoint"] != "none":
        parts.append(f"checkpoint {cfg['checkpoint']}")
    if cfg["gpus"] > 1 or cfg["zero"]:
        parts.append(f"{cfg['gpus']} GPUs, ZeRO-{cfg['zero']}")
    return " · ".join(parts)


def _verdict(fit: dict[str, Any], dev: dict[str, Any]) -> str:
    if fit["fits"]:
        word = "FITS, tight" if fit["tight"] else "FITS"
    else:
        word = "DOES NOT FIT"
    scope = " (static floor only: activations not estimated)" if fit["static_only"] else ""
    return f"{word}: {fit['used_pct']:.0f} % of {dev['name']}{scope}"


def render_plan_text(doc: dict[str, Any]) -> str:
    lg, dev, fit = doc["ledger"], doc["device"], doc["fit"]
    out: list[str] = []
    w = out.append
    w(f"trainscope plan — {lg['params'] / 1e9:.3g} B parameters · {_setup_line(lg['config'])}")
    w(f"  device  {dev['name']}: {dev['capacity_bytes'] / 2**30:.0f} GiB = {dev['capacity_gb']:.1f} GB")
    w("")
    w("Ledger (per GPU, GB = 10⁹ bytes)")
    for i in lg["items"]:
        val = "—" if i["gb"] is None else f"{i['gb']:8.2f} GB"
        w(f"  {i['label'][:58]:58s} {val:>11s}   {i['formula']}")
    w(f"  {'static (weights + gradients + master + optimizer)':58s} {lg['static_gb']:8.2f} GB")
    w(f"  {'total':58s} {lg['total_gb']:8.2f} GB")
    w("")
    w(f"{_verdict(fit, dev)}")
    if lg["recompute_overhead_pct"]:
        w(f"  recomputation costs +{lg['recompute_overhead_pct']:g} % compute ({lg['recompute_source']})")
    w("")
    if doc["options"]:
        w("Cheapest changes that fit, cheapest first")
        for k, o in enumerate(doc["options"], 1):
            w(f"  {k}. {' + '.join(c['description'] for c in o['changes'])}")
            w(
                f"       → {o['total_gb']:.2f} GB ({o['fit']['used_pct']:.0f} %{', tight' if o['fit']['tight'] else ''}); "
                f"cost: {o['cost']['summary']}"
            )
        w("")
    elif not fit["fits"]:
        w("No combination of the levers fits this device.")
        w("")
    if lg["activations"]["method"] != "unknown":
        w(f"activations: {lg['activations']['formula']}")
        w(f"  source: {lg['activations']['source']}")
    for n in lg["notes"]:
        w(f"note: {n}")
    return "\n".join(out) + "\n"


def render_plan_markdown(doc: dict[str, Any]) -> str:
    lg, dev, fit = doc["ledger"], doc["device"], doc["fit"]
    out: list[str] = []
    w = out.append
    w(f"# Training memory plan: {lg['params'] / 1e9:.3g} B parameters")
    w("")
    w(f"- **Setup:** {md_escape(_setup_line(lg['config']))}")
    w(f"- **Device:** {md_escape(dev['name'])} ({dev['capacity_gb']:.1f} GB)")
    w(f"- **Verdict:** {md_escape(_verdict(fit, dev))}")
    w("")
    out += md_table(
        "| component | GB | formula | source |",
        "|---|---:|---|---|",
        (
            [
                md_escape(i["label"]),
                "—" if i["gb"] is None else f"{i['gb']:.2f}",
                md_escape(i["formula"]),
                md_escape(i["source"]),
            ]
            for i in lg["items"]
        ),
    )
    w(f"| **total** | **{lg['total_gb']:.2f}** | | |")
    w("")
    if doc["options"]:
        w("## Cheapest changes that fit")
        w("")
        w("| # | change | GB | cost |")
        w("|---:|---|---:|---|")
        for k, o in enumerate(doc["options"], 1):
            w(
                f"| {k} | {md_escape(' + '.join(c['description'] for c in o['changes']))} | {o['total_gb']:.2f} | "
                f"{md_escape(o['cost']['summary'])} |"
            )
        w("")
    for n in lg["notes"]:
        w(f"- {md_escape(n)}")
    w(f"<sub>trainscope {doc['tool']['version']} · schema {doc['schema']}</sub>")
    return "\n".join(out) + "\n"


def ledger_vs_measured(
    lg: Ledger, measured_peak: int | None, capacity: int | None, basis: str | None
) -> dict[str, Any]:
    """The optional ``ledger`` section of an analysis: the plan next to the trace's measured peak."""
    d = ledger_dict(lg)
    d["measured_peak_bytes"] = measured_peak
    d["measured_basis"] = basis
    d["capacity_bytes"] = capacity
    # A relative peak (2021 traces: growth since profiling started) leaves out whatever was
    # allocated before — the weights and optimizer state above all — so no difference is taken.
    d["unexplained_bytes"] = (
        None if measured_peak is None or basis != "absolute" else measured_peak - round(lg.total_bytes)
    )
    return d


def ledger_text_lines(d: dict[str, Any]) -> list[str]:
    out = ["", "Ledger vs measured  (GB = 10⁹ bytes; the plan from --model next to the trace's peak)"]
    for i in d["items"]:
        out.append(f"  {i['label'][:56]:56s} {'—' if i['gb'] is None else format(i['gb'], '8.2f') + ' GB':>11s}")
    out.append(f"  {'ledger total':56s} {d['total_gb']:8.2f} GB")
    if d["measured_peak_bytes"] is not None:
        rel = " (growth since profiling started)" if d["measured_basis"] == "relative" else ""
        out.append(f"  {'measured peak allocated' + rel:56s} {d['measured_peak_bytes'] / 1e9:8.2f} GB")
        if d["unexplained_bytes"] is None:
            out.append("  (not comparable: the trace counts only memory allocated after profiling started)")
        else:
            label = "not in the ledger (activations, workspace)" if not d["complete"] else "measured − ledger"
            out.append(f"  {label:56s} {d['unexplained_bytes'] / 1e9:8.2f} GB")
    else:
        out.append("  measured peak: unknown (record with profile_memory=True)")
    return out


def ledger_markdown_lines(d: dict[str, Any]) -> list[str]:
    out = ["## Ledger vs measured", "", "| component | GB |", "|---|---:|"]
    for i in d["items"]:
        out.append(f"| {md_escape(i['label'])} | {'—' if i['gb'] is None else format(i['gb'], '.2f')} |")
    out.append(f"| ledger total | {d['total_gb']:.2f} |")
    if d["measured_peak_bytes"] is not None:
        out.append(
            f"| measured peak allocated ({md_escape(d['measured_basis'])}) | {d['measured_peak_bytes'] / 1e9:.2f} |"
        )
        if d["unexplained_bytes"] is not None:
            out.append(f"| measured − ledger | {d['unexplained_bytes'] / 1e9:.2f} |")
    out.append("")
    return out
