"""The timeline shows what Perfetto shows (issue 28 item 6): slice names where they fit, what
launched the kernel under the cursor (runtime call, correlation id, the operator and its input
shapes) and an NVTX lane for Nsight exports."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from textual.geometry import Region

from tests.test_tui import KINETO
from tests.test_tui import RESNET
from tests.test_tui import _ready
from tests.test_tui import session

pytest.importorskip("textual")

from trainscope.analyzers.rules import Rules  # noqa: E402
from trainscope.collectors import open_traces  # noqa: E402
from trainscope.tui.app import AnalyzeApp  # noqa: E402
from trainscope.tui.state import build_session  # noqa: E402
from trainscope.tui.timeline import TimelineView  # noqa: E402

NSYS = "tests/data/nsys/cs336_small_train_step_a100.sqlite"


def lines(widget) -> list[str]:
    r = widget.region
    return [s.text for s in widget.render_lines(Region(0, 0, r.width, r.height))]


def test_kernel_names_on_their_slices_and_the_launch_in_the_detail():
    async def go():
        s = session(RESNET)
        app = AnalyzeApp(str(KINETO / RESNET), session=s)
        async with app.run_test(size=(140, 44)) as pilot:
            await _ready(app, pilot)
            await pilot.press("4", "enter")  # the heaviest kernel's longest instance
            await pilot.pause(0.2)
            view = app.query_one(TimelineView)
            m = view.matches[0]
            shown = lines(view)
            first = next(i for i, x in enumerate(shown) if x.startswith("s7 "))
            stream = "\n".join([shown[first]] + [x for x in shown[first + 1 : first + 7] if not x[:9].strip()])
            assert shown[first][9:].strip("█ ") == ""  # the lane's first row keeps the glyphs
            assert "dgrad_engine<float, 512" in stream  # the name written on its slice
            detail = str(app.query_one("#tl-detail").render())
            t = s.ranks[0].trace
            row = int(np.flatnonzero(t.kernels.ts == m.start_ns)[0])
            corr = int(t.kernels.correlation[row])
            rt = int(np.flatnonzero(t.runtime.correlation == corr)[0])
            assert t.strings[int(t.runtime.name[rt])] == "cudaLaunchKernel"
            # the operator around that launch on its thread, innermost first (independently of the app)
            o = t.cpu_ops
            around = np.flatnonzero(
                (o.thread == t.runtime.thread[rt])
                & (o.ts <= t.runtime.ts[rt])
                & (o.ts + o.dur >= t.runtime.ts[rt] + t.runtime.dur[rt])
            )
            op = t.strings[int(o.name[around[np.argmin(o.dur[around])]])]
            assert op == "aten::cudnn_convolution_backward_input"
            assert f"launched by {op} [[], [32, " in detail
            assert f"via cudaLaunchKernel · stream 7 · correlation {corr}" in detail
            assert "External id" in detail

    asyncio.run(go())


def test_nsight_exports_get_an_nvtx_lane_and_kineto_traces_do_not():
    nsys = build_session(NSYS, open_traces(NSYS), Rules())

    async def go(path, sess, want):
        app = AnalyzeApp(path, session=sess)
        async with app.run_test(size=(140, 44)) as pilot:
            await _ready(app, pilot)
            await pilot.press("2", "a")
            await pilot.pause(0.2)
            rows = [x for x in lines(app.query_one(TimelineView)) if x.startswith("NVTX")]
            if not want:
                assert not rows
                return
            assert len(rows) == 1
            t = sess.ranks[0].trace
            names = {t.strings[int(i)] for i in t.annotations.name}
            assert {"forward pass", "backward pass", "optimizer step"} <= names
            for n in ("forward pass", "backward pass", "optimizer step"):
                assert n in rows[0], rows[0]

    asyncio.run(go(NSYS, nsys, True))
    asyncio.run(go(str(KINETO / RESNET), session(RESNET), False))
