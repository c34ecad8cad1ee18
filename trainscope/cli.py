"""Command line entry point: ``trainscope COMMAND …``.

Each subcommand lives in ``trainscope/commands/<name>.py`` with ``register(subparsers)`` and
``run(args) -> int``; add it to COMMANDS below.

Exit codes (trainscope.api.describe maps errors to them): 0 success, 2 bad input or usage, 3 regression (diff gate), 1 internal error (with a one-line message;
``TRAINSCOPE_DEBUG=1`` shows the traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from trainscope import __version__
from trainscope.api import EXIT_INTERRUPTED, TrainscopeError
from trainscope.commands import analyze, baseline, cache, diff, mcp, memory, plan, runs, thresholds, watch
from trainscope.common import EXIT_BAD_INPUT, EXIT_OK, fail_on

# Order is the order in `trainscope --help`.
COMMANDS = [
    analyze,
    watch,
    diff,
    runs,
    baseline,
    plan,
    memory,
    thresholds,
    cache,
    mcp,
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: exit 2 with one line
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="trainscope",
        description="Find out why a deep-learning training run is slow: "
        "data-bound, memory-bound or compute-bound (the D·A·M taxonomy), with the evidence and ranked fixes.",
    )
    p.add_argument("--version", action="version", version=f"trainscope {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return args.run(args)
    except KeyboardInterrupt:
        sys.stderr.write("\ntrainscope: interrupted\n")
        return EXIT_INTERRUPTED
    except TrainscopeError as e:  # bad input (2), regression (3), …: one line, the code the error carries
        return fail_on(e)
    except BrokenPipeError:
        # `trainscope analyze … | head`: the reader left; not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as e:  # a bug (or out of memory): one line, not a traceback, unless asked
        if os.environ.get("TRAINSCOPE_DEBUG") and not isinstance(e, MemoryError):
            raise
        return fail_on(e)
