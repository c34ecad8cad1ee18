"""One key map across the apps, tabs declared once, app actions in the command palette."""

from __future__ import annotations

import asyncio

import pytest

from tests.test_tui import KINETO
from tests.test_tui import RESNET
from tests.test_tui import _ready
from tests.test_tui import notices
from tests.test_tui import session

pytest.importorskip("textual")

from trainscope.tui.app import AnalyzeApp  # noqa: E402
from trainscope.tui.app import key_sections  # noqa: E402
from trainscope.tui.diff_app import DiffApp  # noqa: E402
from trainscope.tui.keys import KEYMAP  # noqa: E402
from trainscope.tui.memory_app import MemoryApp  # noqa: E402
from trainscope.tui.memory_app import PeakTable  # noqa: E402
from trainscope.tui.plan_app import PlanApp  # noqa: E402
from trainscope.tui.tabs import TABS  # noqa: E402
from trainscope.tui.watch_app import WatchApp  # noqa: E402


def _keys_by_action(app_cls) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for b in app_cls.BINDINGS:
        out.setdefault(b.action, set()).update(k.strip() for k in b.key.split(","))
    return out


@pytest.mark.parametrize("app_cls", [AnalyzeApp, DiffApp, PlanApp, WatchApp, MemoryApp])
def test_the_shared_actions_have_the_same_key_in_every_app(app_cls):
    keys = _keys_by_action(app_cls)
    for name in ("help", "theme", "quit"):
        k = KEYMAP[name]
        assert k.key in keys.get(k.action, set()), (app_cls.__name__, name)
    # No app gives a shared key to something else.
    shared = {KEYMAP[n].key: KEYMAP[n].action for n in ("help", "theme", "quit", "export")}
    for action, ks in keys.items():
        for k in ks:
            assert shared.get(k, action) == action, (app_cls.__name__, k, action)


def test_tabs_are_declared_once_and_numbered_in_order():
    keys = _keys_by_action(AnalyzeApp)
    for i, t in enumerate(TABS):
        assert keys[f"show_tab('{t.id}')"] == {str(i + 1)}
    help_tabs = key_sections()[0][1][0]
    assert help_tabs[0] == f"1 … {len(TABS)}" and all(t.title.lower() in help_tabs[1] for t in TABS)


def test_the_command_palette_runs_app_actions_and_a_missing_tab_says_why():
    async def go():
        app = AnalyzeApp(str(KINETO / RESNET), session=session(RESNET))
        notices(app)  # kept from the start: Textual drops a notice 6 s after its post
        async with app.run_test(size=(100, 30)) as pilot:
            await _ready(app, pilot)
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert "Show the Kernels tab" in titles and "Export the Markdown report" in titles
            await pilot.press("ctrl+p")
            await pilot.pause(0.3)
            await pilot.press(*"show the kernels tab")
            await pilot.pause(0.5)
            await pilot.press("enter")
            await pilot.pause(0.3)
            assert app.query_one("#tabs").active == "kernels"
            await pilot.press("8")  # no --deep: the notification names the flag
            await pilot.pause()
            assert any("--deep" in str(n.message) for n in notices(app))
            assert app.query_one("#tabs").active == "kernels"

    asyncio.run(go())


def test_the_memory_apps_table_uses_the_shared_letters():
    """The memory app's own keys (on its table) are the shared ones: / search, s sort, r reverse, y copy."""
    keys = _keys_by_action(PeakTable)
    for name in ("search", "sort", "reverse", "copy"):
        k = KEYMAP[name]
        assert any(k.key in ks for ks in keys.values()), name
    assert keys[KEYMAP["sort"].action] == {KEYMAP["sort"].key} and keys[KEYMAP["copy"].action] == {KEYMAP["copy"].key}
    assert keys["focus_filter"] == {KEYMAP["search"].key}


def test_a_tab_without_its_pane_is_refused_when_declared():
    """A tab is one class: forgetting its widget fails at import, not when the tab is opened."""
    import pytest

    from trainscope.tui.tabs import TABS
    from trainscope.tui.tabs import Tab

    assert all(callable(t.__dict__["pane"]) or isinstance(t.__dict__["pane"], staticmethod) for t in TABS)
    with pytest.raises(TypeError, match="NoPane declares no pane"):

        class NoPane(Tab):  # noqa: F841
            id, title, hint = "x", "X", ""
