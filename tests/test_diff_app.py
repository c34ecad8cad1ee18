"""The `trainscope diff` app, driven with Textual's Pilot on the real A100 → V100 pair (HTA's own
trace-diff test pair). Every assertion is on what the app holds or shows, compared with a RunDiff
the test computes itself, and where possible with numbers re-derived from the raw trace events."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools

import numpy as np
import pytest
from textual.geometry import Region

from tests.conftest import KINETO
from tests.conftest import exit_code_written
from tests.test_diff import A100
from tests.test_diff import V100
from tests.test_diff import _events
from tests.test_diff import _raw_steps
from tests.test_diff import _run
from tests.tmux import needs_tmux
from tests.tmux import terminal
from tests.tmux import trainscope_line

pytest.importorskip("textual")

from trainscope.analyzers.compare.diff import RunDiff  # noqa: E402
from trainscope.analyzers.compare.diff import check_gate  # noqa: E402
from trainscope.analyzers.compare.diff import diff_runs  # noqa: E402
from trainscope.commands import diff as diff_command  # noqa: E402
from trainscope.reports.diff_document import build_diff_document  # noqa: E402
from trainscope.reports.diff_markdown import render_diff_markdown  # noqa: E402
from trainscope.tui.chrome import HelpScreen as DiffHelpScreen  # noqa: E402
from trainscope.tui.diff_app import DiffApp  # noqa: E402
from trainscope.tui.diff_app import report_name  # noqa: E402
from trainscope.tui.diff_panes import SHORT_LABELS
from trainscope.tui.diff_panes import DiffBreakdown
from trainscope.tui.diff_panes import DiffSummary
from trainscope.tui.diff_panes import FixOutcomes
from trainscope.tui.diff_panes import KernelDiffPane  # noqa: E402

BEFORE, AFTER = str(KINETO / A100), str(KINETO / V100)
MATCHED = ("exact", "arch", "family")


@functools.cache
def pair() -> RunDiff:
    return diff_runs(_run(A100), _run(V100))


@contextlib.asynccontextmanager
async def opened(size: tuple[int, int] = (80, 24), key: str | None = None, **kw):
    """The diff app on the bundled pair (:func:`pair`) at ``size``, ready; ``key`` pressed (a tab's
    number). ``kw``: more of DiffApp's arguments (a gate). Yields (app, pilot)."""
    app = DiffApp(BEFORE, AFTER, diff=pair(), **kw)
    async with app.run_test(size=size) as pilot:
        await _ready(app, pilot)
        if key is not None:
            await pilot.press(key)
        yield app, pilot


def run(coro):
    return asyncio.run(coro)


def text_of(app, selector: str) -> str:
    """What the widget shows on screen, line by line (rich Tables included)."""
    w = app.query_one(selector)
    return "\n".join(strip.text.rstrip() for strip in w.render_lines(Region(0, 0, w.region.width, w.region.height)))


async def _ready(app, pilot) -> None:
    for _ in range(400):
        await pilot.pause(0.05)
        if app.diff is not None and app.query_one("#tabs").display or app.return_code is not None:
            break
    await pilot.pause()


def test_summary_flags_the_other_gpu_and_shows_the_step_p50_slowdown():
    d = pair()

    async def go():
        async with opened() as (app, pilot):
            summary = app.query_one(DiffSummary)
            gpu = next(c for c in d.comparability if c.check == "gpu")
            assert gpu.status == "differ" and "A100" in gpu.before and "V100" in gpu.after
            assert "device" in summary.flagged and "steps" not in summary.flagged  # 6 steps in both
            sides = text_of(app, "#sides")
            assert gpu.before in sides and gpu.after in sides and "⚠ Tesla V100" in sides
            banner = text_of(app, "#comparable")
            assert banner.startswith(" NOT COMPARABLE ") and "gpu" in banner
            assert "different GPUs" in text_of(app, "#comparability")

            # p50 from the raw ProfilerStep events of both files: the V100 run is slower.
            p50 = [np.percentile([(t - s) / 1e3 for s, t in _raw_steps(_events(n))], 50) for n in (A100, V100)]
            steps = text_of(app, "#step-time")
            p50_line = next(line for line in steps.splitlines() if line.startswith("p50"))
            assert f"{p50[0]:.2f} ms" in p50_line and f"{p50[1]:.2f} ms" in p50_line
            assert f"{p50[1] / p50[0]:.2f}× slower" in p50_line and "1.49× slower" in p50_line
            assert f"{d.p50.change_pct:+.1f} %" in p50_line

            before, after = app.query_one("#badge-before"), app.query_one("#badge-after")
            assert before.has_class("axis-machine") and "MEMORY-BANDWIDTH-BOUND" in text_of(app, "#badge-before")
            assert after.has_class("axis-machine") and "MEMORY-BANDWIDTH-BOUND" in text_of(app, "#badge-after")
            assert not app.query_one("#gate").display  # no --fail-if-slower, no gate line
            await pilot.press("q")
        return app.return_code

    assert run(go()) == 0


def _line(rendered: str, *labels: str) -> str:
    return next(line for line in rendered.splitlines() if any(line.startswith(label + " ") for label in labels))


def test_breakdown_rows_are_the_diffs_categories_side_by_side():
    d = pair()

    async def go():
        async with opened((80, 24), "2") as (app, pilot):
            pane = app.query_one(DiffBreakdown)
            assert [(r.name, r.before, r.after) for r in pane.category_rows] == [
                (c.name, c.before_pct, c.after_pct) for c in d.categories
            ]
            # The exclusive categories account for every instant of the steps.
            assert sum(r.before for r in pane.category_rows) == pytest.approx(100, abs=0.1)
            assert sum(r.after for r in pane.category_rows) == pytest.approx(100, abs=0.1)
            assert [r.name for r in pane.share_rows] == ["gpu_busy", "data_wait"]
            assert pane.share_rows[0].before == d.gpu_busy.before_pct
            rendered = text_of(app, "#bd-categories")
            for c in d.categories:
                line = _line(rendered, c.label, SHORT_LABELS[c.name])  # a short label where the full one does not fit
                assert f"{c.before_pct:5.1f} %" in line and f"{c.after_pct:5.1f} %" in line
                change = f"{c.change_pts:+.1f} pts" if abs(c.change_pts) >= 0.05 else "0.0 pts"
                assert line.endswith(change)
            assert [(r.name, r.before, r.after) for r in pane.class_rows] == [
                (c.name, c.before_ms_per_step, c.after_ms_per_step) for c in d.kernel_classes
            ]
            gemm = _line(text_of(app, "#bd-classes"), "gemm")
            g = next(c for c in d.kernel_classes if c.name == "gemm")
            assert f"{g.before_ms_per_step:.2f}" in gemm and gemm.endswith(
                f"{g.after_ms_per_step - g.before_ms_per_step:+.2f} ms"
            )

    run(go())


def test_kernel_filters_show_exactly_each_group_and_the_names_behind_a_row():
    d = pair()
    # The groups by their definition, straight from the matched kernel list.
    expected = {
        "grew": [k for k in d.kernels if k.match in MATCHED and k.after_ms_per_step > k.before_ms_per_step],
        "shrank": [k for k in d.kernels if k.match in MATCHED and k.after_ms_per_step < k.before_ms_per_step],
        "appeared": [k for k in d.kernels if not k.before_names],
        "disappeared": [k for k in d.kernels if not k.after_names],
        "all": list(d.kernels),
    }
    # Every kernel name of either run sits in exactly one row of "all".
    assert sorted(n for k in d.kernels for n in k.before_names) == sorted(k.name for k in d.before.kernels)
    assert sorted(n for k in d.kernels for n in k.after_names) == sorted(k.name for k in d.after.kernels)

    async def go():
        async with opened((120, 36), "3") as (app, pilot):
            pane = app.query_one(KernelDiffPane)
            table = app.query_one("#kd-table")
            assert app.focused is table
            for key, group in (("g", "grew"), ("-", "shrank"), ("n", "appeared"), ("d", "disappeared"), ("a", "all")):
                await pilot.press({"-": "minus"}.get(key, key))
                await pilot.pause()
                assert pane.group == group
                assert {id(k) for k in pane.shown} == {id(k) for k in expected[group]}, group
                assert len(pane.shown) == table.row_count > 0
                deltas = [abs(k.delta_ms_per_step) for k in pane.shown]
                assert deltas == sorted(deltas, reverse=True)
                assert f"{key} {group} {len(expected[group])}" in text_of(app, "#kd-groups")
            # The biggest growth is the NCCL all-reduce (exact name), 5.48 → 15.35 ms per step.
            await pilot.press("g")
            top = pane.shown[0]
            assert top.match == "exact" and top.key.startswith("ncclKernel_AllReduce")
            row = table.get_row_at(0)
            assert str(row[0]) == f"{top.delta_ms_per_step:+.3f}" and str(row[3]) == "exact"
            # A row matched across architectures: both names show below the table.
            arch = next(i for i, k in enumerate(pane.shown) if k.match == "arch")
            table.move_cursor(row=arch)
            await pilot.pause()
            k = pane.shown[arch]
            assert (
                pane.selected is k and k.before_names[0].startswith("ampere_") and k.after_names[0].startswith("volta_")
            )
            detail = text_of(app, "#kd-detail")
            assert "arch" in detail and k.before_names[0] in detail and k.after_names[0] in detail
            assert f"{k.before_count} calls" in detail and f"{k.after_count} calls" in detail
            # Sorting: s moves to the next column (before ms/step, largest first), r reverses it.
            await pilot.press("s")
            befores = [x.before_ms_per_step for x in pane.shown]
            assert pane.sort_column == "before" and befores == sorted(befores, reverse=True)
            await pilot.press("r")
            assert [x.before_ms_per_step for x in pane.shown] == sorted(befores)

    run(go())


def test_earlier_fixes_show_each_outcome_with_its_values():
    d = pair()
    # A100 → V100: the memory-bound kernel time grows on the slower memory; launch and comm waits shrink.
    assert [o.status for o in d.recommendations] == ["worse", "improved", "improved"]

    async def go():
        async with opened((80, 24), "4") as (app, pilot):
            pane = app.query_one(FixOutcomes)
            assert pane.outcomes == d.recommendations
            listing = " ".join(text_of(app, "#fo-list").split())
            for o in d.recommendations:
                assert " ".join(o.title.split()) in listing and f"{o.status.upper()}" in listing
                assert f"{o.before:.2f} → {o.after:.2f} {o.unit}" in listing
                assert o.note in listing
            assert "2 improved" in text_of(app, "#fo-note")

    run(go())


def test_export_writes_the_same_markdown_as_diff_report(tmp_path, monkeypatch):
    d = pair()
    gate = check_gate(d, "step_p50", 20)
    monkeypatch.chdir(tmp_path)

    async def go():
        async with opened((80, 24), "e", gate=gate) as (app, pilot):
            await pilot.pause()
        return app

    app = run(go())
    path = tmp_path / report_name(BEFORE, AFTER)
    assert app.exported == [report_name(BEFORE, AFTER)] == ["hta_a100_control-vs-hta_v100_test.trainscope-diff.md"]
    text = path.read_text()
    from trainscope.api import DiffResult

    assert text == DiffResult(d, gate).to_markdown()  # the document with each fix's projected and achieved gain
    assert text.startswith(render_diff_markdown(build_diff_document(d, gate)).split("**Gate")[0].rstrip("\n"))
    assert r"**Gate (step\_p50):** regression: step time p50 rose 49.3 %" in text


def _args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    diff_command.register(parser.add_subparsers().add_parser("diff"))
    return parser.parse_args(["diff", *extra])


def _through_the_app(monkeypatch, keys: tuple[str, ...] = ("e", "q")):
    """`trainscope diff` as at a terminal: the CLI opens the app, which runs headless and gets ``keys``."""
    monkeypatch.setattr("trainscope.commands.analyze.use_tui", lambda args: True)
    original = DiffApp.run

    def headless(self, **kwargs):
        async def pilot(p):
            await _ready(self, p)
            if self.diff is not None:
                await p.press(*keys)

        return original(self, headless=True, size=(100, 30), auto_pilot=pilot)

    monkeypatch.setattr(DiffApp, "run", headless)


def test_cli_opens_the_app_and_the_gate_exit_code_survives_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # `e` without --report writes in the current directory
    _through_the_app(monkeypatch)
    report, js = tmp_path / "diff.md", tmp_path / "diff.json"
    code = diff_command.run(
        _args(BEFORE, AFTER, "--fail-if-slower", "20", "--gate-anyway", "--report", str(report), "--json", str(js))
    )
    err = capsys.readouterr().err
    assert code == 3  # p50 rose 49.3 % > 20 %: a regression, after quitting the app as without it
    assert err.splitlines()[-1] == (
        "trainscope: regression: step time p50 rose 49.3 % (76.8 → 114.7 ms), more than "
        "the 20 % allowed; Mann-Whitney U p = 0.00108 (α 0.05, 95 % interval +19.2 … "
        "+117.5 %) [runs not comparable: gpu, batch_shapes]"
    )
    from trainscope.api import DiffResult

    d = pair()
    gate = check_gate(d, "step_p50", 20)
    assert report.read_text() == DiffResult(d, gate).to_markdown()  # --report and e: one file
    import json

    assert json.loads(js.read_text())["gate"]["regressed"] is True

    # Without --gate-anyway the pair (another GPU) is not gated: exit 2 with the reason, after the app too.
    code = diff_command.run(_args(BEFORE, AFTER, "--fail-if-slower", "20"))
    assert code == 2 and capsys.readouterr().err.splitlines()[-1].startswith(
        "trainscope: gate not run: the runs are not comparable (gpu NVIDIA A100-PG509-200 → Tesla V100-SXM2-16GB"
    )

    # The same pair within a 60 % allowance passes: exit 0 after the app.
    code = diff_command.run(_args(BEFORE, AFTER, "--fail-if-slower", "60", "--gate-anyway"))
    assert (tmp_path / report_name(BEFORE, AFTER)).exists()
    assert code == 0 and capsys.readouterr().err.splitlines()[-1].startswith(
        "trainscope: gate passed: step time p50 rose 49.3 %"
    )


def test_bad_input_in_the_app_exits_2_with_the_clis_line(tmp_path, monkeypatch, capfd):
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    code = diff_command.run(_args(BEFORE, str(junk), "--no-tui", "-q"))
    cli_line = capfd.readouterr().err.strip()
    assert code == 2 and cli_line.startswith("trainscope: AFTER: ") and len(cli_line.splitlines()) == 1

    _through_the_app(monkeypatch)
    code = diff_command.run(_args(BEFORE, str(junk), "--fail-if-slower", "5"))
    err = capfd.readouterr().err
    assert code == 2 and err.strip() == cli_line


def test_quitting_before_a_requested_gate_ran_is_not_a_pass():
    import threading

    release = threading.Event()

    def slow_loader(progress):
        progress("before: reading", 0.25)
        release.wait(30)
        return pair(), None

    async def go():
        app = DiffApp(BEFORE, AFTER, loader=slow_loader, fail_if_slower=5)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.3)
            assert app.query_one("#loading").display and not app.query_one("#tabs").display
            assert "before: reading" in text_of(app, "#loading-stage")
            await pilot.press("q")
            release.set()
        return app.return_code

    assert run(go()) == 130


def test_help_lists_every_key_and_t_switches_the_theme():
    async def go():
        async with opened((80, 24), "question_mark") as (app, pilot):
            assert isinstance(app.screen, DiffHelpScreen)
            text = text_of(app.screen, "#help-keys")
            keys = [k for b in [*app.BINDINGS, *KernelDiffPane.BINDINGS] for k in b.key.split(",")]
            shown = {"question_mark": "?", "plus": "+", "minus": "-", **{str(i): "1 … 4" for i in range(1, 5)}}
            for key in keys:
                assert shown.get(key, key) in text, key
            for words in ("export the Markdown diff report", "grew", "disappeared", "exit code 3", "arch"):
                assert words in text
            await pilot.press("escape")
            assert not isinstance(app.screen, DiffHelpScreen)
            dark = app.current_theme.dark
            await pilot.press("t")
            assert app.current_theme.dark is not dark

    run(go())


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_every_tab_renders_at_small_and_large_sizes(size):
    async def go():
        async with opened(size, gate=check_gate(pair(), "step_p50", 60)) as (app, pilot):
            tabs = app.query_one("#tabs")
            for key, tab in zip("4321", ("fixes", "kernels", "breakdown", "summary")):
                await pilot.press(key)
                await pilot.pause()
                assert tabs.active == tab
            assert app.query_one("#gate").has_class("gate-pass")
            assert "exit code 0 on quit" in " ".join(text_of(app, "#gate").split())
            await pilot.press("2")
            await pilot.pause()
            bars = text_of(app, "#bd-categories").splitlines()
            assert len(bars) == 1 + len(pair().categories) and max(len(line) for line in bars) <= size[0] - 2

    run(go())


@needs_tmux
def test_in_a_real_terminal_the_app_opens_and_quitting_gives_the_gates_exit_code(tmp_path):
    exit_file = tmp_path / "exit.txt"
    # stderr stays on the terminal: Textual draws there.
    line = trainscope_line(["diff", BEFORE, AFTER, "--fail-if-slower", "20", "--gate-anyway"], exit_file)
    with terminal(f"trainscope-diff-{tmp_path.name}", line, (100, 30), cwd=tmp_path) as tmux:
        screen = tmux.wait_for("GATE FAILED")
        assert "1.49× slower" in screen and "NOT COMPARABLE" in screen
        tmux.keys("3")
        tmux.wait_for("ncclKernel_AllReduce_RING_LL_Sum_float")
        tmux.keys("q")
        assert exit_code_written(exit_file) == "3"
        screen = tmux.wait_for("trainscope: regression: step time p50 rose 49.3 %")  # the gate's line, after the app
        assert "GATE FAILED" not in screen  # the terminal is given back
