"""``trainscope plan`` in a terminal: the memory ledger with live toggles.

Every toggle replaces the (immutable) :class:`PlanConfig` and recomputes the ledger at once (about
a millisecond). The cheapest changes that fit (``fit_options``, tens of milliseconds: it tries
every combination of the levers) are computed in a worker thread after the keys have been still
for a moment, so holding a key down never queues up searches.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from typing import TypeVar

from rich.text import Text
from textual import work
from textual.app import App
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import DataTable
from textual.widgets import Header
from textual.widgets import Static
from textual.worker import get_current_worker

from trainscope.analyzers.plan.gpu_memory import GPU_MEMORY
from trainscope.analyzers.plan.gpu_memory import GpuMemory
from trainscope.analyzers.plan.ledger import PRECISIONS
from trainscope.analyzers.plan.ledger import Fit
from trainscope.analyzers.plan.ledger import FitOption
from trainscope.analyzers.plan.ledger import Ledger
from trainscope.analyzers.plan.ledger import PlanConfig
from trainscope.api import planning
from trainscope.api.planning import PlanResult
from trainscope.api.planning import plan
from trainscope.reports import formats
from trainscope.reports.formats import FILE_DEFAULT
from trainscope.reports.formats import writer
from trainscope.tui.chrome import HelpScreen
from trainscope.tui.chrome import KeyBar
from trainscope.tui.chrome import Palette
from trainscope.tui.chrome import keys_text
from trainscope.tui.keys import bind
from trainscope.tui.keys import common_bindings
from trainscope.tui.plan_view import activation_note
from trainscope.tui.plan_view import banner_text
from trainscope.tui.plan_view import gb2
from trainscope.tui.plan_view import ledger_bar
from trainscope.tui.plan_view import toggles_text
from trainscope.tui.plan_view import verdict_class

# api/planning.py leaves these two unannotated: their types, declared where the app calls them.
normalize: Callable[[PlanConfig], PlanConfig] = planning.normalize_plan
ledger: Callable[[PlanConfig], Ledger] = planning.plan_ledger

OPTIMIZER_CYCLE = ("adam", "adam8bit", "momentum", "sgd")
PRECISION_CYCLE = ("fp32", "mixed", "mixed-fp32-grads")
CHECKPOINT_CYCLE = ("none", "selective", "every:2", "every:4")
OPTIONS_DELAY_S = 0.08  # keys still this long before the what-if search starts

KEYS: list[tuple[str, str]] = [
    ("o", "optimizer: Adam → 8-bit Adam → SGD with momentum → SGD"),
    ("p", "precision: FP32 → mixed 16-bit (FP32 master) → mixed with FP32 gradient accumulation"),
    ("c", "activation checkpointing: none → selective → every 2 layers → every 4 layers"),
    ("b / B", "batch size ×2 / ÷2 (samples per GPU per optimizer step)"),
    ("a / A", "gradient accumulation: next / previous divisor of the batch (micro-batches per step)"),
    ("g / G", "data-parallel GPUs ×2 / ÷2"),
    ("z", "ZeRO stage 0 → 1 → 2 → 3 (sharding needs more than one GPU)"),
    ("d / D", "next / previous device"),
    ("↑ / ↓, Enter", "choose one of the cheapest changes that fit; Enter applies it"),
    ("tab", "move focus between the options and the ledger table (← / → scroll it to the sources)"),
    ("r", "reset to the plan from the command line"),
    ("e", "export the Markdown report of the current plan (same as plan --format markdown)"),
    ("t", "toggle dark / light theme"),
    ("ctrl+p", "command palette: every action by name"),
    ("?", "this help (Esc closes)"),
    ("q / ctrl+c", "quit"),
]
T = TypeVar("T")
HINT = "o p c b/B a/A g/G z d toggle · ⏎ apply · r reset · e export · t theme · ? help · q quit"


def pin_measured(cfg: PlanConfig) -> PlanConfig:
    """Pin a measured activation figure to the batch and precision it was measured at.

    Unpinned, ``activations_batch`` and ``activations_precision`` default to the plan's own batch and
    precision, so toggling either would leave the activations unchanged instead of rescaling them."""
    cfg = normalize(cfg)
    if cfg.activations_gb is None:
        return cfg
    return replace(
        cfg,
        activations_batch=cfg.activations_batch or cfg.batch,
        activations_precision=cfg.activations_precision
        or ("fp32" if PRECISIONS[cfg.precision].activation_bytes == 4 else "fp16"),
    )


def plan_document(cfg: PlanConfig, device: GpuMemory, threshold_pct: float, limit: int) -> dict[str, Any]:
    """The ``trainscope.plan/1`` document for a config, exactly as the plan command builds it."""
    return plan(cfg, device=device, options=limit, threshold_pct=threshold_pct).to_dict()


def _next(seq: Sequence[T], current: T, step: int = 1) -> T:
    return seq[(seq.index(current) + step) % len(seq)] if current in seq else seq[0]


HELP_NOTE = (
    "\nEvery toggle recomputes the ledger at once; the options follow a moment later. Values that "
    "differ from the command line are shown in bold. GB are 10⁹ bytes; device capacities are GiB as sold."
)


def help_screen() -> HelpScreen:
    text = keys_text("trainscope plan", [("", KEYS)], key_width=16)
    text.append(HELP_NOTE, style="dim")
    return HelpScreen(text)


class LedgerBar(Static):
    """The stacked bar; drawn at render time so it always spans the widget's width."""

    DEFAULT_CSS = "LedgerBar { height: 3; padding: 0 1; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state: tuple[Ledger, Fit] | None = None

    def show(self, lg: Ledger, f: Fit) -> None:
        self.state = (lg, f)
        self.refresh()

    def render(self) -> Text:
        if self.state is None:
            return Text("")
        return ledger_bar(*self.state, self.content_size.width or 60)


class PlanApp(Palette, App[int]):
    TITLE = "trainscope plan"
    CSS = """
    #banner { height: 1; padding: 0 1; text-style: bold; }
    #banner.fits { background: #2e7d32; color: white; }
    #banner.tight { background: #b26a00; color: white; }
    #banner.nofit { background: #b3261e; color: white; }
    #toggles { height: auto; padding: 0 1; }
    #items { height: auto; max-height: 7; scrollbar-size-horizontal: 0; }
    #options-heading { height: 1; padding: 0 1; text-style: bold; background: $boost; }
    #options { height: 1fr; min-height: 3; scrollbar-size-horizontal: 0; }
    #note-box { height: auto; max-height: 25%; min-height: 2; background: $boost; padding: 0 1; }
    """
    BINDINGS = [
        *common_bindings(),
        Binding("o", "cycle('optimizer')", "optimizer"),
        Binding("p", "cycle('precision')", "precision"),
        Binding("c", "cycle('checkpoint')", "checkpointing"),
        Binding("b", "batch(2)", "batch ×2"),
        Binding("B", "batch(0.5)", "batch ÷2"),
        Binding("a", "accum(1)", "more accumulation"),
        Binding("A", "accum(-1)", "less accumulation"),
        Binding("g", "gpus(2)", "GPUs ×2"),
        Binding("G", "gpus(0.5)", "GPUs ÷2"),
        Binding("z", "cycle('zero')", "ZeRO stage"),
        Binding("d", "device(1)", "next device"),
        Binding("D", "device(-1)", "previous device"),
        Binding("r", "reset", "reset"),
        bind("export", "export report"),
    ]

    config: reactive[PlanConfig] = reactive(PlanConfig(params=1.0), init=False, always_update=True)
    device_index: reactive[int] = reactive(0, init=False)

    def __init__(
        self,
        config: PlanConfig,
        device: GpuMemory,
        *,
        threshold_pct: float = 90.0,
        limit: int = 6,
        export_path: str | None = None,
    ) -> None:
        super().__init__()
        self.initial_config = pin_measured(config)  # ValueError: a bad config, before anything is drawn
        self.devices: list[GpuMemory] = list(GPU_MEMORY)
        if device not in self.devices:
            self.devices.insert(0, device)  # a --gpu-memory size
        self.initial_device = self.devices.index(device)
        self.threshold_pct = threshold_pct
        self.limit = limit
        # where `e` writes: the given path, else a name in the current directory in the default format
        self.export_path = export_path or f"trainscope-plan{writer(FILE_DEFAULT).suffixes[0]}"
        first = self._plan(self.initial_config, device)
        self.lg: Ledger = first.ledger
        self.fit: Fit = first.fit
        self.options: list[FitOption] = []
        self.options_for: tuple[PlanConfig, str] | None = None  # the (config, device) the options belong to
        self._pending_row: int | None = None  # Enter on an option while the options were recomputed
        self.exported: list[str] = []
        self._timer: Timer | None = None
        self.set_reactive(PlanApp.config, self.initial_config)
        self.set_reactive(PlanApp.device_index, self.initial_device)

    @property
    def device(self) -> GpuMemory:
        return self.devices[self.device_index]

    def _plan(self, cfg: PlanConfig, device: GpuMemory, options: int = 0) -> PlanResult:
        return plan(cfg, device=device, options=options, threshold_pct=self.threshold_pct)

    # -- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield Static("", id="banner")
        yield Static("", id="toggles")
        yield LedgerBar(id="bar")
        yield DataTable(id="items", cursor_type="none", zebra_stripes=False)
        yield Static("", id="options-heading")
        yield DataTable(id="options", cursor_type="row")
        with VerticalScroll(id="note-box"):
            yield Static("", id="note")
        yield KeyBar(HINT, id="keybar")

    def on_mount(self) -> None:
        self.query_one("#items", DataTable).add_columns("component", "GB", "formula", "source")
        self.query_one("#options", DataTable).add_columns("#", "GB", "%", "change · cost")
        self._show()
        # The first options synchronously: the first frame is complete (and snapshots are stable).
        self._show_options(self.config, self.device.key, self._search(self.config, self.device))
        self.query_one("#options", DataTable).focus()

    # -- recomputation --------------------------------------------------------------------------

    def watch_config(self) -> None:
        self._recompute()

    def watch_device_index(self) -> None:
        self._recompute()

    def _recompute(self) -> None:
        r = self._plan(self.config, self.device)
        self.lg, self.fit = r.ledger, r.fit
        self._show()
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(OPTIONS_DELAY_S, self._start_search)

    def _show(self) -> None:
        lg, f, dev = self.lg, self.fit, self.device
        banner = self.query_one("#banner", Static)
        banner.set_classes(verdict_class(f))
        banner.update(banner_text(lg, f, dev.name))
        self.query_one("#toggles", Static).update(
            toggles_text(self.config, dev.name, self.initial_config, self.devices[self.initial_device].name)
        )
        self.query_one(LedgerBar).show(lg, f)
        table = self.query_one("#items", DataTable)
        table.clear()
        for it in lg.items:
            table.add_row(
                Text(it.label),
                Text("—" if it.bytes is None else f"{gb2(it.bytes)}", justify="right"),
                Text(it.formula),
                Text(it.source, style="dim"),
            )
        table.add_row(
            Text("total", style="bold"),
            Text(f"{gb2(lg.total_bytes)}", style="bold", justify="right"),
            Text(f"static {gb2(lg.static_bytes)} GB" + ("" if lg.complete else "; activations unknown"), style="dim"),
            Text(f"{lg.params / 1e9:.3g} B parameters ({lg.params_source})", style="dim"),
        )
        self.query_one("#note", Static).update(activation_note(lg))
        self.sub_title = f"{lg.params / 1e9:.3g} B parameters on {dev.name}"
        self._options_heading()

    def _start_search(self) -> None:
        self._timer = None
        self._search_worker(self.config, self.device)

    def _search(self, cfg: PlanConfig, dev: GpuMemory) -> list[FitOption]:
        return self._plan(cfg, dev, self.limit).options if self.limit else []

    @work(thread=True, exclusive=True, group="options")
    def _search_worker(self, cfg: PlanConfig, dev: GpuMemory) -> None:
        options = self._search(cfg, dev)
        if not get_current_worker().is_cancelled:
            self.call_from_thread(self._show_options, cfg, dev.key, options)

    def _show_options(self, cfg: PlanConfig, device_key: str, options: list[FitOption]) -> None:
        if (cfg, device_key) != (self.config, self.device.key):
            return  # a toggle came in meanwhile; its own search follows
        self.options, self.options_for = options, (cfg, device_key)
        table = self.query_one("#options", DataTable)
        row = table.cursor_row
        table.clear()
        for k, o in enumerate(options, 1):
            pct = f"{o.fit.pct:.0f}" + (" tight" if o.fit.tight else "")
            what = Text(" + ".join(c.description for c in o.changes))
            what.append(f"\ncost: {o.cost.summary}", style="dim")
            table.add_row(
                Text(str(k)),
                Text(f"{gb2(o.ledger.total_bytes)}", justify="right"),
                Text(pct),
                what,
                key=str(k - 1),
                height=2,
            )
        if table.row_count:
            table.move_cursor(row=min(max(row, 0), table.row_count - 1))
        self._options_heading()
        pending, self._pending_row = self._pending_row, None
        if pending is not None and options:
            self.apply_option(min(max(pending, 0), len(options) - 1))

    @property
    def options_ready(self) -> bool:
        return self.options_for == (self.config, self.device.key)

    def _options_heading(self) -> None:
        heading = self.query_one("#options-heading", Static)
        if not self.options_ready:
            heading.update(Text("Cheapest changes that fit — computing…", style="dim"))
        elif self.options:
            heading.update("Cheapest changes that fit, cheapest first (Enter applies)")
        elif self.fit.fits:
            heading.update("Fits as it is: no change needed")
        else:
            heading.update("No combination of the levers fits this device (try more GPUs: g, or a larger device: d)")

    # -- toggles --------------------------------------------------------------------------------

    def _try(self, new: PlanConfig, what: str) -> bool:
        try:
            new = normalize(new)
            ledger(new)
        except ValueError as e:
            self.notify(f"{what}: {e}", severity="warning", timeout=4, markup=False)
            return False
        self.config = new
        return True

    def action_cycle(self, lever: str) -> None:
        cfg = self.config
        if lever == "zero":
            self._try(replace(cfg, zero=(cfg.zero + 1) % 4), "ZeRO")
            return
        cycle = {"optimizer": OPTIMIZER_CYCLE, "precision": PRECISION_CYCLE, "checkpoint": CHECKPOINT_CYCLE}[lever]
        value = getattr(cfg, lever)
        # Skip values the model cannot take (every:4 on a 3-layer model) rather than stopping there.
        for _ in range(len(cycle)):
            value = _next(cycle, value)
            try:
                normalize(replace(cfg, **{lever: value}))
            except ValueError:
                continue
            self._try(replace(cfg, **{lever: value}), lever)
            return

    def action_batch(self, factor: float) -> None:
        cfg = self.config
        batch = max(1, int(cfg.batch * factor))
        if batch == cfg.batch:
            self.notify("batch is already 1", timeout=2)
            return
        # Keep the accumulation a divisor of the new batch (fewer micro-batches when halving).
        accum = cfg.grad_accum
        while batch % accum:
            accum -= 1
        self._try(replace(cfg, batch=batch, grad_accum=accum), "batch")

    def action_accum(self, step: int) -> None:
        cfg = self.config
        divisors = [d for d in range(1, cfg.batch + 1) if cfg.batch % d == 0]
        i = divisors.index(cfg.grad_accum) + step
        if not 0 <= i < len(divisors):
            self.notify(
                f"gradient accumulation is already {'1' if step < 0 else f'the whole batch ({cfg.batch})'}", timeout=2
            )
            return
        self._try(replace(cfg, grad_accum=divisors[i]), "gradient accumulation")

    def action_gpus(self, factor: float) -> None:
        cfg = self.config
        gpus = max(1, int(cfg.gpus * factor))
        if gpus != cfg.gpus:
            self._try(replace(cfg, gpus=gpus), "GPUs")

    def action_device(self, step: int) -> None:
        self.device_index = (self.device_index + step) % len(self.devices)

    def action_reset(self) -> None:
        self.device_index = self.initial_device
        self.config = self.initial_config

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id != "options" or event.row_key.value is None:
            return
        if self.options_ready:
            self.apply_option(int(event.row_key.value))
            return
        # The options are being recomputed for a setup that just changed: the rows shown are the old
        # setup's. Enter is kept, not dropped: it applies the row under the cursor once they are ready.
        self._pending_row = event.cursor_row
        self.notify(
            "options are being recomputed for the new setup: Enter applies the chosen row when they are ready",
            timeout=3,
        )

    def apply_option(self, index: int) -> None:
        """Take the changes of the ``index``-th option (its ledger's config is the base plus them)."""
        option = self.options[index]
        self.config = option.ledger.config
        self.notify("applied: " + " + ".join(c.description for c in option.changes), timeout=3)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(help_screen())

    def action_export(self) -> None:
        """The current plan in the format the export path's name says (reports/formats.py)."""
        path = self.export_path
        try:
            result = plan(self.config, device=self.device, options=self.limit, threshold_pct=self.threshold_pct)
            formats.write(path, result.output())
        except OSError as e:
            self.notify(f"cannot write {path}: {e.strerror or e}", severity="error", timeout=6, markup=False)
            return
        self.exported.append(path)
        self.notify(f"Report written to {path}", timeout=4, markup=False)
