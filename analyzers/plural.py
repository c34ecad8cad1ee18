"""Counts in words: ``1 step``, ``2 steps``; ``1 call`` where a count's unit is a plural noun."""

from __future__ import annotations

import re

# A count noun: one word of letters ending in s (not a unit symbol such as ms, ns, µs, GB/s).
_COUNT_NOUN = re.compile(r"^[A-Za-z]{2,}s$")
_SYMBOLS = {"ms", "ns", "us", "µs", "bps", "Gbps", "GBs", "FLOPs", "TFLOPs"}


def plural(n: float, noun: str, many: str | None = None) -> str:
    """``plural(1, "step")`` → ``"1 step"``; ``plural(3, "step")`` → ``"3 steps"``."""
    word = noun if n == 1 else (many or noun + "s")
    return f"{n:g} {word}" if isinstance(n, float) else f"{n} {word}"


def unit_for(value: float | None, unit: str) -> str:
    """The unit as a count of one reads it: ``unit_for(1, "calls")`` → ``"call"``."""
    if value == 1 and _COUNT_NOUN.match(unit) and unit not in _SYMBOLS:
        return unit[:-1]
    return unit
