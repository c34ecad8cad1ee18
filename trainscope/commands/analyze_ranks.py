"""``trainscope analyze DIR`` (or a glob): the flags of the per-rank map. The map and the reduce run in
:func:`trainscope.api.analyze` (through :mod:`trainscope.api.executor`); ``commands/analyze.py`` calls it."""

from __future__ import annotations

import argparse

from trainscope.argtypes import number


def add_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument(
        "--jobs",
        type=_positive_int,
        default=None,
        metavar="N",
        help="cores the analysis may use (default: the cores this process may use): a rank directory's ranks "
        "N at once in worker processes; a large trace's host-side attribution on a second core, by "
        "default only where its memory fits in the container's limit and the machine's free memory "
        "(1: serially, the least memory)",
    )
    a.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="rank directories: analyze the ranks on the Dask cluster whose scheduler is at ADDRESS "
        "(tcp://host:8786); the workers read the files at the same paths (needs the dask extra)",
    )


_positive_int = number(int, lambda n: n >= 1, "must be at least 1: {text!r}", "a whole number")
