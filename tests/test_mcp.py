"""`trainscope mcp` driven by the MCP SDK's own client over stdio, as a coding agent drives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pinned in the [test] extra) provides the client")

from tests.mcp_client import DATA  # noqa: E402
from tests.mcp_client import TOOLS  # noqa: E402
from tests.mcp_client import stdio_session  # noqa: E402

SLOW = "cpu/slow.pt.trace.json.gz"
RESNET = "kineto/resnet50_v100_num_workers_0.pt.trace.json.gz"
SNAPSHOT = "memory/mem_cs336_nothanmin_trainstep.pickle.gz"
QWEN = "kineto/tracelens_h100_qwen_inference.json.gz"


def cli_json(*args: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", *args, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=DATA,
    )
    assert p.returncode in (0, 3), p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server session over tests/data: every call the tests below check."""
    tmp = tmp_path_factory.mktemp("mcp")
    store = str(tmp / "runs.db")
    outside = tmp / "outside.json"
    outside.write_text('{"traceEvents": []}')
    link_dir = tmp / "root"
    link_dir.mkdir()
    os.symlink(outside, link_dir / "inside-looking.json")  # a link under the root to a file outside it
    (link_dir / "ranks").mkdir()
    os.symlink(os.path.join(DATA, SLOW), link_dir / "ranks" / "rank0.pt.trace.json.gz")
    os.symlink(outside, link_dir / "ranks" / "rank1.pt.trace.json")
    assert (
        subprocess.run(
            [
                sys.executable,
                "-m",
                "trainscope",
                "analyze",
                os.path.join(DATA, SLOW),
                "--format",
                "json",
                "--save",
                "--tag",
                "cpu",
                "--store",
                store,
            ],
            capture_output=True,
        ).returncode
        == 0
    )
    store_bytes = open(store, "rb").read()

    async def calls(c):
        r = {"tools": await c.list_tools()}
        for key, name, args in (
            ("slow", "analyze_trace", {"path": SLOW}),
            ("resnet", "analyze_trace", {"path": RESNET}),
            ("explain", "explain_finding", {"path": RESNET, "finding": "data/input-wait"}),
            ("explain_missing", "explain_finding", {"path": SLOW, "finding": "machine/bandwidth"}),
            ("kernels", "list_kernels", {"path": RESNET, "kernel_class": "convolution", "limit": 3}),
            ("steps", "list_steps", {"path": RESNET}),
            ("diff", "diff_runs", {"before": SLOW, "after": "cpu/fast.pt.trace.json.gz", "fail_if_slower": 5}),
            ("diff_stored", "diff_runs", {"before": "latest:cpu", "after": "cpu/fast.pt.trace.json.gz"}),
            ("memory", "memory_snapshot", {"path": SNAPSHOT, "top": 3}),
            ("runs", "list_runs", {}),
            ("outside", "analyze_trace", {"path": "/etc/hostname"}),
            ("dotdot", "analyze_trace", {"path": "../../README.md"}),
            ("glob", "analyze_trace", {"path": "cpu/*.json.gz"}),
            ("tree", "module_tree", {"path": QWEN}),
            (
                "tree_block",
                "module_tree",
                {"path": QWEN, "under": "Qwen2DecoderLayer_0…23", "sort": "pct_of_roof", "limit": 3, "detail": "full"},
            ),
            ("tree_missing", "module_tree", {"path": QWEN, "under": "NoSuchBlock"}),
        ):
            r[key] = await c.call_tool(name, args)
        steps = r["steps"].structured_content["steps"]
        r["window"] = await c.call_tool(
            "timeline_window",
            {
                "path": RESNET,
                "start_ms": steps[1]["start_ms"],
                "end_ms": steps[1]["start_ms"] + 2.0,
                "kinds": ["kernel"],
                "limit": 5,
            },
        )
        return r

    result = stdio_session(DATA, store, calls)

    async def link_calls(c):
        return {
            "link": await c.call_tool("analyze_trace", {"path": "inside-looking.json"}),
            "ranks": await c.call_tool("analyze_trace", {"path": "ranks"}),
        }

    result.update(stdio_session(str(link_dir), store, link_calls))
    result["store_unchanged"] = open(store, "rb").read() == store_bytes
    return result


def test_the_server_lists_its_tools_with_typed_results(served):
    tools = {t.name: t for t in served["tools"].tools}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t.output_schema and t.output_schema.get("type") == "object", t.name
        assert t.annotations.read_only_hint is True and t.annotations.destructive_hint is False
    assert "verdict" in tools["analyze_trace"].output_schema["properties"]
    assert tools["analyze_trace"].input_schema["required"] == ["path"]


def test_analyze_gives_the_command_lines_verdict_and_numbers(served):
    for key, path in (("slow", SLOW), ("resnet", RESNET)):
        r = served[key]
        assert not r.is_error, r.content
        got, doc = r.structured_content, cli_json("analyze", path)
        v = doc["verdict"]
        assert (got["verdict"]["axis"], got["verdict"]["bottleneck"], got["verdict"]["confidence"]) == (
            v["axis"],
            v["bottleneck"],
            v["confidence"],
        )
        assert got["verdict"]["evidence"] == v["evidence"]  # every number with its source
        assert got["step_time_ms"] == doc["breakdown"]["step_time_ms"]
        assert [f["id"] for f in got["fixes"]] == [r["id"] for r in doc["recommendations"]]
        assert [f["projected_speedup"] for f in got["fixes"]] == [
            r["projected_speedup"] for r in doc["recommendations"]
        ]
        names = [k["name"] for k in doc["kernels"]["top"]]
        assert len(got["top_kernels"]) == len(names)
        for k, name in zip(got["top_kernels"], names):  # a name over 240 characters is cut in the summary
            assert k["name"] == name or (len(name) > 240 and k["name"] == name[:239] + "…"), (k["name"], name)
        assert got["command_line"] == f"trainscope analyze {path} --format json"
    assert served["slow"].structured_content["verdict"]["headline"] == "DATA-BOUND · D·A·M axis: Data"


def test_explain_kernels_steps_and_window(served):
    e = served["explain"].structured_content
    assert e["role"] == "primary (the verdict)" and e["finding"]["id"] == "data/input-wait"
    assert all(ev["source"] for ev in e["finding"]["evidence"] if ev["value"] is not None)
    assert {t["name"] for t in e["graded_by"]} >= {"data_wait.moderate"} and all(t["source"] for t in e["graded_by"])
    assert e["fixes"] and e["fixes"][0]["finding"] == "data/input-wait"
    assert e["timeline"]["step"].startswith("ProfilerStep#")
    assert served["explain_missing"].is_error and "is not raised" in served["explain_missing"].content[0].text
    k = served["kernels"].structured_content
    assert k["matched"] > 3 and len(k["kernels"]) == 3 and all(x["class"] == "convolution" for x in k["kernels"])
    assert [x["total_ms"] for x in k["kernels"]] == sorted((x["total_ms"] for x in k["kernels"]), reverse=True)
    doc = cli_json("analyze", RESNET)
    assert served["steps"].structured_content["steps"] == doc["steps"]
    w = served["window"].structured_content
    assert 0 < w["shown"] <= 5 and w["matched"] >= w["shown"] and all(e["kind"] == "kernel" for e in w["events"])
    assert all(e["start_ms"] < w["end_ms"] and e["start_ms"] + e["duration_ms"] > w["start_ms"] for e in w["events"])


def test_diff_memory_and_runs(served):
    d = served["diff"].structured_content
    assert d["basis"] == "traces" and d["gate"]["regressed"] is False and d["gate"]["test"]["test"].startswith("Mann")
    assert d["fixes"][0]["line"] == "fix dataloader-workers: projected up to 3.54×, achieved 2.15×"
    stored = served["diff_stored"].structured_content
    assert stored["basis"] == "summaries" and stored["fixes"][0]["line"] == d["fixes"][0]["line"]
    m = served["memory"].structured_content
    doc = cli_json("memory", SNAPSHOT)
    assert m["devices"][0]["peak_allocated_bytes"] == doc["devices"][0]["peak_allocated_bytes"]
    assert len(m["devices"][0]["live_at_peak"]) == 3 and m["devices"][0]["live_at_peak"][0]["site"]
    runs = served["runs"].structured_content["runs"]
    assert [(r["id"], r["tag"]) for r in runs] == [(1, "cpu")]
    assert served["store_unchanged"]  # the server wrote nothing to the history


def test_paths_outside_the_root_are_refused(served):
    for key in ("outside", "dotdot", "link"):
        r = served[key]
        assert r.is_error and "refused" in r.content[0].text and "outside the allowed roots" in r.content[0].text, key
    ranks = served["ranks"]
    assert ranks.is_error and "leads outside the allowed roots" in ranks.content[0].text
    assert served["glob"].is_error and "glob patterns are not accepted" in served["glob"].content[0].text


def test_without_the_extra_the_server_says_so_in_one_line(tmp_path):
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named mcp (shadowed by the test)')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow")] + sys.path)}
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", "mcp", "--root", DATA],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 2
    assert p.stderr == "trainscope: trainscope mcp needs the mcp package: pip install 'trainscope-dam[mcp]'\n"
    bad = subprocess.run(
        [sys.executable, "-m", "trainscope", "mcp", "--root", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 2 and "not a directory" in bad.stderr


def test_module_tree_pages_the_tree_sorted_and_under_a_node(served):
    t = served["tree"].structured_content
    assert t["source"] == QWEN and t["gpu_ms"] == pytest.approx(43.295, abs=0.01)
    assert [n["path"][-1] for n in t["nodes"]][:2] == ["Qwen2Model_0", "Qwen2DecoderLayer_0…23"]
    assert max(n["depth"] for n in t["nodes"]) == 2  # max_depth 2 by default
    assert "top_kernels" not in t["nodes"][0] and any("detail='full'" in m for m in t["more"])
    b = served["tree_block"].structured_content
    # the block, then depth first by share of peak: the MLP (68.6 %), its SiLU (78.1 %) before its Linear (62.9 %)
    assert [n["path"][-1] for n in b["nodes"]] == ["Qwen2DecoderLayer_0…23", "Qwen2MLP_0…23", "SiLU_0…23"]
    assert b["nodes"][0]["instances"] == 24 and b["nodes"][0]["top_kernels"]
    assert b["page"]["next_offset"] == 3 and any("offset=3" in m for m in b["more"])
    assert served["tree_missing"].is_error
    assert "no node whose path ends with 'NoSuchBlock'" in served["tree_missing"].content[0].text
