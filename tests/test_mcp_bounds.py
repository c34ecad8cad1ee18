"""Every MCP tool's default answer on every bundled trace stays within 20,000 characters, and names
its input one way: the path as a tool call takes it, relative to --root (issue 37: `diff_runs`
answered 73,296 characters on a real pair, `timeline_window` 110,907, `list_kernels` 29,122, and
`source` was the path of whichever call first analyzed the file).

The measure is what the client receives: the answer's text content (the SDK's JSON, indented) and
its structured content; the server runs in this process behind the SDK's own client."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pinned in the [test] extra) provides the client")

from tests.mcp_client import DATA  # noqa: E402
from tests.mcp_client import TOOLS  # noqa: E402
from tests.mcp_client import run_calls  # noqa: E402

LIMIT = 20_000
# Folders of inputs that are not profiler traces (memory has its own tool, below).
NOT_TRACES = ("memory", "nvml", "watch")
MEMORY = sorted(os.path.join("memory", n) for n in os.listdir(os.path.join(DATA, "memory")) if not n.startswith("."))
RANK_FOLDERS = ["gloo", "kineto/hta_dlrm_ws128_2ranks"]
DIFF_PAIRS = [
    ("cpu/slow.pt.trace.json.gz", "cpu/fast.pt.trace.json.gz"),
    ("nsys/nsysai_h100x2_wan21_train_before.sqlite", "nsys/nsysai_h100x2_wan21_train_after.sqlite"),
    ("kineto/resnet50_v100_num_workers_0.pt.trace.json.gz", "kineto/hta_v100_test.json.gz"),  # 73,296 before
    ("gloo", "kineto/hta_dlrm_ws128_2ranks"),
]


ROWS = {
    "list_kernels": "kernels",
    "list_steps": "steps",
    "timeline_window": "events",
    "list_runs": "runs",
    "module_tree": "nodes",
}


def bundled_traces() -> list[str]:
    out = []
    for top, dirs, files in os.walk(DATA):
        dirs[:] = sorted(d for d in dirs if os.path.relpath(os.path.join(top, d), DATA) not in NOT_TRACES)
        for name in sorted(files):
            if name.endswith((".json.gz", ".sqlite")) or (
                name.endswith(".json") and name not in ("expected.json", "labels.json")
            ):
                out.append(os.path.relpath(os.path.join(top, name), DATA))
    return out


def history(store: str, runs: int) -> None:
    """A run history of ``runs`` saves of cpu/slow (its source: the absolute path under the root)."""
    from trainscope import api
    from trainscope.api.store import RunStore
    from trainscope.api.store import report_summary

    summary = report_summary(api.analyze(os.path.join(os.path.abspath(DATA), "cpu/slow.pt.trace.json.gz")))
    with RunStore(store) as st:
        for _ in range(runs):
            st.save(summary, tag="bounds", detect_git=False)


def measured(r) -> tuple[int, int]:
    """(characters of the text content, characters of the structured content as JSON)."""
    text = sum(len(c.text) for c in r.content if getattr(c, "text", None) is not None)
    return text, len(json.dumps(r.structured_content or {}, ensure_ascii=False))


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """Every tool with its default arguments: on every bundled trace and rank folder (explain_finding
    for each raised finding), on every memory input, diff_runs on real pairs, list_runs on a history."""
    store = str(tmp_path_factory.mktemp("store") / "runs.db")
    history(store, 30)

    async def calls(c):
        got = []
        for path in bundled_traces() + RANK_FOLDERS:
            a = await c.call_tool("analyze_trace", {"path": path})
            got.append(("analyze_trace", path, path, a))
            if a.is_error:
                continue
            for tool in ("list_kernels", "list_steps", "timeline_window", "module_tree"):
                got.append((tool, path, path, await c.call_tool(tool, {"path": path})))
            for f in a.structured_content["findings"]:
                r = await c.call_tool("explain_finding", {"path": path, "finding": f["id"]})
                got.append(("explain_finding", f"{path} {f['id']}", path, r))
        for path in MEMORY:
            got.append(("memory_snapshot", path, path, await c.call_tool("memory_snapshot", {"path": path})))
        for before, after in DIFF_PAIRS:
            r = await c.call_tool("diff_runs", {"before": before, "after": after})
            got.append(("diff_runs", f"{before} -> {after}", (before, after), r))
        got.append(("list_runs", "", None, await c.call_tool("list_runs", {})))
        return got

    return run_calls(calls, store)


def test_the_bundled_inputs_are_all_there():
    traces = bundled_traces()
    assert (
        len(traces) >= 40
        and "cpu/slow.pt.trace.json.gz" in traces
        and not any(t.startswith(NOT_TRACES) for t in traces)
    )
    assert len(MEMORY) == 3


def test_every_default_answer_fits_in_20000_characters(answers):
    tools = {tool for tool, *_ in answers}
    assert tools == TOOLS
    over, failed, largest = [], [], {}
    for tool, what, _, r in answers:
        if r.is_error:
            failed.append((tool, what, r.content[0].text))
            continue
        text, structured = measured(r)
        largest[tool] = max(largest.get(tool, 0), text)
        if text > LIMIT or structured > LIMIT:
            over.append((tool, what, text, structured))
    assert not failed, failed[:5]
    assert not over, over
    # The answers that were over the limit before are still substantial (the cut is not to nothing).
    assert largest["timeline_window"] > LIMIT * 0.8 and largest["diff_runs"] > 5000, largest


def test_a_cut_answer_says_what_it_left_out_and_how_to_ask(answers):
    paged = 0
    for tool, what, _, r in answers:
        if r.is_error:
            continue
        s = r.structured_content
        page = s.get("page")
        if page is not None:
            assert page["returned"] == len(s[ROWS[tool]]), (tool, what)
            assert page["offset"] == 0 and page["returned"] <= page["limit"], (tool, what)
            if page["next_offset"] is not None:
                paged += 1
                assert page["next_offset"] == page["returned"] < page["total"], (tool, what, page)
                assert any(f"offset={page['next_offset']}" in m for m in s["more"]), (tool, what, s["more"])
            else:
                assert page["returned"] == page["total"], (tool, what, page)
        if tool == "diff_runs":
            assert s["document"] is None and s["detail"] == "summary"
            for kind, rows in s["kernels"].items():
                if isinstance(rows, list) and len(rows) < s["kernels"]["match_counts"].get(kind, 0):
                    assert any(m.startswith(f"kernels.{kind}:") for m in s["more"]), (what, kind, s["more"])
    assert paged >= 5  # the long timelines and kernel tables come in pages


def test_every_answer_names_its_input_as_the_call_gave_it(answers):
    roots = {os.path.realpath(DATA), os.path.abspath(DATA)}
    for tool, what, path, r in answers:
        if r.is_error:
            continue
        s = r.structured_content
        text = r.content[0].text
        assert "trainscope-mcp-" not in text, (tool, what)
        assert not any(root in text for root in roots), (tool, what)  # no absolute path of the root's
        if tool == "diff_runs":
            assert (s["before"], s["after"]) == path, (tool, what)
        elif tool == "list_runs":
            assert all(not run["source"].startswith("/") for run in s["runs"]), s["runs"][0]["source"]
        else:
            assert s["source"] == path, (tool, what, s["source"])
    analyze = {what: r.structured_content for tool, what, _, r in answers if tool == "analyze_trace"}
    assert analyze["gloo"]["command_line"] == "trainscope analyze gloo --format json"


def test_the_same_file_is_named_one_way_however_it_was_asked_for(tmp_path):
    """The analysis cache once named a file as the first call had (an absolute path stayed absolute
    in every later tool's `source`); now each form of the path comes back as the one relative form,
    a path through `..` as the path that was walked, and a file under a second root absolutely."""
    slow = "cpu/slow.pt.trace.json.gz"
    second = tmp_path / "second"
    (second / "runs").mkdir(parents=True)
    os.link(os.path.join(DATA, slow), second / "runs" / "a.pt.trace.json.gz")
    os.symlink("runs/a.pt.trace.json.gz", second / "latest.pt.trace.json.gz")
    forms = [
        os.path.join(os.path.abspath(DATA), slow),
        slow,
        "./cpu/./slow.pt.trace.json.gz",
        "cpu//slow.pt.trace.json.gz",
    ]

    async def calls(c):
        got = []
        for form in forms:
            for tool, extra in (
                ("analyze_trace", {}),
                ("list_kernels", {}),
                ("list_steps", {}),
                ("timeline_window", {}),
                ("explain_finding", {"finding": "data/input-wait"}),
            ):
                got.append((form, tool, await c.call_tool(tool, {"path": form, **extra})))
        got.append(
            ("dotdot", "list_steps", await c.call_tool("list_steps", {"path": "nsys/../cpu/slow.pt.trace.json.gz"}))
        )
        link = str(second / "latest.pt.trace.json.gz")
        got.append(("second", "list_kernels", await c.call_tool("list_kernels", {"path": link})))
        got.append(
            (
                "second-dotdot",
                "list_steps",
                await c.call_tool("list_steps", {"path": str(second / "runs/../latest.pt.trace.json.gz")}),
            )
        )
        missing = await c.call_tool("explain_finding", {"path": forms[0], "finding": "machine/bandwidth"})
        return got, missing

    got, missing = run_calls(calls, roots=[DATA, str(second)])
    for form, tool, r in got:
        assert not r.is_error, (form, tool, r.content[0].text)
        source = r.structured_content["source"]
        if form == "second":
            assert source == str(second / "latest.pt.trace.json.gz"), source  # as given, under its root
        elif form == "second-dotdot":
            assert source == str(second / "runs/a.pt.trace.json.gz"), source  # the path walked
        else:
            assert source == slow, (form, tool, source)
    assert missing.is_error and f"is not raised on {slow} " in missing.content[0].text, missing.content[0].text
