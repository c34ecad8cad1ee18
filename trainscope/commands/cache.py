"""``trainscope cache {info,clear}``: the analysis cache (trainscope/api/cache.py)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trainscope.api import cache
from trainscope.api.errors import EXIT_OK
from trainscope.common import fail
from trainscope.common import one_line_errors


def register(c: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope cache`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    c.description = (
        "`analyze` (and the MCP server's tools) keep the document of each analysis in a cache, "
        "keyed by the input (its size, modification time and a hash of its bytes), trainscope's version "
        "and every option that changes the result: the same look again is read from there instead of "
        "the trace. Beside the documents it keeps each trace's columns (keyed by the input and the "
        "readers' version): `analyze` (HTML, --perfetto, --save, the app), `diff` and the MCP tools read "
        "a trace read before from there instead of parsing it. Entries are checked on every read (a damaged one is removed and the trace analyzed "
        "again); the least recently used go first when the cache passes its bound."
    )
    c.epilog = (
        "where: $TRAINSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/trainscope, else ~/.cache/trainscope\n"
        "bound: $TRAINSCOPE_CACHE_MAX (e.g. 500MB, 4GiB; default 2GiB)\n"
        "off:   analyze --no-cache, or TRAINSCOPE_NO_CACHE=1 for every command\n\n"
        "examples:\n  trainscope cache info\n  trainscope cache info --format json\n  trainscope cache clear\n\n"
        "exit codes: 0 done, 2 bad usage or an unsafe cache folder, 1 internal error"
    )
    c.formatter_class = argparse.RawDescriptionHelpFormatter
    what = c.add_subparsers(dest="action", metavar="ACTION")
    info = what.add_parser("info", help="the cache's folder, entries and bytes, and its bound")
    info.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or a JSON object")
    what.add_parser("clear", help="remove every entry (and what writers that died left behind)")
    c.set_defaults(run=run)


@one_line_errors
def run(args: argparse.Namespace) -> int:
    if args.action is None:
        return fail("cache: say info or clear (see `trainscope cache --help`)")
    where = cache.cache_dir()
    bound = cache.max_bytes()
    try:
        dfd = cache.open_dir(create=False)
    except OSError as e:
        return fail(f"cache folder {where}: {e.strerror or e}")
    try:
        if args.action == "clear":
            n, size = cache.clear(dfd) if dfd is not None else (0, 0)
            sys.stdout.write(f"removed {n} {'entry' if n == 1 else 'entries'} ({_size(size)}) from {where}\n")
            return EXIT_OK
        ls = cache.listing(dfd) if dfd is not None else cache.Listing([], [])
        traces = [e for e in ls.entries if not e[0].endswith(cache.SUFFIX)]
        info: dict[str, Any] = {
            "path": where,
            "exists": dfd is not None,
            "entries": len(ls.entries),
            "bytes": ls.bytes,
            "documents": len(ls.entries) - len(traces),
            "traces": len(traces),
            "trace_bytes": sum(e[1] for e in traces),
            "max_bytes": bound,
            "temporary_files": len(ls.temporary),
            "enabled": cache.enabled(),
        }
        if args.format == "json":
            sys.stdout.write(json.dumps(info, indent=2) + "\n")
            return EXIT_OK
        state = "" if info["enabled"] else f"  (off: {cache.ENV_OFF} is set)"
        sys.stdout.write(
            f"cache    {where}{'' if dfd is not None else ' (not created yet)'}{state}\n"
            f"entries  {info['entries']}, {_size(ls.bytes)} of at most {_size(bound)}\n"
            f"         {info['documents']} analysis document{'' if info['documents'] == 1 else 's'}, "
            f"{info['traces']} {'trace' + chr(39) + 's' if info['traces'] == 1 else 'traces' + chr(39)} columns "
            f"({_size(info['trace_bytes'])})\n"
        )
        if ls.temporary:
            sys.stdout.write(f"writing  {len(ls.temporary)} entries being written (or left by a writer that died)\n")
        return EXIT_OK
    finally:
        if dfd is not None:
            import os

            os.close(dfd)


def _size(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"
