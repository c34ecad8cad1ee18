"""Rich renderings for the plan app: the verdict banner, the stacked ledger bar, the toggle line.

Pure functions of a :class:`Ledger` and :class:`Fit` (no widgets), so a test can check a picture
against numbers it computes itself.
"""

from __future__ import annotations

from rich.text import Text

from trainscope.analyzers.plan.ledger import GB
from trainscope.analyzers.plan.ledger import OPTIMIZERS
from trainscope.analyzers.plan.ledger import Fit
from trainscope.analyzers.plan.ledger import Ledger
from trainscope.analyzers.plan.ledger import PlanConfig

# Ledger item → (glyph, colour). Each item has its own glyph too, so the bar reads without colour.
ITEM_STYLE: dict[str, tuple[str, str]] = {
    "weights": ("█", "#3d7fd9"),
    "gradients": ("▓", "#8a63d2"),
    "master": ("▒", "#1fa6a6"),
    "optimizer": ("░", "#c9a227"),
    "activations": ("█", "#2e9e44"),
}
ITEM_SHORT = {
    "weights": "weights",
    "gradients": "gradients",
    "master": "master",
    "optimizer": "optimizer",
    "activations": "activations",
}
ITEM_TINY = {"weights": "wts", "gradients": "grads", "master": "master", "optimizer": "optim", "activations": "act"}


def gb2(nbytes: float) -> str:
    """GB with two decimals, rounded as the plan reports round them (to 3 decimals first)."""
    return f"{round(nbytes / GB, 3):.2f}"


def verdict_word(f: Fit) -> str:
    return "DOES NOT FIT" if not f.fits else "TIGHT" if f.tight else "FITS"


def verdict_class(f: Fit) -> str:
    return {"FITS": "fits", "TIGHT": "tight", "DOES NOT FIT": "nofit"}[verdict_word(f)]


def banner_text(lg: Ledger, f: Fit, device_name: str) -> str:
    scope = " · static floor only: activations not estimated" if f.static_only else ""
    return (
        f"{verdict_word(f)} · {gb2(lg.total_bytes)} GB = {f.pct:.0f} % of {device_name} "
        f"({f.capacity_bytes / GB:.1f} GB){scope}"
    )


def ledger_bar(lg: Ledger, f: Fit, width: int) -> Text:
    """Three lines: the items stacked to scale, markers at the threshold and at capacity, a legend.

    The scale is the larger of the total and the capacity (plus room for the markers), so both the
    overflow of a plan that does not fit and the headroom of one that does are visible.
    """
    width = max(20, width)
    scale = max(lg.total_bytes, f.capacity_bytes) * 1.02

    def cells(b: float) -> int:
        return round(width * b / scale)

    out = Text(no_wrap=True, overflow="crop")
    cum, drawn = 0.0, 0
    for it in lg.items:
        if not it.bytes:
            continue
        cum += it.bytes
        n = cells(cum) - drawn
        glyph, colour = ITEM_STYLE[it.key]
        out.append(glyph * n, style=colour)
        drawn += n
    out.append("·" * (width - drawn), style="dim")
    out.append("\n")
    marks = [" "] * width
    p90 = min(width - 1, cells(f.capacity_bytes * f.threshold_pct / 100))
    pcap = min(width - 1, cells(f.capacity_bytes))
    marks[p90] = "▲"
    marks[pcap] = "▲"
    line = Text("".join(marks), no_wrap=True)
    line.stylize("#e08a1e", p90, p90 + 1)
    line.stylize("bold #e0443e", pcap, pcap + 1)
    label = f" {f.threshold_pct:g} % · capacity {f.capacity_bytes / GB:.1f} GB"
    # The label after the capacity marker when it fits there, else ending before the 90 % marker.
    if pcap + 1 + len(label) <= width:
        line = line[: pcap + 1] + Text(label, style="dim")
    elif p90 - len(label) - 1 >= 0:
        start = p90 - len(label) - 1
        line = Text("".join(marks[:start]), no_wrap=True) + Text(label.strip() + " ", style="dim") + line[p90:]
    out.append_text(line)
    out.append("\n")
    legend = _legend(lg, ITEM_SHORT)
    out.append_text(legend if legend.cell_len <= width else _legend(lg, ITEM_TINY))
    return out


def _legend(lg: Ledger, names: dict[str, str]) -> Text:
    out = Text(no_wrap=True, overflow="crop")
    for it in lg.items:
        if it.bytes is None and it.key == "activations":
            out.append("? activations unknown ", style="dim")
            continue
        if not it.bytes:
            continue
        glyph, colour = ITEM_STYLE[it.key]
        out.append(glyph, style=colour)
        out.append(f" {names[it.key]} {it.bytes / GB:.1f}  ")
    out.append(f"= {lg.total_bytes / GB:.1f} GB", style="bold")
    return out


def toggles_text(cfg: PlanConfig, device_name: str, initial: PlanConfig, initial_device: str) -> Text:
    """The live settings, each after its key; values that differ from the starting plan in bold."""
    fields = [
        ("o", OPTIMIZERS[cfg.optimizer].label, cfg.optimizer != initial.optimizer),
        (
            "p",
            {"fp32": "FP32", "mixed": "mixed 16-bit", "mixed-fp32-grads": "mixed, FP32 grads"}[cfg.precision],
            cfg.precision != initial.precision,
        ),
        ("c", f"ckpt {cfg.checkpoint}", cfg.checkpoint != initial.checkpoint),
        ("b", f"batch {cfg.batch}", cfg.batch != initial.batch),
        (
            "a",
            f"accum {cfg.grad_accum}" + (f" (micro {cfg.micro_batch})" if cfg.grad_accum > 1 else ""),
            cfg.grad_accum != initial.grad_accum,
        ),
        ("g", f"{cfg.gpus} GPU{'s' * (cfg.gpus > 1)}", cfg.gpus != initial.gpus),
        ("z", f"ZeRO-{cfg.zero}", cfg.zero != initial.zero),
        ("d", device_name, device_name != initial_device),
    ]
    out = Text()
    for i, (key, value, changed) in enumerate(fields):
        if i:
            out.append("  ")
        out.append(key, style="bold reverse")
        out.append(" ")
        out.append(value, style="bold yellow" if changed else "")
    return out


def activation_note(lg: Ledger) -> Text:
    """The footer: how the activation figure was obtained, and on what source it rests."""
    a = lg.activations
    out = Text(no_wrap=False)
    out.append(f"activations ({a.method}): ", style="bold")
    out.append(a.formula)
    if a.full_bytes is not None and a.bytes is not None and a.full_bytes != a.bytes:
        out.append(f"  (without checkpointing {a.full_bytes / GB:.2f} GB)")
    if a.source:
        out.append("\nsource: ", style="bold")
        out.append(a.source, style="dim")
    for n in lg.notes:
        out.append("\nnote: ", style="bold")
        out.append(n)
    return out
