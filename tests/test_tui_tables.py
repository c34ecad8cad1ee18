"""Tables that fit: at 80×24 the columns that matter are on screen; the full kernel name is in a
detail line and `y` copies it."""

from __future__ import annotations

import asyncio

import pytest

from tests.test_tui import A100
from tests.test_tui import PARAM_RESNET
from tests.test_tui import RESNET
from tests.test_tui import opened

pytest.importorskip("textual")

from trainscope.tui.tables import KernelsPane  # noqa: E402
from trainscope.tui.timeline import short_name  # noqa: E402


def visible_labels(table) -> list[str]:
    """Column labels whose whole width is inside the table's visible region (no horizontal scroll)."""
    room = table.scrollable_content_region.width
    x, out = 0, []
    for col in table.ordered_columns:
        x += col.get_render_width(table)
        if x <= room:
            out.append(str(col.label).split(" ")[0])
    return out


@pytest.mark.parametrize(
    "name,key,table_id,must",
    [
        # at 80 columns the class gives way to the kernel's name (the detail below names the class)
        (A100, "4", "#kernels-table", ["total", "mean", "share", "count", "kernel"]),
        (RESNET, "5", "#fixes-table", ["what-if", "#", "projected", "fix"]),
        (PARAM_RESNET, "3", "#steps-table", ["step", "ms", "busy%", "wait%", "i:data", "i:launch", "i:other", "comp"]),
    ],
)
def test_every_column_that_matters_is_visible_at_80x24(name, key, table_id, must):
    async def go():
        async with opened(name, (80, 24)) as (app, pilot):
            await pilot.press(key)
            await pilot.pause()
            table = app.query_one(table_id)
            shown = visible_labels(table)
            for label in must:
                assert label in shown, (label, shown)

    asyncio.run(go())


def test_the_kernel_name_is_whole_in_the_detail_and_y_copies_it():
    async def go():
        async with opened(A100, (140, 40), "4") as (app, pilot):
            pane = app.query_one(KernelsPane)
            # A long templated name: the table cuts it to the column, the detail holds it whole.
            i = next(i for i, k in enumerate(pane.shown) if len(short_name(k.name, 10_000)) > 120)
            table = app.query_one("#kernels-table")
            table.move_cursor(row=i)
            await pilot.pause()
            k = pane.shown[i]
            cell = str(table.get_row_at(i)[-1])
            assert len(cell) <= table.columns["name"].width and cell.endswith("…")
            assert short_name(k.name, 10_000) in str(app.query_one("#kernel-detail").render()).replace("\n", "")
            await pilot.press("y")
            assert app.clipboard == k.name

    asyncio.run(go())
