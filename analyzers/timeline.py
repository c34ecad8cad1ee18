"""The timeline: what the GPU and the host were doing at every instant, on one time axis.

Two lanes, each an exclusive decomposition of the trace span into categories (every instant
belongs to exactly one), so a view at any zoom is answered with a few binary searches per
category instead of a pass over the events:

* GPU lane — the categories of :mod:`breakdown` (compute, communication, copy, memset, then the
  GPU's idle time by the host's reason: data wait, sync, launch/CPU overhead, other).
* Host lane — what the host thread was in: DataLoader wait, a synchronizing call, a runtime
  call (kernel launch), the optimizer, the backward pass, any other framework op, or nothing.

:meth:`TimelineModel.item_at` answers "what is this segment?" for a selected column.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.breakdown import BUSY, CATEGORIES, CATEGORY_LABELS, SYNC_CALL, gpu_layers, host_layers
from trainscope.analyzers.kernels import ALL_CLASSES
from trainscope.analyzers.steps import PROFILER_STEP, StepSegmentation, name_mask
from trainscope.traces.model import COPY_KINDS, Trace

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

    def __init__(self, trace: Trace, segmentation: StepSegmentation, device: int | None,
                 classes: np.ndarray | None = None) -> None:
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
            return iv.union(np.concatenate([o.ts[mask_ops], a.ts[mask_ann]]), np.concatenate([o.end[mask_ops], a.end[mask_ann]]))

        host_sets = [
            host["idle_data_wait"],
            iv.union(r.ts[sync_names[r.name]], r.end[sync_names[r.name]]),
            iv.union(r.ts, r.end),
            ranges(ops & opt_names[o.name], a_host & opt_names[a.name]),
            ranges(ops & bwd_names[o.name], a_host & bwd_names[a.name]),
            ranges(ops, a_host),
        ]
        self.host_sets = _exclusive_sets(host_sets, *self.span)
        self._index_items(classes)

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
        order = np.argsort(self._g_ts, kind="stable")
        for attr in ("_g_ts", "_g_end", "_g_name", "_g_copy_kind", "_g_kind"):
            setattr(self, attr, getattr(self, attr)[order])
        self._g_maxdur = int((self._g_end - self._g_ts).max()) if len(self._g_ts) else 0

        o, a, r = t.cpu_ops, t.annotations, t.runtime
        step_names = name_mask(t, PROFILER_STEP)
        a_host = (a.device < 0) & ~step_names[a.name]
        o_keep = ~step_names[o.name]
        self._h_ts = np.concatenate([o.ts[o_keep], a.ts[a_host], r.ts])
        self._h_end = np.concatenate([o.end[o_keep], a.end[a_host], r.end])
        self._h_name = np.concatenate([o.name[o_keep], a.name[a_host], r.name])
        self._h_kind = np.concatenate([np.zeros(int(o_keep.sum()), np.int64), np.ones(int(a_host.sum()), np.int64),
                                       np.full(len(r), 2, np.int64)])
        order = np.argsort(self._h_ts, kind="stable")
        for attr in ("_h_ts", "_h_end", "_h_name", "_h_kind"):
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
                j = int(np.argmax(ov)) + lo
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
                return Item("gpu", kind, name, int(self._g_ts[j]), dur, own, labels[own], step, share)
        else:
            lo = int(np.searchsorted(self._h_ts, mid - self._h_maxdur, side="left"))
            hi = int(np.searchsorted(self._h_ts, mid, side="right"))
            ts, en = self._h_ts[lo:hi], self._h_end[lo:hi]
            cover = np.flatnonzero(en > mid)
            if len(cover):
                length = (en - ts)[cover]
                j = int(cover[np.argmin(length)]) + lo
                outer = int(cover[np.argmax(length)]) + lo
                dur = int(self._h_end[j] - self._h_ts[j])
                step, share = self._step_share(int(self._h_ts[j]), dur)
                kind = ("cpu op", "annotation", "runtime")[int(self._h_kind[j])]
                context = self.trace.strings[int(self._h_name[outer])] if outer != j else None
                return Item("host", kind, self.trace.strings[int(self._h_name[j])], int(self._h_ts[j]), dur, cat,
                            labels[cat], step, share, context)
        step, _ = self._step_share(start_ns, 0)
        return Item(lane, "idle", labels[cat], start_ns, end_ns - start_ns, cat, labels[cat], step, None)
