"""The analyze app's tabs, each declared once.

A tab is one class: its id, title, key line, help section, the pane it shows, the widget that
takes the focus, whether it applies to the trace (and why not), and how it fills its pane from
the chosen rank. ``TABS`` registers them in order; the tab bar, the number keys, the help screen,
the key line and the command palette are all built from it.

The documents a tab hands its pane (the rank's, the session's, the stragglers) pass through
:func:`shown` first: every string in them is made visible (traces/safe_text.py), so a trace's
device, step, range or file name can neither drive the terminal nor reorder the line it is on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar

from textual.widget import Widget

from trainscope.reports.document import counters_only
from trainscope.traces.safe_text import safe_strings
from trainscope.tui.deep import DeepPane
from trainscope.tui.fixes import FixesPane
from trainscope.tui.memory import MemoryPane
from trainscope.tui.overview import Overview
from trainscope.tui.tables import KernelsPane
from trainscope.tui.tables import RanksPane
from trainscope.tui.tables import StepsPane
from trainscope.tui.timeline import TimelinePane
from trainscope.tui.tree import TreePane

if TYPE_CHECKING:
    from trainscope.api.report import RankView
    from trainscope.tui.app import AnalyzeApp


class Tab:
    id: ClassVar[str]
    title: ClassVar[str]
    hint: ClassVar[str]  # the key line while the tab is shown
    keys: ClassVar[list[tuple[str, str]]] = []  # help: (keys, what they do) on this tab
    focus: ClassVar[str | None] = None  # selector of the widget that takes the focus
    pane: ClassVar[Callable[[], Widget]]  # the tab's widget; every tab class declares its own

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "pane" not in cls.__dict__:  # a tab without its widget is a mistake at import, not on screen
            raise TypeError(f"{cls.__name__} declares no pane")

    @classmethod
    def applies(cls, app: AnalyzeApp) -> str | None:
        """None when the tab has something to show for this trace; else why not (one line)."""
        return None

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        """Fill the pane from ``app.rank`` (called when the rank changes)."""


def shown(doc: Any) -> Any:
    """A document (or a part of one) as the app shows it: every string made visible."""
    return None if doc is None else safe_strings(doc)


def _median_step(rank: RankView) -> int:
    steps = rank.analysis.breakdown.steps
    if not steps:
        return 0
    order = sorted(range(len(steps)), key=lambda i: steps[i].duration_ns)
    return order[len(order) // 2]


def _events(app: AnalyzeApp) -> str | None:
    return "sampled counters have no events to draw" if counters_only(app.rank.doc) else None


class OverviewTab(Tab):
    id, title = "overview", "Overview"
    hint = "number keys: tabs · e export · t theme · ctrl+p commands · ? keys · q quit"
    focus = "Overview"
    pane = staticmethod(Overview)

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        if app.rank_index == app.loaded.main_rank:  # the report's own document: what it says, warnings included
            app.query_one(Overview).show_document(app.loaded.document())
            return
        stragglers = app.loaded.stragglers if len(app.loaded.ranks) > 1 else None
        app.query_one(Overview).show(shown(app.rank.doc), shown(stragglers))


class TimelineTab(Tab):
    id, title = "timeline", "Timeline"
    hint = "←/→ cursor · +/− zoom · h/l pan · n/p step · f/a fit · / search · n/N match · ? keys · q quit"
    focus = "TimelineView"
    keys = [
        ("← / →", "move the cursor (shift: 8 columns); every item under it, per stream, shows below"),
        ("+ / −  (i / o, mouse wheel)", "zoom in / out around the cursor"),
        ("h / l", "pan left / right by a quarter window"),
        ("n / p  (] / [)", "next / previous step"),
        ("/", "search kernels, ops and ranges by name; n / N: next / previous match; Esc: leave the matches"),
        ("0 or f / a", "fit the current step / the whole trace"),
        ("c", "collapse / expand the lanes (one GPU and one host lane, or one per stream and thread)"),
        ("R", "ranks side by side on one clock (a rank directory: the Ranks tab's lanes, late arrivals marked)"),
        ("click", "put the cursor there"),
    ]
    pane = staticmethod(TimelinePane)
    applies = staticmethod(_events)

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        pane = app.query_one(TimelinePane)
        pane.launch_info = app.rank.kernel_launch  # the detail pane says what launched a kernel
        pane.set_model(app.rank.timeline, _median_step(app.rank))


class StepsTab(Tab):
    id, title = "steps", "Steps"
    hint = "↑/↓ choose · Enter show on timeline · number keys: tabs · ? keys · q quit"
    focus = "#steps-table"
    keys = [("↑ / ↓, Enter", "choose a step; Enter opens it on the timeline")]
    pane = staticmethod(StepsPane)
    applies = staticmethod(_events)

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        app.query_one(StepsPane).show(shown(app.rank.doc), app.rules.value("step.outlier_ratio"))


class KernelsTab(Tab):
    id, title = "kernels", "Kernels"
    hint = "/ filter · s sort · r reverse · p roofline · Enter longest instance · y copy name · ? keys · q quit"
    focus = "#kernels-table"
    keys = [
        ("/", "filter by name or class (Enter or Esc returns to the table)"),
        ("s / click a header", "sort by the next column / by that column (again: reverse)"),
        ("r", "reverse the sort"),
        ("Enter", "show the kernel's longest instance on the timeline (n / N there: next / previous instance)"),
        ("y", "copy the selected kernel's full name (OSC 52)"),
        ("p", "show / hide the roofline chart (log-log, heaviest kernels labeled)"),
    ]
    pane = staticmethod(KernelsPane)
    applies = staticmethod(_events)

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        app.query_one(KernelsPane).show(app.rank.all_kernels, app.rank.analysis.roofline)


class FixesTab(Tab):
    id, title = "fixes", "Fixes"
    hint = "↑/↓ choose · space what-if · Enter show evidence · c clear · y copy change · ? keys · q quit"
    focus = "#fixes-table"
    keys = [
        ("↑ / ↓", "choose a fix: its evidence, change and projection show below"),
        ("space", "assume the fix in the what-if projection (toggle)"),
        ("Enter", "show the worst step's interval that carries the fix's finding on the timeline"),
        ("y", "copy the fix's change (OSC 52)"),
        ("c", "clear the what-ifs"),
    ]
    pane = staticmethod(FixesPane)

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        app.query_one(FixesPane).show(app.rank.analysis, shown(app.rank.doc))


class MemoryTab(Tab):
    id, title = "memory", "Memory"
    hint = "number keys: tabs · e export · ? keys · q quit"
    pane = staticmethod(MemoryPane)

    @classmethod
    def _ledger(cls, app: AnalyzeApp) -> dict[str, Any] | None:
        s = app.loaded
        ledger: dict[str, Any] | None = (
            s.document().get("ledger") if (s.decorate or s.report.ledger is not None) else None
        )
        return ledger

    @classmethod
    def applies(cls, app: AnalyzeApp) -> str | None:
        if app.rank.memory or cls._ledger(app):
            return None
        return "no memory events: record with profile_memory=True, or pass --model for the planned ledger"

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        app.query_one(MemoryPane).show(app.rank.memory, app.rank.timeline.span, shown(cls._ledger(app)))


class RanksTab(Tab):
    id, title = "ranks", "Ranks"
    hint = "↑/↓ choose · Enter this rank's latest-arriving collective on the timeline · ? keys · q quit"
    focus = "#ranks-table"
    keys = [
        (
            "↑ / ↓, Enter",
            "choose a rank; Enter shows it on every tab and opens the timeline on the collective "
            "it reached furthest behind the first rank (highlighted)",
        ),
        ("tab, then + / − / h / l / a", "the ranks side by side on one clock: zoom, pan, every rank's whole trace"),
        ("n / N (side by side)", "frame the next / previous late arrival (! in red: the rank the others waited for)"),
    ]
    pane = staticmethod(RanksPane)

    @classmethod
    def applies(cls, app: AnalyzeApp) -> str | None:
        return None if len(app.loaded.ranks) > 1 else "one rank only: open a directory of per-rank traces"

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        s = app.loaded
        app.query_one(RanksPane).show(shown(s.document()["ranks"]), app.rank_index, s.main_rank, shown(s.stragglers))
        app.prepare_side_by_side()


class DeepTab(Tab):
    id, title = "deep", "Deep"
    hint = "Holistic Trace Analysis: critical path, launch statistics · e export · ? keys · q quit"
    focus = "DeepPane"
    pane = staticmethod(DeepPane)

    @classmethod
    def applies(cls, app: AnalyzeApp) -> str | None:
        return None if app.deep else "run with --deep for Holistic Trace Analysis (critical path, launch statistics)"


class TreeTab(Tab):
    id, title = "tree", "Tree"
    hint = "↑/↓ move · space/←/→ collapse/expand · s sort · r reverse · Enter on timeline · ? keys · q quit"
    focus = "#tree-view"
    keys = [
        ("↑ / ↓, space, ← / →", "move; collapse / expand a node (← on a collapsed node: its parent)"),
        ("s", "sort each level by GPU time or by share of peak (% of roof)"),
        ("r", "reverse the sort"),
        ("Enter", "show the node's longest range in the steps on the timeline"),
        ("shift+space", "expand / collapse every node below the cursor"),
    ]
    pane = staticmethod(TreePane)

    @classmethod
    def applies(cls, app: AnalyzeApp) -> str | None:
        why = _events(app)
        if why:
            return why
        t = app.rank.analysis.tree
        if t is None or not t.roots or all(r.kind == "outside" for r in t.roots):
            return "the trace records no ranges (record_function, nn.Module frames, NVTX) around its GPU work"
        return None

    @classmethod
    def show(cls, app: AnalyzeApp) -> None:
        seg = app.rank.analysis.segmentation
        app.query_one(TreePane).show(app.rank.analysis.tree, app.rank.trace, (seg.starts, seg.ends))


TABS: list[type[Tab]] = [
    OverviewTab,
    TimelineTab,
    StepsTab,
    KernelsTab,
    FixesTab,
    MemoryTab,
    RanksTab,
    DeepTab,
    TreeTab,
]


def tab(tab_id: str) -> type[Tab]:
    return next(t for t in TABS if t.id == tab_id)
