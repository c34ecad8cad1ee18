"""The threshold table a call runs with: the defaults, a whole ``Rules``, or overrides by name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from trainscope.analyzers.rules import Rules
from trainscope.api.errors import BadInput

if TYPE_CHECKING:
    from trainscope.analyzers.rules import Rules


def resolve_rules(rules: Rules | None, thresholds: Mapping[str, float] | None) -> Rules:
    """``rules`` as given, or the defaults with ``thresholds`` ({name: value}) overridden."""

    if rules is not None:
        if thresholds:
            raise BadInput("give rules or thresholds, not both")
        return rules
    thresholds = dict(thresholds or {})
    unknown = sorted(set(thresholds) - set(Rules.names()))
    if unknown:
        raise BadInput(f"unknown threshold {unknown[0]!r} (see `trainscope thresholds`)")
    return Rules({k: float(v) for k, v in thresholds.items()})


def rules_from(thresholds: Mapping[str, float] | None = None) -> Rules:
    """The threshold table (``analyzers.rules.Rules``: every threshold with its value, unit and
    source) with ``thresholds`` ({name: value}) overriding the defaults. Raises :class:`BadInput`
    for a name that is not a threshold."""
    return resolve_rules(None, thresholds)
