"""``trainscope thresholds``: the rule table, so every verdict can be audited."""

from __future__ import annotations

import argparse

from trainscope.common import EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("thresholds", help="list every diagnostic threshold with its default, unit and source")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from trainscope import api

    for t in api.rules_from().all():
        print(f"{t.name:24s} {t.value:>6g} {t.unit:34s} {t.source}")
    return EXIT_OK
