"""The plan app (`trainscope plan` in a terminal), driven with Textual's Pilot. Every state the keys
reach is checked against ``ledger()``/``fit_options()`` computed here from the config the keys
should have produced, and against the seed 000 GPT-2 walkthrough's published figures."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace

import pytest

textual = pytest.importorskip("textual")

from tests.test_ledger import WALKTHROUGH  # noqa: E402
from tests.test_ledger import WALKTHROUGH_FLAGS  # noqa: E402
from trainscope.analyzers.plan.gpu_memory import GPU_MEMORY  # noqa: E402
from trainscope.analyzers.plan.gpu_memory import gpu_memory  # noqa: E402
from trainscope.analyzers.plan.ledger import GB  # noqa: E402
from trainscope.analyzers.plan.ledger import PlanConfig  # noqa: E402
from trainscope.analyzers.plan.ledger import fit  # noqa: E402
from trainscope.analyzers.plan.ledger import fit_options  # noqa: E402
from trainscope.analyzers.plan.ledger import ledger  # noqa: E402
from trainscope.tui.plan_app import KEYS  # noqa: E402
from trainscope.tui.plan_app import HelpScreen  # noqa: E402
from trainscope.tui.plan_app import PlanApp  # noqa: E402
from trainscope.tui.plan_view import ITEM_STYLE  # noqa: E402

V100 = gpu_memory("v100-32")
# The walkthrough (tests/test_ledger.py) on the command line, whole.
WALKTHROUGH_ARGS = [*WALKTHROUGH_FLAGS, "--seq", "1024", "--activations-batch", "32"]
GPT2_XL_SHAPE = PlanConfig(layers=48, hidden=1600, heads=25, vocab=50257, seq=1024, batch=8)


def text(app, selector: str) -> str:
    return str(app.query_one(selector).render())


async def settle(app, pilot) -> None:
    """Wait for the debounced what-if search of the current config."""
    for _ in range(200):
        await pilot.pause(0.05)
        if app.options_ready:
            break
    assert app.options_ready
    await pilot.pause()


def drive(app: PlanApp, keys: list[str], check, size=(100, 32)) -> None:
    async def go():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            for k in keys:
                await pilot.press(k)
            await check(app, pilot)

    asyncio.run(go())


def test_walkthrough_89_to_56_5_to_32_1_gb_with_the_precision_and_checkpoint_keys():
    states = []

    async def check(app, pilot):
        def record():
            states.append((app.config.precision, app.config.checkpoint, app.lg.total_bytes / GB, text(app, "#banner")))

        record()
        await pilot.press("p")  # FP32 → mixed
        record()
        for _ in range(3):  # none → selective → every:2 → every:4
            await pilot.press("c")
            record()
        await settle(app, pilot)
        assert app.options == []  # it fits: nothing to suggest
        assert "no change needed" in text(app, "#options-heading")

    drive(PlanApp(WALKTHROUGH, V100), [], check)
    expected = [("fp32", "none"), ("mixed", "none"), ("mixed", "selective"), ("mixed", "every:2"), ("mixed", "every:4")]
    assert [(p, c) for p, c, _, _ in states] == expected
    for p, c, total, banner in states:
        lg = ledger(replace(WALKTHROUGH, precision=p, checkpoint=c))
        f = fit(lg, V100.name, V100.capacity_bytes)
        assert total == pytest.approx(lg.total_bytes / GB)
        assert banner.startswith("DOES NOT FIT" if not f.fits else "TIGHT" if f.tight else "FITS")
        assert f"{f.pct:.0f} % of V100 32GB" in banner
    # The walkthrough's own figures: 89 → 56.5 → 32.1 GB; only the last fits, above the 90 % line.
    assert [round(s[2], 3) for s in (states[0], states[1], states[4])] == [89.0, 56.5, 32.125]
    assert states[0][3].startswith("DOES NOT FIT · 89.00 GB = 259 %")
    assert states[4][3].startswith("TIGHT · 32.12 GB = 93 %")


def test_batch_accumulation_gpus_zero_and_device_keys_rescale_the_ledger():
    seen = {}

    async def check(app, pilot):
        async def after(keys, name):
            for k in keys:
                await pilot.press(k)
            seen[name] = (app.config, app.device, {i.key: i.bytes for i in app.lg.items})

        await after(["b"], "batch64")
        await after(["B", "B"], "batch16")
        await after(["b", "a"], "accum2")
        await after(["a", "a"], "accum8")
        await after(["B", "B", "B"], "batch4")
        await after(["r", "g", "z"], "zero1")
        await after(["z", "z"], "zero3")
        await after(["G", "d"], "next_device")
        await after(["D", "D"], "previous_device")

    drive(PlanApp(WALKTHROUGH, V100), [], check)
    act = lambda name: seen[name][2]["activations"] / GB  # noqa: E731
    # Measured activations scale with the micro-batch: 65 GB at 32 samples.
    assert seen["batch64"][0].batch == 64 and act("batch64") == pytest.approx(130.0)
    assert seen["batch16"][0].batch == 16 and act("batch16") == pytest.approx(32.5)
    assert (seen["accum2"][0].batch, seen["accum2"][0].grad_accum) == (32, 2) and act("accum2") == pytest.approx(32.5)
    assert seen["accum8"][0].grad_accum == 8 and act("accum8") == pytest.approx(65 / 8)
    # Halving the batch below the accumulation keeps the micro-batch count a divisor: batch 4, 4 micro-batches of 1.
    assert (seen["batch4"][0].batch, seen["batch4"][0].grad_accum) == (4, 4) and act("batch4") == pytest.approx(65 / 32)
    # r, then 2 GPUs with ZeRO-1: the optimizer state (12 GB) halves; ZeRO-3 halves weights and gradients too.
    z1, z3 = seen["zero1"], seen["zero3"]
    assert (z1[0].gpus, z1[0].zero) == (2, 1) and z1[2]["optimizer"] / GB == pytest.approx(6.0)
    assert z1[2]["weights"] / GB == pytest.approx(6.0)
    assert (
        z3[0].zero == 3
        and z3[2]["weights"] / GB == pytest.approx(3.0)
        and z3[2]["gradients"] / GB == pytest.approx(3.0)
    )
    for name in ("batch64", "accum8", "batch4", "zero1", "zero3"):
        cfg, _, items = seen[name]
        assert dict(items.items()) == {i.key: i.bytes for i in ledger(cfg).items}
    order = [g.key for g in GPU_MEMORY]
    assert seen["next_device"][1].key == order[order.index("v100-32") + 1]
    assert seen["next_device"][0].gpus == 1
    assert seen["previous_device"][1].key == order[order.index("v100-32") - 1]


def test_checkpoint_cycle_skips_intervals_the_model_does_not_have():
    small = PlanConfig(layers=3, hidden=256, heads=4, vocab=1000, seq=128, batch=4, attention="eager")
    cycle = []

    async def check(app, pilot):
        for _ in range(4):
            await pilot.press("c")
            cycle.append(app.config.checkpoint)

    drive(PlanApp(small, gpu_memory("t4")), [], check)
    assert cycle == ["selective", "every:2", "none", "selective"]  # every:4 > 3 layers is skipped


def test_options_match_fit_options_and_enter_applies_the_highlighted_one():
    result = {}

    async def check(app, pilot):
        await settle(app, pilot)
        result["shown"] = [(tuple(c.description for c in o.changes), o.ledger.total_bytes) for o in app.options]
        result["rows"] = app.query_one("#options").row_count
        await pilot.press("down", "enter")
        result["applied"] = app.config
        result["banner"] = text(app, "#banner")
        await settle(app, pilot)
        result["after"] = list(app.options)

    drive(PlanApp(WALKTHROUGH, V100), [], check)
    expected = fit_options(WALKTHROUGH, V100.name, V100.capacity_bytes, 90.0, limit=6)
    assert len(expected) >= 2
    assert result["shown"] == [(tuple(c.description for c in o.changes), o.ledger.total_bytes) for o in expected]
    assert result["rows"] == len(expected)
    second = expected[1]
    assert result["applied"] == second.ledger.config
    for c in second.changes:
        assert str(getattr(result["applied"], c.lever)) == c.after
    lg = ledger(result["applied"])
    assert lg.total_bytes == pytest.approx(second.ledger.total_bytes)
    assert result["banner"].split(" ·")[0] in ("FITS", "TIGHT")
    assert result["after"] == []


def test_export_equals_plan_format_markdown_for_the_current_config(tmp_path):
    out = tmp_path / "plan.md"

    async def check(app, pilot):
        for k in ("p", "c", "c", "c", "b", "d", "e"):
            await pilot.press(k)
        await pilot.pause()

    app = PlanApp(WALKTHROUGH, V100, export_path=str(out))
    drive(app, [], check)
    assert app.exported == [str(out)]
    assert (app.config.precision, app.config.checkpoint, app.config.batch, app.device.key) == (
        "mixed",
        "every:4",
        64,
        "v100-16",
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainscope",
            "plan",
            *WALKTHROUGH_ARGS,  # then what the keys changed (a flag given twice: the last one holds)
            "--precision",
            "mixed",
            "--checkpoint",
            "every:4",
            "--batch",
            "64",
            "--gpu",
            "v100-16",
            "--format",
            "markdown",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert out.read_text() == p.stdout
    assert "FP16/BF16 mixed" in p.stdout and "V100 16GB" in p.stdout


def test_reset_returns_to_the_command_line_plan():
    got = {}

    async def check(app, pilot):
        got["changed"] = (app.config, app.device_index)
        await pilot.press("r")
        got["reset"] = (app.config, app.device.key, text(app, "#banner"))

    drive(PlanApp(WALKTHROUGH, V100), ["o", "p", "z", "g", "d", "a"], check)
    assert got["changed"][0] != got["reset"][0]
    cfg, key, banner = got["reset"]
    assert (cfg.optimizer, cfg.precision, cfg.zero, cfg.gpus, cfg.grad_accum, key) == (
        "adam",
        "fp32",
        0,
        1,
        1,
        "v100-32",
    )
    assert banner.startswith("DOES NOT FIT · 89.00 GB")


def test_the_bar_crosses_the_capacity_marker_only_when_it_does_not_fit():
    bars = []

    async def check(app, pilot):
        for keys in ([], ["p", "c", "c", "c"]):
            for k in keys:
                await pilot.press(k)
            await pilot.pause()
            bars.append((text(app, "#bar").splitlines(), app.fit))

    drive(PlanApp(WALKTHROUGH, V100), [], check, size=(90, 30))
    glyphs = "".join(g for g, _ in ITEM_STYLE.values())
    for lines, f in bars:
        bar, marks = lines[0], lines[1]
        filled = len(bar.rstrip("·").rstrip())
        cap = marks.rfind("▲")
        assert set(bar.strip("·").strip()) <= set(glyphs)
        assert (filled > cap + 1) == (not f.fits), (bar, marks)
        assert f"capacity {V100.capacity_bytes / GB:.1f} GB" in marks
    assert "act 8.1" in bars[1][0][2] or "activations 8.1" in bars[1][0][2]


def test_a_shape_only_model_estimates_and_a_params_only_model_is_a_static_floor():
    got = {}

    async def check(app, pilot):
        got[app.config.params is None] = (text(app, "#banner"), text(app, "#note"))

    drive(PlanApp(PlanConfig(params=7e9), gpu_memory("a100-80")), [], check)
    drive(PlanApp(GPT2_XL_SHAPE, gpu_memory("a100-80")), [], check)
    banner, note = got[False]
    assert "static floor only" in banner and "not estimated" in note
    assert f"{round(ledger(PlanConfig(params=7e9)).total_bytes / GB, 3):.2f} GB" in banner
    banner, note = got[True]
    assert "static floor only" not in banner and "Korthikanti" in note
    assert f"{round(ledger(GPT2_XL_SHAPE).total_bytes / GB, 3):.2f} GB" in banner


def test_help_lists_every_key_and_closes_with_escape():
    got = {}

    async def check(app, pilot):
        await pilot.press("question_mark")
        got["open"] = isinstance(app.screen, HelpScreen)
        keys = app.screen.query_one("#help-keys")
        got["text"] = str(getattr(keys, "text", None) or keys.render())  # the keys unwrapped
        await pilot.press("o")  # keys do not reach the plan under the help
        got["optimizer"] = app.config.optimizer
        await pilot.press("escape")
        got["closed"] = not isinstance(app.screen, HelpScreen)

    drive(PlanApp(WALKTHROUGH, V100), [], check)
    assert got["open"] and got["closed"] and got["optimizer"] == "adam"
    bound = {b.key for b in PlanApp.BINDINGS}
    for key in ("o", "p", "c", "b", "B", "a", "A", "g", "G", "z", "d", "D", "r", "e"):
        assert key in bound
        assert any(key in k.replace(" ", "").split("/") for k, _ in KEYS), key
    for _, does in KEYS:
        assert does in got["text"]


def test_plan_opens_the_app_only_for_a_terminal_without_format(monkeypatch):
    from trainscope.cli import build_parser
    from trainscope.tui import plan_app

    opened = []
    monkeypatch.setattr(plan_app.PlanApp, "run", lambda self: opened.append((self.config, self.device.key)))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    parser = build_parser()
    for extra, opens in (([], True), (["--no-tui"], False), (["--format", "json"], False)):
        args = parser.parse_args(["plan", *WALKTHROUGH_ARGS, *extra])
        before = len(opened)
        assert args.run(args) == 0
        assert (len(opened) > before) == opens, extra
    cfg, key = opened[0]
    assert key == "v100-32" and ledger(cfg).total_bytes / GB == pytest.approx(89.0)


def test_enter_while_the_options_recompute_is_applied_when_they_are_ready(monkeypatch):
    """Enter right after a toggle was dropped while the options were recomputed (issue 28 item 8).
    The search waits 1 s after a key here (0.08 s in the app), so Enter surely comes before it."""
    import trainscope.tui.plan_app as plan_app

    monkeypatch.setattr(plan_app, "OPTIONS_DELAY_S", 1.0)
    result = {}

    async def check(app, pilot):
        await settle(app, pilot)
        await pilot.press("o")  # another optimizer: the options are recomputed after a delay
        result["toggled"] = app.config
        result["ready_at_enter"] = app.options_ready
        await pilot.press("enter")
        result["right_after"] = app.config
        await settle(app, pilot)
        for _ in range(40):  # the pending Enter applies once the new options are shown
            await pilot.pause(0.05)
            if app.config != result["toggled"]:
                break
        result["applied"] = app.config

    drive(PlanApp(WALKTHROUGH, V100), [], check)
    assert result["ready_at_enter"] is False
    assert result["right_after"] == result["toggled"]  # nothing applied from the old setup's rows
    toggled = result["toggled"]
    expected = fit_options(toggled, V100.name, V100.capacity_bytes, 90.0, limit=6)
    assert expected, "the toggled setup must still need a change for this test"
    assert result["applied"] == expected[0].ledger.config
