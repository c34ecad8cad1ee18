"""The analyze app on a trace whose analysis the cache holds: the first screen, the Overview, comes
from the cached document while the session loads behind it (a loader held on an Event here, so it
cannot arrive early); the other tabs come with the session, and the Overview drawn again from the
session's own document is the one shown from the cache. A miss, ``--no-cache`` and
``TRAINSCOPE_NO_CACHE`` open on the loading screen as before."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from tests.cache_on import turn_cache_on
from tests.conftest import KINETO
from tests.fuzzing import run_in_process

pytest.importorskip("textual")

from tests.test_tui import RESNET  # noqa: E402
from tests.test_tui import notices  # noqa: E402
from tests.test_tui import static_text  # noqa: E402
from tests.test_tui import until  # noqa: E402
from trainscope import api  # noqa: E402
from trainscope.analyzers.rules import Rules  # noqa: E402
from trainscope.api import cache  # noqa: E402
from trainscope.reports.document import headline  # noqa: E402
from trainscope.traces.safe_text import safe_strings  # noqa: E402
from trainscope.tui.app import AnalyzeApp  # noqa: E402
from trainscope.tui.overview import Overview  # noqa: E402
from trainscope.tui.state import build_session  # noqa: E402
from trainscope.tui.state import cached_document  # noqa: E402

PATH = str(KINETO / RESNET)
RANKS = str(KINETO / "hta_dlrm_ws128_2ranks")  # two ranks: the Overview says the rank story too
OVERVIEW_PARTS = ("#badge", "#summary", "#figures", "#evidence", "#top-fixes", "#ledger", "#ranks-summary", "#warnings")


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    """The cache on (the suite runs with it off: tests/conftest.py), in a folder of this test's own."""
    return turn_cache_on(tmp_path, monkeypatch)


def overview_text(app) -> dict[str, str]:
    return {part: static_text(app, part) for part in OVERVIEW_PARTS}


def held_loader(rules: Rules, path: str = PATH):
    """A loader that builds the real session (through the cache, as the CLI's) only once released."""
    started, release = threading.Event(), threading.Event()

    def loader(progress):
        started.set()
        if not release.wait(120):
            raise TimeoutError("the test never released the loader")
        return build_session(path, None, rules, progress=progress, jobs=1, cache=True)

    return loader, started, release


def tabs_bar_shown(app) -> bool:
    return bool(app.query_one("#tabs").query_one("ContentTabs").display)


@pytest.mark.parametrize("path", [PATH, RANKS], ids=["file", "rank-directory"])
def test_the_app_opens_on_the_cached_document_and_the_session_fills_in_the_rest(cache_on, path):
    rules = Rules()
    doc = api.analyze(path, rules=rules, cache=True, jobs=1).to_dict()  # the first look: analyzed and stored
    cached = cached_document(path, rules)
    assert cached == doc
    loader, started, release = held_loader(rules, path)

    async def go():
        app = AnalyzeApp(path, loader=loader, rules=rules, document=cached)
        notices(app)  # kept from the start: Textual drops a notice 6 s after its post
        async with app.run_test(size=(100, 40)) as pilot:
            try:
                assert await until(pilot, lambda: headline(doc) in static_text(app, "#badge"))
                assert f"confidence {doc['verdict']['confidence']:.2f}" in static_text(app, "#badge")
                assert await until(pilot, started.is_set)  # the loader starts after the first frame…
                assert app.session is None  # … and cannot finish
                assert f"{doc['breakdown']['gpu_busy_pct']:.1f} %" in static_text(app, "#figures")
                if path == PATH:
                    assert "DATA-BOUND" in static_text(app, "#badge")
                    assert "1. Load batches in parallel worker processes" in static_text(app, "#top-fixes")
                else:  # the rank story's line, from the document's stragglers section
                    assert "rank" in static_text(app, "#ranks-summary").lower() and doc["stragglers"]
                assert app.query_one("#tabs").display and not tabs_bar_shown(app)  # the Overview alone
                loading = app.query_one("#loading")
                assert loading.display and loading.has_class("behind")  # the stage and bar under it
                preview = overview_text(app)

                # Keys that need the session say so and change nothing.
                for key, said in (("2", "the Timeline tab opens"), ("e", "the report can be exported")):
                    await pilot.press(key)
                    assert await until(pilot, lambda said=said: any(said in str(n.message) for n in notices(app)))
                    assert app.query_one("#tabs").active == "overview" and app.session is None
                assert not app.exported and len(app.screen_stack) == 1  # no path asked for
            finally:
                release.set()
            assert await until(pilot, lambda: app.session is not None and tabs_bar_shown(app))
            await pilot.pause()
            assert not app.query_one("#loading").display
            final = overview_text(app)
            assert final == preview
            # The session's document is the cached one, and the Overview drawn from it is the one shown.
            assert app.session.document() == doc
            app.query_one(Overview).show_document(app.session.document())
            assert overview_text(app) == preview
            # … and the main rank's own document draws it the same (the Overview before this change).
            stragglers = app.session.stragglers if path == RANKS else None
            app.query_one(Overview).show(safe_strings(app.rank.doc), safe_strings(stragglers))
            assert overview_text(app) == preview
            await pilot.press("2")  # the tabs work now
            assert await until(pilot, lambda: app.query_one("#tabs").active == "timeline")

    asyncio.run(go())


def test_a_miss_opens_on_the_loading_screen_as_before(cache_on):
    rules = Rules()
    assert cached_document(PATH, rules) is None  # an empty cache
    loader, started, release = held_loader(rules)

    async def go():
        app = AnalyzeApp(PATH, loader=loader, rules=rules, document=None)
        notices(app)
        async with app.run_test(size=(100, 40)) as pilot:
            try:
                assert await until(pilot, started.is_set)
                await pilot.pause()
                loading = app.query_one("#loading")
                assert loading.display and not loading.has_class("behind")
                assert not app.query_one("#tabs").display and static_text(app, "#badge") == ""
                await pilot.press("2")
                await pilot.pause()
                assert not notices(app)  # as before: the keys wait silently for the session
            finally:
                release.set()
            assert await until(pilot, lambda: app.session is not None and tabs_bar_shown(app))
            assert "DATA-BOUND" in static_text(app, "#badge") and not app.query_one("#loading").display

    asyncio.run(go())
    # The session stored its document: the next look opens on it.
    assert cached_document(PATH, rules) == build_session(PATH, None, rules).document()


def _app_for(argv: list[str]):
    """The app ``trainscope analyze ARGV`` would run in a terminal (not run)."""
    from trainscope.cli import build_parser
    from trainscope.commands.analyze import _rules
    from trainscope.commands.analyze import analyze_app

    args = build_parser().parse_args(["analyze", *argv])
    return analyze_app(args, _rules(args), None)


def test_the_command_line_app_finds_what_the_printed_report_stored_and_respects_no_cache(cache_on, monkeypatch):
    argv = [PATH, "--threshold", "data_wait.high=25", "--peak-tflops", "100"]
    assert _app_for(argv).document is None
    rc, out, err = run_in_process(["analyze", *argv, "--format", "json", "-q"])  # stores the document
    assert rc == 0, err
    assert _app_for(argv).document == json.loads(out)  # the same key as the printed report's
    assert _app_for([PATH, "--threshold", "data_wait.high=26", "--peak-tflops", "100"]).document is None
    assert _app_for([*argv, "--no-cache"]).document is None
    monkeypatch.setenv(cache.ENV_OFF, "1")
    assert _app_for(argv).document is None
