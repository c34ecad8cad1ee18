"""The memory app (`trainscope memory SNAPSHOT` in a terminal), driven with Textual's Pilot on the
bundled CUDA memory snapshots. Every number the app shows is checked against an independent
replay of the raw pickle (stdlib pickle, plain dicts: no trainscope code): the allocator state at
the dump, walked backwards through the recorded events."""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import pickle
from collections import Counter
from pathlib import Path

import pytest

from trainscope import api
from trainscope.tui.chrome import HelpScreen
from trainscope.tui.memory_app import MemoryApp
from trainscope.tui.memory_app import PeakChart
from trainscope.tui.memory_app import PeakTable
from trainscope.tui.memory_app import size_text

DATA = Path(__file__).parent / "data" / "memory"
TRAINSTEP = DATA / "mem_cs336_nothanmin_trainstep.pickle.gz"  # 19,464 allocator events, one device
OOM = DATA / "mem_oom_flexgen_opt.pickle"  # PyTorch 2.0 era, no allocator events


def raw(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return pickle.load(f)  # our own bundled test data: plain dicts and lists


def independent_peak(path: Path) -> tuple[int, int, dict[int, int]]:
    """(peak allocated bytes, index of the event after which it holds, {address: requested bytes} live
    then), by undoing the recorded events one by one from the state at the dump."""
    d = raw(path)
    live = {
        b["address"]: b["requested_size"]
        for s in d["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    }
    events = d["device_traces"][0]
    now = sum(live.values())
    after = [0] * len(events)
    for i in range(len(events) - 1, -1, -1):
        after[i] = now
        e = events[i]
        if e["action"] == "alloc":  # before it, the block was not live
            now -= e["size"]
            live.pop(e["addr"])
        elif e["action"] == "free_requested":  # before it, the block was live
            now += e["size"]
            live[e["addr"]] = e["size"]
    peak = max(after)
    i_peak = after.index(peak)
    # Second walk: the live set just after event i_peak.
    live = {
        b["address"]: b["requested_size"]
        for s in d["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    }
    for i in range(len(events) - 1, i_peak, -1):
        e = events[i]
        if e["action"] == "alloc":
            live.pop(e["addr"])
        elif e["action"] == "free_requested":
            live[e["addr"]] = e["size"]
    return peak, i_peak, live


def app_for(path: Path) -> MemoryApp:
    return MemoryApp(str(path), report=api.memory(path), peaks=api.memory_peaks(path))


@pytest.fixture(scope="module")
def trainstep():
    return independent_peak(TRAINSTEP)


def test_peak_and_live_set_match_an_independent_replay(trainstep):
    peak, i_peak, live = trainstep
    (p,) = api.memory_peaks(TRAINSTEP)
    assert p.peak_bytes == peak and p.peak_index == i_peak
    # What the table lists adds up to the chart's peak, allocation by allocation.
    assert p.accounted and p.live_bytes == sum(live.values()) == peak
    assert Counter(a.size for a in p.allocations) == Counter(live.values())
    assert {a.address for a in p.allocations} == set(live)
    assert [a.size for a in p.allocations] == sorted(live.values(), reverse=True)
    # The series the chart draws peaks at the same event.
    assert int(p.allocated.max()) == peak and int(p.allocated[i_peak]) == peak
    assert p.peak_time_us == raw(TRAINSTEP)["device_traces"][0][i_peak]["time_us"]


def test_app_shows_the_peak_its_marker_and_the_live_allocations(trainstep):
    peak, i_peak, live = trainstep
    app = app_for(TRAINSTEP)

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            chart, table = app.query_one(PeakChart), app.query_one(PeakTable)
            dt = app.query_one("#mm-table")
            # Scaled to the peak: the highest column is the peak, and it is the marked one.
            cols = chart.columns
            binned = chart.peak.binned_peak(cols)
            assert int(binned.max()) == peak
            at = chart.peak_column()
            assert at is not None and int(binned[at]) == peak
            t = raw(TRAINSTEP)["device_traces"][0]
            t0, t1 = t[0]["time_us"], t[-1]["time_us"]
            assert at == (t[i_peak]["time_us"] - t0) * cols // (t1 - t0 + 1)
            text = chart.render().plain
            assert f"▼ peak {size_text(peak)}" in text and "┴" in text
            lines = text.splitlines()
            assert lines[1][chart.GUTTER - 1 :].strip().startswith(size_text(peak)[:4]) or size_text(peak) in lines[1]
            # The table: largest first, share of the peak, the stack top; the full stack below.
            assert dt.row_count == min(PeakTable.MAX_ROWS, len(live))
            first = table.shown[0]
            assert first.size == max(live.values())
            cells = dt.get_row_at(0)
            assert str(cells[0]) == size_text(first.size)
            assert str(cells[1]) == f"{100 * first.size / peak:.2f} %"
            assert str(cells[3]) == first.site[: table._site_w]
            stack = str(app.query_one("#mm-stack-text").render())
            assert first.site in stack and first.stack[-1].text in stack
            # ↓ selects the next allocation and its stack.
            await pilot.press("down")
            await pilot.pause()
            assert table.selected is table.shown[1]
            assert table.shown[1].stack[-1].text in str(app.query_one("#mm-stack-text").render())
            note = str(app.query_one("#mm-note").render())
            assert f"peak allocated {size_text(peak)}" in note and f"{len(live):,} allocations live" in note

    asyncio.run(go())


def test_one_key_map_sort_filter_copy_help_palette(trainstep, tmp_path, monkeypatch):
    peak, _, live = trainstep
    app = app_for(TRAINSTEP)

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            table = app.query_one(PeakTable)
            await pilot.press("s")  # size → of peak
            await pilot.press("s")  # → allocated (time, oldest first)
            await pilot.pause()
            assert table.sort_column == "time" and not table.descending
            times = [-1 if a.time_us is None else a.time_us for a in table.shown]
            assert times == sorted(times)
            await pilot.press("r")
            await pilot.pause()
            times = [-1 if a.time_us is None else a.time_us for a in table.shown]
            assert times == sorted(times, reverse=True)
            # / filters by any frame; every row kept names the word, and none left out does.
            await pilot.press("slash", *"einsum", "enter")
            await pilot.pause()
            kept = table.shown
            expected = [
                a
                for a in app.peak.allocations
                if any("einsum" in f.text.lower() for f in a.stack) or "einsum" in a.site.lower()
            ]
            assert kept and len(kept) == len(expected) < len(live)
            assert app.focused is app.query_one("#mm-table")
            await pilot.press("y")
            await pilot.pause()
            assert app.clipboard == table.selected.site
            await pilot.press("question_mark")
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen)
            help_text = str(app.screen.query_one("#help-keys").render())
            for key in ("?", "/", "s", "t", "e", "y", "q"):
                assert f"\n  {key} " in help_text, key
            await pilot.press("escape")
            await pilot.pause()
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert "Export the Markdown memory report" in titles and any("filter" in t.lower() for t in titles)
            dark = app.current_theme.dark
            await pilot.press("t")
            await pilot.pause()
            assert app.current_theme.dark != dark
            monkeypatch.chdir(tmp_path)
            await pilot.press("e")
            await pilot.pause()
            written = tmp_path / "mem_cs336_nothanmin_trainstep.trainscope-memory.md"
            assert app.exported == [str(written)] and "21.26 GiB" in written.read_text()
            await pilot.press("q")

    asyncio.run(go())


def test_snapshot_without_events_lists_the_state_at_the_dump():
    d = raw(OOM)
    segs = d["segments"] if isinstance(d, dict) else d
    live = [b["requested_size"] for s in segs for b in s["blocks"] if b["state"] == "active_allocated"]
    app = app_for(OOM)

    async def go():
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            p = app.peak
            assert p.peak_bytes == sum(live) and p.live_bytes == sum(live)
            assert [a.size for a in p.allocations] == sorted(live, reverse=True)
            assert "No allocator events recorded" in app.query_one(PeakChart).render().plain
            assert app.query_one("#mm-table").row_count == len(live)

    asyncio.run(go())


def test_cli_opens_the_app_in_a_terminal_and_prints_otherwise(monkeypatch, capsys):
    from trainscope.cli import main
    from trainscope.tui import memory_app

    opened = []
    monkeypatch.setattr(memory_app.MemoryApp, "run", lambda self: opened.append(self.path) or 0)
    monkeypatch.setattr("trainscope.commands.analyze.use_tui", lambda args: args.format is None)
    assert main(["memory", str(TRAINSTEP), "-q"]) == 0
    assert opened == [str(TRAINSTEP)] and capsys.readouterr().out == ""
    assert main(["memory", str(TRAINSTEP), "-q", "--format", "text"]) == 0
    assert opened == [str(TRAINSTEP)] and "peak allocated" in capsys.readouterr().out
    # A memory timeline has no stacks: text, even in a terminal.
    assert main(["memory", str(DATA / "hta_memory_timeline.raw.json.gz"), "-q"]) == 0
    assert opened == [str(TRAINSTEP)] and capsys.readouterr().out


@pytest.mark.skipif(
    importlib.util.find_spec("pytest_textual_snapshot") is None,
    reason="pytest-textual-snapshot (the test extra) is not installed",
)
def test_memory_app_snapshot(snap_compare):
    assert snap_compare(app_for(TRAINSTEP), press=["down"], terminal_size=(100, 30))


def test_the_report_gives_the_apps_peaks_from_the_snapshot_it_read():
    """The memory command reads the snapshot once: the app's peaks come from the report's own
    snapshot and equal those read afresh."""
    from trainscope import api

    report = api.memory(TRAINSTEP)
    kept, fresh = report.peaks(), api.memory_peaks(TRAINSTEP)
    assert [p.peak_bytes for p in kept] == [p.peak_bytes for p in fresh] == [22_827_925_508]
    assert kept[0].allocations == fresh[0].allocations and kept[0].accounted


def test_memory_top_n_prints_n_allocations_in_text_and_markdown(capsys):
    """`memory --top N` printed at most 5 allocations in text (issue 28 item 8)."""
    from trainscope.cli import main

    snap = str(Path(__file__).parent / "data" / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz")
    for n in (3, 12):
        assert main(["memory", snap, "--top", str(n), "--no-tui"]) == 0
        out = capsys.readouterr().out
        block = out.split("largest live allocations at the peak:", 1)[1].split("\n\n", 1)[0]
        assert sum(1 for line in block.splitlines() if line.strip().endswith(")") or "MiB" in line) == n, block
        assert main(["memory", snap, "--top", str(n), "--format", "markdown"]) == 0
        md = capsys.readouterr().out
        assert md.count(" MiB | ") == n
