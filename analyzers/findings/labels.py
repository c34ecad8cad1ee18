"""Scoring a verdict against expert labels: the class a verdict claims (from the registry's
``label_class``) and whether it is right for a label ``{"primary": [...], "must_not": [...]}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.trace.host_only import LABEL_CLASS
from trainscope.analyzers.trace.host_only import NO_GPU_ROWS


def verdict_class(axis: str, bottleneck: str | None) -> str:
    """The benchmark class a verdict claims: its primary finding's declared class; "none" for
    insufficient evidence ("insufficient-gpu-evidence" for an Nsight export without GPU rows,
    analyzers/trace/host_only.py); "balanced" (no class) when no cause stands out."""
    if axis == "insufficient_evidence":
        return LABEL_CLASS if bottleneck == NO_GPU_ROWS else "none"
    spec = REGISTRY.get(bottleneck or "")
    if spec is None or spec.label_class is None:
        return "balanced"
    return spec.label_class


class Label(TypedDict, total=False):
    """An expert label as the labeled benchmark writes it (its other keys, facts, are not read here)."""

    primary: list[str]  # the classes a right verdict names one of
    must_not: list[str]  # the classes it must not name


@dataclass(frozen=True)
class Score:
    claimed: str
    right: bool
    why: str


def score(claimed: str, label: Label) -> Score:
    """Right when the claimed class is one of the label's "primary" classes (where it lists any)
    and none of its "must_not" classes."""
    primary, must_not = label.get("primary") or [], label.get("must_not") or []
    if claimed in must_not:
        return Score(claimed, False, f"{claimed} is a class the verdict must not give")
    if primary and claimed not in primary:
        return Score(claimed, False, f"{claimed} is not among {', '.join(primary)}")
    return Score(claimed, True, "named " + claimed if primary else f"{claimed}: not a forbidden class")


def scored(label: Label) -> bool:
    """Whether a label judges the verdict at all (a label of facts only does not)."""
    return bool(label.get("primary") or label.get("must_not"))
