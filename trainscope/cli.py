"""Command line entry point: ``trainscope COMMAND …``.

Each subcommand lives in ``trainscope/commands/<name>.py`` with ``register(parser)`` (its arguments)
and ``run(args) -> int``; add it to COMMANDS below.

Exit codes (trainscope.api.describe maps errors to them): 0 success, 2 bad input or usage, 3 regression (diff gate), 1 internal error (with a one-line message;
``TRAINSCOPE_DEBUG=1`` shows the traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Sequence
from typing import NoReturn

from trainscope import __version__
from trainscope.api.errors import EXIT_BAD_INPUT
from trainscope.api.errors import EXIT_INTERRUPTED
from trainscope.api.errors import EXIT_OK
from trainscope.api.errors import TrainscopeError
from trainscope.common import fail_on

# Every command: the module that registers its arguments and runs it, and its line in `trainscope
# --help` (in this order). The one place trainscope defers imports for start-up time: a command's
# module imports what it runs at its top (the analyzers and numpy, the readers, Textual), and all
# ten together cost 0.9 s of CPU (measured), so a command line loads only the module of the command
# it names, and `trainscope --help` none (0.37 s of CPU before this table, 0.05 s with it).
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("trainscope.commands.analyze", "diagnose a recorded profiler trace"),
    "watch": ("trainscope.commands.watch", "live diagnosis beside a running training job"),
    "diff": (
        "trainscope.commands.diff",
        "compare two runs (traces or stored runs): what a change did, and a statistical CI gate",
    ),
    "runs": (
        "trainscope.commands.runs",
        "list the runs saved in the history (analyze --save, watch --save, the on_trace_ready hook)",
    ),
    "baseline": (
        "trainscope.commands.baseline",
        "set or show the baseline run of a tag (what `diff --against baseline` compares with)",
    ),
    "plan": (
        "trainscope.commands.plan",
        "will this training setup fit a GPU? the memory ledger and the cheapest changes that fit",
    ),
    "memory": (
        "trainscope.commands.memory",
        "peak memory, fragmentation and live allocations from a CUDA memory snapshot or timeline",
    ),
    "thresholds": (
        "trainscope.commands.thresholds",
        "list every diagnostic threshold with its default, unit and source",
    ),
    "cache": ("trainscope.commands.cache", "where the analysis cache is, how much it holds; clear it"),
    "mcp": ("trainscope.commands.mcp", "serve the analyses to a coding agent (Model Context Protocol, stdio)"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # usage errors: exit 2 with one line
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; with ``load``, only those commands' modules are imported and
    their arguments known (the others are their names and help lines, enough for ``--help``)."""
    p = _Parser(
        prog="trainscope",
        description="Find out why a deep-learning training run is slow: "
        "data-bound, memory-bound or compute-bound (the D·A·M taxonomy), with the evidence and ranked fixes.",
    )
    p.add_argument("--version", action="version", version=f"trainscope {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, line) in COMMANDS.items():
        parser = sub.add_parser(name, help=line)
        if load is None or name in load:
            importlib.import_module(module).register(parser)
    return p


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (trainscope's own options,
    --help and --version, take no value)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    named = command_named(argv)
    parser = build_parser(load=[named] if named else [])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        run: Callable[[argparse.Namespace], int] = args.run  # set by the command's register()
        return run(args)
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
