"""The argparse types of numbers, declared once: each command's numeric flag is one row here (its
kind, its bound and the words it is refused with) rather than a function of its own."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


def number(
    kind: Callable[[str], N], ok: Callable[[N], bool], refusal: str, noun: str = "a number"
) -> Callable[[str], N]:
    """An argparse type: ``text`` read as ``kind`` (``int`` or ``float``), refused with ``not NOUN:
    'text'`` when it is none and with ``refusal`` (which may name ``{text!r}``) when ``ok`` says no."""

    def parse(text: str) -> N:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(refusal.format(text=text))
        return v

    return parse


def whole(lo: int, hi: int) -> Callable[[str], int]:
    """A whole number from ``lo`` to ``hi``."""
    return number(int, lambda v: lo <= v <= hi, f"must be {lo}–{hi}", "a whole number")


positive_float = number(float, lambda v: v > 0, "must be > 0")
non_negative_float = number(float, lambda v: v >= 0, "must be ≥ 0")
finite_non_negative = number(float, lambda v: v >= 0 and v != float("inf"), "must be a finite number ≥ 0")
positive_int = number(int, lambda v: v >= 1, "must be ≥ 1", "a whole number")
