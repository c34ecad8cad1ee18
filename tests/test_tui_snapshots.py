"""SVG snapshots of the analyze app (pytest-textual-snapshot), with real traces and no clock,
worker or cursor blink in the picture. Textual is pinned in the ``test`` extra so the pictures
only change when the app does. Update after an intended change with
``python -m pytest tests/test_tui_snapshots.py --snapshot-update`` and review the SVGs."""

from __future__ import annotations

import pytest

from tests.test_tui import KINETO
from tests.test_tui import PARAM_RESNET
from tests.test_tui import RESNET
from tests.test_tui import session

pytest.importorskip("pytest_textual_snapshot")

from trainscope.tui.app import AnalyzeApp  # noqa: E402


def app_for(name: str) -> AnalyzeApp:
    return AnalyzeApp(str(KINETO / name), session=session(name))


def test_overview_80x24(snap_compare):
    assert snap_compare(app_for(RESNET), terminal_size=(80, 24))


def test_overview_light_theme(snap_compare):
    assert snap_compare(app_for(RESNET), press=["t"], terminal_size=(80, 24))


def test_timeline_80x24(snap_compare):
    assert snap_compare(app_for(RESNET), press=["2", *["right"] * 6], terminal_size=(80, 24))


def test_timeline_large(snap_compare):
    assert snap_compare(app_for(RESNET), press=["2", "plus", *["right"] * 30], terminal_size=(160, 45))


def test_steps_with_outliers(snap_compare):
    assert snap_compare(app_for(PARAM_RESNET), press=["3"], terminal_size=(120, 36))


def test_kernels(snap_compare):
    assert snap_compare(app_for(RESNET), press=["4"], terminal_size=(120, 30))


def test_fixes_with_a_what_if(snap_compare):
    assert snap_compare(app_for(RESNET), press=["5", "space"], terminal_size=(100, 34))


def test_memory(snap_compare):
    assert snap_compare(app_for(RESNET), press=["6"], terminal_size=(100, 30))
