"""The Tree tab: where in the model the GPU time goes (analyzers/trace/module_tree.py), as a tree to expand and
collapse, sorted by GPU time or by share of peak (% of roof); Enter shows the node on the timeline.

Each line leads with its figures (inclusive GPU time, its share of the window's GPU time, % of roof),
then the name, so the figures stay in view at 80 columns however deep the node is. The detail below
the tree describes the node under the cursor: path, count, host and GPU time, bound, achieved rates,
heaviest kernels and a folded block's spread.

Enter on a node frames one of its ranges on the timeline: the longest range in the steps whose name is
the node's (digits aside; a folded block's slowest instance where the trace names it); a phase
(forward, backward, optimizer) by the longest range whose name contains it. ``data-to-device`` and
``(outside any range)`` have no range of their own.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from trainscope.analyzers.views.timeline import Match
from trainscope.reports.document import known_parts
from trainscope.traces.model import Trace
from trainscope.traces.safe_text import visible
from trainscope.tui.timeline import short_name

# A node of analyzers/trace/module_tree.py's ModuleTree is typed Any here: front ends import only the
# analyzers' result types tests/test_layering.py allows, and the tree's node is not among them.
Node = Any

SORTS = ("time", "peak")  # s cycles: GPU time (inclusive), share of peak (% of roof)
SORT_LABELS = {"time": "GPU time", "peak": "share of peak (% of roof)"}
_MODULE = "nn.Module: "
_AUTOGRAD = "autograd::engine::evaluate_function: "
_RANGE = re.compile(r"\d+…\d+")
_DIGITS = re.compile(r"\d+")
NO_RANGE = ("outside", "data-to-device")


def masked(name: str) -> str:
    """A name with its digit runs (and a folded block's ranges) as ``#``."""
    return _DIGITS.sub("#", _RANGE.sub("#", name))


def _display(name: str) -> str:
    return name[len(_MODULE) :] if name.startswith(_MODULE) else name.removeprefix(_AUTOGRAD)


def node_interval(trace: Trace, windows: tuple[Any, Any], node: Node) -> Match | None:
    """The range on the host to show for ``node`` (see the module docstring); None when it has none."""
    if node.kind == "outside" or node.name == "data-to-device":
        return None
    S = trace.strings
    if node.kind == "phase":
        ids = [i for i, s in enumerate(S) if node.name in s.lower() and not s.startswith(_AUTOGRAD)]
    else:
        want = masked(node.name)
        ids = [i for i, s in enumerate(S) if masked(_display(s)) == want]
        slow = node.slowest if node.slowest and not node.slowest.startswith("#") else None
        exact = [i for i in ids if _display(S[i]) == slow] if slow else []
        ids = exact or ids
    if not ids:
        return None
    idx = np.asarray(ids, np.int64)
    ws, we = np.asarray(windows[0], np.int64), np.asarray(windows[1], np.int64)
    best: tuple[int, int, int] | None = None
    a = trace.annotations
    for ts, dur, name, ok in (
        (a.ts, a.dur, a.name, a.device < 0),
        (trace.python_frames.ts, trace.python_frames.dur, trace.python_frames.name, None),
        (trace.cpu_ops.ts, trace.cpu_ops.dur, trace.cpu_ops.name, None),
    ):
        if not len(ts):
            continue
        sel = np.isin(name, idx)
        if ok is not None:
            sel &= ok
        if len(ws):
            j = np.searchsorted(ws, ts, side="right") - 1
            inside = j >= 0
            inside[inside] = ts[inside] < we[j[inside]]
            sel &= inside
        rows = np.flatnonzero(sel)
        if not len(rows):
            continue
        k = rows[int(np.argmax(dur[rows]))]
        if best is None or int(dur[k]) > best[1] - best[0]:
            best = (int(ts[k]), int(ts[k] + dur[k]), int(name[k]))
    if best is None:
        return None
    return Match(best[0], max(best[1], best[0] + 1), "host", visible(_display(S[best[2]])))


def _roof(n: Node) -> str:
    return "   —  " if n.share_of_peak_pct is None else f"{n.share_of_peak_pct:4.0f} %"


def label(n: Node, total_ns: int) -> Text:
    """One line: GPU time, share of the window's GPU time, % of roof, then the name (× instances)."""
    share = 100.0 * n.gpu_ns_inclusive / total_ns if total_ns else 0.0
    t = Text()
    t.append(
        f"{n.gpu_ns_inclusive / 1e6:9.2f} ms {share:5.1f} % {_roof(n)}  ", style="bold" if n.kind == "phase" else ""
    )
    t.append(visible(n.name), style="italic" if n.kind == "outside" else "")
    if n.folded:
        t.append(f" ×{n.instances}", style="dim")
    return t


def detail(n: Node, total_ns: int) -> str:
    """The node under the cursor, in at most five lines."""
    share = 100.0 * n.gpu_ns_inclusive / total_ns if total_ns else 0.0
    lines = [" › ".join(visible(p) for p in n.path) + f"  ({n.kind})"]
    lines.append(
        f"GPU {n.gpu_ns_inclusive / 1e6:.3f} ms ({share:.1f} %), own {n.gpu_ns_exclusive / 1e6:.3f} ms · "
        f"host {n.host_ns / 1e6:.3f} ms · {n.count} range{'s' if n.count != 1 else ''}"
    )
    rates = ([f"{n.bound}-bound"] if n.bound != "unknown" else []) + known_parts(
        ("{:.0f} % of roof", n.share_of_peak_pct), ("{:.1f} TFLOP/s", n.tflops), ("{:.0f} GB/s", n.gbps)
    )
    lines.append(" · ".join(rates) if rates else "roofline: unknown")
    if n.folded and n.spread_ns is not None:  # a folded block: how its instances differ
        lo, med, hi = n.spread_ns
        lines.append(
            f"×{n.instances}: {lo / 1e6:.2f}–{hi / 1e6:.2f} ms each (median {med / 1e6:.2f}), "
            f"slowest {visible(n.slowest or '?')}"
        )
    elif n.top_kernels:
        lines.append(
            "kernels: " + " · ".join(f"{short_name(k, 48)} {ns / 1e6:.2f} ms ×{c}" for k, c, ns in n.top_kernels[:2])
        )
    return "\n".join(lines)


class ModuleTreeView(Tree[Node]):
    """The tree itself: Enter posts TreePane.Open (no toggle), space / ← / → collapse and expand."""

    BINDINGS = [
        Binding("enter", "select_cursor", "show the node's range on the timeline", show=False),
        Binding("space", "toggle_node", "expand / collapse", show=False),
        Binding("right", "expand_node", "expand", show=False),
        Binding("left", "collapse_node", "collapse (on a collapsed node: go to its parent)", show=False),
    ]

    def action_expand_node(self) -> None:
        node = self.cursor_node
        if node is not None and node.allow_expand:
            node.expand()

    def action_collapse_node(self) -> None:
        node = self.cursor_node
        if node is None:
            return
        if node.is_expanded and node.allow_expand:
            node.collapse()
        else:
            self.action_cursor_parent()


class TreePane(Vertical):
    """The module tree of the chosen rank."""

    DEFAULT_CSS = """
    TreePane #tree-note { height: auto; color: $text-muted; }
    TreePane ModuleTreeView { height: 1fr; }
    TreePane #tree-detail { height: 5; padding: 0 1; border-top: solid $panel; }
    """
    BINDINGS = [
        Binding("s", "sort_next", "sort by GPU time / by share of peak", show=False),
        Binding("r", "reverse", "reverse the sort", show=False),
    ]

    class Open(Message):
        """Show this interval (one of the node's ranges) on the timeline."""

        def __init__(self, match: Match | None, what: str) -> None:
            super().__init__()
            self.match = match
            self.what = what

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_tree: Any = None  # analyzers.trace.module_tree.ModuleTree
        self.trace: Trace | None = None
        self.windows: tuple[Any, Any] = ((), ())
        self.sort = "time"
        self.descending = True

    def compose(self) -> ComposeResult:
        yield Static("", id="tree-note", markup=False)
        view: ModuleTreeView = ModuleTreeView("model", id="tree-view")
        view.show_root = False
        view.auto_expand = False
        yield view
        yield Static("", id="tree-detail", markup=False)

    @property
    def view(self) -> ModuleTreeView:
        return self.query_one(ModuleTreeView)

    def show(self, tree: Any, trace: Trace, windows: tuple[Any, Any]) -> None:
        self.model_tree, self.trace, self.windows = tree, trace, windows
        self._fill(expanded=None)

    def _order(self, nodes: list[Node]) -> list[Node]:
        if self.sort == "time":
            key = lambda n: n.gpu_ns_inclusive  # noqa: E731
            return sorted(nodes, key=key, reverse=self.descending)
        known = [n for n in nodes if n.share_of_peak_pct is not None]
        rest = [n for n in nodes if n.share_of_peak_pct is None]
        known.sort(key=lambda n: n.share_of_peak_pct, reverse=self.descending)
        return known + sorted(rest, key=lambda n: -n.gpu_ns_inclusive)

    def _note(self) -> str:
        t = self.model_tree
        arrow = "↓" if self.descending else "↑"
        sort = "GPU time" if self.sort == "time" else "share of peak"
        return (
            f"{t.gpu_ns / 1e6:,.1f} ms GPU in {t.windows} step{'s' if t.windows != 1 else ''} · "
            f"sort: {sort} {arrow} · ms, share, % of roof, node"
        )

    def _fill(self, expanded: set[tuple[str, ...]] | None, cursor: tuple[str, ...] | None = None) -> None:
        view = self.view
        view.clear()
        note = self.query_one("#tree-note", Static)
        detail_w = self.query_one("#tree-detail", Static)
        if self.model_tree is None or not self.model_tree.roots:
            note.update("No module tree: the trace records neither ranges nor GPU work in its steps.")
            detail_w.update("")
            return
        note.update(self._note())
        total = self.model_tree.gpu_ns
        target: TreeNode[Node] | None = None

        def add(parent: TreeNode[Node], n: Node, depth: int) -> None:
            nonlocal target
            kids = self._order(n.children)
            if kids:
                tn = parent.add(label(n, total), data=n)
                for c in kids:
                    add(tn, c, depth + 1)
                if n.path in expanded if expanded is not None else depth == 0:
                    tn.expand()
            else:
                tn = parent.add_leaf(label(n, total), data=n)
            if cursor is not None and n.path == cursor:
                target = tn

        for r in self._order(self.model_tree.roots) if self.sort == "peak" else self.model_tree.roots:
            add(view.root, r, 0)
        view.root.expand()
        if target is not None:
            self.call_after_refresh(view.move_cursor, target)
        self._describe(target.data if target is not None else self.model_tree.roots[0])

    def _expanded(self) -> set[tuple[str, ...]]:
        out: set[tuple[str, ...]] = set()

        def walk(tn: TreeNode[Node]) -> None:
            for c in tn.children:
                if c.is_expanded and c.data is not None:
                    out.add(c.data.path)
                walk(c)

        walk(self.view.root)
        return out

    def _cursor_path(self) -> tuple[str, ...] | None:
        node = self.view.cursor_node
        return node.data.path if node is not None and node.data is not None else None

    def action_sort_next(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self.descending = True
        self._fill(self._expanded(), self._cursor_path())

    def action_reverse(self) -> None:
        self.descending = not self.descending
        self._fill(self._expanded(), self._cursor_path())

    def _describe(self, n: Node) -> None:
        if n is not None and self.model_tree is not None:
            self.query_one("#tree-detail", Static).update(detail(n, self.model_tree.gpu_ns))

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[Node]) -> None:
        event.stop()
        self._describe(event.node.data)

    def on_tree_node_selected(self, event: Tree.NodeSelected[Node]) -> None:
        event.stop()
        n = event.node.data
        if n is None or self.trace is None:
            return
        match = node_interval(self.trace, self.windows, n)
        self.post_message(self.Open(match, " › ".join(visible(p) for p in n.path)))
