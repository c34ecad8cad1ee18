"""SVG snapshots of the diff app on the real A100 → V100 pair (pytest-textual-snapshot; Textual is
pinned in the ``test`` extra). Update after an intended change with
``python -m pytest tests/test_diff_app_snapshots.py --snapshot-update`` and review the SVGs."""

from __future__ import annotations

import pytest

from tests.test_diff_app import AFTER
from tests.test_diff_app import BEFORE
from tests.test_diff_app import pair

pytest.importorskip("pytest_textual_snapshot")

from trainscope.analyzers.compare.diff import check_gate  # noqa: E402
from trainscope.tui.diff_app import DiffApp  # noqa: E402


def app_with_gate() -> DiffApp:
    return DiffApp(BEFORE, AFTER, diff=pair(), gate=check_gate(pair(), "step_p50", 20))


def test_summary_with_a_failed_gate_80x24(snap_compare):
    assert snap_compare(app_with_gate(), terminal_size=(80, 24))


def test_kernels_that_grew_with_an_arch_match_selected_140x40(snap_compare):
    assert snap_compare(app_with_gate(), press=["3", "g", "down", "down", "down"], terminal_size=(140, 40))
