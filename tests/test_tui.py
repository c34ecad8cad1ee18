"""The analyze app, driven with Textual's Pilot on real traces; every assertion is on state that
could be wrong, re-derived from the trace or the analysis where possible."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shutil

import numpy as np
import pytest

from tests.conftest import KINETO

textual = pytest.importorskip("textual")

from trainscope.analyzers.rules import Rules  # noqa: E402
from trainscope.collectors import open_traces  # noqa: E402
from trainscope.tui.app import AnalyzeApp  # noqa: E402
from trainscope.tui.app import HelpScreen  # noqa: E402
from trainscope.tui.fixes import FixesPane  # noqa: E402
from trainscope.tui.state import Session  # noqa: E402
from trainscope.tui.state import build_session  # noqa: E402
from trainscope.tui.tables import KernelsPane  # noqa: E402
from trainscope.tui.timeline import GUTTER  # noqa: E402
from trainscope.tui.timeline import TimelinePane  # noqa: E402
from trainscope.tui.timeline import TimelineView  # noqa: E402

RESNET = "resnet50_v100_num_workers_0.pt.trace.json.gz"
PARAM_RESNET = "param_resnet_2080ti.json.gz"
A100 = "hta_a100_control.json.gz"


@functools.cache
def session(name: str) -> Session:
    path = str(KINETO / name)
    return build_session(path, open_traces(path), Rules())


def run(coro):
    return asyncio.run(coro)


def static_text(app, selector: str) -> str:
    return str(app.query_one(selector).render())


async def until(pilot, ready, limit_s: float = 120.0) -> bool:
    """Pause until ``ready()`` holds (checked every 50 ms), at most ``limit_s`` of wall time: a test
    waits for the event itself, never a fixed time that a loaded machine can outlast (a fixed pause
    read the app's notices before its background thread had posted them, 1 run in 5 under load)."""
    for _ in range(int(limit_s / 0.05)):
        if ready():
            return True
        await pilot.pause(0.05)
    return bool(ready())


def notices(app) -> list:
    """Every notification ``app`` posts from now on, kept. Textual's own collection
    (``app._notifications``) drops a notification on every read once its timeout has passed — 6 s
    of wall time, which a loaded machine can spend between the post and the test's read (a red
    loaded run read an empty list after waiting for the notice). Call before the notice is posted."""
    kept = getattr(app, "_kept_notices", None)
    if kept is None:
        kept = []
        add = app._notifications.add

        def keep(notification):
            kept.append(notification)
            return add(notification)

        app._notifications.add = keep
        app._kept_notices = kept
    return kept


def toasts(app) -> list[str]:
    """The kept notifications (:func:`notices`) as their toasts draw them."""
    from textual.widgets._toast import Toast

    return [str(Toast(n).render().plain) for n in notices(app)]


async def _ready(app, pilot) -> None:
    await until(pilot, lambda: app.session is not None and app.query_one("#tabs").display)
    await pilot.pause()


@contextlib.asynccontextmanager
async def opened(name: str, size: tuple[int, int] = (120, 40), key: str | None = None):
    """The app on bundled trace ``name`` (its :func:`session`) at ``size``, ready; ``key`` pressed
    (a tab's number, a command). Yields (app, pilot)."""
    app = AnalyzeApp(str(KINETO / name), session=session(name))
    async with app.run_test(size=size) as pilot:
        await _ready(app, pilot)
        if key is not None:
            await pilot.press(key)
        yield app, pilot


def test_overview_shows_the_data_bound_verdict_and_the_dataloader_fix_first():
    async def go():
        async with opened(RESNET, (80, 24)) as (app, pilot):
            badge = static_text(app, "#badge")
            assert (
                "DATA-BOUND" in badge and "confidence 0.82" in badge
            )  # 0.5 + 0.45 × (1 − 9.9 / 33.9): input 33.9 %, runner-up launch 9.9 % (9.4 recorded + 0.5 issued late)
            assert app.query_one("#badge").has_class("axis-data")
            figures = static_text(app, "#figures")
            b = session(RESNET).analyses[0].breakdown
            # one label column, as wide as its longest label ("peak memory GPU 0")
            assert re.search(rf"^GPU busy +{b.gpu_busy_pct:.1f} %", figures, re.M), figures
            value_columns = {len(m.group(0)) for m in re.finditer(r"^\S.*?\S  +(?=\S)", figures, re.M)}
            assert len(value_columns) == 1, figures
            assert f"{b.data_wait_pct:.1f} %" in figures and "p50 " in figures
            assert "2.6 GiB of 31.7 GiB" in figures  # peak memory vs the V100's capacity
            fixes = static_text(app, "#top-fixes")
            first = fixes.splitlines()[0]
            assert first.startswith("1. Load batches in parallel worker processes") and "1.66×" in first
            evidence = static_text(app, "#evidence")
            assert "host waiting on DataLoader __next__: 39.6 %" in evidence and "XProf" in evidence

    run(go())


def _lanes_in_view(view: TimelineView):
    model = view.model
    return (
        model.lane("gpu", view.start_ns, view.end_ns, view.columns),
        model.lane("host", view.start_ns, view.end_ns, view.columns),
    )


def test_timeline_lines_up_gpu_idle_with_host_data_wait_and_navigates():
    async def go():
        s = session(RESNET)
        async with opened(RESNET, (100, 30), "2") as (app, pilot):
            await pilot.pause()
            view = app.query_one(TimelineView)
            assert app.focused is view
            steps = s.analyses[0].segmentation.steps
            durs = [st.duration_ns for st in steps]
            median = sorted(range(len(steps)), key=lambda i: durs[i])[len(steps) // 2]
            assert view.step_index == median
            assert (view.start_ns, view.end_ns) == (steps[median].start_ns, steps[median].end_ns)

            gpu, host = _lanes_in_view(view)
            waiting = gpu.dominant == gpu.categories.index("idle_data_wait")
            # A third of the step: GPU idle columns, and the host is in the DataLoader on (nearly) all of them.
            assert waiting.sum() > 0.25 * view.columns
            host_wait = host.dominant == host.categories.index("data_wait")
            assert (host_wait[waiting]).mean() > 0.95

            # Step navigation.
            await pilot.press("p")
            assert view.step_index == median - 1
            assert view.start_ns == steps[median - 1].start_ns
            await pilot.press("n", "n")
            assert view.step_index == median + 1

            # Zoom in around the cursor halves the window and keeps the cursor's instant in view.
            await pilot.press("right", "right", "right")
            before = view.end_ns - view.start_ns
            t_cursor = view.column_window(view.cursor)[0]
            await pilot.press("plus")
            assert abs((view.end_ns - view.start_ns) - before / 2) <= 2
            a, b = view.column_window(view.cursor)
            assert abs(a - t_cursor) <= before / view.columns
            await pilot.press("l")
            assert view.start_ns > a - (view.end_ns - view.start_ns)  # panned right
            await pilot.press("minus", "minus")
            await pilot.press("a")
            lo, hi = view.model.span
            assert view.start_ns <= lo + 1 and view.end_ns >= hi - 1
            # The header (and f) follow the step under the cursor, not the step shown before `a`.
            a, b = view.column_window(view.cursor)
            under = view.model.step_at((a + b) // 2)
            await pilot.press("f")
            assert view.start_ns == steps[under if under is not None else median + 1].start_ns

    run(go())


def test_timeline_cursor_says_which_kernel_and_host_op_are_under_it():
    async def go():
        s = session(RESNET)
        trace = s.ranks[0].trace
        async with opened(RESNET, (100, 30), "2") as (app, pilot):
            view = app.query_one(TimelineView)
            gpu, _ = _lanes_in_view(view)
            # Move the cursor onto the first column where the GPU computes: the last step there is a key
            # press (each of `col` presses redrew the detail the same way; only the last one is read).
            col = int(np.flatnonzero(gpu.dominant == gpu.categories.index("compute"))[-1])
            assert col >= 1
            view.cursor = col - 1
            await pilot.press("right")
            await pilot.pause()
            a, b = view.column_window(view.cursor)
            k = trace.kernels
            overlap = np.minimum(k.end, b) - np.maximum(k.ts, a)
            expected = trace.strings[int(k.name[int(np.argmax(overlap))])]
            detail = static_text(app, "#tl-detail")
            from trainscope.tui.timeline import short_name

            assert short_name(expected) in detail.replace("\n", "")
            assert "\nT main " in detail and "% of ProfilerStep#" in detail  # the host thread, named

    run(go())


def test_steps_table_marks_the_periodic_dataloader_stalls_and_opens_a_step():
    async def go():
        s = session(PARAM_RESNET)
        async with opened(PARAM_RESNET, (120, 40), "3") as (app, pilot):
            table = app.query_one("#steps-table")
            durs = np.array([st.duration_ns for st in s.analyses[0].segmentation.steps], float)
            expected = np.flatnonzero(durs > 1.5 * np.median(durs))
            flagged = [i for i in range(table.row_count) if "⚠" in str(table.get_row_at(i)[-1])]
            assert flagged == list(expected) and len(flagged) >= 3  # first wait + periodic stalls
            # Enter on the second outlier opens it on the timeline.
            table.move_cursor(row=int(expected[1]))
            await pilot.press("enter")
            await pilot.pause()
            assert app.query_one("#tabs").active == "timeline"
            assert app.query_one(TimelineView).step_index == int(expected[1])

    run(go())


def test_kernels_sort_and_filter():
    async def go():
        s = session(RESNET)
        async with opened(RESNET, (120, 40), "4") as (app, pilot):
            pane = app.query_one(KernelsPane)
            totals = [k.total_ns for k in pane.shown]
            assert totals == sorted(totals, reverse=True) and pane.sort_column == "total"
            # Independently: distinct kernel names inside the steps.
            trace = s.ranks[0].trace
            seg = s.analyses[0].segmentation
            k = trace.kernels
            inside = np.zeros(len(k), bool)
            for st in seg.steps:
                inside |= (k.ts >= st.start_ns) & (k.ts < st.end_ns)
            assert len(pane.shown) == len(np.unique(k.name[inside]))
            assert sum(x.count for x in pane.shown) == int(inside.sum())
            await pilot.press("s")  # next column: mean
            means = [x.mean_ns for x in pane.shown]
            assert pane.sort_column == "mean" and means == sorted(means, reverse=True)
            await pilot.press("r")
            assert [x.mean_ns for x in pane.shown] == sorted(means)
            await pilot.press("slash", *"sgemm")
            names = {trace.strings[i] for i in np.unique(k.name[inside])}
            assert pane.filter_text == "sgemm"
            assert {x.name for x in pane.shown} == {n for n in names if "sgemm" in n.lower()}
            await pilot.press("escape")
            assert app.focused is app.query_one("#kernels-table")
            # roofline columns, and the chart on p
            from trainscope.tui.roofline_plot import RooflinePlot

            roof = {r.name: r for r in s.analyses[0].roofline.rows}
            assert any(roof.get(x.name) and roof[x.name].bound in ("memory", "compute") for x in pane.shown)
            plot = app.query_one(RooflinePlot)
            assert not plot.display
            await pilot.press("p")
            assert plot.display and "TFLOP/s vs FLOP/byte" in str(plot.render())

    run(go())


def test_fixes_what_if_toggles_recompute_the_projection():
    async def go():
        s = session(RESNET)
        a = s.analyses[0]
        async with opened(RESNET, (100, 30), "5") as (app, pilot):
            pane = app.query_one(FixesPane)
            assert a.recommendations[0].id == "dataloader-workers"
            await pilot.press("space")
            assert pane.assumed == {"dataloader-workers"}
            assert pane.projection.speedup == pytest.approx(a.recommendations[0].projected_speedup, abs=1e-3)
            text = static_text(app, "#whatif")
            assert (
                "projection" in text
                and f"{a.breakdown.step_ms.mean:.1f} → {pane.projection.projected_step_ms:.1f} ms" in text
            )
            await pilot.press("down", "space")  # add mixed precision: both removals combine
            assert pane.assumed == {"dataloader-workers", "mixed-precision"}
            both = pane.projection.speedup
            assert both > a.recommendations[0].projected_speedup and both > a.recommendations[1].projected_speedup
            # T' = max(T − I − U, B − U) re-derived from the breakdown.
            b = a.breakdown
            g = next(f.stake_pct for f in a.findings if f.id == "algorithm/no-tensor-cores")
            ratio = a.device_spec.tensor_tflops / a.device_spec.fp32_tflops
            u = g * (1 - 1 / ratio)
            assert both == pytest.approx(100 / max(100 - b.data_wait_pct - u, b.gpu_busy_pct - u), rel=1e-6)
            detail = pane.detail_plain
            assert "autocast" in detail and "basis:" in detail
            await pilot.press("c")
            assert pane.assumed == frozenset() and pane.projection.speedup == pytest.approx(1.0)

    run(go())


def test_export_writes_the_same_report_as_the_report_flag(tmp_path, monkeypatch):
    from trainscope.reports.markdown import render_markdown

    monkeypatch.chdir(tmp_path)

    async def go():
        async with opened(RESNET, (80, 24), "e") as (app, pilot):
            await pilot.pause()
            return app.exported

    exported = run(go())
    out = tmp_path / "resnet50_v100_num_workers_0.trainscope.md"
    assert exported == [str(out)]  # the absolute path, as the notification says
    assert out.read_text() == render_markdown(session(RESNET).document())
    assert "DATA\\-BOUND" in out.read_text() and "Load batches in parallel worker processes" in out.read_text()


def test_memory_tab_plots_usage_against_capacity_and_is_hidden_without_memory_events():
    async def go(name):
        async with opened(name, (100, 30), "6") as (app, pilot):
            await pilot.pause()
            tabs = app.query_one("#tabs")
            chart = app.query_one("#mem-chart").render().plain if tabs.active == "memory" else ""
            return tabs.active, static_text(app, "#mem-note"), chart

    active, note, chart = run(go(RESNET))
    assert active == "memory"
    # Scaled to the peak: the tallest column reaches the top row (it filled 3 of 25 rows at capacity scale).
    rows = chart.splitlines()
    assert any("█" in r[10:] for r in rows[:2])  # within the top two of ~20 rows
    assert "GiB" in rows[0] and float(rows[0].split("GiB")[0]) == pytest.approx(1.05 * 2.6, abs=0.1)
    peak = session(RESNET).analyses[0].memory[0].peak_allocated
    assert f"peak {peak / 2**30:.2f} GiB of 31.74 GiB" in note
    active, _, _ = run(go(A100))
    assert active != "memory"  # no memory events: no tab, the key says so


def test_rank_selector_switches_every_screen(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copy(KINETO / "hta_a100_80gb_rank0.json.gz", ranks / "a.json.gz")
    shutil.copy(KINETO / RESNET, ranks / "b.json.gz")

    async def go():
        app = AnalyzeApp(str(ranks))
        async with app.run_test(size=(120, 40)) as pilot:
            await _ready(app, pilot)
            s = app.session
            assert len(s.ranks) == 2
            start = app.rank_index
            assert start == s.main_rank
            slow = max(range(2), key=lambda i: s.analyses[i].breakdown.step_ms.p50)
            assert start == slow
            await pilot.press("7")
            table = app.query_one("#ranks-table")
            other = 1 - start
            table.move_cursor(row=other)
            await pilot.press("enter")
            for _ in range(100):
                await pilot.pause(0.05)
                if app.rank_index == other and static_text(app, "#badge") != "":
                    break
            await pilot.pause(0.2)
            assert app.rank_index == other
            expect = "DATA-BOUND" if s.analyses[other].verdict.axis == "data" else "HOST-BOUND"
            assert expect in static_text(app, "#badge")
            assert app.query_one(TimelineView).model is s.ranks[other].timeline

    run(go())


def test_help_lists_keys_and_closes():
    async def go():
        async with opened(RESNET, (80, 24), "question_mark") as (app, pilot):
            assert isinstance(app.screen, HelpScreen)
            text = static_text(app.screen, "#help-keys")
            for key in ("zoom in", "next / previous step", "export the Markdown report", "what-if", "quit"):
                assert key in text
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            await pilot.press("t")
            assert not app.current_theme.dark
            await pilot.press("q")
        return app.return_code

    assert run(go()) in (0, None)


def test_loading_runs_in_a_worker_and_bad_input_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")

    async def go(path):
        app = AnalyzeApp(str(path))
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(200):
                await pilot.pause(0.05)
                if app.session is not None or app.return_code is not None:
                    break
        return app

    app = run(go(KINETO / RESNET))
    assert app.session is not None and app.session.analyses[0].verdict.axis == "data"
    app = run(go(bad))
    assert app.return_code == 2 and app.session is None


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_every_tab_renders_at_small_and_large_sizes(size):
    async def go():
        async with opened(A100, size) as (app, pilot):
            for key in "1234567":
                await pilot.press(key)
                await pilot.pause()
            await pilot.press("2", "plus", "plus", "h", "n", "a")
            view = app.query_one(TimelineView)
            assert view.columns == size[0] - GUTTER - 1
            assert app.query_one(TimelinePane).query_one("#tl-title").render()

    run(go())


DATA = KINETO.parent


@pytest.mark.parametrize(
    "path, badge, hidden, ranks",
    [
        ("nsys/cs336_small_train_step_a100.sqlite", "BOUND", {"memory", "ranks"}, 1),
        ("nsys/cs336_ddp_2x3090.sqlite", "", {"memory"}, 2),
        ("nsys/pipit_saxpy_a100_nsys2022.sqlite", "", {"memory", "ranks"}, 1),
        ("nvml/nanogpt_8gpu_gpu_metrics.csv", "BALANCED", {"timeline", "steps", "kernels", "memory", "ranks"}, 1),
        ("kineto/hta_cpu_only.pt.trace.json.gz", "INSUFFICIENT EVIDENCE", {"memory", "ranks"}, 1),
    ],
)
def test_app_opens_every_input_kind(path, badge, hidden, ranks):
    """Nsight exports, counter logs and CPU-only traces: the right tabs, and every visible one renders."""

    async def go():
        app = AnalyzeApp(str(DATA / path))
        async with app.run_test(size=(100, 30)) as pilot:
            await _ready(app, pilot)
            assert len(app.session.ranks) == ranks
            assert badge in static_text(app, "#badge")
            tabs = app.query_one("#tabs")
            shown = {
                t
                for t in ("overview", "timeline", "steps", "kernels", "fixes", "memory", "ranks")
                if tabs.get_tab(t).display
            }
            assert shown == {"overview", "timeline", "steps", "kernels", "fixes", "memory", "ranks"} - hidden
            for i, t in enumerate(("overview", "timeline", "steps", "kernels", "fixes", "memory", "ranks")):
                await pilot.press(str(i + 1))
                await pilot.pause()
                assert (tabs.active == t) == (t in shown)

    run(go())


def test_nsight_timeline_shows_the_backward_and_optimizer_phases_on_the_host_lane():
    async def go():
        app = AnalyzeApp(str(DATA / "nsys/cs336_small_train_step_a100.sqlite"))
        async with app.run_test(size=(120, 34)) as pilot:
            await _ready(app, pilot)
            await pilot.press("2")
            view = app.query_one(TimelineView)
            _, host = _lanes_in_view(view)
            share = {c: float((host.dominant == i).mean()) for i, c in enumerate(host.categories)}
            # NVTX: forward ≈ 63 ms, backward ≈ 112 ms, optimizer ≈ 59 ms of a ≈ 235 ms iteration.
            assert share["backward"] == pytest.approx(112 / 235, abs=0.06)
            assert share["optimizer"] == pytest.approx(59 / 235, abs=0.06)

    run(go())


def test_deep_tab_shows_htas_critical_path_beside_the_verdict(tmp_path):
    pytest.importorskip("hta", reason="--deep needs Holistic Trace Analysis (the [test] extra installs it)")
    report = tmp_path / "r.md"

    async def go():
        app = AnalyzeApp(
            str(KINETO / A100), session=session(A100), deep=True, deep_step="1010", report_path=str(report)
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await _ready(app, pilot)
            await pilot.press("8")
            assert app.query_one("#tabs").active == "deep"
            from trainscope.tui.deep import DeepPane

            pane = app.query_one(DeepPane)
            for _ in range(1200):  # HTA takes ~10 s here; the app stays usable meanwhile
                if pane.result is not None:
                    break
                await pilot.pause(0.1)
            return pane.result, str(app.query_one("#deep-body").render()), app.session.document()

    result, text, doc = run(go())
    shares = result["critical_path"]["shares_pct"]
    assert shares["cpu"] == pytest.approx(71.8, abs=1.0) and shares["gpu_compute"] == pytest.approx(26.8, abs=1.0)
    assert "critical path of ProfilerStep#1010" in text and "vs verdict: disagrees" in text
    assert doc["deep"]["critical_path"]["step"] == "ProfilerStep#1010"
    assert "Deep analysis" in report.read_text()  # --report waits for HTA, then includes it


def test_ranks_tab_shows_the_straggler(gloo_dir):
    async def go():
        app = AnalyzeApp(str(gloo_dir))
        async with app.run_test(size=(120, 40)) as pilot:
            await _ready(app, pilot)
            overview = str(app.query_one("#ranks-summary").render())
            await pilot.press("7")
            return app.session.stragglers, str(app.query_one("#stragglers").render()), overview

    stragglers, text, overview = run(go())
    from trainscope.reports.deep import straggler_headline

    imb = stragglers["alignment"]["rank_imbalance"]  # the Overview names what the Ranks tab finds
    assert (
        imb["rank"] == 1
        and f"◀ rank 1: arrives {stragglers['alignment']['ranks'][1]['mean_late_ms']:.1f} ms" in overview
    )
    assert straggler_headline(stragglers)[0].split(" (")[0] in overview.replace("\n", " ")
    assert stragglers["stragglers"] == [1]
    assert "straggler: rank 1 is last at" in text  # the rank story's line; one table, the straggler's row marked
    assert [line.split()[0] for line in text.splitlines() if "◀ straggler" in line] == ["1"]


def test_model_ledger_shows_next_to_the_measured_peak():
    from trainscope.commands.analyze import _ledger_hook

    qwen = "tracelens_h100_qwen_inference.json.gz"

    async def go():
        app = AnalyzeApp(str(KINETO / qwen), decorate=_ledger_hook("params=0.5B,optimizer=adam,precision=mixed"))
        async with app.run_test(size=(120, 40)) as pilot:
            await _ready(app, pilot)
            await pilot.press("6")
            return app.session.document()["ledger"], str(app.query_one("#mem-ledger").render())

    ledger, text = run(go())
    assert ledger["total_gb"] == pytest.approx(0.5 * 16, rel=0.01)  # mixed-precision Adam: 16 bytes per parameter
    assert (
        "Ledger vs measured" in text and "measured peak allocated" in text and f"{ledger['total_gb']:8.2f} GB" in text
    )


def test_loader_errors_after_quit_do_not_change_the_exit_code():
    """Quitting mid-load removes the widgets the loader thread reports to; what it raises then
    is not an internal error. Before the user quits, the same failure is one (exit 1)."""

    def broken(progress):
        raise ValueError("widgets gone")

    app = AnalyzeApp("trace.json", loader=broken)
    posted = []
    app._post = lambda fn, *args: posted.append((fn.__name__, args))
    app._exit = True  # what App.exit sets when q is pressed
    app.load()
    assert posted == []
    app._exit = False
    app.load()
    assert posted and posted[0][0] == "exit" and posted[0][1][:2] == (1, 1)
    assert "internal error: ValueError: widgets gone" in posted[0][1][2]


def test_number_keys_leave_every_tab():
    """From the tabs whose focused table used to pull its pane back (Kernels and Fixes: 1 or 6
    flickered and stayed), every number key shows its tab."""

    async def go():
        async with opened(RESNET, (100, 30)) as (app, pilot):
            tabs = app.query_one("#tabs")
            shown = ["overview", "timeline", "steps", "kernels", "fixes", "memory"]
            for a in ("kernels", "fixes"):
                for b in shown:
                    await pilot.press(str(shown.index(a) + 1))
                    await pilot.pause()
                    await pilot.press(str(shown.index(b) + 1))
                    await pilot.pause()
                    await pilot.pause()
                    assert tabs.active == b, f"{a} → {b}: still on {tabs.active}"

    run(go())


def test_export_in_a_directory_that_cannot_be_written_asks_where(tmp_path, monkeypatch):
    from trainscope.tui.chrome import PathPrompt

    monkeypatch.chdir("/proc")  # no file can be created here, not even by root
    target = tmp_path / "report.md"

    async def go():
        async with opened(RESNET, (100, 30), "e") as (app, pilot):
            await pilot.pause()
            assert isinstance(app.screen, PathPrompt)
            assert "/proc is not writable" in str(app.screen.query_one("#prompt-why").render())
            box = app.screen.query_one("#prompt-path")
            assert box.value.startswith(os.path.expanduser("~"))
            box.value = str(target)
            await pilot.press("enter")
            await pilot.pause()
            return app.exported

    assert run(go()) == [str(target)]
    assert "Load batches in parallel worker processes" in target.read_text()
