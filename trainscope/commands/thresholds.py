"""``trainscope thresholds``: the rule table, so every verdict can be audited."""

from __future__ import annotations

import argparse

from trainscope import api
from trainscope.api.errors import EXIT_OK


def register(p: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope thresholds`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    for t in api.rules_from().all():
        print(f"{t.name:24s} {t.value:>6g} {t.unit:34s} {t.source}")
    return EXIT_OK
