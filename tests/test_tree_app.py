"""The analyze app's Tree tab (tui/tree.py): the module tree of the bundled Qwen (Kineto, nn.Module
frames) and cs336 (Nsight, NVTX phases) traces at 80×24 and 120×40 with Textual's pilot — expand,
collapse, sort by GPU time or share of peak, Enter to the node's range on the timeline — and the same
in a real terminal under tmux."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest

from tests.conftest import DATA
from tests.conftest import exit_code_written
from tests.tmux import needs_tmux
from tests.tmux import terminal
from tests.tmux import trainscope_line

pytest.importorskip("textual")

from trainscope.analyzers.rules import Rules  # noqa: E402
from trainscope.collectors import open_traces  # noqa: E402
from trainscope.tui.app import AnalyzeApp  # noqa: E402
from trainscope.tui.state import build_session  # noqa: E402
from trainscope.tui.timeline import TimelineView  # noqa: E402
from trainscope.tui.tree import TreePane  # noqa: E402
from trainscope.tui.tree import node_interval  # noqa: E402

QWEN = DATA / "kineto" / "tracelens_h100_qwen_inference.json.gz"
CS336 = DATA / "nsys" / "cs336_small_train_step_a100.sqlite"


@functools.cache
def session(path):
    return build_session(str(path), open_traces(str(path)), Rules())


def screen(app) -> str:
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


async def ready(app, pilot) -> None:
    for _ in range(300):
        await pilot.pause(0.05)
        if app.session is not None and app.query_one("#tabs").display:
            break
    await pilot.pause()


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_tree_tab_expands_sorts_and_jumps_to_the_timeline(size):
    async def go():
        app = AnalyzeApp(str(QWEN), session=session(QWEN))
        async with app.run_test(size=size) as pilot:
            await ready(app, pilot)
            await pilot.press("9")
            await pilot.pause()
            assert app.query_one("#tabs").active == "tree"
            text = screen(app)
            lines = text.splitlines()
            assert len(lines) == size[1] and all(len(line) <= size[0] for line in lines)
            assert "9 Tree" in lines[1] and "q quit" in lines[-1]
            assert "43.3 ms GPU in 1 step · sort: GPU time ↓ · ms, share, % of roof, node" in text
            assert "29.85 ms  69.0 %   54 %  Qwen2Model_0" in text  # first level expanded, figures first
            assert "29.77 ms  68.8 %   54 %  Qwen2DecoderLayer_0…23 ×24" in text
            assert "Qwen2MLP_0…23" not in text  # the block is collapsed
            await pilot.press("down", "down", "right")  # the cursor onto the block, expand it
            await pilot.pause()
            text = screen(app)
            assert "14.84 ms  34.3 %   40 %  Qwen2Attention_0…23 ×24" in text
            assert "Qwen2MLP_0…23 ×24" in text
            assert "×24: " in text and "slowest Qwen2DecoderLayer_" in text, text  # the detail: the spread
            await pilot.press("left")  # collapse again
            await pilot.pause()
            assert "Qwen2MLP_0…23" not in screen(app)
            await pilot.press("right", "s")  # sort by share of peak: the MLP (69 %) above the attention (40 %)
            await pilot.pause()
            text = screen(app)
            assert "sort: share of peak ↓" in text
            assert text.index("Qwen2MLP_0…23") < text.index("Qwen2Attention_0…23")
            await pilot.press("r")
            await pilot.pause()
            text = screen(app)
            assert "sort: share of peak ↑" in text and text.index("Qwen2MLP_0…23") > text.index("Qwen2Attention_0…23")
            await pilot.press("s")  # back to GPU time, the expansion kept
            await pilot.pause()
            text = screen(app)
            assert "sort: GPU time ↓" in text and text.index("Qwen2Attention_0…23") < text.index("Qwen2MLP_0…23")
            # Enter on the highlighted block: its slowest layer's range on the timeline
            assert app.query_one("#tree-view").cursor_node.data.name == "Qwen2DecoderLayer_0…23"
            await pilot.press("enter")
            await pilot.pause(0.3)
            assert app.query_one("#tabs").active == "timeline"
            view = app.query_one(TimelineView)
            m = view.matches[0]
            assert m.lane == "host" and m.name.startswith("Qwen2DecoderLayer_")
            assert view.match_title == "Qwen2Model_0 › Qwen2DecoderLayer_0…23"
            await pilot.press("9")
            await pilot.pause()
            assert app.query_one("#tabs").active == "tree"

    run(go())


def test_nsight_phases_and_a_node_without_a_range():
    async def go():
        app = AnalyzeApp(str(CS336), session=session(CS336))
        async with app.run_test(size=(80, 24)) as pilot:
            await ready(app, pilot)
            await pilot.press("9")
            await pilot.pause()
            text = screen(app)
            for line in ("43.66 ms  29.4 %   81 %  forward", "92.29 ms  62.2 %   81 %  backward"):
                assert line in text
            assert [r.name for r in app.rank.analysis.tree.roots][:3] == ["forward", "backward", "optimizer"]
            assert "scaled dot product attention ×12" in text and "BmmBackward0" in text
            await pilot.press("down", "enter")  # forward: the longest "forward pass" NVTX range
            await pilot.pause(0.3)
            view = app.query_one(TimelineView)
            assert app.query_one("#tabs").active == "timeline" and view.matches[0].name == "forward pass"

    run(go())
    s = session(CS336)
    tree = s.ranks[0].analysis.tree
    seg = s.ranks[0].analysis.segmentation
    windows = (seg.starts, seg.ends)
    sdpa = tree.find("forward", "scaled dot product attention")
    m = node_interval(s.ranks[0].trace, windows, sdpa)
    assert m is not None and m.name == "scaled dot product attention"
    assert node_interval(s.ranks[0].trace, windows, tree.roots[-1]) is None or tree.roots[-1].kind != "outside"


def test_without_a_tree_the_tab_is_off_and_says_why():
    from types import SimpleNamespace

    from trainscope.tui.tabs import tab

    rank = session(QWEN).ranks[0]
    app = SimpleNamespace(rank=SimpleNamespace(doc=rank.doc, analysis=SimpleNamespace(tree=None)))
    assert "records no ranges" in tab("tree").applies(app)
    app.rank.analysis.tree = rank.analysis.tree
    assert tab("tree").applies(app) is None

    async def go():  # the pane itself, handed no tree
        app = AnalyzeApp(str(QWEN), session=session(QWEN))
        async with app.run_test(size=(80, 24)) as pilot:
            await ready(app, pilot)
            app.query_one(TreePane).show(None, None, ((), ()))
            await pilot.press("9")
            await pilot.pause()
            assert "No module tree" in screen(app)

    run(go())


@needs_tmux
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_tree_tab_in_tmux(tmp_path, size):
    exit_file = tmp_path / "exit.txt"
    line = trainscope_line(["analyze", QWEN], exit_file)
    with terminal(f"trainscope-tree-{tmp_path.name}", line, size, cwd=tmp_path) as tmux:
        tmux.wait_for("1 Overview")
        tmux.keys("9")
        tmux.wait_for("Qwen2DecoderLayer_0…23 ×24")
        time.sleep(0.5)  # the rest of the tab's first frame
        s = tmux.screen()
        lines = s.rstrip("\n").splitlines()
        assert all(len(line) <= size[0] for line in lines), s
        assert "ms GPU in 1 step · sort: GPU time ↓ · ms, share, % of roof, node" in lines[3], s  # one line
        assert "9 Tree" in lines[1] and any("q quit" in line for line in lines[-6:]), s
        assert "Qwen2Model_0" in s and "(outside any range)" in s
        tmux.keys("Down", "Down", "Right")
        s = tmux.wait_for("Qwen2Attention_0…23 ×24")
        assert "Qwen2MLP_0…23 ×24" in s and "Qwen2RMSNorm_0…47 ×48" in s
        tmux.keys("s")
        s = tmux.wait_for("sort: share of peak ↓")
        assert s.index("Qwen2MLP_0…23") < s.index("Qwen2Attention_0…23")
        tmux.keys("Enter")
        s = tmux.wait_for("GPU all")  # the timeline, framing the layer's range
        assert "T main" in s
        tmux.keys("q")
        assert exit_code_written(exit_file) == "0"
