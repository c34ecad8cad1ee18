"""SVG snapshots of the plan app (pytest-textual-snapshot; Textual pinned in the ``test`` extra).
Update after an intended change with ``python -m pytest tests/test_plan_snapshots.py --snapshot-update``
and review the SVGs."""

from __future__ import annotations

import pytest

from tests.test_plan_app import GPT2_XL_SHAPE
from tests.test_plan_app import V100
from tests.test_plan_app import WALKTHROUGH
from tests.test_plan_app import settle

pytest.importorskip("pytest_textual_snapshot")

from trainscope.analyzers.plan.gpu_memory import gpu_memory  # noqa: E402
from trainscope.tui.plan_app import PlanApp  # noqa: E402


def test_walkthrough_does_not_fit_80x24(snap_compare):
    # Seed 000's GPT-2 on a 32 GB V100 in FP32: 89 GB, and the options (computed before the first frame).
    assert snap_compare(PlanApp(WALKTHROUGH, V100), terminal_size=(80, 24))


def test_gpt2_xl_shape_toggled_120x40(snap_compare):
    # The estimated activations of GPT-2 XL's shape on an A100 40GB, with batch ×2 and 8-bit Adam toggled:
    # toggled values in bold, options recomputed for the new config.
    app = PlanApp(GPT2_XL_SHAPE, gpu_memory("a100-40"))

    async def toggle(pilot):
        await pilot.press("b", "o")
        await settle(app, pilot)

    assert snap_compare(app, terminal_size=(120, 40), run_before=toggle)
