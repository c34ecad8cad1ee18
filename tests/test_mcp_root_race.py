"""The MCP server's --root against a writer inside it (trainscope/mcp_server.py): a writer process
flips a file, and a rank folder's file, between a regular file and a symbolic link to a trace
outside the root as fast as it can, while a client calls the tools 500 times. No answer may carry
the outside trace's contents. (The server that checked the resolved path and opened it later
returned them in 20 and 47 of 500 folder calls here, and in 107 of 150 file calls with a thread
as the writer.) Also: every numeric input is checked, and the read limits are the server's own
flags."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pinned in the [test] extra) provides the client")

from tests.mcp_client import stdio_session  # noqa: E402

CALLS = 500
SECRET = "OUTSIDE_SECRET_KERNEL"


def tiny_trace(kernel: str, rank: int | None = None, steps: int = 4) -> dict:
    """A small Kineto trace: ``steps`` ProfilerStep ranges, three launches of ``kernel`` in each."""
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]
    t, corr = 1000, 1
    for s in range(steps):
        ev.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t, "dur": 1000}
        )
        for k in range(3):
            ts = t + 50 + k * 300
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": ts,
                    "dur": 10,
                    "args": {"correlation": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kernel,
                    "pid": 0,
                    "tid": 7,
                    "ts": ts + 20,
                    "dur": 200,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                }
            )
            corr += 1
        t += 1000
    doc: dict = {"schemaVersion": 1, "traceEvents": ev}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    return doc


def session(root: str, calls, *flags: str):
    return stdio_session(root, os.path.join(root, "none.db"), calls, *flags)


# The writer: a process of its own (a thread of the test would share the client's interpreter lock).
FLIP = """
import os, signal, sys
target, inside, outside = sys.argv[1:4]
tmp, flips = target + ".flip", 0
def stop(*_):
    print(flips, flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:  # the target starts as a hard link of inside: the link to outside first
    os.symlink(outside, tmp)
    os.replace(tmp, target)
    os.link(inside, tmp)
    os.replace(tmp, target)
    flips += 2
"""


class Flipper:
    """Turns ``target`` into a symbolic link to ``outside`` and back into a regular file (a hard
    link of ``inside``), each by an atomic rename, as fast as it can until stopped."""

    def __init__(self, target: str, inside: str, outside: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FLIP, target, inside, outside], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline() == "ready\n"
        self.flips = 0

    def stop(self) -> None:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=60)
        self.flips = int(out.split()[-1]) if out.split() else 0


@pytest.fixture
def tree(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "ranks").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps(tiny_trace(SECRET, rank=1)))
    (root / "inside.json").write_text(json.dumps(tiny_trace("inside_gemm_kernel", rank=1)))
    (root / "ranks" / "rank0.json").write_text(json.dumps(tiny_trace("inside_gemm_kernel", rank=0)))
    for name in ("t.json", "ranks/rank1.json"):
        os.link(root / "inside.json", root / name)
    return root, outside / "secret.json"


def _race(root, target: str, outside, tool: str, args: dict) -> dict:
    async def calls(c):
        got = {"ok": 0, "refused": 0, "leaked": 0, "other": []}
        flipper = Flipper(str(root / target), str(root / "inside.json"), str(outside))
        try:
            for _ in range(CALLS):
                r = await c.call_tool(tool, args)
                text = r.content[0].text if r.content else ""
                if SECRET in text or SECRET in json.dumps(r.structured_content or {}):
                    got["leaked"] += 1
                elif not r.is_error:
                    got["ok"] += 1
                elif "outside the allowed roots" in text:
                    got["refused"] += 1
                else:
                    got["other"].append(text)
        finally:
            flipper.stop()
        got["flips"] = flipper.flips
        return got

    return session(str(root), calls)


def test_a_file_flipped_to_a_link_outside_never_returns_outside_contents(tree):
    root, outside = tree
    got = _race(root, "t.json", outside, "list_kernels", {"path": "t.json"})
    assert got["leaked"] == 0, got
    assert got["ok"] > 0 and got["flips"] > CALLS, got  # the writer ran all along
    assert all("changed while it was opened" in t or "no such file" in t for t in got["other"]), got["other"][:3]


def test_a_rank_folder_file_flipped_to_a_link_outside_never_returns_outside_contents(tree):
    root, outside = tree
    got = _race(root, "ranks/rank1.json", outside, "list_kernels", {"path": "ranks", "rank": 1})
    assert got["leaked"] == 0, got
    assert got["ok"] > 0 and got["flips"] > CALLS, got
    assert all("changed while it was opened" in t or "no such file" in t for t in got["other"]), got["other"][:3]


# -- the same without a race: what was opened is what is read ------------------------------------------


def test_what_is_read_is_the_file_that_was_opened_even_after_a_swap(tree):
    from trainscope.mcp_server import Roots

    root, outside = tree
    guard = Roots([str(root)])
    for path in ("t.json", "ranks"):
        o = guard.open(path)
        try:
            # The writer swaps the file (the rank file) for a link outside once the server has opened it.
            target = root / ("t.json" if path == "t.json" else "ranks/rank1.json")
            os.unlink(target)
            os.symlink(outside, target)
            read = o.show() if path == "t.json" else os.path.join(o.show(), "rank1.json")
            assert os.path.basename(read) == os.path.basename(target)  # the readers see the file's own name
            with open(read) as f:
                text = f.read()
            assert SECRET not in text and "inside_gemm_kernel" in text
            assert o.public(f"{read}: x") == f"{path if path == 't.json' else 'ranks/rank1.json'}: x"
        finally:
            o.close()
        assert not os.path.exists(o.tmp)
        os.unlink(target)
        os.link(root / "inside.json", target)


def test_links_that_stay_inside_are_followed_and_others_refused(tree, tmp_path):
    from trainscope.api import BadInput
    from trainscope.mcp_server import Roots

    root, outside = tree
    guard = Roots([str(root)])
    os.symlink("inside.json", root / "rel-link.json")
    os.symlink(str(root / "ranks" / "rank0.json"), root / "abs-link.json")
    os.symlink("ranks/../inside.json", root / "dotdot-link.json")
    os.symlink("../outside/secret.json", root / "escape.json")
    os.symlink("loop-b", root / "loop-a")
    os.symlink("loop-a", root / "loop-b")
    os.mkfifo(root / "pipe.json")
    for path in ("rel-link.json", "abs-link.json", "dotdot-link.json", str(root / "t.json"), "ranks/../t.json"):
        o = guard.open(path)
        try:
            with open(o.show()) as f:
                assert "inside_gemm_kernel" in f.read(), path
        finally:
            o.close()
    for path, why in (
        ("escape.json", "refused — outside the allowed roots"),
        (str(outside), "refused — outside the allowed roots"),
        ("../outside/secret.json", "refused — outside the allowed roots"),
        ("loop-a", "too many levels of symbolic links"),
        ("pipe.json", "a FIFO (named pipe), not a regular file"),  # refused without waiting for a writer
        ("missing.json", "no such file or directory"),
        ("t.json/x", "not a directory"),
    ):
        with pytest.raises(BadInput) as e:
            guard.open(path)
        assert f"{path}: {why}" in str(e.value), (path, str(e.value))
    # A folder: a link outside refuses it; a link to nothing, a subfolder or a FIFO is left out.
    os.symlink("nothing.json", root / "ranks" / "dangling.json")
    (root / "ranks" / "sub").mkdir()
    o = guard.open("ranks")
    try:
        assert sorted(os.listdir(o.show())) == ["rank0.json", "rank1.json"]
    finally:
        o.close()
    os.symlink(outside, root / "ranks" / "rank2.json")
    with pytest.raises(BadInput, match="ranks: refused — ranks/rank2.json leads outside the allowed roots"):
        guard.open("ranks")


# -- inputs and limits ------------------------------------------------------------------------------------


def test_numeric_inputs_are_checked_and_limits_are_the_servers_flags(tree):
    root, _ = tree
    with gzip.open(root / "small.json.gz", "wt") as f:
        json.dump(tiny_trace("inside_gemm_kernel"), f)
    bad = [
        ("timeline_window", {"path": "t.json", "start_ms": 1e308, "end_ms": 1e308}, "start_ms"),
        ("timeline_window", {"path": "t.json", "start_ms": "NaN", "end_ms": 5}, "start_ms"),
        ("timeline_window", {"path": "t.json", "start_ms": 0, "end_ms": "inf"}, "end_ms"),
        ("timeline_window", {"path": "t.json", "start_ms": -1e308, "end_ms": 0}, "start_ms"),
        ("timeline_window", {"path": "t.json", "start_ms": 5, "end_ms": 1}, "must be after start_ms"),
        ("timeline_window", {"path": "t.json", "start_ms": 0, "end_ms": 1, "limit": 0}, "limit"),
        ("list_kernels", {"path": "t.json", "limit": -1}, "limit"),
        ("list_kernels", {"path": "t.json", "limit": 10**30}, "limit"),
        ("list_kernels", {"path": "t.json", "min_total_ms": "-inf"}, "min_total_ms"),
        ("list_kernels", {"path": "t.json", "rank": -1}, "rank"),
        ("list_steps", {"path": "t.json", "min_duration_ms": "nan"}, "min_duration_ms"),
        ("list_steps", {"path": "t.json", "limit": 2**63}, "limit"),
        ("explain_finding", {"path": "t.json", "finding": "x", "rank": 2**40}, "rank"),
        ("analyze_trace", {"path": "t.json", "thresholds": {"data_wait.high": "NaN"}}, "thresholds.data_wait.high"),
        ("diff_runs", {"before": "t.json", "after": "t.json", "fail_if_slower": "inf"}, "fail_if_slower"),
        ("memory_snapshot", {"path": "t.json", "top": -1}, "top"),
        ("list_runs", {"limit": 0}, "limit"),
    ]

    async def calls(c):
        out = [await c.call_tool(tool, args) for tool, args, _ in bad]
        out.append(await c.call_tool("list_kernels", {"path": "small.json.gz"}))
        out.append(await c.call_tool("timeline_window", {"path": "t.json", "start_ms": 0, "end_ms": 1e12}))
        return out

    got = session(str(root), calls, "--max-decompressed", "1KiB")
    for (tool, args, name), r in zip(bad, got):
        text = r.content[0].text if r.content else ""
        assert r.is_error and name in text and "internal error" not in text, (tool, args, text)
    gz = got[-2].content[0].text
    assert got[-2].is_error and "decompresses to more than 1 KiB" in gz, gz
    assert "`trainscope mcp --max-decompressed SIZE`" in gz and "a tool call cannot set it" in gz, gz
    assert "small.json.gz" in gz and "trainscope-mcp-" not in gz, gz  # the client's path, not the private one
    assert not got[-1].is_error, got[-1].content


def test_both_decompression_messages_name_the_servers_flag():
    from trainscope.collectors.errors import TraceError
    from trainscope.collectors.readers import check_expansion
    from trainscope.mcp_server import server_flags

    for total, cap, ratio in ((5 << 30, 4 << 30, True), (200 << 20, 4 << 30, True)):  # over the cap; a bomb
        with pytest.raises(TraceError) as e:
            check_expansion("x.json.gz", total, 1 << 20, cap, ratio)
        said = server_flags(str(e.value))
        assert said.count("`trainscope mcp --max-decompressed SIZE` (the server's flag") == 1, said
        assert "a tool call cannot set it" in said and " --max-decompressed SIZE" not in said.replace("mcp --", ""), (
            said
        )
