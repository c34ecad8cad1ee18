"""Where in the model, before and after: two module trees (analyzers/trace/module_tree.py) compared node by
node, and the node-level budgets of the CI gate (``diff --gate 'PATH:+5%'``).

**Matching.** Nodes are matched by their path, level by level under matched parents (the first level
against the first level). A name is compared as it stands, except that a folded block's digit ranges
are masked: ``Qwen2DecoderLayer_0…23`` matches ``Qwen2DecoderLayer_0…27`` (a deeper model), and the
block's inside matches below it.

**Renamed.** Of the nodes left unmatched under one matched parent, a BEFORE node and an AFTER node of
the same kind are one node renamed when their children carry the same names (the same non-empty set,
compared as above), or, both being leaves, when their heaviest kernel is the same kernel. Pairs are
taken in BEFORE's order (heaviest first), each with the first such AFTER node; a renamed node's
subtree is then matched below it.

**Added / removed.** What is left: the top of each unmatched subtree is listed once (with the number
of nodes it holds), never each node inside it.

**Stored trees.** A stored run keeps the tree's top levels (:func:`module_tree.top_levels`): where a
run's node (or its first level) left children out, a node of the other run left unmatched under it
may be one of them — it is *not kept*, counted (``TreeDiff.not_kept``) and neither added nor removed;
a node that left children out has no children signature (it is never taken for a renamed one).

Times are GPU time per step window (per capture window without steps), so runs that profiled
different numbers of steps compare; shares are of the window's GPU time. Pure functions over two
:class:`~trainscope.analyzers.trace.module_tree.ModuleTree`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field

from trainscope.analyzers.trace.module_tree import STORED_LEVELS
from trainscope.analyzers.trace.module_tree import STORED_NODES
from trainscope.analyzers.trace.module_tree import ModuleTree
from trainscope.analyzers.trace.module_tree import Node

_RANGE = re.compile(r"(\d+)…(\d+)")
_DIGITS = re.compile(r"\d+")

# A node whose change lies almost wholly (this share, same sign) in one of its children is shown by
# that child in "changed most": the chain Qwen2Model › layers › MLP is the MLP's change three times.
PASS_THROUGH = 0.9
# Nodes the node gate judges: at least this share of BEFORE's window GPU time (a 2 µs node moving 40 %
# is noise, not a regression); smaller matching nodes are counted as not judged.
NODE_FLOOR_PCT = 0.1


def match_key(name: str) -> str:
    """The name a node is matched by: as it stands, a folded block's digit ranges masked."""
    return _RANGE.sub("#…#", name)


@dataclass(frozen=True)
class NodeChange:
    """One node before and after. ``status``: matched | renamed | added | removed; for an added node
    the BEFORE fields are None (and the AFTER fields for a removed one)."""

    path: tuple[str, ...]  # BEFORE's path (AFTER's for an added node)
    after_path: tuple[str, ...] | None  # AFTER's path where it differs (renamed, or below a renamed node)
    status: str
    kind: str
    depth: int
    before_ms: float | None  # inclusive GPU time per window
    after_ms: float | None
    before_self_ms: float | None  # exclusive
    after_self_ms: float | None
    before_share_pct: float | None  # of the window's GPU time
    after_share_pct: float | None
    before_roof_pct: float | None  # kernel-time-weighted % of roof (share of peak)
    after_roof_pct: float | None
    before_instances: int | None
    after_instances: int | None
    nodes: int = 1  # nodes in the subtree (added / removed: the whole subtree listed once)
    children: tuple[int, ...] = ()  # indices of its children in TreeDiff.nodes (matched / renamed only)

    @property
    def name(self) -> str:
        return (self.after_path or self.path)[-1]

    @property
    def change_ms(self) -> float:
        return (self.after_ms or 0.0) - (self.before_ms or 0.0)

    @property
    def change_pct(self) -> float | None:
        return 100.0 * self.change_ms / self.before_ms if self.before_ms else None

    @property
    def self_change_ms(self) -> float:
        return (self.after_self_ms or 0.0) - (self.before_self_ms or 0.0)

    @property
    def roof_change_pts(self) -> float | None:
        if self.before_roof_pct is None or self.after_roof_pct is None:
            return None
        return self.after_roof_pct - self.before_roof_pct


@dataclass(frozen=True)
class TreeDiff:
    before_gpu_ms: float  # GPU time per window in the tree's windows
    after_gpu_ms: float
    before_windows: int
    after_windows: int
    nodes: list[NodeChange]  # depth first: BEFORE's order, each parent's added children after the rest
    roots: tuple[int, ...] = ()  # indices of the first level's rows
    partial: bool = False  # a side is a stored tree's top levels (module_tree.top_levels)
    not_kept: int = 0  # unmatched nodes of one run under a node whose counterpart's stored tree left children out

    def by_status(self, status: str) -> list[NodeChange]:
        return [n for n in self.nodes if n.status == status]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(("matched", "renamed", "added", "removed"), 0)
        for n in self.nodes:
            out[n.status] += 1
        return out

    def changed_most(self, n: int = 10) -> list[NodeChange]:
        """The matched (and renamed) nodes whose GPU time per window moved most either way, a node
        whose change lies (≥ PASS_THROUGH, same sign) in one child left out for that child."""
        rows = []
        for c in self.nodes:
            if c.status not in ("matched", "renamed") or abs(c.change_ms) < 5e-4:
                continue
            kids = [self.nodes[i] for i in c.children]
            if kids:
                big = max(kids, key=lambda k: abs(k.change_ms))
                if big.change_ms * c.change_ms > 0 and abs(big.change_ms) >= PASS_THROUGH * abs(c.change_ms):
                    continue
            rows.append(c)
        rows.sort(key=lambda c: -abs(c.change_ms))
        return rows[:n]


def _per_window(t: ModuleTree, ns: int) -> float:
    return ns / 1e6 / max(1, t.windows)


def _share(t: ModuleTree, ns: int) -> float:
    return 100.0 * ns / t.gpu_ns if t.gpu_ns else 0.0


def _size(n: Node) -> int:
    return 1 + sum(_size(c) for c in n.children)


def _signature(n: Node) -> frozenset[str] | tuple[str, str] | None:
    """What a renamed node keeps: its children's names, or (a leaf) its heaviest kernel."""
    if n.omitted:  # a stored tree left children out: the names it kept are no signature
        return None
    if n.children:
        return frozenset(match_key(c.name) for c in n.children)
    return ("kernel", n.top_kernels[0][0]) if n.top_kernels else None


def diff_trees(before: ModuleTree, after: ModuleTree) -> TreeDiff:
    """The two trees node by node (the module docstring's rules)."""
    rows: list[NodeChange] = []
    not_kept = 0

    def add(b: Node | None, a: Node | None, status: str, depth: int, after_path: tuple[str, ...] | None) -> int:
        n = b if b is not None else a
        assert n is not None
        row = NodeChange(
            path=n.path,
            after_path=after_path if b is not None and a is not None and after_path != b.path else None,
            status=status,
            kind=n.kind,
            depth=depth,
            before_ms=None if b is None else _per_window(before, b.gpu_ns_inclusive),
            after_ms=None if a is None else _per_window(after, a.gpu_ns_inclusive),
            before_self_ms=None if b is None else _per_window(before, b.gpu_ns_exclusive),
            after_self_ms=None if a is None else _per_window(after, a.gpu_ns_exclusive),
            before_share_pct=None if b is None else _share(before, b.gpu_ns_inclusive),
            after_share_pct=None if a is None else _share(after, a.gpu_ns_inclusive),
            before_roof_pct=None if b is None else b.share_of_peak_pct,
            after_roof_pct=None if a is None else a.share_of_peak_pct,
            before_instances=None if b is None else b.instances,
            after_instances=None if a is None else a.instances,
            nodes=_size(n) if status in ("added", "removed") else 1,
        )
        rows.append(row)
        return len(rows) - 1

    def level(bs: list[Node], as_: list[Node], depth: int, b_omits: bool, a_omits: bool) -> list[int]:
        nonlocal not_kept
        by_key: dict[str, list[int]] = {}
        for j, a in enumerate(as_):
            by_key.setdefault(match_key(a.name), []).append(j)
        used: set[int] = set()
        pair: dict[int, tuple[int, str]] = {}
        for i, b in enumerate(bs):
            for j in by_key.get(match_key(b.name), []):
                if j not in used and as_[j].kind == b.kind:
                    used.add(j)
                    pair[i] = (j, "matched")
                    break
        for i, b in enumerate(bs):  # renamed: the same children (or the same heaviest kernel), another name
            if i in pair:
                continue
            sig = _signature(b)
            if sig is None:
                continue
            for j, a in enumerate(as_):
                if j not in used and a.kind == b.kind and _signature(a) == sig:
                    used.add(j)
                    pair[i] = (j, "renamed")
                    break
        out: list[int] = []
        for i, b in enumerate(bs):
            if i in pair:
                j, status = pair[i]
                a = as_[j]
                idx = add(b, a, status, depth, a.path)
                kids = level(b.children, a.children, depth + 1, b.omitted > 0, a.omitted > 0)
                rows[idx] = _with_children(rows[idx], kids)
            elif a_omits:  # AFTER's stored tree may hold it among the children it left out
                not_kept += _size(b)
                continue
            else:
                idx = add(b, None, "removed", depth, None)
            out.append(idx)
        for j, a in enumerate(as_):
            if j in used:
                continue
            if b_omits:
                not_kept += _size(a)
                continue
            out.append(add(None, a, "added", depth, None))
        return out

    roots = level(before.roots, after.roots, 0, before.omitted > 0, after.omitted > 0)
    return TreeDiff(
        _per_window(before, before.gpu_ns),
        _per_window(after, after.gpu_ns),
        before.windows,
        after.windows,
        rows,
        tuple(roots),
        before.partial or after.partial,
        not_kept,
    )


def _with_children(row: NodeChange, kids: list[int]) -> NodeChange:
    from dataclasses import replace

    return replace(row, children=tuple(kids))


# -- node budgets: the gate per node ---------------------------------------------------------------

_BUDGET = re.compile(r"^(?P<pattern>.+):(?P<sign>[+-])?(?P<value>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>%|pts?|points?)$")


@dataclass(frozen=True)
class NodeBudget:
    """``PATTERN:+N%``: each matching node's GPU time per window may grow by at most N %;
    ``PATTERN:-Npts``: its share of peak (% of roof) may fall by at most N points."""

    pattern: str
    limit: float
    unit: str  # "%" | "points"
    text: str

    @property
    def separator(self) -> str:
        return "/" if "/" in self.pattern else "."

    @property
    def anchored(self) -> bool:
        return self.pattern.startswith("/")


def parse_budget(text: str) -> NodeBudget:
    """A node budget from ``PATTERN:+5%`` or ``PATTERN:-3pts``; raises ValueError with what is wrong."""
    m = _BUDGET.match(text.strip())
    if not m:
        raise ValueError(
            f"not a node budget: {text!r} (PATTERN:+N% — GPU time may grow by at most N %; "
            "PATTERN:-Npts — share of peak may fall by at most N points; e.g. 'Qwen2DecoderLayer_*.Qwen2MLP_*:+5%')"
        )
    unit = "%" if m["unit"] == "%" else "points"
    sign = m["sign"] or ("+" if unit == "%" else "-")
    if (unit == "%") != (sign == "+"):
        raise ValueError(
            f"{text!r}: a time budget is +N% (how much a node's GPU time may grow), a share-of-peak budget "
            "-Npts (how many points its % of roof may fall)"
        )
    pattern = m["pattern"].strip()
    if not pattern.strip("/."):
        raise ValueError(f"{text!r}: the pattern names no node")
    return NodeBudget(pattern, float(m["value"]), unit, text.strip())


def _glob(pattern: str, sep: str) -> re.Pattern[str]:
    """``*`` any text within one name, ``**`` any text across names, ``?`` one character."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += f"[^{re.escape(sep)}]*"
            i += 1
        elif pattern[i] == "?":
            out += f"[^{re.escape(sep)}]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out, re.S)


def _text_matches(pattern: str, text: str, sep: str) -> bool:
    p, t = pattern.lower(), text.lower()
    if _glob(p, sep).fullmatch(t):
        return True
    # a concrete instance (layers.5) inside a folded block (layers.0…27)
    if "…" not in t or any(ch in p for ch in "*?"):
        return False
    parts = _RANGE.split(t)  # text, lo, hi, text, lo, hi, …, text
    rx = "".join("(\\d+)" if i % 3 == 1 else re.escape(part) for i, part in enumerate(parts) if i % 3 != 2)
    m = re.fullmatch(rx, p)
    if not m:
        return False
    ranges = [(int(lo), int(hi)) for lo, hi in _RANGE.findall(t)]
    return all(lo <= int(v) <= hi for v, (lo, hi) in zip(m.groups(), ranges))


def path_matches(budget: NodeBudget, path: tuple[str, ...]) -> bool:
    """The pattern against the end of ``path``, its names joined by "." (by "/" when the pattern has a
    "/"; a leading "/" matches the whole path from the first level): ``*`` any text within a name, ``**``
    any text across names, ``?`` one character, case-insensitive; a folded block also matches one of its instances (``layers.5`` in ``layers.0…27``)."""
    sep = budget.separator
    pattern = budget.pattern.lstrip("/") if budget.anchored else budget.pattern
    starts = [0] if budget.anchored else range(len(path))
    return any(_text_matches(pattern, sep.join(path[k:]), sep) for k in starts)


@dataclass(frozen=True)
class NodeVerdict:
    node: NodeChange
    worse_by: float | None  # % (time) or points (share of peak), positive = worse; None: not judged
    judged: bool
    why_not: str = ""


@dataclass(frozen=True)
class NodeGateResult:
    budget: NodeBudget
    verdicts: list[NodeVerdict] = field(default_factory=list)
    regressed: bool = False
    reason: str = ""
    refused: str | None = None  # not run: the runs are not comparable (exit 2)

    @property
    def worst(self) -> NodeVerdict | None:
        judged = [v for v in self.verdicts if v.judged and v.worse_by is not None]
        return max(judged, key=lambda v: v.worse_by or 0.0) if judged else None


class NoSuchNode(ValueError):
    """No node of either tree matches a budget's pattern."""


def _label(path: tuple[str, ...]) -> str:
    return " › ".join(path)


def node_gate(td: TreeDiff, budget: NodeBudget) -> NodeGateResult:
    """Judge every node whose path (BEFORE's, or AFTER's where renamed) matches the budget: time — a
    regression when its GPU time per window grew by more than the budget's % (nodes under
    NODE_FLOOR_PCT of BEFORE's window GPU time are not judged); share of peak — when its % of roof
    fell by more than the budget's points (judged where both runs know it). Nodes only one run has
    are listed, not judged. One value per run and node: no rank test (the tree is not kept per step).
    Raises :class:`NoSuchNode` when nothing matches."""
    hits = [
        n
        for n in td.nodes
        if path_matches(budget, n.path) or (n.after_path is not None and path_matches(budget, n.after_path))
    ]
    if not hits:
        raise NoSuchNode(
            f"no node matches {budget.pattern!r} in either run (the first level: "
            + ", ".join(td.nodes[i].name for i in td.roots)
            + "; names are separated by '.' or '/', '*' stands for any text within a name, '**' across names, a "
            "leading '/' anchors at the first level"
            + (
                f"; a stored run keeps the tree's first {STORED_LEVELS} levels and its heaviest nodes, "
                f"{STORED_NODES} in all"
                if td.partial
                else ""
            )
            + ")"
        )
    verdicts = []
    for n in hits:
        if n.status in ("added", "removed"):
            verdicts.append(NodeVerdict(n, None, False, f"{n.status} (only one run has it)"))
            continue
        if budget.unit == "%":
            share = n.before_share_pct or 0.0
            if share < NODE_FLOOR_PCT:
                verdicts.append(NodeVerdict(n, n.change_pct, False, f"under {NODE_FLOOR_PCT:g} % of the GPU time"))
                continue
            verdicts.append(NodeVerdict(n, n.change_pct, True))
        else:
            ch = n.roof_change_pts
            if ch is None:
                verdicts.append(NodeVerdict(n, None, False, "share of peak not known in both runs"))
                continue
            verdicts.append(NodeVerdict(n, -ch, True))
    judged = [v for v in verdicts if v.judged]
    over = [v for v in judged if (v.worse_by or 0.0) > budget.limit]
    allowed = f"{budget.limit:g} {'%' if budget.unit == '%' else 'points'}"
    what = "GPU time" if budget.unit == "%" else "share of peak"
    skipped = len(verdicts) - len(judged)
    tail = f"; {skipped} matching node{'s' if skipped != 1 else ''} not judged" if skipped else ""

    def values(v: NodeVerdict) -> str:
        n = v.node
        if budget.unit == "%":
            return f"{n.before_ms:.3f} → {n.after_ms:.3f} ms per step"
        return f"{n.before_roof_pct:.1f} → {n.after_roof_pct:.1f} % of roof"

    def amount(v: NodeVerdict) -> str:
        w = v.worse_by or 0.0
        if budget.unit == "%":
            return f"{'rose' if w > 0 else 'fell'} {abs(w):.1f} %" if w else "did not change"
        return f"{'fell' if w > 0 else 'rose'} {abs(w):.1f} points" if w else "did not change"

    if over:
        v = max(over, key=lambda v: v.worse_by or 0.0)
        more = f" (and {len(over) - 1} more node{'s' if len(over) > 2 else ''})" if len(over) > 1 else ""
        reason = (
            f"regression: node {_label(v.node.after_path or v.node.path)} {what} {amount(v)} ({values(v)}), "
            f"more than the {allowed} allowed by {budget.text!r}{more}{tail}"
        )
        return NodeGateResult(budget, verdicts, True, reason)
    if not judged:
        reason = f"gate passed: {budget.text!r} matches no node both runs measure{tail}"
        return NodeGateResult(budget, verdicts, False, reason)
    v = max(judged, key=lambda v: v.worse_by or 0.0)
    reason = (
        f"gate passed: {budget.text!r}: {len(judged)} node{'s' if len(judged) != 1 else ''} within the {allowed} "
        f"allowed; the most: {_label(v.node.after_path or v.node.path)} {what} {amount(v)} ({values(v)}){tail}"
    )
    return NodeGateResult(budget, verdicts, False, reason)


def refuse_node_gate(budget: NodeBudget, why: str, blockers: str) -> NodeGateResult:
    return NodeGateResult(budget, [], False, f"gate {budget.text!r} not run: {why}", refused=blockers)


def digits_masked(name: str) -> str:
    """Every digit run as ``#`` (for callers matching raw range names against a node's name)."""
    return _DIGITS.sub("#", _RANGE.sub("#", name))
