"""``trainscope mcp``: serve trainscope's analyses to a coding agent over the Model Context Protocol."""

from __future__ import annotations

import argparse
import os

from trainscope import api
from trainscope.api.errors import EXIT_OK
from trainscope.common import add_input_limit_args
from trainscope.common import apply_input_limits
from trainscope.common import one_line_errors

# The extra's pinned version, for the install line.
MCP_EXTRA = "pip install 'trainscope-dam[mcp]'"


def register(m: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope mcp`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    m.description = (
        "Run a Model Context Protocol server on stdin/stdout. Its tools are trainscope's own calls "
        "with typed results: analyze_trace, explain_finding, list_kernels, list_steps, timeline_window, "
        "diff_runs, memory_snapshot, list_runs. It reads only paths under --root: each file is opened "
        "one path component at a time without following a link (a link is followed only where it stays "
        "under a root) and checked once open, so a link swapped in later cannot lead outside; anything "
        "else is refused. Every answer names a path as a tool call takes it (relative to the first --root) and "
        "stays within 20,000 characters by default: lists come in pages (offset, limit; the answer says how many "
        "more and the offset to ask for), the rest has a summary level (detail=full gives everything). "
        "It opens the run history read-only and writes nothing but its private folder in $TMPDIR (removed when it "
        "ends; a killed server's is removed by the next one). The read limits "
        "(--max-decompressed) are this server's flags: a tool call cannot change them. "
        f"Needs the mcp extra: {MCP_EXTRA}."
    )
    m.epilog = (
        "a coding agent's configuration (e.g. .mcp.json):\n"
        '  {"mcpServers": {"trainscope": {"command": "trainscope",\n'
        '                                 "args": ["mcp", "--root", "/path/to/traces"]}}}\n\n'
        "exit codes: 0 the client closed the session, 2 bad usage or the mcp extra is missing"
    )
    m.formatter_class = argparse.RawDescriptionHelpFormatter
    m.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        default=[],
        help="a directory the server may read (repeatable; default: the current directory); relative "
        "paths in tool calls are taken from the first",
    )
    m.add_argument(
        "--store",
        metavar="PATH",
        help="the run history list_runs and diff_runs read (default: "
        "$TRAINSCOPE_STORE, else $XDG_DATA_HOME/trainscope/runs.db, else ~/.local/share/trainscope/runs.db)",
    )
    add_input_limit_args(m)
    m.set_defaults(run=run)


@one_line_errors
def run(args: argparse.Namespace) -> int:
    try:
        import mcp.server  # noqa: F401
    except ImportError:
        raise api.BadInput(f"trainscope mcp needs the mcp package: {MCP_EXTRA}") from None
    roots = args.root or [os.getcwd()]
    for r in roots:
        if not os.path.isdir(r):
            raise api.BadInput(f"--root {r}: not a directory")
    apply_input_limits(args)
    from trainscope.mcp_server import serve  # after the check: it imports the optional mcp extra (pydantic)

    serve(roots, args.store)
    return EXIT_OK
