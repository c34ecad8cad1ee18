"""How the MCP tests (test_mcp*.py) talk to `trainscope mcp`: the SDK's own client, over stdio to a
server process as a coding agent runs it, or in process to a server built here. Each test file
skips itself first when the mcp extra is not installed (``pytest.importorskip("mcp")``)."""

from __future__ import annotations

import os
import sys

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

DATA = os.path.join(os.path.dirname(__file__), "data")

TOOLS = {
    "analyze_trace",
    "explain_finding",
    "list_kernels",
    "list_steps",
    "timeline_window",
    "module_tree",
    "diff_runs",
    "memory_snapshot",
    "list_runs",
}


def _run(server, calls):
    out = {}

    async def main():
        async with Client(server) as client:
            out["result"] = await calls(client)

    anyio.run(main)
    return out["result"]


def stdio_session(root: str, store: str, calls, *flags: str):
    """Start `trainscope mcp --root ROOT --store STORE [FLAGS]`, run ``calls(client)``, return its result."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "trainscope", "mcp", "--root", root, "--store", store, *flags],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return _run(params, calls)


def run_calls(calls, store: str | None = None, roots: list[str] | None = None):
    """``calls(client)`` against a server built in this process over ``roots`` (tests/data), closed after."""
    from trainscope.mcp_server import build_server

    server = build_server(roots or [DATA], store)
    try:
        return _run(server, calls)
    finally:
        server.trainscope_close()
