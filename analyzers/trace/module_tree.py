"""Where in the model, where in the step: the trace's own hierarchy as one tree over the step windows.

The tree is built from the ranges the trace itself records, never from a list of model names:

- ``nn.Module: Name_i`` frames (``with_modules=True``; Kineto ``python_function`` events) — kind
  ``module``;
- ``record_function`` / ``user_annotation`` ranges (Kineto) — kind ``range``; NVTX push/pop ranges
  (Nsight exports) — kind ``nvtx``;
- autograd's backward nodes (``autograd::engine::evaluate_function: XBackward0`` operators) — kind
  ``range`` under ``backward``. A node at the top of the backward whose forward operator the trace
  names (Kineto's "Sequence number" and "Fwd thread id": :func:`forward_ops`) and which ran inside a
  module or range (outside every autograd node) hangs under that range's **mirror**: ``backward ›
  ResNet_0 › … › Conv2d_1…19 › ConvolutionBackward0``, the forward path's names under the backward
  phase, folded the same way, so a module's backward sits beside its forward. A mirror node holds no
  ranges of its own: its count is the forward ranges whose backward it holds, its host time 0, its
  instances those ranges' names (or occurrences). The other nodes (no sequence number — autograd's
  ``AccumulateGrad`` —, a forward operator in no range, a trace without the args: Nsight exports,
  older Kineto) stay under ``backward`` by their own names; the tree's note counts the mapped ones.

Ranges nest per host thread (:func:`nesting.nest_parents`: the innermost range still open, holding
the child whole). Ranges that hold a whole step window (``ProfilerStep#N``, a ``profile`` range
around the run) are above the tree and left out; GPU-side copies of host ranges are left out.

**GPU time.** Every GPU operation in the windows on the analyzed GPU (kernels, copies, memsets, on
any stream) goes to exactly one node: the innermost range enclosing the runtime call that launched
it (matched by correlation id), on the launching thread. So the nodes' exclusive times partition the
window's GPU time, and the first level's inclusive times sum to it. Work whose launch lies in no
range goes to the phase whose range was open at the launch on any thread (the GPU runs behind the
host, and backward runs on autograd's own thread while the main thread's ``backward`` range is
open); host-to-device copies launched outside every phase go to ``data-to-device``; the rest —
including work whose launch the trace did not record — to ``(outside any range)``.

**First level.** ``forward``, ``backward``, ``optimizer`` (ranges named like them, as
:mod:`phases` reads them: the outermost such range on its thread is the phase; a nested one is an
ordinary node under it; autograd nodes outside every phase range are backward) and
``data-to-device``, where the trace shows them; then top-level ranges in no phase (an inference
model's ``nn.Module``); then ``(outside any range)``.

**Folding.** Siblings whose names differ only in their digits (``layers.0`` … ``layers.27``,
``Qwen2DecoderLayer_0`` … ``_27``, ``Block 3``) are one node: their children are matched the same
way, so the repeated block's inside is one subtree. A folded node keeps its instances: the spread
(min, median, max) of GPU time per instance — per distinct name where the names differ, else per
occurrence within a step (``#k``) — and the slowest instance by name.

Everything is vectorized over the columns: one nesting pass over ranges and launch calls, then
loops over tree levels and nodes only (never over events).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field

import numpy as np
import numpy.typing as npt

from trainscope.analyzers import codes
from trainscope.analyzers.intervals import searchsorted
from trainscope.analyzers.nesting import nest_gathered
from trainscope.analyzers.nesting import nest_parents
from trainscope.analyzers.nesting import outer_first
from trainscope.analyzers.trace import heap
from trainscope.analyzers.trace.cost import KernelCosts
from trainscope.analyzers.trace.phases import PHASE_PATTERNS
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import Trace

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "data-to-device")
OUTSIDE = "(outside any range)"
MODULE_PREFIX = "nn.Module: "
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function: "
STEP_MARKER = "ProfilerStep#"
BOUNDS: tuple[str, ...] = ("memory", "compute", "communication", "unknown")
TOP_KERNELS = 3

_DIGITS = re.compile(r"\d+")
_TIME_PRIORITY = ("optimizer", "backward", "forward")  # where phase ranges overlap in time (phases.py)


@dataclass
class Node:
    """One node: a phase, or the ranges of one name (digits aside) under one parent node."""

    path: tuple[str, ...]  # names from the first level down to this node
    name: str
    kind: str  # "phase" | "module" | "range" | "nvtx" | "outside"
    count: int  # ranges of this node in the windows (occurrences: a folded block's layers × steps)
    host_ns: int  # host time of those ranges, clipped to the windows
    gpu_ns_inclusive: int  # GPU time launched inside the node or below it
    gpu_ns_exclusive: int  # launched inside it and in none of its children
    flops: float | None  # of its kernels (inclusive) where the cost model knows them
    bytes: float | None
    tflops: float | None  # achieved: FLOPs ÷ time of the kernels with known FLOPs
    gbps: float | None
    bound: str  # the roofline bound carrying most of its kernel time
    share_of_peak_pct: float | None  # kernel-time-weighted % of roof (roofline rows), where known
    top_kernels: list[tuple[str, int, int]]  # (kernel name, calls, ns), heaviest first (inclusive)
    instances: int = 1  # distinct instances folded into this node (layers 0…N: N + 1)
    spread_ns: tuple[int, int, int] | None = None  # min, median, max GPU time per instance
    slowest: str | None = None  # the instance with the most GPU time
    children: list[Node] = field(default_factory=list)
    omitted: int = 0  # children a stored tree left out (:func:`top_levels`); 0 in a tree read from a trace
    roof_ns: int = 0  # GPU time of its kernels whose % of roof is known (what share_of_peak_pct weighs)
    bound_ns: dict[str, int] = field(default_factory=dict)  # GPU time per roofline bound (BOUNDS), inclusive
    autograd: bool = False  # autograd's backward nodes (``XBackward0``): a repeat is another operator, not a block

    @property
    def folded(self) -> bool:
        return self.instances > 1


@dataclass
class ModuleTree:
    roots: list[Node]  # the first level
    gpu_ns: int  # GPU time of the window's work on the analyzed GPU (what the roots' inclusive times sum to)
    windows: int  # step windows
    ranges: dict[str, int]  # ranges used, by kind
    unlinked: int  # GPU operations whose launch the trace did not record (in the outside node)
    notes: list[str] = field(default_factory=list)
    omitted: int = 0  # first-level nodes a stored tree left out (:func:`top_levels`)

    @property
    def partial(self) -> bool:
        """Whether this is a stored tree's top levels (:func:`top_levels`): some nodes were left out."""
        return bool(self.omitted) or any(n.omitted for _, n in self.walk())

    def walk(self) -> list[tuple[int, Node]]:
        """(depth, node) for every node, depth first, children heaviest first."""
        out: list[tuple[int, Node]] = []

        def rec(n: Node, d: int) -> None:
            out.append((d, n))
            for c in n.children:
                rec(c, d + 1)

        for r in self.roots:
            rec(r, 0)
        return out

    def find(self, *path: str) -> Node | None:
        for _, n in self.walk():
            if n.path == tuple(path):
                return n
        return None


def _display(name: str) -> str:
    if name.startswith(MODULE_PREFIX):
        return name[len(MODULE_PREFIX) :]
    if name.startswith(AUTOGRAD_PREFIX):
        return name[len(AUTOGRAD_PREFIX) :]
    return name


def folded_name(names: list[str]) -> str:
    """One name for instances whose names differ only in their digits: the digit runs that vary
    become ``lo…hi`` (``Layer_0``, ``Layer_27`` → ``Layer_0…27``)."""
    uniq = sorted(set(names))
    if len(uniq) == 1:
        return uniq[0]
    parts = [_DIGITS.split(n) for n in uniq]
    runs = [_DIGITS.findall(n) for n in uniq]
    if any(len(r) != len(runs[0]) for r in runs) or any(p != parts[0] for p in parts):
        return uniq[0]
    out = parts[0][0]
    for j in range(len(runs[0])):
        vals = [r[j] for r in runs]
        if len(set(vals)) == 1:
            out += vals[0]
        else:
            nums = [int(v) for v in vals]
            out += f"{min(nums)}…{max(nums)}"
        out += parts[0][j + 1]
    return out


def _window_of(ts: I64, ends: I64, ws: I64, we: I64) -> I64:
    """Index of the step window each interval overlaps (the last starting before its end), −1: none."""
    if not len(ws):
        return np.full(len(ts), -1, np.int64)
    j = np.searchsorted(ws, ends, side="left") - 1
    ok = j >= 0
    jj = np.clip(j, 0, None)
    ok &= we[jj] > ts
    return np.where(ok, j, -1).astype(np.int64)


def _phase_at(t: I64, sets: dict[str, tuple[I64, I64]]) -> I64:
    """Phase index (into PHASES) open at each time, optimizer over backward over forward; −1: none."""
    out = np.full(len(t), -1, np.int64)
    for name in reversed(_TIME_PRIORITY):  # later assignments win
        s, e = sets.get(name, (np.empty(0, np.int64), np.empty(0, np.int64)))
        if not len(s) or not len(t):
            continue
        i = searchsorted(s, t, side="right") - 1
        ok = i >= 0
        ok[ok] = t[ok] < e[i[ok]]
        out[ok] = PHASES.index(name)
    return out


def _union(s: I64, e: I64) -> tuple[I64, I64]:
    if not len(s):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]
    starts = s[new]
    idx = np.flatnonzero(new)
    ends = reach[np.append(idx[1:] - 1, len(s) - 1)]
    return starts.astype(np.int64), ends.astype(np.int64)


def _clipped_total(s: I64, e: I64, ws: I64, we: I64) -> int:
    """Length of the union of [s, e) inside the windows."""
    us, ue = _union(s, e)
    tot = 0
    for a, b in zip(ws.tolist(), we.tolist()):
        tot += int(np.clip(np.minimum(ue, b) - np.maximum(us, a), 0, None).sum())
    return tot


def _last_before(f_key: I64, f_ts: I64, q_key: I64, q_ts: I64) -> I64:
    """For each query (key, time): the index of the last item with the same key starting at or
    before it (−1: none). One sort of items and queries together."""
    n = len(f_key)
    key = np.concatenate([f_key, q_key])
    ts = np.concatenate([f_ts, q_ts])
    is_q = np.r_[np.zeros(n, bool), np.ones(len(q_key), bool)]
    o = np.lexsort((is_q, ts, key))  # by key, then time; items before queries at equal times
    at = np.where(is_q[o], -1, np.arange(len(o)))
    at = np.maximum.accumulate(at)  # the position of the last item at or before each position
    last = np.where(at >= 0, o[np.clip(at, 0, None)], -1)
    pos = np.empty(len(o), np.int64)
    pos[o] = np.arange(len(o))
    hit = last[pos[n:]]
    ok = hit >= 0
    ok[ok] = f_key[hit[ok]] == q_key[ok]
    out: I64 = np.where(ok, hit, -1).astype(np.int64)
    return out


def forward_ops(trace: Trace, rows: I64) -> I64:
    """For each operator row in ``rows`` (autograd's backward nodes), the ``cpu_ops`` row of the
    forward operator that created it, −1 where the trace does not tell.

    A forward operator (its "Fwd thread id" 0) and the backward node it created share the sequence
    number, a counter of the forward thread; the node's "Fwd thread id" names that thread by the
    profiler's own id, which the trace does not tie to its threads: each id is the trace thread whose
    forward operators hold the most of its nodes' sequence numbers (none on a tie). Several operators
    carry one number (the composite operator around the one that created the node, operators without
    a node since the last one); the node's is the last of them to start before the node — the counter
    moves on when a node is created, so later operators carry a later number."""
    op, oi = trace.cpu_ops, trace.op_inputs
    out = np.full(len(rows), -1, np.int64)
    seq, fwd = oi.cpu_sequence, oi.cpu_fwd_thread
    if not len(rows) or len(seq) != len(op) or len(fwd) != len(op):
        return out
    qs, qf, qt = seq[rows].astype(np.int64), fwd[rows].astype(np.int64), op.ts[rows].astype(np.int64)
    fsel = np.flatnonzero((seq >= 0) & (fwd == 0))
    ask = (qs >= 0) & (qf > 0)
    if not ask.any() or not len(fsel):
        return out
    f_thr = op.thread[fsel].astype(np.int64)
    f_seq = seq[fsel].astype(np.int64)
    f_ts = op.ts[fsel].astype(np.int64)
    threads = np.unique(f_thr)
    for fid in np.unique(qf[ask]).tolist():
        q = np.flatnonzero(ask & (qf == fid))
        best, best_hits, tie = None, 0, False
        for th in threads.tolist():
            on = np.flatnonzero(f_thr == th)
            m = _last_before(f_seq[on], f_ts[on], qs[q], qt[q])
            hits = int((m >= 0).sum())
            if hits > best_hits:
                best, best_hits, tie = np.where(m >= 0, fsel[on[np.clip(m, 0, None)]], -1), hits, False
            elif hits and hits == best_hits:
                tie = True
        if best is not None and not tie:
            out[q] = best
    return out


def _launch_rows(r_corr: np.ndarray, w_corr: I64) -> I64:
    """For each operation's correlation id, the runtime row that launched it (−1: none), by a binary
    search in the runtime calls' ids sorted once — no sort where they are in order already, as a
    table's are (its sort and gathers of 2 M calls, held through the tree, were ≈ 90 MiB)."""
    out = np.full(len(w_corr), -1, np.int64)
    if not len(r_corr) or not len(w_corr):
        return out
    rsel = np.flatnonzero(r_corr >= 0)
    rc, o = codes.ascending(r_corr[rsel])
    rrow = rsel if o is None else rsel[o]
    if len(rc):
        pos = np.clip(searchsorted(rc, w_corr), 0, len(rc) - 1)
        hit = (w_corr >= 0) & (rc[pos] == w_corr)
        out[hit] = rrow[pos[hit]]
    return out


def module_tree(
    trace: Trace,
    windows: tuple[np.ndarray, np.ndarray],
    device: int | None,
    costs: KernelCosts | None = None,
    roof_rows: dict[str, tuple[str, float | None]] | None = None,
) -> ModuleTree | None:
    """The tree of the trace's ranges over the step ``windows`` (sorted, disjoint starts and ends) on
    ``device``. ``costs``: FLOPs and bytes per kernel (aligned with ``trace.kernels``); ``roof_rows``:
    per kernel name, its roofline bound and % of roof (``roofline.Roofline.rows``). None when the
    trace records neither ranges nor GPU work."""
    ws = np.asarray(windows[0], np.int64)
    we = np.asarray(windows[1], np.int64)
    S = trace.strings
    k, cp, ms, rt = trace.kernels, trace.copies, trace.memsets, trace.runtime

    # --- the GPU work in the windows ------------------------------------------------------------
    def in_windows(ts: np.ndarray, dev: np.ndarray) -> np.ndarray:
        if not len(ws):
            return np.zeros(len(ts), bool)
        j: np.ndarray = searchsorted(ws, ts, side="right") - 1
        ok: np.ndarray = j >= 0
        ok[ok] = ts[ok] < we[j[ok]]
        if device is not None:
            ok &= dev == device
        return ok

    kin, cin, min_ = in_windows(k.ts, k.device), in_windows(cp.ts, cp.device), in_windows(ms.ts, ms.device)
    ki = np.flatnonzero(kin).astype(np.int32) if len(kin) < 1 << 31 else np.flatnonzero(kin)  # held to the sums
    ci = np.flatnonzero(cin)
    mi = np.flatnonzero(min_)
    del kin, cin, min_
    nk, nc = len(ki), len(ci)
    nw = nk + nc + len(mi)
    w_corr = np.concatenate([k.correlation[ki], cp.correlation[ci], ms.correlation[mi]]).astype(np.int64)
    extra_names = [f"Memcpy {c}" for c in COPY_KINDS] + ["Memset"]
    # per name: bound code and % of roof, from the roofline rows
    nnames = len(S) + len(extra_names)
    name_bound = np.full(nnames, BOUNDS.index("unknown"), np.int64)
    name_pct = np.full(nnames, np.nan)
    if roof_rows:
        index = {s: i for i, s in enumerate(S)}
        for nm, (b, pct) in roof_rows.items():
            i = index.get(nm)
            if i is None:
                continue
            name_bound[i] = BOUNDS.index(b) if b in BOUNDS else BOUNDS.index("unknown")
            name_pct[i] = np.nan if pct is None else pct

    # --- the launches: runtime row of each operation, by correlation id ---------------------------
    w_launch = _launch_rows(rt.correlation, w_corr)
    del w_corr
    if len(rt) < 1 << 31:  # row numbers, held through the nesting: four bytes each
        w_launch = w_launch.astype(np.int32)
    linked = w_launch >= 0
    launches, w_li = codes.unique_inverse(w_launch[linked])
    w_lidx = np.full(nw, -1, np.int32 if nw < 1 << 31 else np.int64)
    w_lidx[linked] = w_li.reshape(-1)
    del w_li

    # --- the ranges ---------------------------------------------------------------------------------
    a = trace.annotations
    on_host = a.device < 0
    a_end = a.ts + a.dur
    if len(ws) and on_host.any():  # a range holding a whole step window is above the tree
        j = np.searchsorted(ws, a.ts, side="left")  # first window starting at or after the range
        jj = np.clip(j, 0, len(ws) - 1)
        holds = (j < len(ws)) & (we[jj] <= a_end)
        on_host &= ~holds
    if on_host.any():  # the profiler's own step markers, held window or not (a warm-up step's)
        marker = np.array([s.startswith(STEP_MARKER) for s in S], bool)
        on_host &= ~marker[a.name]
    ai = np.flatnonzero(on_host)
    pf = trace.python_frames
    is_mod = np.array([s.startswith(MODULE_PREFIX) for s in S], bool) if S else np.zeros(0, bool)
    is_ag = np.array([s.startswith(AUTOGRAD_PREFIX) for s in S], bool) if S else np.zeros(0, bool)
    pi = np.flatnonzero(is_mod[pf.name]) if len(pf) else np.empty(0, np.int64)
    op = trace.cpu_ops
    oi = np.flatnonzero(is_ag[op.name]) if len(op) else np.empty(0, np.int64)
    ann_kind = "nvtx" if trace.format.startswith("nsys") else "range"
    KINDS = (ann_kind, "module", "range")
    r_ts = np.concatenate([a.ts[ai], pf.ts[pi], op.ts[oi]]).astype(np.int64)
    r_end = np.concatenate([a_end[ai], pf.ts[pi] + pf.dur[pi], op.ts[oi] + op.dur[oi]]).astype(np.int64)
    r_thread = np.concatenate([a.thread[ai], pf.thread[pi], op.thread[oi]]).astype(np.int32)  # codes
    r_name = np.concatenate([a.name[ai], pf.name[pi], op.name[oi]]).astype(np.int64)
    r_kind = np.concatenate([np.zeros(len(ai), np.int8), np.ones(len(pi), np.int8), np.full(len(oi), 2, np.int8)])
    r_autograd = np.concatenate([np.zeros(len(ai) + len(pi), bool), np.ones(len(oi), bool)])
    nr = len(r_ts)
    if not nr and not nw:
        return None

    # phase pattern of each range (annotations only: a module or an autograd node is never a phase)
    pat_of_name: dict[int, int] = {}
    for i in np.unique(a.name[ai]).tolist():
        for pname, rx in PHASE_PATTERNS:
            if rx.search(S[i]):
                pat_of_name[i] = PHASES.index(pname)
                break
    r_pat = np.full(nr, -1, np.int64)
    if pat_of_name:
        lut = np.full(len(S), -1, np.int64)
        for i, p in pat_of_name.items():
            lut[i] = p
        r_pat[: len(ai)] = lut[a.name[ai]]

    # --- one nesting pass over the ranges and the launch calls, per thread -----------------------
    l_ts = rt.ts[launches].astype(np.int64)
    l_end = (rt.ts[launches] + rt.dur[launches]).astype(np.int64)
    l_thread = rt.thread[launches]
    del launches
    all_ts = np.concatenate([r_ts, l_ts])
    all_end = np.concatenate([r_end, l_end])
    all_thread = np.concatenate([r_thread, l_thread.astype(np.int32)])  # codes: compared, never summed
    del l_ts, l_end, l_thread  # joined: not held through the nesting
    heap.release()  # the launch join's freed columns handed back before the nesting
    order = outer_first(all_ts, all_end - all_ts, all_thread)
    if len(order) < 1 << 31:
        order = order.astype(np.int32)  # held through the nesting: four bytes a row
    # each column gathered along the order in turn, the unordered one dropped: held once through the nesting
    all_ts = all_ts[order]
    all_end = all_end[order]
    all_thread = all_thread[order]
    parent = nest_gathered(all_ts, all_end, all_thread, order)
    # a range is never held by a launch call: jump past launch calls to the innermost range
    while True:
        bad = parent >= nr
        if not bad.any():
            break
        parent[bad] = parent[parent[bad]]
    r_parent = parent[:nr].copy()  # its own: the launch calls' part dies with l_range, not with r_parent
    l_range = parent[nr:]  # innermost range around each launch call, −1: none
    del parent
    # the nesting's inputs are read no more: not held through the rest (a 1 GB export: ≈ 200 MiB)
    del all_ts, all_end, all_thread, order, a_end, on_host

    # depth of each range, and the nearest phase-pattern ancestor
    def nearest(mask: np.ndarray) -> I64:
        cand = r_parent.copy()
        while True:
            move = (cand >= 0) & ~mask[np.clip(cand, 0, None)]
            if not move.any():
                out: I64 = cand
                return out
            cand[move] = r_parent[cand[move]]

    is_pat = r_pat >= 0
    r_phase_range = is_pat & (nearest(is_pat) < 0) if nr else np.zeros(0, bool)
    # A range holding a phase range (``nn.Module: DistributedDataParallel_0`` around the
    # ``DistributedDataParallel.forward`` range) wraps the phases: it is left out, like a step marker,
    # and what it holds is placed as if it were not there.
    wrapper = np.zeros(nr, bool)
    cur = np.where(r_phase_range, r_parent, -1)
    while True:
        on = cur >= 0
        if not on.any():
            break
        wrapper[cur[on]] = True
        cur = np.where(on, r_parent[np.clip(cur, 0, None)], -1)
    if wrapper.any():
        r_parent = np.where((r_parent >= 0) & wrapper[np.clip(r_parent, 0, None)], -1, r_parent)
        l_range = np.where((l_range >= 0) & wrapper[np.clip(l_range, 0, None)], -1, l_range)
    phase_anc = nearest(r_phase_range) if nr else np.empty(0, np.int64)

    # time sets of the phase ranges, for work and ranges on other threads
    phase_sets: dict[str, tuple[I64, I64]] = {}
    for p, pname in enumerate(PHASES):
        sel = r_phase_range & (r_pat == p)
        if sel.any():
            phase_sets[pname] = _union(r_ts[sel], r_end[sel])

    # phase of each range: its phase range; else (a top-level range) the phase open on any thread
    # at its start; else backward for an autograd node; else none (−1)
    r_phase = np.full(nr, -1, np.int64)
    r_phase[r_phase_range] = r_pat[r_phase_range]
    inside = phase_anc >= 0
    r_phase[inside] = r_pat[phase_anc[inside]]
    rest = ~r_phase_range & ~inside
    # ranges whose topmost ancestor is not a phase: the topmost ancestor decides for its subtree
    top = r_parent.copy()
    while True:
        up = (top >= 0) & (r_parent[np.clip(top, 0, None)] >= 0)
        if not up.any():
            break
        top[up] = r_parent[top[up]]
    root_of = np.where(top >= 0, top, np.arange(nr))
    root_phase = _phase_at(r_ts, phase_sets)
    root_phase = np.where((root_phase < 0) & r_autograd, PHASES.index("backward"), root_phase)
    r_phase[rest] = root_phase[root_of[rest]]
    del top, root_of, root_phase, rest, inside

    # --- autograd's backward nodes ↔ the forward operators that created them -----------------------
    # A node at the top of the backward (no range around it but a phase) whose forward operator lies
    # in a range outside every autograd node hangs under that range's mirror in its phase.
    g0 = nr - len(oi)
    r_map = np.full(nr, -1, np.int64)  # the innermost range around the node's forward operator
    fop = forward_ops(trace, oi) if len(oi) else np.empty(0, np.int64)
    has_f = fop >= 0
    if has_f.any():
        fu, finv = np.unique(fop[has_f], return_inverse=True)
        f_ts, f_end = op.ts[fu].astype(np.int64), (op.ts[fu] + op.dur[fu]).astype(np.int64)
        f_th = op.thread[fu].astype(np.int64)
        b_ts, b_end, b_th = (
            np.concatenate([r_ts, f_ts]),
            np.concatenate([r_end, f_end]),
            np.concatenate([r_thread, f_th]),
        )
        fpar = nest_parents(b_ts, b_end, order=outer_first(b_ts, b_end - b_ts, b_th), groups=b_th)
        while True:  # an operator inside another: the range around the outer one
            bad = fpar >= nr
            if not bad.any():
                break
            fpar[bad] = fpar[fpar[bad]]
        fr = fpar[nr:][finv.reshape(-1)]
        fr = np.where((fr >= 0) & wrapper[np.clip(fr, 0, None)], -1, fr)
        under_ag = r_autograd.copy()  # an autograd node or inside one (a recomputed forward)
        anc = r_parent.copy()
        while True:
            on = anc >= 0
            if not on.any():
                break
            under_ag[on] |= r_autograd[anc[on]]
            anc[on] = r_parent[anc[on]]
        g_rows = g0 + np.flatnonzero(has_f)
        gp = r_parent[g_rows]
        ok = (gp < 0) | r_phase_range[np.clip(gp, 0, None)]
        ok &= fr >= 0
        ok[ok] = ~r_phase_range[fr[ok]] & ~under_ag[fr[ok]]
        r_map[g_rows[ok]] = fr[ok]
    r_target = np.where(r_phase >= 0, r_phase, len(PHASES))  # the phase (or the root) a node hangs in

    # --- nodes, level by level ------------------------------------------------------------------
    # node table: parent node, name key, kind; the first nodes are the phases, the virtual root, outside
    n_parent: list[int] = [-1] * len(PHASES) + [-1, -1]
    n_names: list[list[int]] = [[] for _ in range(len(PHASES) + 2)]
    n_label: list[str] = list(PHASES) + ["", OUTSIDE]
    n_kind: list[str] = ["phase"] * len(PHASES) + ["root", "outside"]
    n_autograd: list[bool] = [False] * (len(PHASES) + 2)
    n_key: list[tuple[int, int]] = [(-1, -1)] * (len(PHASES) + 2)  # (canonical name, range kind)
    ROOT, OUT = len(PHASES), len(PHASES) + 1
    canon: dict[str, int] = {}
    name_canon = np.full(len(S), -1, np.int64)
    for i in np.unique(r_name).tolist():
        c = _DIGITS.sub("#", _display(S[i]))
        name_canon[i] = canon.setdefault(c, len(canon))
    r_node = np.full(nr, -1, np.int64)
    r_node[r_phase_range] = r_pat[r_phase_range]
    depth = np.zeros(nr, np.int64)
    cur = r_parent.copy()
    while True:
        on = cur >= 0
        if not on.any():
            break
        depth[on] += 1
        cur[on] = r_parent[cur[on]]
    key_index: dict[tuple[int, int, int], int] = {}

    def new_node(key: tuple[int, int, int], kind: str, autograd: bool) -> int:
        got = key_index[key] = len(n_parent)
        n_parent.append(key[0])
        n_names.append([])
        n_label.append("")
        n_kind.append(kind)
        n_autograd.append(autograd)
        n_key.append((key[1], key[2]))
        return got

    # mirrors: (phase, forward node) → the node of the same name path under that phase
    mirror: dict[tuple[int, int], int] = {}

    def mirror_of(target: int, nid: int) -> int:
        got = mirror.get((target, nid))
        if got is None:
            par = n_parent[nid]
            pm = target if par < len(PHASES) + 2 else mirror_of(target, par)
            key = (pm, *n_key[nid])
            got = key_index.get(key)
            if got is None:
                got = new_node(key, n_kind[nid], False)
            mirror[(target, nid)] = got
        return got

    # read no more: not held through the node building and the per-node sums (the tree's peak)
    del phase_anc, fop, r_thread, bad
    # mapped nodes and what they hold are placed after the rest (their parents are mirrors)
    deferred = r_map >= 0
    for d in range(1, int(depth.max()) + 1 if nr else 0):
        lvl = np.flatnonzero(depth == d)
        deferred[lvl] |= deferred[r_parent[lvl]]
    hang = np.full(nr, -1, np.int64)  # the mirror node a mapped backward node hangs under
    for second in (False, True):
        if second:
            if not deferred.any():
                break
            for g in np.flatnonzero(r_map >= 0).tolist():
                fnode = int(r_node[r_map[g]])
                if fnode >= 0:
                    hang[g] = mirror_of(int(r_target[g]), fnode)
        todo = deferred if second else ~deferred
        for d in range(int(depth.max()) + 1 if nr else 0):
            lvl = np.flatnonzero((depth == d) & ~r_phase_range & ~wrapper & todo)
            if not len(lvl):
                continue
            par = r_parent[lvl]
            has_par = par >= 0
            pnode = np.where(
                has_par & ~r_phase_range[np.clip(par, 0, None)],
                r_node[np.clip(par, 0, None)],
                np.where(r_phase[lvl] >= 0, r_phase[lvl], ROOT),
            )
            pnode = np.where(pnode < 0, ROOT, pnode)  # a parent without a node (cannot happen): the root
            pnode = np.where(hang[lvl] >= 0, hang[lvl], pnode)
            # (parent node, canonical name, kind) packed in one integer in their lexicographic order:
            # np.unique(axis=0) of the three-column rows sorted 5 M rows of a 1 GB export as bytes
            # (2 s); one int64 key sorts (or counts) in a tenth of that, the same keys in the same order
            n_canon, n_kinds = max(len(canon), 1), len(KINDS)
            packed = (pnode * n_canon + name_canon[r_name[lvl]]) * n_kinds + r_kind[lvl]
            uk, inv = codes.unique_inverse(packed)
            ids = np.empty(len(uk), np.int64)
            for row, u in enumerate(uk.tolist()):
                pn, rest_ = divmod(u, n_canon * n_kinds)
                cn, kd = divmod(rest_, n_kinds)
                key = (pn, cn, kd)
                got = key_index.get(key)
                if got is None:
                    got = new_node(key, KINDS[kd], kd == 2)
                ids[row] = got
            r_node[lvl] = ids[inv.reshape(-1)]
    nn_ = len(n_parent)

    # --- each operation's node ----------------------------------------------------------------------
    # the operations' durations and names, built now (not held through the nesting)
    w_dur = np.concatenate([k.dur[ki], cp.dur[ci], ms.dur[mi]]).astype(np.int64)
    # a name per operation: kernels by their string; copies and memsets by their kind, past the strings
    w_name: npt.NDArray[np.signedinteger] = np.concatenate(
        [k.name[ki].astype(np.int64), len(S) + cp.kind[ci].astype(np.int64), np.full(len(mi), len(S) + len(COPY_KINDS))]
    ).astype(np.int32 if len(S) + len(extra_names) < 1 << 31 else np.int64)  # codes: indices, never summed
    w_htod = np.zeros(nw, bool)
    w_htod[nk : nk + nc] = cp.kind[ci] == COPY_KINDS.index("HtoD")
    del ci, mi
    w_range = np.full(nw, -1, np.int64)
    w_range[linked] = l_range[w_lidx[linked]]
    del l_range  # with r_parent its own copy, the nesting's whole column goes here
    w_node = np.full(nw, OUT, np.int64)
    has_r = w_range >= 0
    w_node[has_r] = r_node[w_range[has_r]]
    free = linked & ~has_r
    if free.any():
        lt = rt.ts[w_launch[free]].astype(np.int64)
        ph = _phase_at(lt, phase_sets)
        fi = np.flatnonzero(free)
        w_node[fi[ph >= 0]] = ph[ph >= 0]
        d2d = (ph < 0) & w_htod[fi]
        w_node[fi[d2d]] = PHASES.index("data-to-device")
    # an operation inside a phase range (not in a child) is the phase's own: its range has no node
    inst = np.full(nw, -1, np.int64)
    if nr:
        inst = np.where(has_r & ~r_phase_range[np.clip(w_range, 0, None)], w_range, -1)
    del w_range, w_lidx, has_r, free, w_htod  # read no more (a million operations: ≈ 30 MiB)
    # the operations' figures the rest reads, taken now: their million-row columns are not held
    # through the per-node sums and the instances (the tree's deepest points)
    wd = w_dur.astype(np.float64)
    # no range: one bin past the ranges, dropped (each range's sum adds the same values in the same
    # order as over the selected rows, without gathering them)
    inst[inst < 0] = nr
    inst_gpu = np.bincount(inst, weights=wd, minlength=nr + 1)[:nr].astype(np.float64)
    del inst
    d2d_ops = w_node == PHASES.index("data-to-device")
    d2d_count = int(d2d_ops.sum())
    d2d_calls = np.unique(w_launch[d2d_ops & linked])
    d2d_host = float(rt.dur[d2d_calls].sum()) if len(d2d_calls) else 0.0
    out_count = int((w_node == OUT).sum())
    gpu_total = int(w_dur.sum())
    unlinked = int((~linked).sum())
    del d2d_ops, d2d_calls, w_launch, linked, w_dur

    # --- per node sums (exclusive), then inclusive up the tree -------------------------------------
    def per_node(weights: np.ndarray, nodes: np.ndarray = w_node) -> F64:
        out: F64 = np.bincount(nodes, weights=weights, minlength=nn_).astype(np.float64)
        return out

    w_flops = np.full(nw, np.nan)
    w_bytes = np.full(nw, np.nan)
    if costs is not None and len(costs.flops) == len(k):
        w_flops[:nk] = costs.flops[ki]
        w_bytes[:nk] = costs.bytes[ki]
    del ki
    fk = ~np.isnan(w_flops)
    bk = ~np.isnan(w_bytes)
    pk = ~np.isnan(name_pct[w_name])
    cols = {
        "gpu": per_node(wd),
        "flops": per_node(np.where(fk, w_flops, 0.0)),
        "fdur": per_node(np.where(fk, wd, 0.0)),
        "fn": per_node(fk.astype(np.float64)),
        "bytes": per_node(np.where(bk, w_bytes, 0.0)),
        "bdur": per_node(np.where(bk, wd, 0.0)),
        "bn": per_node(bk.astype(np.float64)),
        "pct": per_node(np.where(pk, name_pct[w_name] * wd, 0.0)),
        "pdur": per_node(np.where(pk, wd, 0.0)),
    }
    del fk, bk, pk, w_flops, w_bytes
    # GPU time per (node, bound) in one count: each bin sums the values the four masked counts summed
    # (they added zeros besides), in the same order
    nb = w_node * len(BOUNDS)
    nb += name_bound[w_name]
    bound_t = np.bincount(nb, weights=wd, minlength=nn_ * len(BOUNDS)).reshape(nn_, len(BOUNDS))
    del nb
    exclusive = cols["gpu"].copy()
    n_par = np.array(n_parent, np.int64)
    n_depth = np.zeros(nn_, np.int64)
    cur = n_par.copy()
    while True:
        on = cur >= 0
        if not on.any():
            break
        n_depth[on] += 1
        cur[on] = n_par[cur[on]]
    by_depth = np.argsort(-n_depth, kind="stable")
    for arr in [*cols.values(), bound_t]:
        for nid in by_depth.tolist():
            p = n_parent[nid]
            if p >= 0:
                arr[p] += arr[nid]

    # top kernels, inclusive: (node, name) pairs carried to every ancestor
    pair = w_node * nnames
    pair += w_name  # in place: the names are 32-bit codes
    up_, pinv = codes.unique_inverse(pair)
    del pair
    p_ns = np.bincount(pinv.reshape(-1), weights=wd, minlength=len(up_))
    p_cnt = np.bincount(pinv.reshape(-1), minlength=len(up_))
    del pinv
    tops: dict[int, dict[int, list[float]]] = {}
    for u, t_ns, c in zip(up_.tolist(), p_ns.tolist(), p_cnt.tolist()):
        nid, nm = divmod(u, nnames)
        while nid >= 0:
            slot = tops.setdefault(nid, {}).setdefault(nm, [0.0, 0.0])
            slot[0] += t_ns
            slot[1] += c
            nid = n_parent[nid]

    del w_node, w_name, wd, per_node

    # --- instances: counts, host time, per-instance inclusive GPU time -------------------------------
    r_win = _window_of(r_ts, r_end, ws, we)
    in_win = r_win >= 0
    wj = np.clip(r_win, 0, None)
    clip_ns = np.where(
        in_win, np.minimum(r_end, we[wj] if len(we) else r_end) - np.maximum(r_ts, ws[wj] if len(ws) else r_ts), 0
    )
    node_ok = r_node >= len(PHASES) + 2
    count: I64 = np.bincount(r_node[in_win & node_ok], minlength=nn_).astype(np.int64)
    host = np.bincount(r_node[node_ok], weights=np.clip(clip_ns[node_ok], 0, None), minlength=nn_)
    for d in range(int(depth.max()) if nr else 0, 0, -1):  # deepest first, up to non-phase parents
        lvl = np.flatnonzero(depth == d)
        par = r_parent[lvl]
        ok = (par >= 0) & ~r_phase_range[np.clip(par, 0, None)] & ~r_phase_range[lvl]
        np.add.at(inst_gpu, par[ok], inst_gpu[lvl[ok]])
    # mirror rows: each forward range on the way up from a mapped node's forward operator, per phase,
    # with the GPU time of the backward nodes it holds (a mirror's count, names and instances)
    mg = np.flatnonzero(hang >= 0)
    cur = r_map[mg]
    pv: list[I64] = []
    pg: list[I64] = []
    while len(cur):
        ok = (cur >= 0) & ~r_phase_range[np.clip(cur, 0, None)]
        mg, cur = mg[ok], cur[ok]
        pv.append(cur)
        pg.append(mg)
        cur = r_parent[cur]
    v_rows = np.empty(0, np.int64)
    v_node = np.empty(0, np.int64)
    v_gpu = np.empty(0, np.float64)
    if pv:
        allv, allg = np.concatenate(pv), np.concatenate(pg)
        uk_, kinv_ = np.unique(allv * 8 + r_target[allg], return_inverse=True)
        v_rows, v_tgt = uk_ // 8, uk_ % 8
        v_gpu = np.bincount(kinv_.reshape(-1), weights=inst_gpu[allg], minlength=len(uk_)).astype(np.float64)
        v_node = np.array(
            [mirror.get((t_, int(r_node[v_])), -1) for v_, t_ in zip(v_rows.tolist(), v_tgt.tolist())], np.int64
        )
        keep_ = v_node >= 0
        v_rows, v_node, v_gpu = v_rows[keep_], v_node[keep_], v_gpu[keep_]
        np.add.at(count, v_node[in_win[v_rows]], 1)
    # phases: count and host time from their ranges (an autograd-only backward: its top-level nodes)
    for p in range(len(PHASES[:3])):
        sel = r_phase_range & (r_pat == p)
        if not sel.any():
            sel = (r_phase == p) & (r_parent < 0) & ~r_phase_range & ~wrapper
        count[p] = int((sel & in_win).sum())
        host[p] = _clipped_total(r_ts[sel], r_end[sel], ws, we)
    count[PHASES.index("data-to-device")] = d2d_count
    host[PHASES.index("data-to-device")] = d2d_host
    count[OUT] = out_count

    names_of: dict[int, list[str]] = {}
    # each node's names (its ranges' distinct names), for its folded label
    named = np.flatnonzero(node_ok)
    if len(named):
        # distinct (node, name) pairs, each packed in one integer in their order (np.unique(axis=0)
        # of the two-column rows sorted a 1 GB export's 5 M ranges as bytes)
        n_s = max(len(S), 1)
        pairs = codes.distinct(np.r_[r_node[named], v_node] * n_s + np.r_[r_name[named], r_name[v_rows]])
        for nid_, nm_ in zip((pairs // n_s).tolist(), (pairs % n_s).tolist()):
            names_of.setdefault(nid_, []).append(_display(S[nm_]))

    # folding: per node, instances keyed by distinct raw name, else by occurrence within its window
    spread: dict[int, tuple[tuple[int, int, int], str, int]] = {}
    # the ranges and the mirror rows as one list of instances
    if len(v_rows):
        x_node, x_name = np.r_[r_node, v_node], np.r_[r_name, r_name[v_rows]]
        x_win, x_ts, x_gpu = np.r_[r_win, r_win[v_rows]], np.r_[r_ts, r_ts[v_rows]], np.r_[inst_gpu, v_gpu]
    else:  # no mirror rows: the ranges' own columns (read only below), not copies of them
        x_node, x_name, x_win, x_ts, x_gpu = r_node, r_name, r_win, r_ts, inst_gpu
    sel = np.flatnonzero(np.r_[node_ok & (in_win | (inst_gpu > 0)), np.ones(len(v_rows), bool)])
    if len(sel):
        o = np.lexsort((x_ts[sel], x_win[sel], x_node[sel]))
        sel = sel[o]
        nodes_s = x_node[sel]
        bounds = np.flatnonzero(np.r_[True, nodes_s[1:] != nodes_s[:-1], True])
        for b0, b1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            rows = sel[b0:b1]
            nid = int(nodes_s[b0])
            raw = x_name[rows]
            uniq_raw = np.unique(raw)
            if len(rows) < 2:
                continue
            if len(uniq_raw) > 1:
                keys, kinv = np.unique(raw, return_inverse=True)
                labels = [_display(S[i]) for i in keys.tolist()]
            else:  # the same name each time: the k-th occurrence within its window
                win = x_win[rows]
                first = np.r_[True, win[1:] != win[:-1]]
                start_idx = np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0))
                ordinal = np.arange(len(rows)) - start_idx
                keys, kinv = np.unique(ordinal, return_inverse=True)
                labels = [f"#{int(x) + 1}" for x in keys.tolist()]
            if len(keys) < 2:
                continue
            kinv = kinv.reshape(-1)
            tot = np.bincount(kinv, weights=x_gpu[rows], minlength=len(keys))
            occ = np.bincount(kinv, minlength=len(keys))
            mean = tot / np.maximum(occ, 1)
            s = int(np.argmax(mean))
            busy = mean[mean > 0]  # instances whose launches the trace recorded in the windows
            if len(busy):
                spread[nid] = ((int(busy.min()), int(np.median(busy)), int(busy.max())), labels[s], len(keys))

    # --- the Node objects ------------------------------------------------------------------------------
    extra_start = len(S)

    def kname(i: int) -> str:
        return S[i] if i < extra_start else extra_names[i - extra_start]

    def label(nid: int) -> str:
        if n_label[nid]:
            return n_label[nid]
        return folded_name(names_of.get(nid, ["?"]))

    objs: dict[int, Node] = {}
    for nid in np.argsort(n_depth, kind="stable").tolist():
        if nid == ROOT:
            continue
        if nid > OUT and not count[nid] and not cols["gpu"][nid]:
            continue  # ranges outside the windows that launched nothing in them
        p = n_parent[nid]
        ppath = objs[p].path if p >= 0 and p != ROOT and p in objs else ()
        name = label(nid)
        bt = bound_t[nid]
        sp = spread.get(nid)
        top_k = sorted(tops.get(nid, {}).items(), key=lambda kv: -kv[1][0])[:TOP_KERNELS]
        objs[nid] = Node(
            path=(*ppath, name),
            name=name,
            kind=n_kind[nid],
            count=int(count[nid]),
            host_ns=int(host[nid]),
            gpu_ns_inclusive=int(cols["gpu"][nid]),
            gpu_ns_exclusive=int(exclusive[nid]),
            flops=float(cols["flops"][nid]) if cols["fn"][nid] else None,
            bytes=float(cols["bytes"][nid]) if cols["bn"][nid] else None,
            tflops=float(cols["flops"][nid] / cols["fdur"][nid] / 1e3) if cols["fdur"][nid] > 0 else None,
            gbps=float(cols["bytes"][nid] / cols["bdur"][nid]) if cols["bdur"][nid] > 0 else None,
            bound=BOUNDS[int(np.argmax(bt))] if bt.sum() > 0 else "unknown",
            share_of_peak_pct=float(cols["pct"][nid] / cols["pdur"][nid]) if cols["pdur"][nid] > 0 else None,
            top_kernels=[(kname(nm), int(v[1]), int(v[0])) for nm, v in top_k],
            instances=sp[2] if sp else 1,
            spread_ns=sp[0] if sp else None,
            slowest=sp[1] if sp else None,
            roof_ns=int(cols["pdur"][nid]),
            bound_ns={b: int(v) for b, v in zip(BOUNDS, bt.tolist()) if v > 0},
            autograd=n_autograd[nid],
        )
        if p >= 0 and p != ROOT and p in objs:
            objs[p].children.append(objs[nid])
    for n in objs.values():
        n.children.sort(key=lambda c: -c.gpu_ns_inclusive)

    roots: list[Node] = []
    for p in range(len(PHASES)):
        n = objs[p]
        if n.count or n.gpu_ns_inclusive or n.children:
            roots.append(n)
    roots += sorted(
        (objs[i] for i in range(nn_) if i in objs and n_parent[i] == ROOT), key=lambda c: -c.gpu_ns_inclusive
    )
    if objs[OUT].gpu_ns_inclusive:
        roots.append(objs[OUT])
    notes = []
    if unlinked:
        notes.append(
            f"{unlinked:,} GPU operation{'s' if unlinked != 1 else ''} without a recorded launch call: in {OUTSIDE}"
        )
    if len(oi):
        top_ag = r_autograd & ((r_parent < 0) | r_phase_range[np.clip(r_parent, 0, None)])
        n_top, n_map = int((top_ag & in_win).sum()), int((hang >= 0)[in_win].sum())
        ag_gpu = float(inst_gpu[top_ag].sum())
        map_gpu = float(inst_gpu[hang >= 0].sum())
        if n_map:
            share = f", {100.0 * map_gpu / ag_gpu:.1f}% of their GPU time" if ag_gpu > 0 else ""
            notes.append(
                f"{n_map:,} of {n_top:,} backward nodes{share}: under their forward module's path in "
                "backward (the forward operator with the node's sequence number); the rest by autograd's names"
            )
        elif (oi_seq := trace.op_inputs.cpu_fwd_thread).shape == (len(op),) and (oi_seq > 0).any():
            notes.append(
                "backward nodes are shown by autograd's names: none of their forward operators (by sequence "
                "number) ran inside a module or range"
            )
        else:
            notes.append(
                "backward nodes are shown by autograd's names: the trace records no sequence numbers tying "
                "them to their forward operators"
            )
    ranges = {
        ann_kind: int(len(ai) - wrapper[: len(ai)].sum()),
        "module": int(len(pi)),
        "autograd": int(len(oi)),
    }
    return ModuleTree(roots, gpu_total, len(ws), {k_: v for k_, v in ranges.items() if v}, unlinked, notes)


# -- the tree's top levels: what a stored run keeps --------------------------------------------------

STORED_LEVELS = 3  # a stored run keeps the tree's first levels (phases, the model, its blocks) …
STORED_NODES = 64  # … and its heaviest deeper nodes, this many nodes in all (a summary stays a few kB)
STORED_NAME = 160  # characters of a node's name a stored tree keeps (longer: its head and a digest) …
STORED_KERNEL = 96  # … and of a leaf's heaviest kernel (only compared for equality: a renamed leaf)


def bounded_name(name: str, limit: int) -> str:
    """``name`` itself up to ``limit`` characters, else its head and a digest of the whole (``…#`` and 10
    hex digits), so that equal names stay equal and different ones different."""
    if len(name) <= limit:
        return name
    import hashlib

    return name[: limit - 12] + "…#" + hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def top_levels(tree: ModuleTree, levels: int = STORED_LEVELS, max_nodes: int = STORED_NODES) -> ModuleTree:
    """The tree's first ``levels`` levels (each level's heaviest first, while there is room) and then
    its heaviest deeper nodes by inclusive GPU time, ``max_nodes`` nodes in all; a node is kept only
    with its parent, so every kept node keeps its whole path. Each node counts the children left out
    (:attr:`Node.omitted`; the tree: the first-level nodes left out), so a comparison can tell a node
    one run lacks from one its stored tree did not keep. Deeper nodes without GPU time are not kept.
    Every kept node's times are the full tree's (inclusive and exclusive); a node keeps its heaviest
    kernel only where it is a leaf (what a renamed leaf is recognised by), and no spread, FLOPs or
    bytes; names longer than ``STORED_NAME`` characters (kernels: ``STORED_KERNEL``) keep their head
    and a digest (:func:`bounded_name`). What the run history stores (analyzers/compare/history.py)."""
    walked = tree.walk()
    parent: dict[int, Node | None] = {}
    for r in tree.roots:
        parent[id(r)] = None
    for _, n in walked:
        for c in n.children:
            parent[id(c)] = n
    order = [i for i, (d, _) in enumerate(walked) if d < levels]
    order.sort(key=lambda i: (walked[i][0], -walked[i][1].gpu_ns_inclusive, i))
    deeper = [i for i, (d, n) in enumerate(walked) if d >= levels and n.gpu_ns_inclusive > 0]
    deeper.sort(key=lambda i: (-walked[i][1].gpu_ns_inclusive, walked[i][0], i))
    kept: set[int] = set()
    for i in order + deeper:
        if len(kept) >= max_nodes:
            break
        n = walked[i][1]
        p = parent[id(n)]
        if p is None or id(p) in kept:
            kept.add(id(n))

    def copy(n: Node, parent: tuple[str, ...]) -> Node:
        name = bounded_name(n.name, STORED_NAME)
        path = (*parent, name)
        kids = [copy(c, path) for c in n.children if id(c) in kept]
        leaf = not n.children and not n.omitted
        return Node(
            path=path,
            name=name,
            kind=n.kind,
            count=n.count,
            host_ns=n.host_ns,
            gpu_ns_inclusive=n.gpu_ns_inclusive,
            gpu_ns_exclusive=n.gpu_ns_exclusive,
            flops=None,
            bytes=None,
            tflops=None,
            gbps=None,
            bound=n.bound,
            share_of_peak_pct=None if n.share_of_peak_pct is None else round(n.share_of_peak_pct, 3),
            top_kernels=[(bounded_name(k, STORED_KERNEL), c, ns) for k, c, ns in n.top_kernels[:1]] if leaf else [],
            instances=n.instances,
            children=kids,
            omitted=n.omitted + len(n.children) - len(kids),
        )

    roots = [copy(r, ()) for r in tree.roots if id(r) in kept]
    return ModuleTree(
        roots,
        tree.gpu_ns,
        tree.windows,
        dict(tree.ranges),
        tree.unlinked,
        [],
        tree.omitted + len(tree.roots) - len(roots),
    )
