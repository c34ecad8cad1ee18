"""Ranks as a map and a reduce: a small, picklable summary per rank, and the ranks aligned on
the ends of their shared collectives.

Map (:func:`summarize`): one rank's trace and analysis → a :class:`RankSummary` of a few tens of
kilobytes (the analysis itself, its steps, its collectives with their start and end instants,
kernel time per class). No trace crosses a process boundary; 256 ranks fit in the parent.

Reduce (:func:`align_ranks`): a collective completes together on every rank that takes part —
the last contribution arrives, then everyone finishes within a hop's latency. So the END of a
collective is a common instant across ranks, whatever each rank's clock. Each rank's collectives
are matched to the reference rank's by identity where the trace records it — the same (process
group, sequence number) that PyTorch writes on ``record_param_comms`` and its kernels ("Process
Group Name", "Seq"), with the kind and, for collectives whose message is the same on every rank,
the size required to agree (a disagreement refuses the match and is counted: a desynchronized
job, or a trace cut mid-way) — as Holistic Trace Analysis reads those args and TraceLens matches
by process group and order. Collectives without that identity (older traces, CPU backends) are
matched by time: same kind, overlapping, ends within ``ranks.end_match_us`` or
``ranks.end_match_pct`` of the longer one's duration once the clock offset is removed, that
offset first guessed as the densest cluster of end differences. The clock offset between two
ranks is then the median end difference over all their matches, and each rank's *arrival* is its
start on the common clock. Time inside a collective
splits into **waiting** (from a rank's arrival to the last rank's arrival: the skew) and
**transfer** (from the last arrival to the end: what the network costs). The rank that arrives
last is the straggler; what it does differently is read from its kernel time per class against
the other ranks' median. (HTA's straggler analysis ranks by late-starting communication kernels
with each rank normalized to its own iteration start; aligning on ends instead keeps the answer
right when ranks share a clock and start their steps together — the punctual rank then shows
its wait as waiting, not as communication cost.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import field
from typing import TypedDict

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.kernel_match import KernelTime
from trainscope.analyzers.ranks.straggler_test import StragglerTest
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.shapes import ShapeSignature
from trainscope.analyzers.shapes import shape_signature
from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.analyzers.trace.kernels import kernel_summary
from trainscope.traces.model import Trace

_KERNEL_KIND = re.compile(r"(?:nccl|rccl)\w*?Kernel_([A-Za-z]+)", re.I)
_HOST_KIND = re.compile(r"^(gloo|mpi|ucc|xccl):([a-z_]+)")  # blocking host-side collectives (not nccl:, an enqueue)

# A collective's identity across ranks, as PyTorch records it: (process group, sequence, p2p), and
# what must agree for two ranks' entries to be the same collective: (collective name, in nelems,
# out nelems, dtype).
CollectiveKey = tuple[str, int, bool]
CollectiveMeta = tuple[str | None, int | None, int | None, str | None]


@dataclass(frozen=True)
class RankCollectives:
    """One rank's collectives on its own clock (absolute ns), sorted by start."""

    source: str  # "GPU kernels", "host ranges" or "none"
    kind: tuple[str, ...]
    start: np.ndarray
    end: np.ndarray
    # The identity PyTorch records (empty when the trace records none; per entry None where absent):
    # (process group, sequence, p2p) and (collective name, in nelems, out nelems, dtype).
    key: tuple[CollectiveKey | None, ...] = ()
    meta: tuple[CollectiveMeta | None, ...] = ()
    # Per collective: the first on this rank with its kernel (or range) name — a cold start candidate:
    # the first launch loads the kernel, the first use of a communicator connects the ranks.
    first_use: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class RankSummary:
    """What the reduce needs of one rank. Small and picklable (numpy arrays, strings, the Analysis)."""

    rank: int | None
    source: str
    world_size: int | None
    origin_ns: int
    analysis: Analysis
    collectives: RankCollectives
    # The straggler matching by step offset (analyzers/ranks/stragglers.py) on host-side ranges:
    # (source, start ns, end ns, names) relative to the trace origin.
    host_collectives: tuple[str, np.ndarray, np.ndarray, list[str]]
    class_ns: dict[str, int] = field(default_factory=dict)  # kernel time per class in the steps
    kernel_ns: dict[str, int] = field(default_factory=dict)  # the top kernels by time in the steps
    # What ``diff`` compares of a rank: every kernel name in the steps, and the operators' shapes.
    kernel_times: tuple[KernelTime, ...] = ()
    shapes: ShapeSignature | None = None

    @property
    def step_labels(self) -> list[str]:
        return [s.label for s in self.analysis.segmentation.steps]

    @property
    def step_ms(self) -> np.ndarray:
        return np.array([s.duration_ns for s in self.analysis.segmentation.steps], float) / 1e6


def collective_kind(name: str) -> str | None:
    m = _KERNEL_KIND.search(name)
    if m:
        return m.group(1).lower()
    m = _HOST_KIND.match(name)
    if m:
        return m.group(2).replace("_", "").lstrip("_")
    return None


# Collectives whose message has the same size on every rank of the group: a (group, sequence) match
# whose sizes differ is not the same collective. (all_to_allv, gather, scatter and point-to-point
# messages differ between ranks by definition.)
SAME_SIZE_ON_ALL_RANKS = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "reduce", "barrier")
_P2P = ("send", "recv")


def collective_name(name: str) -> str:
    """PyTorch's "Collective name" reduced to its operation: ``_allgather_base`` and
    ``all_gather_into_tensor_coalesced`` → ``allgather``, ``all_to_allv`` → ``alltoallv``."""
    n = name.lower().replace("_", "")
    for op in (
        "allreduce",
        "allgather",
        "reducescatter",
        "alltoallv",
        "alltoall",
        "broadcast",
        "barrier",
        "gather",
        "scatter",
        "reduce",
        "send",
        "recv",
    ):
        if n.startswith(op) or (op in ("allgather", "reducescatter", "allreduce") and op in n):
            return op
    return n


def _identity(
    trace: Trace, kernel_rows: np.ndarray
) -> tuple[tuple[CollectiveKey | None, ...], tuple[CollectiveMeta | None, ...]]:
    """(key, meta) per kernel row from the collective args under its External id; ((), ()) when the
    trace records none."""
    ext = trace.op_inputs.kernel_external
    args = trace.collective_args
    if not args or len(ext) != len(trace.kernels):
        return (), ()
    keys: list[CollectiveKey | None] = []
    metas: list[CollectiveMeta | None] = []
    for row in kernel_rows:
        a = args.get(int(ext[row]))
        if a is None:
            keys.append(None)
            metas.append(None)
            continue
        op = collective_name(a.name) if a.name else None
        keys.append((a.process_group, a.seq, op in _P2P) if a.process_group is not None and a.seq is not None else None)
        metas.append((op, a.in_nelems, a.out_nelems, a.dtype))
    # a key carried by several kernels (a coalesced group) does not name one collective
    seen: dict[CollectiveKey, int] = {}
    for kk in keys:
        if kk is not None:
            seen[kk] = seen.get(kk, 0) + 1
    keys = [kk if kk is not None and seen[kk] == 1 else None for kk in keys]
    return tuple(keys), tuple(metas)


def rank_collectives(trace: Trace) -> RankCollectives:
    """GPU communication kernels (their end is the collective's completion); without a GPU, the
    blocking host ranges of CPU backends (gloo, MPI)."""
    k = trace.kernels
    if len(k):
        comm = kernel_classes(trace)[0][k.name] == ALL_CLASSES.index("communication")
        if comm.any():
            order = np.argsort(k.ts[comm], kind="stable")
            names = k.name[comm][order]
            kinds = tuple(collective_kind(trace.strings[i]) or trace.strings[i][:40].lower() for i in names)
            key, meta = _identity(trace, np.flatnonzero(comm)[order])
            return RankCollectives(
                "GPU kernels",
                kinds,
                k.ts[comm][order] + trace.origin_ns,
                k.end[comm][order] + trace.origin_ns,
                key,
                meta,
                _first_use(names),
            )
    a = trace.annotations
    kind_of = [collective_kind(s) if _HOST_KIND.match(s) else None for s in trace.strings]
    sel = np.array([kind_of[i] is not None for i in a.name], bool) & (a.device < 0) if len(a) else np.zeros(0, bool)
    if sel.any():
        order = np.argsort(a.ts[sel], kind="stable")
        names = a.name[sel][order]
        return RankCollectives(
            "host ranges",
            tuple(kind_of[i] for i in names),
            a.ts[sel][order] + trace.origin_ns,
            a.end[sel][order] + trace.origin_ns,
            first_use=_first_use(names),
        )
    return RankCollectives("none", (), np.empty(0, np.int64), np.empty(0, np.int64))


def _first_use(names: np.ndarray) -> np.ndarray:
    """Whether each entry (in time order) is the first with its name."""
    out = np.zeros(len(names), bool)
    if len(names):
        out[np.unique(names, return_index=True)[1]] = True
    return out


def summarize(trace: Trace, analysis: Analysis, top_kernels: int = 30) -> RankSummary:
    """The map step: pure, from one rank's trace and its analysis."""
    from trainscope.analyzers.ranks.stragglers import host_collectives  # circle: stragglers imports this module

    ks = analysis.kernels
    return RankSummary(
        rank=trace.rank,
        source=trace.source,
        world_size=trace.world_size,
        origin_ns=trace.origin_ns,
        analysis=analysis,
        collectives=rank_collectives(trace),
        host_collectives=host_collectives(trace),
        class_ns=dict(ks.by_class_ns),
        kernel_ns={k.name: int(k.total_ns) for k in ks.top[:top_kernels]},
        kernel_times=tuple(kernel_times(trace, analysis)),
        shapes=shape_signature(trace),
    )


def kernel_times(trace: Trace, analysis: Analysis) -> list[KernelTime]:
    """Per kernel name, the calls and time of kernels that start inside the analyzed steps on the
    analyzed GPU: the same selection as the analysis's kernel summary, but every name."""
    seg = analysis.segmentation
    inside = iv.contains((seg.starts, seg.ends), trace.kernels.ts)
    ks = kernel_summary(trace, inside, analysis.device, top_n=len(trace.strings), classes=kernel_classes(trace))
    return [KernelTime(k.name, k.kernel_class, k.count, k.total_ns) for k in ks.top]


# -- the reduce: alignment on collective ends ------------------------------------------------


@dataclass(frozen=True)
class RankAlignment:
    rank: int | None
    clock_offset_us: float | None  # this rank's clock minus the reference rank's (None: not aligned)
    matched: int  # collectives matched to the reference rank
    mean_late_ms: float  # mean arrival after the first rank to arrive, over the matched collectives
    last_in: int  # matched collectives this rank arrived at last
    wait_ms_per_step: float  # inside collectives, waiting for the last rank
    transfer_ms_per_step: float  # inside collectives, after the last rank arrived
    by_seq: int = 0  # of ``matched``: by (process group, sequence)
    by_end: int = 0  # of ``matched``: by end instant
    refused: int = 0  # (process group, sequence) pairs whose kind or size disagree


@dataclass(frozen=True)
class Imbalance:
    """The ``rank imbalance`` finding."""

    rank: int | None
    late_ms: float  # its mean arrival after the first rank
    last_in: int
    matched: int
    others_wait_ms_per_step: float  # what the other ranks lose waiting for it, mean per rank and step
    others_wait_pct: float  # … as a share of the median step
    extra_work: list[tuple[str, float]]  # (kernel class, ms per step over the other ranks' median), largest first
    summary: str
    # Its work per step beyond the other ranks' median (:func:`extra_work_ms`): GPU kernel time outside
    # collectives on GPU ranks, host time outside collectives on CPU ranks (``work_basis`` says which);
    # None where neither can be measured. What balancing can move: it caps the ``ranks/imbalance`` stake.
    extra_work_ms_per_step: float | None = None
    work_basis: str = ""


@dataclass(frozen=True)
class Alignment:
    source: str
    reference: int | None
    instances: int  # collectives matched on at least two ranks
    ranks: list[RankAlignment]
    imbalance: Imbalance | None
    offsets_note: str
    by_seq: int = 0  # rank pairs matched by (process group, sequence), over the non-reference ranks
    by_end: int = 0  # rank pairs matched by end instant
    refused: int = 0  # (process group, sequence) pairs refused: kind or size disagree
    test: StragglerTest | None = None  # whether the last rank is a straggler or chance (straggler_test.py)

    @property
    def method_note(self) -> str:
        refused = (
            f"; {self.refused} refused (same process group and sequence, kind or size differ)" if self.refused else ""
        )
        return f"matched by process group and sequence: {self.by_seq}; by end instant: {self.by_end}{refused}"


def _offset(ref: RankCollectives, other: RankCollectives, tol: int, cap: int = 600) -> tuple[float, int] | None:
    """Clock offset of ``other`` against ``ref``: the densest cluster (width 2·tol) of end
    differences between collectives of the same kind; (offset ns, pairs in the cluster)."""
    diffs = []
    for kind in set(ref.kind[:cap]) & set(other.kind[:cap]):
        a = ref.end[:cap][np.array(ref.kind[:cap]) == kind]
        b = other.end[:cap][np.array(other.kind[:cap]) == kind]
        diffs.append((b[None, :] - a[:, None]).ravel())
    if not diffs:
        return None
    d = np.sort(np.concatenate(diffs))
    if len(d) > 4_000_000:
        d = d[:: len(d) // 4_000_000 + 1]
    hi = np.searchsorted(d, d + 2 * tol, side="right")
    counts = hi - np.arange(len(d))
    i = int(np.argmax(counts))
    return float(np.median(d[i : hi[i]])), int(counts[i])


def _match(ref: RankCollectives, other: RankCollectives, offset: float, tol: int, rel: float) -> dict[int, int]:
    """Reference index → other's index: same kind, the intervals overlapping, ends within
    ``max(tol, rel × the longer duration)`` once the offset is removed; one to one, nearest ends first."""
    end_o = other.end - offset
    start_o = other.start - offset
    dur_o = other.end - other.start
    dur_r = ref.end - ref.start
    reach = max(tol, int(rel * max(int(dur_o.max(initial=0)), int(dur_r.max(initial=0)))))
    order = np.argsort(end_o, kind="stable")
    sorted_end = end_o[order]
    los = np.searchsorted(sorted_end, ref.end - reach)
    his = np.searchsorted(sorted_end, ref.end + reach, side="right")
    # every (reference, candidate) pair within reach, as flat index arrays
    counts = his - los
    js = np.repeat(np.arange(len(ref)), counts)
    if not len(js):
        return {}
    offs = np.arange(len(js)) - np.repeat(np.cumsum(counts) - counts, counts)
    cand = order[np.repeat(los, counts) + offs]
    gap = np.abs(end_o[cand] - ref.end[js]).astype(float)
    ok = (
        (start_o[cand] < ref.end[js])
        & (ref.start[js] < end_o[cand])
        & (gap <= np.maximum(tol, rel * np.maximum(dur_o[cand], dur_r[js])))
    )
    kind_o, kind_r = other.kind, ref.kind
    pairs = sorted((float(g), int(j), int(i)) for g, j, i in zip(gap[ok], js[ok], cand[ok]) if kind_o[i] == kind_r[j])
    used_r, used_o, out = set(), set(), {}
    for _, j, i in pairs:
        if j not in used_r and i not in used_o:
            used_r.add(j)
            used_o.add(i)
            out[j] = i
    return out


def _subset(c: RankCollectives, idx: np.ndarray) -> RankCollectives:
    return RankCollectives(
        c.source,
        tuple(c.kind[i] for i in idx),
        c.start[idx],
        c.end[idx],
        first_use=None if c.first_use is None else c.first_use[idx],
    )


def _by_identity(ref: RankCollectives, other: RankCollectives) -> tuple[dict[int, int], set[int], set[int]]:
    """Reference index → other's index for collectives with the same (process group, sequence):
    (matches, reference indices refused, other's indices refused)."""
    if not ref.key or not other.key:
        return {}, set(), set()
    mine = {k: i for i, k in enumerate(other.key) if k is not None}
    out, bad_r, bad_o = {}, set(), set()
    for j, k in enumerate(ref.key):
        i = mine.get(k) if k is not None else None
        if i is None:
            continue
        meta_r, meta_o = ref.meta[j], other.meta[i]
        assert meta_r is not None and meta_o is not None  # _identity records a meta wherever it records a key
        (op_r, in_r, out_r, dt_r), (op_o, in_o, out_o, dt_o) = meta_r, meta_o
        if op_r != op_o or (op_r in SAME_SIZE_ON_ALL_RANKS and (in_r, out_r, dt_r) != (in_o, out_o, dt_o)):
            bad_r.add(j)
            bad_o.add(i)
        else:
            out[j] = i
    return out, bad_r, bad_o


def _match_rank(
    ref: RankCollectives, other: RankCollectives, tol: int, rel: float
) -> tuple[float | None, dict[int, int], int, int]:
    """(clock offset ns, reference index → other's index, matched by identity, refused): identity
    first; the rest by end instant, never pairing two collectives that both carry an identity."""
    by_id, bad_r, bad_o = _by_identity(ref, other)
    keyed_r = {j for j, k in enumerate(ref.key) if k is not None}
    keyed_o = {i for i, k in enumerate(other.key) if k is not None}
    free_r = np.array([j for j in range(len(ref)) if j not in by_id and j not in bad_r], int)
    used_o = set(by_id.values()) | bad_o
    free_o = np.array([i for i in range(len(other)) if i not in used_o], int)
    guess: float | None
    if by_id:
        guess = float(np.median([other.end[i] - ref.end[j] for j, i in by_id.items()]))
    else:
        off = _offset(_subset(ref, free_r), _subset(other, free_o), tol) if len(free_r) and len(free_o) else None
        guess = off[0] if off is not None and off[1] >= 2 else None
    matches = dict(by_id)
    if guess is not None and len(free_r) and len(free_o):
        for a, b in _match(_subset(ref, free_r), _subset(other, free_o), guess, tol, rel).items():
            j, i = int(free_r[a]), int(free_o[b])
            if not (j in keyed_r and i in keyed_o):  # both carry an identity and it differs: not the same
                matches[j] = i
    if not matches:
        return None, {}, 0, len(bad_r)
    # the clock offset from every match: the median end difference (a collective ends together on all ranks)
    offset = float(np.median([other.end[i] - ref.end[j] for j, i in matches.items()]))
    return offset, matches, len(by_id), len(bad_r)


@dataclass(frozen=True)
class Matching:
    """Collectives matched across ranks (one table every consumer reads: the alignment, the app's
    jump to a rank's latest arrival): the reference rank (the one that saw the most), each rank's
    clock offset (ns, None when nothing matched), reference index → the rank's index, the reference
    collectives matched on at least one other rank, and per rank the matches by identity and the
    pairs refused."""

    reference: int
    offsets: list[float | None]
    matches: list[dict[int, int]]
    instances: list[int]
    by_identity: list[int]
    refused: list[int]


def match_collectives(collectives: list[RankCollectives], rules: Rules | None = None) -> Matching:
    """Match every rank's collectives to the reference rank's (identity first, then end instant)."""
    rules = rules or Rules()
    tol = int(rules.value("ranks.end_match_us") * 1000)
    rel = rules.value("ranks.end_match_pct") / 100
    n = len(collectives)
    ref_i = max(range(n), key=lambda r: (len(collectives[r]), -r))
    ref = collectives[ref_i]
    offsets: list[float | None] = [None] * n
    matches: list[dict[int, int]] = [{} for _ in range(n)]
    offsets[ref_i] = 0.0
    matches[ref_i] = {j: j for j in range(len(ref))}
    n_seq, refused = [0] * n, [0] * n
    for r, c in enumerate(collectives):
        if r == ref_i or not len(c):
            continue
        off, m, n_seq[r], refused[r] = _match_rank(ref, c, tol, rel)
        if off is None:
            continue
        offsets[r] = off
        matches[r] = m
    inst = [j for j in range(len(ref)) if sum(j in matches[r] for r in range(n) if r != ref_i) >= 1]
    return Matching(ref_i, offsets, matches, inst, n_seq, refused)


def align_ranks(summaries: list[RankSummary], rules: Rules | None = None) -> Alignment | None:
    """Ranks aligned on the ends of their shared collectives (None for fewer than two ranks): the
    alignment part of the one rank story (:func:`trainscope.analyzers.ranks.story.rank_story`)."""
    from trainscope.analyzers.ranks.story import rank_story  # circle: story imports this module

    if len(summaries) < 2:
        return None
    return rank_story(summaries, rules).alignment


GPU_WORK = "GPU kernel time outside collectives"
HOST_WORK = "host time outside collectives"


def work_basis(summaries: list[RankSummary]) -> str:
    """How the ranks' work is measured: their GPU kernel time outside collectives where every rank ran
    kernels other than communication in its steps; their host time outside collectives where every
    rank's collectives are host ranges (CPU backends: gloo, MPI); "" where neither holds for all."""
    if summaries and all(any(ns for c, ns in s.class_ns.items() if c != "communication") for s in summaries):
        return GPU_WORK
    if summaries and all(s.collectives.source == "host ranges" for s in summaries):
        return HOST_WORK
    return ""


def work_ms_per_step(s: RankSummary, basis: str) -> float:
    """One rank's work per analyzed step, as ``basis`` measures it: kernel time in its steps less the
    communication kernels (their length is waiting as much as work), or the steps' time less the
    union of its host collectives inside them (the time it spends anywhere but in a collective)."""
    steps = s.analysis.segmentation.steps
    n = max(1, len(steps))
    if basis == GPU_WORK:
        return sum(ns for c, ns in s.class_ns.items() if c != "communication") / n / 1e6
    if basis != HOST_WORK:
        return 0.0
    win_s = np.array([st.start_ns for st in steps], np.int64)
    win_e = np.array([st.end_ns for st in steps], np.int64)
    coll = iv.union(s.collectives.start - s.origin_ns, s.collectives.end - s.origin_ns)
    inside = int(iv.overlap_per_window(coll, win_s, win_e).sum())
    return float((win_e - win_s).sum() - inside) / n / 1e6


def extra_work_ms(summaries: list[RankSummary], index: int, others: list[int], basis: str) -> float | None:
    """Rank ``index``'s work per step beyond the median of ``others``' (negative: it does less);
    None where the ranks' work cannot be measured alike (``basis`` "")."""
    if not basis or not others:
        return None
    theirs = float(np.median([work_ms_per_step(summaries[i], basis) for i in others]))
    return round(work_ms_per_step(summaries[index], basis) - theirs, 3)


def balance_bound(summaries: list[RankSummary], alignment: Alignment) -> tuple[float, int | None, str, bool] | None:
    """What balancing the ranks' work can move: (extra work ms per step, the rank that carries it, its
    basis, whether that rank is the straggler). The straggler's extra work where the story found one;
    else the largest extra work of any aligned rank against the others' median (an upper bound: no
    single rank is the one the others wait for). None where the work cannot be measured alike."""
    aligned = [i for i, a in enumerate(alignment.ranks) if a.matched]
    imb = alignment.imbalance
    if imb is not None and imb.extra_work_ms_per_step is not None:
        return imb.extra_work_ms_per_step, imb.rank, imb.work_basis, True
    basis = work_basis([summaries[i] for i in aligned])
    if len(aligned) < 2 or not basis:
        return None
    extra = {i: extra_work_ms(summaries, i, [j for j in aligned if j != i], basis) or 0.0 for i in aligned}
    top = max(aligned, key=lambda i: (extra[i], -i))
    return extra[top], summaries[top].rank, basis, False


def _imbalance(
    summaries: list[RankSummary], ranks: list[RankAlignment], rules: Rules, test: StragglerTest | None
) -> Imbalance | None:
    """The straggler, only where :func:`straggler_test` finds it clear (significantly often last,
    late beyond the collectives' jitter, cold start left out)."""
    aligned = [i for i, a in enumerate(ranks) if a.matched]
    # test.clear implies a rank_index; the last test narrows its type
    if len(aligned) < 2 or test is None or not test.clear or test.rank_index is None:
        return None
    s_i = test.rank_index
    lead = ranks[s_i]
    median_step = float(np.median([s.analysis.breakdown.step_ms.p50 for s in summaries]))
    if lead.mean_late_ms <= 0 or median_step <= 0:
        return None
    others = [i for i in aligned if i != s_i]
    lose = float(np.mean([ranks[i].wait_ms_per_step for i in others]))
    steps = max(1, len(summaries[s_i].analysis.segmentation.steps))
    extra = []
    for c in ALL_CLASSES:
        if c == "communication":
            continue  # waiting inflates the others' communication kernels: not work
        mine = summaries[s_i].class_ns.get(c, 0) / steps
        theirs = float(
            np.median(
                [
                    summaries[i].class_ns.get(c, 0) / max(1, len(summaries[i].analysis.segmentation.steps))
                    for i in others
                ]
            )
        )
        if mine - theirs > 0:
            extra.append((c, round((mine - theirs) / 1e6, 3)))
    extra.sort(key=lambda x: -x[1])
    basis = work_basis([summaries[i] for i in aligned])
    total = extra_work_ms(summaries, s_i, others, basis)
    if not any(summaries[s_i].class_ns.values()):
        work = "none to compare (no GPU kernels)"
    else:
        work = ", ".join(f"{c} +{ms:.1f} ms" for c, ms in extra[:3]) or "no kernel class takes longer"
    if total is not None:
        work = f"{total:.3g} ms of {basis} ({work})"
    summary = (
        f"{test.figures(f'rank {lead.rank}')}; the other ranks wait "
        f"{lose:.1f} ms per step for it inside collectives ({100 * lose / median_step:.0f} % of the "
        f"{median_step:.1f} ms median step). Its extra work per step against the others' median: {work}"
    )
    return Imbalance(
        lead.rank,
        float(lead.mean_late_ms),
        test.last_in,
        test.considered,
        round(lose, 3),
        round(100 * lose / median_step, 2),
        extra,
        summary,
        total,
        basis,
    )


# -- the many-rank view ----------------------------------------------------------------------


class RankLateness(TypedDict):
    rank: int | None
    mean_late_ms: float | None  # None where the alignment did not place the rank
    step_p50_ms: float


class StepDistribution(TypedDict):
    p5: float
    p50: float
    p95: float
    max: float
    min: float


class RanksView(TypedDict):
    """The many-rank view as the JSON report holds it (``stragglers.ranks_view``)."""

    by_lateness: list[RankLateness]
    steps: list[str]
    heat_ms: list[list[float | None]]  # rows in by_lateness order, one column per step label
    step_ms_distribution: StepDistribution | None


def ranks_view(summaries: list[RankSummary], alignment: Alignment | None) -> RanksView:
    """Ranks sorted by lateness, a rank × step strip of step times, and the step-time distribution."""
    late = {a.rank: a for a in alignment.ranks} if alignment else {}
    order = sorted(
        range(len(summaries)),
        key=lambda i: (
            -(late[summaries[i].rank].mean_late_ms if summaries[i].rank in late else 0.0),
            -summaries[i].analysis.breakdown.step_ms.p50,
        ),
    )
    labels: list[str] = []
    for s in summaries:
        for lab in s.step_labels:
            if lab not in labels:
                labels.append(lab)
    labels = labels[:64]
    heat: list[list[float | None]] = []
    for i in order:
        s = summaries[i]
        by = dict(zip(s.step_labels, s.step_ms.tolist()))
        heat.append([round(by[lab], 3) if lab in by else None for lab in labels])
    all_ms = np.array([v for row in heat for v in row if v is not None], float)
    dist: StepDistribution | None = (
        {
            "p5": round(float(np.percentile(all_ms, 5)), 3),
            "p50": round(float(np.percentile(all_ms, 50)), 3),
            "p95": round(float(np.percentile(all_ms, 95)), 3),
            "max": round(float(all_ms.max()), 3),
            "min": round(float(all_ms.min()), 3),
        }
        if len(all_ms)
        else None
    )
    return {
        "by_lateness": [
            {
                "rank": summaries[i].rank,
                "mean_late_ms": late[summaries[i].rank].mean_late_ms if summaries[i].rank in late else None,
                "step_p50_ms": round(summaries[i].analysis.breakdown.step_ms.p50, 3),
            }
            for i in order
        ],
        "steps": labels,
        "heat_ms": heat,  # rows in by_lateness order
        "step_ms_distribution": dist,
    }


# -- the per-rank verdicts, re-judged with the measured wait ----------------------------------


def with_aligned_imbalance(
    summaries: list[RankSummary], alignment: Alignment | None, rules: Rules | None = None
) -> list[Analysis]:
    """Each rank's analysis re-judged with its imbalance sink set to the wait the alignment
    measured inside its matched collectives (from its arrival to the last rank's), in place of any
    estimate from compute-time differences (``analysis.with_rank_imbalance``): the straggler itself
    waits for no one; the others' wait leaves their communication sink. Ranks the alignment could
    not match keep their analysis. Without an alignment, the analyses unchanged."""
    # circle: trace.analysis → findings → findings.ranks → this module
    from trainscope.analyzers.findings.base import Evidence
    from trainscope.analyzers.trace.analysis import rejudged
    from trainscope.analyzers.trace.sinks import moved

    rules = rules or Rules()
    analyses = [s.analysis for s in summaries]
    if alignment is None or not alignment.instances:
        return analyses
    who = f"rank {alignment.imbalance.rank}" if alignment.imbalance else "the last rank to arrive"
    bound = balance_bound(summaries, alignment)
    out = []
    for a, al in zip(analyses, alignment.ranks):
        if not al.matched or a.observations is None or a.sinks is None or not a.breakdown.total_ns:
            out.append(a)
            continue
        n = max(1, len(a.breakdown.steps))
        sinks = moved(
            a.sinks,
            "comm",
            "imbalance",
            int(al.wait_ms_per_step * 1e6 * n),
            f"waiting inside collectives for {who} (ranks aligned on collective ends)",
        )
        lines = (
            Evidence(
                "waiting inside collectives per step, from arrival to the last rank's",
                al.wait_ms_per_step,
                "ms",
                "",
                "ranks aligned on collective ends",
                None,
            ),
            Evidence(
                "arrival after the first rank, mean over matched collectives",
                al.mean_late_ms,
                "ms",
                "",
                "ranks aligned on collective ends",
                None,
            ),
            Evidence(
                "collectives matched to the other ranks", al.matched, "collectives", "", alignment.method_note, None
            ),
        )
        extra = dict(a.observations.extra)
        if alignment.imbalance is not None and al.rank == alignment.imbalance.rank:  # the others wait for this rank
            extra.update(
                straggler_wait_ms=alignment.imbalance.others_wait_ms_per_step,
                straggler_wait_pct=alignment.imbalance.others_wait_pct,
                straggler_ranks=len(alignment.ranks),
            )
        if bound is not None:  # what balancing can move: caps the ranks/imbalance stake (findings/ranks.py)
            extra.update(
                balance_work_ms=bound[0],
                balance_work_rank=bound[1],
                balance_work_basis=bound[2],
                balance_work_straggler=bound[3],
                balance_ranks=len(alignment.ranks),
            )
        out.append(rejudged(a, sinks, lines, rules, extra=extra))
    return out
