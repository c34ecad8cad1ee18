"""The MCP server's answers have one shape (issue 37): lists come in pages that, walked with the
offset each page names, give every item exactly once and in order; a wrong argument's type is one
line, an MCP tool error like any other; and a server killed with SIGKILL leaves no private folder
behind for long (issue 35): the next server removes the folders of servers that are gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pinned in the [test] extra) provides the client")

from tests.mcp_client import DATA  # noqa: E402
from tests.mcp_client import run_calls  # noqa: E402

SLOW = "cpu/slow.pt.trace.json.gz"
LONG_NAMES = "kineto/tl_mi300x_norm_layers_fwdbwd.json.gz"  # 36 kernels, names up to 5,096 characters
MANY_STEPS = "kineto/param_linear_2080ti.json.gz"  # 40 steps


async def walk(c, tool: str, args: dict, rows: str) -> tuple[list, list[dict]]:
    """Every page of ``tool``, each asked for with the offset the one before named: (items, pages)."""
    items, pages, offset = [], [], 0
    while True:
        r = await c.call_tool(tool, {**args, "offset": offset})
        assert not r.is_error, r.content[0].text
        s = r.structured_content
        assert len(r.content[0].text) <= 20_000, (tool, offset, len(r.content[0].text))
        assert len(s[rows]) == s["page"]["returned"] >= 1 and s["page"]["offset"] == offset, s["page"]
        items += s[rows]
        pages.append(s["page"])
        if s["page"]["next_offset"] is None:
            return items, pages
        assert s["page"]["next_offset"] == offset + s["page"]["returned"], s["page"]
        assert any(f"offset={s['page']['next_offset']}" in m for m in s["more"]), s["more"]
        offset = s["page"]["next_offset"]
        assert len(pages) < 500


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    from trainscope import api
    from trainscope.api.store import RunStore
    from trainscope.api.store import report_summary

    store = str(tmp_path_factory.mktemp("store") / "runs.db")
    summary = report_summary(api.analyze(os.path.join(DATA, SLOW)))
    with RunStore(store) as st:
        for i in range(7):
            st.save(summary, tag=f"t{i}", detect_git=False)

    async def calls(c):
        return {
            "kernels": await walk(c, "list_kernels", {"path": LONG_NAMES, "limit": 30, "detail": "full"}, "kernels"),
            "steps": await walk(c, "list_steps", {"path": MANY_STEPS, "limit": 7}, "steps"),
            "events": await walk(
                c,
                "timeline_window",
                {"path": SLOW, "start_ms": -1e6, "end_ms": 1e9, "limit": 5000, "detail": "full"},
                "events",
            ),
            "default_window": await walk(c, "timeline_window", {"path": SLOW}, "events"),
            "runs": await walk(c, "list_runs", {"limit": 3}, "runs"),
            "runs_past_the_end": await c.call_tool("list_runs", {"offset": 50}),
        }

    return run_calls(calls, store)


def test_walking_the_kernel_pages_gives_every_kernel_once(walked):
    from trainscope import api

    rep = api.analyze(os.path.join(DATA, LONG_NAMES))
    every = api.kernel_table(rep, limit=1000)["kernels"]
    items, pages = walked["kernels"]
    assert len(every) == 36 and pages[0]["total"] == 36
    assert [k["name"] for k in items] == [k["name"] for k in every]  # in order, each once, names whole
    assert items == every
    assert max(len(k["name"]) for k in items) > 5000
    # 5,096-character names: a page of 30 is cut short to fit, and the walk still gives them all
    assert any(p["returned"] < p["limit"] for p in pages[:-1]), pages
    assert sum(p["returned"] for p in pages) == 36


def test_walking_the_step_pages_gives_every_step_once(walked):
    from trainscope import api

    every = api.step_table(api.analyze(os.path.join(DATA, MANY_STEPS)))["steps"]
    items, pages = walked["steps"]
    assert len(every) == 40 and items == every
    assert [p["returned"] for p in pages] == [7, 7, 7, 7, 7, 5]
    assert [p["offset"] for p in pages] == [0, 7, 14, 21, 28, 35] and pages[-1]["next_offset"] is None


def test_walking_the_event_pages_gives_every_event_once(walked):
    from trainscope import api

    rep = api.analyze(os.path.join(DATA, SLOW))
    w = api.timeline_window(rep, -1e6, 1e9, limit=100_000)
    every = w["events"]
    items, pages = walked["events"]
    assert w["matched"] == len(every) == pages[0]["total"] == 660
    assert items == every  # the same events in the same order (start, kind, row)
    assert sum(p["returned"] for p in pages) == len(every)
    assert len(pages) >= 5 and all(p["returned"] < p["limit"] for p in pages[:-1])  # cut to fit, not to limit
    first, pages_ = walked["default_window"]
    steps = api.step_table(rep)["steps"]
    s0 = steps[0]
    inside = api.timeline_window(rep, s0["start_ms"], s0["start_ms"] + s0["duration_ms"], limit=100_000)
    assert len(first) == inside["matched"] == pages_[0]["total"]
    assert [(e["name"][:200], e["start_ms"]) for e in first] == [
        (e["name"][:200], e["start_ms"]) for e in inside["events"]
    ]


def test_walking_the_run_pages_gives_every_run_once(walked):
    items, pages = walked["runs"]
    assert [r["id"] for r in items] == [7, 6, 5, 4, 3, 2, 1]
    assert [r["tag"] for r in items] == [f"t{i}" for i in range(6, -1, -1)]
    assert [(p["offset"], p["returned"], p["total"]) for p in pages] == [(0, 3, 7), (3, 3, 7), (6, 1, 7)]
    assert all(r["source"] == SLOW for r in items)  # saved with its absolute path under the root
    past = walked["runs_past_the_end"].structured_content
    assert past["runs"] == [] and past["page"] == {
        "offset": 50,
        "limit": 20,
        "returned": 0,
        "total": 7,
        "next_offset": None,
    }


# -- errors -------------------------------------------------------------------------------------------


def test_a_wrong_argument_is_one_line_naming_it():
    bad = [
        ("list_kernels", {"path": SLOW, "limit": "abc"}, "limit: input should be a valid integer"),
        ("list_kernels", {"limit": 3}, "path: required"),
        ("analyze_trace", {"path": SLOW, "detail": "everything"}, "detail: input should be 'summary' or 'full'"),
        ("timeline_window", {"path": SLOW, "kinds": "kernel"}, "kinds: input should be a valid list"),
        ("list_steps", {"path": SLOW, "offset": -1}, "offset: -1 is out of range"),
        ("list_steps", {"path": SLOW, "outliers_only": "perhaps"}, "outliers_only: input should be a valid boolean"),
        ("timeline_window", {"path": SLOW, "start_ms": 5}, "give both start_ms and end_ms, or neither"),
        ("diff_runs", {"before": SLOW, "after": 7}, "after: input should be a valid string"),
    ]

    async def calls(c):
        return [await c.call_tool(tool, args) for tool, args, _ in bad]

    for (tool, args, said), r in zip(bad, run_calls(calls)):
        text = r.content[0].text
        assert r.is_error and len(r.content) == 1, (tool, args)
        assert "\n" not in text and said in text, (tool, args, text)
        assert text.startswith(f"Error executing tool {tool}: ") and "pydantic" not in text, text


# -- the private folder -------------------------------------------------------------------------------


class Stdio:
    """`trainscope mcp` over stdio spoken by hand (newline-delimited JSON-RPC), to kill it mid-session."""

    def __init__(self, tmpdir: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainscope", "mcp", "--root", DATA, "--store", os.path.join(tmpdir, "none.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "TMPDIR": tmpdir, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.id = 0
        self.ask(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def ask(self, method: str, params: dict) -> dict:
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            assert line, "the server closed its output"
            got = json.loads(line)
            if got.get("id") == self.id:
                return got["result"]


def _folders(tmpdir) -> list[str]:
    return sorted(n for n in os.listdir(tmpdir) if n.startswith("trainscope-mcp-"))


def test_a_server_killed_with_sigkill_leaves_its_folder_to_the_next_server(tmp_path):
    from trainscope.mcp_server import FOLDER_OWNER

    tmpdir = str(tmp_path)
    first = Stdio(tmpdir)
    try:
        r = first.ask("tools/call", {"name": "list_steps", "arguments": {"path": SLOW, "limit": 1}})
        assert not r.get("isError") and r["structuredContent"]["source"] == SLOW
        left = _folders(tmpdir)
        assert len(left) == 1  # one folder per server, with an owner file naming it
        with open(os.path.join(tmpdir, left[0], FOLDER_OWNER)) as f:
            assert f.read().split()[0] == str(first.proc.pid)
    finally:
        first.proc.kill()
        first.proc.wait(timeout=60)
    assert _folders(tmpdir) == left  # SIGKILL: nothing could remove it
    second = Stdio(tmpdir)  # answers only once it has started, and removed what dead servers left
    try:
        assert _folders(tmpdir) == []
        r = second.ask("tools/call", {"name": "list_kernels", "arguments": {"path": SLOW}})
        assert not r.get("isError")
        assert len(_folders(tmpdir)) == 1 and _folders(tmpdir) != left
    finally:
        second.proc.stdin.close()  # the client closes the session: the server removes its folder
        second.proc.wait(timeout=60)
    assert _folders(tmpdir) == []


def test_only_the_folders_of_servers_that_are_gone_are_removed(tmp_path):
    from trainscope.collectors.step_hook import process_start
    from trainscope.mcp_server import FOLDER_OWNER
    from trainscope.mcp_server import clean_stale

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    def folder(name: str, owner: str | None = None, age: float = 0.0) -> str:
        path = tmp_path / f"trainscope-mcp-{name}"
        (path / "sub").mkdir(parents=True)
        if owner is not None:
            (path / FOLDER_OWNER).write_text(owner)
        then = time.time() - age
        os.utime(path, (then, then))
        return str(path)

    dead = folder("dead", f"{gone.pid} 1\n")
    alive = folder("alive", f"{os.getpid()} {process_start(os.getpid())}\n", age=3600)
    reused = folder("reused", f"{os.getpid()} 1\n")  # this pid, but another process's start time
    garbled = folder("garbled", "not a pid\n")
    old = folder("old", None, age=2 * 86400)  # an older server's per-call folder, nothing open in it
    in_use = folder("in-use", None, age=2 * 86400)
    os.symlink(f"/proc/{os.getpid()}/fd/0", os.path.join(in_use, "sub", "trace.json"))
    young = folder("young", None, age=3600)  # a server's starting, or an older server's in use
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, tmp_path / "trainscope-mcp-link")  # a link is never followed
    (tmp_path / "trainscope-mcp-file").write_text("x")

    removed = clean_stale(str(tmp_path))
    assert sorted(removed) == sorted([dead, reused, garbled, old])
    for kept in (alive, in_use, young, str(elsewhere), str(tmp_path / "trainscope-mcp-file")):
        assert os.path.exists(kept), kept
    assert os.path.islink(tmp_path / "trainscope-mcp-link")
