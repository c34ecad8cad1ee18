"""The timeline: what the GPU and the host were doing at every instant, on one time axis.

Two lanes, each an exclusive decomposition of the trace span into categories (every instant
belongs to exactly one), so a view at any zoom is answered with a few binary searches per
category instead of a pass over the events:

* GPU lane — the categories of :mod:`breakdown` (compute, communication, copy, memset, then the
  GPU's idle time by the host's reason: data wait, sync, launch/CPU overhead, other).
* Host lane — what the host thread was in: DataLoader wait, a synchronizing call, a runtime
  call (kernel launch), the optimizer, the backward pass, any other framework op, or nothing.

Beside the two summary lanes, one :class:`Lane` per GPU stream (its role — compute,
communication, copy — from what runs on it) and one per host thread that matters (busy ≥ 1 % of
the span), so overlap between streams can be seen. :meth:`TimelineModel.items_at` lists every
item under a column, one per lane; :meth:`TimelineModel.overlap_at` measures, over the column,
how much communication and copy time ran while compute ran.

:meth:`TimelineModel.item_at` answers "what is this segment?" for a selected column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.trace.breakdown import BUSY
from trainscope.analyzers.trace.breakdown import CATEGORIES
from trainscope.analyzers.trace.breakdown import CATEGORY_LABELS
from trainscope.analyzers.trace.breakdown import SYNC_CALL
from trainscope.analyzers.trace.breakdown import gpu_layers
from trainscope.analyzers.trace.breakdown import host_layers
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.steps import DATA_WAIT
from trainscope.analyzers.trace.steps import PROFILER_STEP
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.analyzers.trace.steps import name_mask
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import Copies
from trainscope.traces.model import Kernels
from trainscope.traces.model import Memsets
from trainscope.traces.model import Trace

GPU_CATEGORIES: tuple[str, ...] = CATEGORIES
HOST_CATEGORIES: tuple[str, ...] = ("data_wait", "sync", "launch", "optimizer", "backward", "cpu_op", "idle")
HOST_LABELS = {
    "data_wait": "waiting for data (DataLoader)",
    "sync": "synchronizing with the GPU",
    "launch": "runtime call (kernel launch, copy)",
    "optimizer": "optimizer",
    "backward": "backward pass",
    "cpu_op": "framework op (forward, other)",
    "idle": "nothing recorded",
}
GPU_LABELS = dict(CATEGORY_LABELS, idle_other="GPU idle: nothing recorded on the host")
# What an item on a stream is (the exclusive breakdown's "communication (not overlapped)" is a
# statement about the whole GPU, not about one kernel: whether it overlapped is measured at the cursor).
ITEM_LABELS = {
    "compute": "compute",
    "communication": "communication (collective)",
    "copy": "memory copy",
    "memset": "memset",
}
STREAM_CATEGORIES: tuple[str, ...] = ("compute", "communication", "copy", "memset", "idle")
STREAM_ROLE_NAMES = {"compute": "comp", "communication": "NCCL", "copy": "copy", "memset": "mset"}
THREAD_MIN_BUSY = 0.01  # a host thread gets its own lane when busy ≥ 1 % of the span
MAX_THREAD_LANES = 4
STREAM_BUSY_SHOWN = 0.2  # a stream's column shows its busiest category when busy ≥ 20 % of it

_OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)#|optimizer", re.IGNORECASE)
_BACKWARD = re.compile(r"[Bb]ackward|autograd::engine")


@dataclass(frozen=True)
class Item:
    """One thing under the cursor: a kernel, copy, op or runtime call."""

    lane: str  # "gpu" | "host"
    kind: str  # "kernel", "copy HtoD", "memset", "cpu op", "annotation", "runtime", "idle"
    name: str
    start_ns: int
    duration_ns: int
    category: str
    category_label: str
    step_label: str | None
    step_share_pct: float | None  # duration as a share of the step it starts in
    context: str | None = None  # host lane: the outermost range around it (e.g. the DataLoader call)

    @property
    def duration_ms(self) -> float:
        return self.duration_ns / 1e6


@dataclass(frozen=True)
class LaneView:
    """One lane sampled into ``columns`` equal windows: per column the dominant category and the
    per-category nanoseconds (``ns[column, category]``)."""

    categories: tuple[str, ...]
    dominant: np.ndarray  # int index into categories, per column
    ns: np.ndarray  # [columns, len(categories)]


@dataclass(frozen=True)
class Lane:
    """One GPU stream or host thread: exclusive category sets over the span (the last is idle)."""

    key: str  # "stream:7", "thread:0"
    label: str  # short, for the gutter: "s7 compute", "s21 NCCL", "T main"
    kind: str  # "stream" | "thread"
    ident: int  # the stream number or the thread index
    role: str  # streams: compute | communication | copy | memset; threads: "host"
    categories: tuple[str, ...]
    sets: tuple[iv.IntervalSet, ...]  # one per category but the last (idle: the rest)
    busy_ns: int


@dataclass(frozen=True)
class Match:
    """An interval to show: a search hit, a kernel instance, a finding's evidence."""

    start_ns: int
    end_ns: int
    lane: str  # "gpu" | "host"
    name: str


# Which part of the GPU's time a finding is about (the category of the breakdown that carries it).
# Findings about memory or clocks have no interval on the timeline: they open on the worst step.
def _finding_categories() -> dict[str, str]:
    """Finding id → the GPU timeline category whose intervals it cites: the first breakdown category
    its registry declaration names (findings without one — capacity, live-only patterns — cite none)."""

    return {fid: spec.breakdown[0] for fid, spec in REGISTRY.items() if spec.breakdown}


FINDING_CATEGORY = _finding_categories()


@dataclass(frozen=True)
class Overlap:
    """Over one window: busy time per kind on the GPU and how much of it ran beside compute."""

    window_ns: int
    compute_ns: int
    communication_ns: int
    copy_ns: int
    communication_overlapped_ns: int  # communication while some stream computes
    copy_overlapped_ns: int

    def text(self) -> str:
        def pct(part: int, whole: int) -> str:
            return f"{100 * part / whole:.0f} %" if whole else "—"

        def us(ns: int) -> str:
            return f"{ns / 1e3:.1f} µs"

        if not (self.compute_ns or self.communication_ns or self.copy_ns):
            return f"over this {us(self.window_ns)} column: no kernel or copy runs"
        parts = [f"compute {us(self.compute_ns)}"]
        if self.communication_ns:
            parts.append(
                f"communication {us(self.communication_ns)}, {pct(self.communication_overlapped_ns, self.communication_ns)}"
                " overlapped with compute"
            )
        if self.copy_ns:
            parts.append(
                f"copies {us(self.copy_ns)}, {pct(self.copy_overlapped_ns, self.copy_ns)} overlapped with compute"
            )
        return f"over this {us(self.window_ns)} column: " + " · ".join(parts)


def _intersect_ns(a: iv.IntervalSet, b: iv.IntervalSet, lo: int, hi: int) -> int:
    """Nanoseconds in [lo, hi) covered by both sets."""
    a, b = iv.clip(a, lo, hi), iv.clip(b, lo, hi)
    if not len(a[0]) or not len(b[0]):
        return 0
    bounds = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    seg_s, seg_e = bounds[:-1], bounds[1:]
    both = iv.contains(a, seg_s) & iv.contains(b, seg_s)
    return int((seg_e - seg_s)[both].sum())


def _exclusive_sets(layers: list[iv.IntervalSet], lo: int, hi: int) -> list[iv.IntervalSet]:
    """Split [lo, hi) so each instant goes to the first layer covering it; the rest is the last set."""
    pts = [np.array([lo, hi], np.int64)] + [np.clip(x, lo, hi) for layer in layers for x in layer]
    bounds = iv.unique_sorted(np.concatenate(pts))
    if len(bounds) < 2:
        return [iv.EMPTY] * (len(layers) + 1)
    seg_s, seg_e = bounds[:-1], bounds[1:]
    owner = np.full(len(seg_s), len(layers), np.int64)
    for k in range(len(layers) - 1, -1, -1):  # lowest index wins: apply it last
        owner[iv.contains(layers[k], seg_s)] = k
    return [iv.union(seg_s[owner == k], seg_e[owner == k]) for k in range(len(layers) + 1)]


class TimelineModel:
    """Precomputed lanes of one trace on one GPU. Building it costs one pass over the events;
    every view and lookup afterwards is O(columns · log events)."""

    def __init__(
        self, trace: Trace, segmentation: StepSegmentation, device: int | None, classes: np.ndarray | None = None
    ) -> None:
        self.trace = trace
        self.segmentation = segmentation
        self.device = device
        lo, hi = trace.span_ns
        if segmentation.steps:
            lo = min(lo, segmentation.steps[0].start_ns)
            hi = max(hi, segmentation.steps[-1].end_ns)
        self.span = (int(lo), int(max(hi, lo + 1)))
        self.step_starts = segmentation.starts
        self.step_ends = segmentation.ends

        gpu = gpu_layers(trace, device, classes)
        host = host_layers(trace)
        self.gpu_sets = _exclusive_sets([gpu[c] for c in BUSY] + [host[c] for c in CATEGORIES[4:7]], *self.span)

        r, o, a = trace.runtime, trace.cpu_ops, trace.annotations
        sync_names = name_mask(trace, SYNC_CALL)
        step_names = name_mask(trace, PROFILER_STEP)
        opt_names = name_mask(trace, _OPTIMIZER)
        bwd_names = name_mask(trace, _BACKWARD)
        a_host = (a.device < 0) & ~step_names[a.name]
        ops = ~step_names[o.name]

        def ranges(mask_ops: np.ndarray, mask_ann: np.ndarray) -> iv.IntervalSet:
            return iv.union(
                np.concatenate([o.ts[mask_ops], a.ts[mask_ann]]), np.concatenate([o.end[mask_ops], a.end[mask_ann]])
            )

        host_sets = [
            host["idle_data_wait"],
            iv.union(r.ts[sync_names[r.name]], r.end[sync_names[r.name]]),
            iv.union(r.ts, r.end),
            ranges(ops & opt_names[o.name], a_host & opt_names[a.name]),
            ranges(ops & bwd_names[o.name], a_host & bwd_names[a.name]),
            ranges(ops, a_host),
        ]
        self.host_sets = _exclusive_sets(host_sets, *self.span)
        self._gpu_kind_sets = gpu  # compute / communication / copy / memset over every stream
        self.stream_lanes = self._build_stream_lanes(classes)
        self.thread_lanes = self._build_thread_lanes()
        self._index_items(classes)

    # -- lanes per stream and per thread ------------------------------------------------------------

    def _build_stream_lanes(self, classes: np.ndarray | None) -> list[Lane]:
        t, dev = self.trace, self.device
        k, c, m = t.kernels, t.copies, t.memsets

        def on(tab: Kernels | Copies | Memsets) -> np.ndarray:
            return (tab.device == dev) if dev is not None else np.ones(len(tab), bool)

        kon, con, mon = on(k), on(c), on(m)
        comm = np.zeros(len(k), bool)
        if classes is not None and len(k):
            comm = classes[k.name] == ALL_CLASSES.index("communication")
        lanes = []
        for s in np.unique(np.concatenate([k.stream[kon], c.stream[con], m.stream[mon]])).tolist():
            ks, cs, ms = kon & (k.stream == s), con & (c.stream == s), mon & (m.stream == s)
            sets = (
                iv.union(k.ts[ks & ~comm], k.end[ks & ~comm]),
                iv.union(k.ts[ks & comm], k.end[ks & comm]),
                iv.union(c.ts[cs], c.end[cs]),
                iv.union(m.ts[ms], m.end[ms]),
            )
            ns = [iv.total(x) for x in sets]
            role = STREAM_CATEGORIES[int(np.argmax(ns))]
            lanes.append(
                Lane(
                    f"stream:{s}",
                    f"s{s} {STREAM_ROLE_NAMES[role]}",
                    "stream",
                    int(s),
                    role,
                    STREAM_CATEGORIES,
                    sets,
                    sum(ns),
                )
            )
        return lanes

    def _build_thread_lanes(self) -> list[Lane]:
        t = self.trace
        o, a, r = t.cpu_ops, t.annotations, t.runtime
        step_names = name_mask(t, PROFILER_STEP)
        data_names = name_mask(t, DATA_WAIT)
        sync_names = name_mask(t, SYNC_CALL)
        opt_names, bwd_names = name_mask(t, _OPTIMIZER), name_mask(t, _BACKWARD)
        a_host = (a.device < 0) & ~step_names[a.name]
        ops = ~step_names[o.name]
        span = self.span[1] - self.span[0]
        lanes = []
        threads = np.unique(np.concatenate([o.thread, a.thread[a.device < 0], r.thread])).tolist()
        for th in threads:
            mo, ma, mr = ops & (o.thread == th), a_host & (a.thread == th), r.thread == th

            def rng(mask_o: np.ndarray, mask_a: np.ndarray) -> iv.IntervalSet:
                return iv.union(
                    np.concatenate([o.ts[mask_o], a.ts[mask_a]]), np.concatenate([o.end[mask_o], a.end[mask_a]])
                )

            layers = [
                rng(mo & data_names[o.name], ma & data_names[a.name]),
                iv.union(r.ts[mr & sync_names[r.name]], r.end[mr & sync_names[r.name]]),
                iv.union(r.ts[mr], r.end[mr]),
                rng(mo & opt_names[o.name], ma & opt_names[a.name]),
                rng(mo & bwd_names[o.name], ma & bwd_names[a.name]),
                rng(mo, ma),
            ]
            sets = _exclusive_sets(layers, *self.span)[:-1]
            busy = sum(iv.total(x) for x in sets)
            if busy < THREAD_MIN_BUSY * span:
                continue
            info = t.threads[th] if 0 <= th < len(t.threads) else None
            main = info is not None and info.tid == info.pid  # the process's first thread
            label = "T main" if main else f"T {(info.tid if info else str(th))[-6:]}"
            lanes.append(Lane(f"thread:{th}", label, "thread", int(th), "host", HOST_CATEGORIES, tuple(sets), busy))
        lanes.sort(key=lambda ln: (ln.label != "T main", -ln.busy_ns))
        return lanes[:MAX_THREAD_LANES]

    @property
    def lanes(self) -> list[Lane]:
        return self.stream_lanes + self.thread_lanes

    def lane_view(self, lane: Lane, start_ns: int, end_ns: int, columns: int) -> LaneView:
        """Sample one stream or thread lane into ``columns`` windows. A stream's column shows its
        busiest category once it is busy for ≥ 20 % of the column (a short kernel stays visible)."""
        columns = max(1, columns)
        edges = np.linspace(start_ns, end_ns, columns + 1).round().astype(np.int64)
        width = edges[1:] - edges[:-1]
        busy = np.stack([iv.overlap_per_window(x, edges[:-1], edges[1:]) for x in lane.sets], axis=1)
        ns = np.concatenate([busy, (width - busy.sum(axis=1))[:, None]], axis=1)
        if lane.kind == "stream":
            dominant = np.where(
                busy.sum(axis=1) >= STREAM_BUSY_SHOWN * np.maximum(width, 1),
                busy.argmax(axis=1),
                len(lane.categories) - 1,
            )
        else:
            dominant = ns.argmax(axis=1)
        return LaneView(lane.categories, dominant, ns)

    def overlap_at(self, start_ns: int, end_ns: int) -> Overlap:
        """Busy time per kind over [start_ns, end_ns) and how much communication and copying ran
        while any stream computed (the overlap a COMMUNICATION-BOUND verdict is about)."""
        end_ns = max(end_ns, start_ns + 1)
        g = self._gpu_kind_sets
        ns = {k: int(iv.overlap_per_window(g[k], np.array([start_ns]), np.array([end_ns]))[0]) for k in g}
        return Overlap(
            end_ns - start_ns,
            ns["compute"],
            ns["communication"],
            ns["copy"],
            _intersect_ns(g["communication"], g["compute"], start_ns, end_ns),
            _intersect_ns(g["copy"], g["compute"], start_ns, end_ns),
        )

    # -- views ---------------------------------------------------------------------------------

    def lane(self, lane: str, start_ns: int, end_ns: int, columns: int) -> LaneView:
        """Sample ``lane`` ("gpu" or "host") over [start_ns, end_ns) into ``columns`` windows."""
        sets, cats = (self.gpu_sets, GPU_CATEGORIES) if lane == "gpu" else (self.host_sets, HOST_CATEGORIES)
        columns = max(1, columns)
        edges = np.linspace(start_ns, end_ns, columns + 1).round().astype(np.int64)
        ns = np.stack([iv.overlap_per_window(s, edges[:-1], edges[1:]) for s in sets], axis=1)
        # Outside the trace span nothing was recorded: count it as the lane's last ("idle") category.
        ns[:, -1] += (edges[1:] - edges[:-1]) - ns.sum(axis=1)
        return LaneView(cats, ns.argmax(axis=1), ns)

    def step_at(self, t_ns: int) -> int | None:
        i = int(np.searchsorted(self.step_starts, t_ns, side="right")) - 1
        if 0 <= i < len(self.step_ends) and t_ns < self.step_ends[i]:
            return i
        return None

    # -- items under the cursor -------------------------------------------------------------------

    def _index_items(self, classes: np.ndarray | None) -> None:
        t = self.trace
        k, c, m = t.kernels, t.copies, t.memsets
        dev = self.device
        kon = (k.device == dev) if dev is not None else np.ones(len(k), bool)
        con = (c.device == dev) if dev is not None else np.ones(len(c), bool)
        mon = (m.device == dev) if dev is not None else np.ones(len(m), bool)
        comm = np.zeros(len(k), bool)
        if classes is not None and len(k):
            comm = classes[k.name] == ALL_CLASSES.index("communication")
        nk, nc, nm = int(kon.sum()), int(con.sum()), int(mon.sum())
        # kind codes: 0 kernel, 1 communication kernel, 2 copy, 3 memset
        self._g_kind = np.concatenate([np.where(comm[kon], 1, 0), np.full(nc, 2), np.full(nm, 3)]).astype(np.int64)
        self._g_ts = np.concatenate([k.ts[kon], c.ts[con], m.ts[mon]])
        self._g_end = np.concatenate([k.end[kon], c.end[con], m.end[mon]])
        self._g_name = np.concatenate([k.name[kon], np.full(nc + nm, -1)]).astype(np.int64)
        self._g_copy_kind = np.concatenate([np.full(nk, -1), c.kind[con], np.full(nm, -1)]).astype(np.int64)
        self._g_stream = np.concatenate([k.stream[kon], c.stream[con], m.stream[mon]]).astype(np.int64)
        order = np.argsort(self._g_ts, kind="stable")
        for attr in ("_g_ts", "_g_end", "_g_name", "_g_copy_kind", "_g_kind", "_g_stream"):
            setattr(self, attr, getattr(self, attr)[order])
        self._g_maxdur = int((self._g_end - self._g_ts).max()) if len(self._g_ts) else 0

        o, a, r = t.cpu_ops, t.annotations, t.runtime
        step_names = name_mask(t, PROFILER_STEP)
        a_host = (a.device < 0) & ~step_names[a.name]
        o_keep = ~step_names[o.name]
        self._h_ts = np.concatenate([o.ts[o_keep], a.ts[a_host], r.ts])
        self._h_end = np.concatenate([o.end[o_keep], a.end[a_host], r.end])
        self._h_name = np.concatenate([o.name[o_keep], a.name[a_host], r.name])
        self._h_kind = np.concatenate(
            [np.zeros(int(o_keep.sum()), np.int64), np.ones(int(a_host.sum()), np.int64), np.full(len(r), 2, np.int64)]
        )
        self._h_thread = np.concatenate([o.thread[o_keep], a.thread[a_host], r.thread]).astype(np.int64)
        order = np.argsort(self._h_ts, kind="stable")
        for attr in ("_h_ts", "_h_end", "_h_name", "_h_kind", "_h_thread"):
            setattr(self, attr, getattr(self, attr)[order])
        self._h_maxdur = int((self._h_end - self._h_ts).max()) if len(self._h_ts) else 0

    def _step_share(self, start_ns: int, dur_ns: int) -> tuple[str | None, float | None]:
        i = self.step_at(start_ns)
        if i is None:
            return None, None
        st = self.segmentation.steps[i]
        return st.label, (100.0 * dur_ns / st.duration_ns if st.duration_ns else None)

    def _category_at(self, lane: str, start_ns: int, end_ns: int) -> str:
        view = self.lane(lane, start_ns, max(end_ns, start_ns + 1), 1)
        return view.categories[int(view.dominant[0])]

    def item_at(self, lane: str, start_ns: int, end_ns: int) -> Item:
        """The item that covers most of [start_ns, end_ns) on ``lane``; on the host lane, the
        innermost (shortest) op covering the window's middle. Idle when nothing is there."""
        end_ns = max(end_ns, start_ns + 1)
        mid = (start_ns + end_ns) // 2
        cat = self._category_at(lane, mid, mid + 1)
        labels = GPU_LABELS if lane == "gpu" else HOST_LABELS
        if lane == "gpu":
            lo = int(np.searchsorted(self._g_ts, start_ns - self._g_maxdur, side="left"))
            hi = int(np.searchsorted(self._g_ts, end_ns, side="left"))
            ts, en = self._g_ts[lo:hi], self._g_end[lo:hi]
            ov = np.minimum(en, end_ns) - np.maximum(ts, start_ns)
            if len(ov) and ov.max() > 0:
                return self._gpu_item(int(np.argmax(ov)) + lo, "gpu", labels)
        else:
            lo = int(np.searchsorted(self._h_ts, mid - self._h_maxdur, side="left"))
            hi = int(np.searchsorted(self._h_ts, mid, side="right"))
            cover = np.flatnonzero(self._h_end[lo:hi] > mid)
            if len(cover):
                return self._host_item(cover + lo, "host", cat)
        step, _ = self._step_share(start_ns, 0)
        return Item(lane, "idle", labels[cat], start_ns, end_ns - start_ns, cat, labels[cat], step, None)

    # -- every item under a column, one per lane ----------------------------------------------------

    def _gpu_item(self, j: int, lane: str, labels: dict[str, str] = ITEM_LABELS) -> Item:
        """GPU operation ``j`` as an item of ``lane``; ``labels`` name its category (a stream's item
        says what the operation is; the merged GPU lane uses the breakdown's category names)."""
        kind_code = int(self._g_kind[j])
        if kind_code == 2:
            ck = int(self._g_copy_kind[j])
            kind = f"copy {COPY_KINDS[ck] if 0 <= ck < len(COPY_KINDS) else ''}".strip()
            name = f"Memcpy {COPY_KINDS[ck]}" if 0 <= ck < len(COPY_KINDS) else "Memcpy"
        else:
            kind = ("kernel", "communication kernel", "copy", "memset")[kind_code]
            name = self.trace.strings[int(self._g_name[j])] if self._g_name[j] >= 0 else kind
        dur = int(self._g_end[j] - self._g_ts[j])
        step, share = self._step_share(int(self._g_ts[j]), dur)
        own = ("compute", "communication", "copy", "memset")[kind_code]
        return Item(lane, kind, name, int(self._g_ts[j]), dur, own, labels[own], step, share)

    def _host_item(self, cover: np.ndarray, lane: str, cat: str) -> Item:
        """The innermost (shortest) of host ops ``cover`` as an item of ``lane`` in category ``cat``;
        the outermost, where it is another op, is its context."""
        length = self._h_end[cover] - self._h_ts[cover]
        j = int(cover[np.argmin(length)])
        outer = int(cover[np.argmax(length)])
        dur = int(self._h_end[j] - self._h_ts[j])
        step, share = self._step_share(int(self._h_ts[j]), dur)
        kind = ("cpu op", "annotation", "runtime")[int(self._h_kind[j])]
        context = self.trace.strings[int(self._h_name[outer])] if outer != j else None
        name = self.trace.strings[int(self._h_name[j])]
        return Item(lane, kind, name, int(self._h_ts[j]), dur, cat, HOST_LABELS[cat], step, share, context)

    def items_at(self, start_ns: int, end_ns: int) -> list[tuple[Lane, Item | None]]:
        """For every stream and thread lane, the item under [start_ns, end_ns): on a stream the one
        covering most of the window, on a thread the innermost op covering its middle; None when idle."""
        end_ns = max(end_ns, start_ns + 1)
        mid = (start_ns + end_ns) // 2
        out: list[tuple[Lane, Item | None]] = []
        lo = int(np.searchsorted(self._g_ts, start_ns - self._g_maxdur, side="left"))
        hi = int(np.searchsorted(self._g_ts, end_ns, side="left"))
        ov = np.minimum(self._g_end[lo:hi], end_ns) - np.maximum(self._g_ts[lo:hi], start_ns)
        streams = self._g_stream[lo:hi]
        for lane in self.stream_lanes:
            cand = np.flatnonzero((streams == lane.ident) & (ov > 0))
            item = None
            if len(cand):
                item = self._gpu_item(int(cand[np.argmax(ov[cand])]) + lo, lane.label)
            out.append((lane, item))
        lo = int(np.searchsorted(self._h_ts, mid - self._h_maxdur, side="left"))
        hi = int(np.searchsorted(self._h_ts, mid, side="right"))
        en, th = self._h_end[lo:hi], self._h_thread[lo:hi]
        for lane in self.thread_lanes:
            cover = np.flatnonzero((en > mid) & (th == lane.ident))
            item = None
            if len(cover):
                view = self.lane_view(lane, mid, mid + 1, 1)
                item = self._host_item(cover + lo, lane.label, view.categories[int(view.dominant[0])])
            out.append((lane, item))
        return out

    # -- finding things -------------------------------------------------------------------------------

    def find(self, text: str) -> list[Match]:
        """Kernels, ops, ranges and runtime calls whose name contains ``text`` (case-insensitive), by time."""
        words = text.lower().strip()
        if not words:
            return []
        ids = np.array([i for i, s in enumerate(self.trace.strings) if words in s.lower()], np.int64)
        if not len(ids):
            return []
        g = np.flatnonzero(np.isin(self._g_name, ids))
        h = np.flatnonzero(np.isin(self._h_name, ids))
        out = [
            Match(int(self._g_ts[j]), int(self._g_end[j]), "gpu", self.trace.strings[int(self._g_name[j])]) for j in g
        ]
        out += [
            Match(int(self._h_ts[j]), int(self._h_end[j]), "host", self.trace.strings[int(self._h_name[j])]) for j in h
        ]
        out.sort(key=lambda m: (m.start_ns, m.lane))
        return out

    def instances(self, name: str) -> list[Match]:
        """Every instance of the kernel called ``name`` on this GPU, longest first."""
        try:
            sid = self.trace.strings.index(name)
        except ValueError:
            return []
        j = np.flatnonzero(self._g_name == sid)
        j = j[np.argsort(-(self._g_end[j] - self._g_ts[j]), kind="stable")]
        return [Match(int(self._g_ts[i]), int(self._g_end[i]), "gpu", name) for i in j]

    def evidence(self, finding_id: str) -> tuple[int | None, Match | None]:
        """The worst step for a finding (most time in its category) and, in it, the longest interval
        of that category: what Enter on a finding or fix shows."""
        steps = self.segmentation.steps
        if not steps:
            return None, None
        cat = FINDING_CATEGORY.get(finding_id)
        if cat is None:
            worst = int(np.argmax([st.duration_ns for st in steps]))
            return worst, None
        sets = self.gpu_sets[GPU_CATEGORIES.index(cat)]
        per_step = iv.overlap_per_window(sets, np.asarray(self.step_starts), np.asarray(self.step_ends))
        worst = int(np.argmax(per_step))
        if per_step[worst] <= 0:
            return worst, None
        s, e = iv.clip(sets, int(self.step_starts[worst]), int(self.step_ends[worst]))
        k = int(np.argmax(e - s))
        return worst, Match(int(s[k]), int(e[k]), "gpu", GPU_LABELS[cat])
