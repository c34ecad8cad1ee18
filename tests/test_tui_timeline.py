"""The timeline's lanes per stream and per thread, driven with Pilot on the HTA A100 trace and
checked against the raw trace JSON (read here with json, not with trainscope's reader)."""

from __future__ import annotations

import asyncio
import functools
import gzip
import json

import pytest

from tests.test_tui import KINETO
from tests.test_tui import opened
from tests.test_tui import session

pytest.importorskip("textual")

from trainscope.tui.palette import GPU_STYLE  # noqa: E402
from trainscope.tui.palette import HOST_STYLE  # noqa: E402
from trainscope.tui.timeline import GUTTER  # noqa: E402
from trainscope.tui.timeline import TimelineView  # noqa: E402
from trainscope.tui.timeline import axis_labels  # noqa: E402

A100 = "hta_a100_control.json.gz"


@functools.cache
def raw_gpu_events() -> list[dict]:
    """Kernels and copies of the raw Kineto JSON: name, stream, start and end in ns (absolute)."""
    with gzip.open(KINETO / A100, "rt") as f:
        doc = json.load(f)
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy") and "dur" in e:
            ts = round(float(e["ts"]) * 1000)
            out.append(
                {
                    "name": e["name"],
                    "stream": int(e["args"]["stream"]),
                    "cat": e["cat"],
                    "ts": ts,
                    "end": ts + round(float(e["dur"]) * 1000),
                }
            )
    return out


def covering(stream: int, a_abs: int, b_abs: int) -> dict | None:
    """The raw event on ``stream`` covering most of [a_abs, b_abs)."""
    best, best_ov = None, 0
    for e in raw_gpu_events():
        if e["stream"] == stream:
            ov = min(e["end"], b_abs) - max(e["ts"], a_abs)
            if ov > best_ov:
                best, best_ov = e, ov
    return best


def covered_ns(intervals: list[tuple[int, int]], a: int, b: int) -> set[int]:
    """The set of covered nanoseconds of [a, b) (a column is ~70 µs: small enough to count)."""
    out: set[int] = set()
    for s, e in intervals:
        out.update(range(max(s, a), min(e, b)))
    return out


def detail(app) -> str:
    return str(app.query_one("#tl-detail").render())


def test_stream_lanes_name_the_stream_7_kernel_under_the_cursor_and_measure_overlap():
    async def go():
        s = session(A100)
        origin = s.ranks[s.main_rank].trace.origin_ns
        async with opened(A100, (140, 40)) as (app, pilot):
            await pilot.press("2", "plus", "plus", "plus")
            await pilot.pause()
            view = app.query_one(TimelineView)
            # 45 columns right (the cursor stops at the last column): the last of them a key press
            # (each press redrew the detail; only the last is read).
            target = min(view.cursor + 45, view.columns - 1)
            view.cursor = target - 1
            await pilot.press("right")
            await pilot.pause()
            assert view.cursor == target
            labels = [lane.label for lane in view.model.lanes]
            assert labels[:4] == ["s7 comp", "s20 comp", "s21 NCCL", "s22 copy"]
            a, b = view.column_window(view.cursor)
            k = covering(7, a + origin, b + origin)
            assert k is not None and "elementwise" in k["name"]
            text = detail(app)
            line = next(x for x in text.splitlines() if x.startswith("s7 comp"))
            # the name shortened to the detail's 110 characters: namespaces first (at::native::), then
            # arguments nested in the template's
            assert "kernel: unrolled_elementwise_kernel<direct_copy_kernel_cuda" in line, line
            copy = covering(22, a + origin, b + origin)
            assert copy is not None and copy["cat"] == "gpu_memcpy"
            assert f"s22 copy copy HtoD: Memcpy HtoD  {(copy['end'] - copy['ts']) / 1e6:.1f} ms" in text
            assert "nothing on:" in text and "s21 NCCL" in text.splitlines()[0]
            # The header names the step the cursor is in.
            assert str(app.query_one("#tl-title").render()).startswith("ProfilerStep#1010")

            # At 84.3 ms an NCCL kernel runs on stream 21 while stream 7 computes: it is named as a
            # collective, and the overlap over the cursor's column is measured, not "not overlapped".
            t = 84_300_000
            view.show_window(t - 40 * 75_000, t - 40 * 75_000 + view.columns * 75_000)
            view.cursor = 40
            view.action_cursor(0)
            await pilot.pause()
            a, b = view.column_window(view.cursor)
            assert a <= t < b
            text = detail(app)
            nccl = covering(21, a + origin, b + origin)
            assert nccl["name"].startswith("ncclKernel_SendRecv")
            line = next(x for x in text.splitlines() if x.startswith("s21 NCCL"))
            assert "communication kernel: ncclKernel_SendRecv" in line
            assert "not overlapped" not in text
            comm = covered_ns(
                [(e["ts"], e["end"]) for e in raw_gpu_events() if e["stream"] == 21], a + origin, b + origin
            )
            comp = covered_ns(
                [(e["ts"], e["end"]) for e in raw_gpu_events() if e["stream"] in (7, 20) and e["cat"] == "kernel"],
                a + origin,
                b + origin,
            )
            pct = 100 * len(comm & comp) / len(comm)
            assert 50 < pct < 100
            assert f"communication {len(comm) / 1e3:.1f} µs, {pct:.0f} % overlapped with compute" in text

    asyncio.run(go())


def test_every_category_has_its_own_glyph_and_the_lanes_read_without_colour():
    glyphs = [g for g, _ in GPU_STYLE.values()] + [g for g, _ in HOST_STYLE.values()]
    assert len(set(glyphs)) == len(glyphs)

    async def go():
        async with opened(A100, (140, 40)) as (app, pilot):
            await pilot.press("2", "plus", "plus", "plus")
            view = app.query_one(TimelineView)
            t = 84_300_000
            view.show_window(t - 40 * 75_000, t - 40 * 75_000 + view.columns * 75_000)
            view.cursor = 40
            view.action_cursor(0)
            await pilot.pause()
            plain = view.render().plain.splitlines()  # what a NO_COLOR terminal shows
            row = {line[:GUTTER].strip(): line[GUTTER:] for line in plain if line[:GUTTER].strip()}
            assert row["s21 NCCL"][40] == GPU_STYLE["communication"][0]
            assert row["s7 comp"][40] == GPU_STYLE["compute"][0]
            assert set(row["s22 copy"]) <= {GPU_STYLE["copy"][0], " "}
            # The lanes use the rows they have: two rows each at 140×40.
            assert view.rows_per_lane() >= 2
            assert sum(1 for line in plain if line.startswith("s7 comp") or line[:GUTTER].strip() == "") >= 2
            # c collapses them to one GPU and one host lane (and back).
            await pilot.press("c")
            await pilot.pause()
            labels = [line[:GUTTER].strip() for line in view.render().plain.splitlines() if line[:GUTTER].strip()]
            assert "GPU all" in labels and "host" in labels and "s7 comp" not in labels
            await pilot.press("c")
            await pilot.pause()
            assert "s7 comp" in view.render().plain

    asyncio.run(go())


def test_axis_labels_stay_distinct_at_any_zoom():
    for width in (10_000, 200_000, 5_000_000, 400_000_000):
        labels = [text for _, text in axis_labels(98_700_000, 98_700_000 + width, 130)]
        assert len(set(labels)) == len(labels), (width, labels)
        assert max(len(x) for x in labels) < 16
    assert axis_labels(98_700_000, 98_710_000, 128)[1][1] == "98.7013"  # 16 columns of 78 ns = 1.25 µs


def test_header_follows_the_cursor_after_showing_the_whole_trace():
    async def go():
        async with opened(A100, (140, 40)) as (app, pilot):
            await pilot.press("2", "a")
            view = app.query_one(TimelineView)
            steps = view.model.segmentation.steps
            for col in (5, view.columns // 2, view.columns - 5):
                view.cursor = col
                view.action_cursor(0)
                await pilot.pause()
                a, b = view.column_window(view.cursor)
                i = view.model.step_at((a + b) // 2)
                title = str(app.query_one("#tl-title").render())
                if i is None:
                    assert title.startswith("between steps")
                else:
                    assert title.startswith(f"{steps[i].label} ({i + 1}/{len(steps)}")
                    assert steps[i].start_ns <= (a + b) // 2 < steps[i].end_ns

    asyncio.run(go())
