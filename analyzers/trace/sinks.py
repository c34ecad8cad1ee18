"""Step time split into exclusive sinks, and the verdict's ranking of them.

Every nanosecond of the analyzed steps goes to exactly one sink (docs/diagnosis.md §2, the textbook's
D·A·M causes made measurable):

- ``input``: the GPU idles while the host waits on the input pipeline (DataLoader ``__next__``) or
  runs input preprocessing (host frames classified as such);
- ``launch``: the GPU idles while the host issues work (framework ops, runtime calls, cold start);
- ``sync``: the GPU idles while the host is blocked in a synchronization (or just after one);
- ``allocator``: the GPU idles while the host is in allocator or host-runtime object calls
  (``cudaMalloc``/``cudaFree``, ``hipFree``, ``cudaHostAlloc``, event/stream creation: host frames'
  ``alloc`` class) — allocator churn;
- ``comm``: communication kernels run with no compute beside them;
- ``copies``: host-device copies run with no kernel beside them;
- ``memory-bound`` / ``compute-bound`` / ``busy-unknown``: compute-kernel time (and memsets, which
  only move bytes) split by what limits the kernels — hardware counters where sampled, else the
  roofline's per-kernel calls, else the kernel-class mix, said which in ``busy_source``;
- ``imbalance``: time the rank's collectives spend waiting for a slower rank (multi-rank sets);
- ``idle-unexplained``: the GPU idles and the trace records nothing the host was doing.

The verdict is the largest sink among those that can be primary (all but ``busy-unknown`` and
``idle-unexplained``; kernel work only once the GPU is saturated; none below the moderate grade of
its finding, so a threshold override moves the verdict); its lead over the runner-up sets the
confidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace

from trainscope.analyzers.trace.breakdown import Breakdown

SINKS: tuple[str, ...] = (
    "input",
    "launch",
    "sync",
    "allocator",
    "comm",
    "copies",
    "memory-bound",
    "compute-bound",
    "imbalance",
    "host-ranges",
    "host-work",
    "busy-unknown",
    "idle-unexplained",
)
NOT_PRIMARY = ("host-work", "busy-unknown", "idle-unexplained")
# Explained, but named by no bottleneck finding of its own yet: counts against the unexplained idle.
EXPLAINED_ONLY = ("host-work",)
WORK = ("memory-bound", "compute-bound")
SINK_LABELS = {
    "input": "input pipeline (GPU idle while the host loads or preprocesses data)",
    "launch": "launch/CPU overhead (GPU idle while the host issues work)",
    "sync": "blocking synchronizations (GPU idle while or after the host waits on it)",
    "allocator": "allocator churn (GPU idle while the host allocates or frees memory, creates events or streams)",
    "comm": "communication not overlapped with compute",
    "copies": "host-device copies not overlapped with compute",
    "memory-bound": "memory-bound kernel time",
    "compute-bound": "compute-bound kernel time",
    "imbalance": "waiting for a slower rank inside collectives",
    "host-ranges": "GPU idle while the host works in named ranges that issue no GPU work (I/O, checkpoint, logging, eval)",
    "host-work": "GPU idle while the host does other work (between steps, in named ranges, unrecorded in a sparse trace)",
    "busy-unknown": "kernel time whose bound is unknown",
    "idle-unexplained": "GPU idle with no host activity recorded",
}
# Host-frame classes of GPU-idle time (host activity the breakdown does not see: Python stacks,
# OS runtime calls) and the sink each one feeds.
HOST_IDLE_SINK = {
    "input-preprocessing": "input",
    "launch-cold-start": "launch",
    "sync": "sync",
    "allocator": "allocator",
}
# Host-frame classes whose calls the breakdown files as host overhead (every runtime call is host
# work to it): their time is taken from that row first, before the launch sink claims the row.
FROM_HOST_OVERHEAD = ("allocator",)


@dataclass(frozen=True)
class Sink:
    key: str
    ns: int  # over all analyzed steps
    pct: float  # share of step time
    source: str  # how it was measured

    @property
    def label(self) -> str:
        return SINK_LABELS[self.key]

    @property
    def can_be_primary(self) -> bool:
        return self.key not in NOT_PRIMARY

    @property
    def is_work(self) -> bool:
        """Kernel work (memory- or compute-bound busy time), as opposed to time lost to overheads."""
        return self.key in WORK


@dataclass(frozen=True)
class Sinks:
    total_ns: int
    steps: int
    by_key: dict[str, Sink]
    busy_source: str  # "hardware counters" | "roofline" | "kernel classes" | "none"
    saturated: bool = True  # GPU busy at or above gpu_busy.saturated: kernel work can be the bottleneck
    floors: dict[str, float] | None = (
        None  # sink -> least share (%) that names a bottleneck (its finding's moderate grade)
    )
    cpu_only: bool = False  # no GPU: the "idle" sinks are host time (a collective's wait is a host operator's time)

    def pct(self, key: str) -> float:
        return self.by_key[key].pct if key in self.by_key else 0.0

    def ms_per_step(self, key: str) -> float:
        return self.by_key[key].ns / 1e6 / max(1, self.steps) if key in self.by_key else 0.0

    def eligible(self, key: str) -> bool:
        """Whether sink ``key`` can be the verdict here. Kernel work (memory-/compute-bound busy time)
        can only when the GPU is saturated: on a starved GPU the kernels do not set the step's length,
        what keeps the GPU from them does (the textbook flowchart's first test, utilization < 70 %)."""
        s = self.by_key.get(key)
        floor = (self.floors or {}).get(key, 0.0)
        return s is not None and s.ns > 0 and s.can_be_primary and s.pct >= floor and (self.saturated or not s.is_work)

    def ranked(self, primary_only: bool = True) -> list[Sink]:
        """Largest first; ties keep the declaration order of :data:`SINKS`."""
        sinks = [self.by_key[k] for k in SINKS if k in self.by_key and (self.eligible(k) or not primary_only)]
        return sorted(sinks, key=lambda s: -s.ns)

    @property
    def explained_ns(self) -> int:
        """Step time in sinks that name a cause here (whether or not they reach their grade)."""
        return sum(
            s.ns
            for s in self.by_key.values()
            if (s.can_be_primary and (self.saturated or not s.is_work)) or s.key in EXPLAINED_ONLY
        )

    @property
    def leader(self) -> Sink | None:
        r = [s for s in self.ranked() if s.ns > 0]
        return r[0] if r else None

    @property
    def runner_up(self) -> Sink | None:
        """The largest other sink that could lead here, whether or not it reaches its grade (kernel
        work on a starved GPU could not)."""
        lead = self.leader
        r = [
            s
            for s in self.ranked(primary_only=False)
            if s.ns > 0 and s.can_be_primary and (self.saturated or not s.is_work) and s is not lead
        ]
        return r[0] if r else None


# On a trace with no GPU, a collective is a host operator: the breakdown files its time (and the wait
# for a slower rank inside it) as host work, in these sinks, not as communication kernels.
CPU_COLLECTIVE_SINKS = ("launch", "idle-unexplained", "sync")


def moved(s: Sinks, src: str, dst: str, ns: int, source: str) -> Sinks:
    """``s`` with up to ``ns`` of sink ``src`` filed under ``dst`` instead (a cross-rank correction:
    collective time that was a wait for a slower rank). On a CPU-only trace the wait of a
    collective lies in the host sinks (:data:`CPU_COLLECTIVE_SINKS`), taken from there when ``src``
    (communication kernels) holds none."""
    by = dict(s.by_key)
    t = s.total_ns or 1
    left = max(0, ns)
    total = 0
    for key in (src, *(CPU_COLLECTIVE_SINKS if s.cpu_only and src == "comm" else ())):
        got = min(left, by[key].ns)
        if got <= 0:
            continue
        a = by[key]
        by[key] = replace(a, ns=a.ns - got, pct=100.0 * (a.ns - got) / t)
        left -= got
        total += got
    if not total:
        return s
    b = by[dst]
    by[dst] = replace(b, ns=b.ns + total, pct=100.0 * (b.ns + total) / t, source=source)
    return replace(s, by_key=by)


def _take(pool: dict[str, float], key: str, want: float) -> float:
    got = min(max(want, 0.0), pool[key])
    pool[key] -= got
    return got


def split_sinks(
    b: Breakdown,
    *,
    busy_split: dict[str, float] | None = None,
    busy_source: str = "none",
    host_idle_ns: dict[str, int] | None = None,
    sync_bubble_ns: int = 0,
    imbalance_ns: int = 0,
    saturated: bool = True,
    floors: dict[str, float] | None = None,
    gap_ns: dict[str, int] | None = None,
    gap_source: str = "",
) -> Sinks:
    """The exclusive sinks of ``b``.

    ``busy_split``: the fractions of compute-kernel time that are memory-bound, compute-bound and of
    unknown bound ({"memory": f, "compute": f, "unknown": f}); ``host_idle_ns``: GPU-idle time the
    breakdown filed as "other" that host frames explain, by class (:data:`HOST_IDLE_SINK`; the
    allocator calls' idle, filed by the breakdown as host overhead, is taken from that row first);
    ``sync_bubble_ns``: GPU idle after blocking syncs (filed by the breakdown under sync, launch
    overhead or other idle), counted to ``sync`` up to that total; ``imbalance_ns``: collective time
    spent waiting for a slower rank (taken out of ``comm``)."""
    ns = {k: float(v) for k, v in b.ns.items()}
    out = dict.fromkeys(SINKS, 0.0)
    src = dict.fromkeys(SINKS, "step breakdown")
    out["input"] = _take(ns, "idle_data_wait", ns["idle_data_wait"])
    for cls in FROM_HOST_OVERHEAD:  # allocator calls: GPU idle the breakdown filed under host overhead
        want_cls = float((host_idle_ns or {}).get(cls, 0))
        got = _take(ns, "idle_host_overhead", want_cls)
        got += _take(ns, "idle_other", want_cls - got)
        if got > 0:
            out[HOST_IDLE_SINK[cls]] += got
            src[HOST_IDLE_SINK[cls]] = "host runtime calls during GPU idle"
    out["launch"] = _take(ns, "idle_host_overhead", ns["idle_host_overhead"])
    out["sync"] = _take(ns, "idle_sync", ns["idle_sync"])
    for cls, ns_cls in (host_idle_ns or {}).items():
        sink = HOST_IDLE_SINK.get(cls)
        got = _take(ns, "idle_other", ns_cls) if sink and cls not in FROM_HOST_OVERHEAD else 0.0
        if sink and got > 0:
            out[sink] += got
            src[sink] = "step breakdown + host frames during GPU idle"
    if sync_bubble_ns > out["sync"]:
        extra = sync_bubble_ns - out["sync"]
        moved = min(extra, out["launch"])
        out["launch"] -= moved
        moved += _take(ns, "idle_other", extra - moved)
        out["sync"] += moved
        src["sync"] = "step breakdown + GPU idle after blocking syncs"
    for sink, want_ns in (gap_ns or {}).items():
        want: float = want_ns
        if sink == "sync":  # the bubble after blocking syncs may already be counted above
            want = max(0.0, want - max(0.0, sync_bubble_ns - b.ns["idle_sync"]))
        got = _take(ns, "idle_other", want)
        if got > 0:
            out[sink] += got
            src[sink] = (src[sink] + " + " if src[sink] != "step breakdown" else "step breakdown + ") + gap_source
    out["idle-unexplained"] = _take(ns, "idle_other", ns["idle_other"])
    out["imbalance"] = _take(ns, "communication", imbalance_ns)
    out["comm"] = _take(ns, "communication", ns["communication"])
    out["copies"] = _take(ns, "copy", ns["copy"])
    compute = _take(ns, "compute", ns["compute"])
    split = busy_split or {"unknown": 1.0}
    tot = sum(split.get(k, 0.0) for k in ("memory", "compute", "unknown")) or 1.0
    out["memory-bound"] = compute * split.get("memory", 0.0) / tot
    out["compute-bound"] = compute * split.get("compute", 0.0) / tot
    out["busy-unknown"] = compute - out["memory-bound"] - out["compute-bound"]
    out["memory-bound"] += _take(ns, "memset", ns["memset"])  # a memset only writes bytes
    for k in ("memory-bound", "compute-bound", "busy-unknown"):
        src[k] = f"compute-kernel time split by {busy_source}"
    src["imbalance"] = "collective time waiting for the slowest rank"
    total = b.total_ns
    by = {k: Sink(k, int(round(v)), 100.0 * v / total if total else 0.0, src[k]) for k, v in out.items()}
    return Sinks(total, len(b.steps), by, busy_source, saturated, floors, cpu_only=b.device is None)


# The breakdown row that shows each idle sink (analyzers.trace.breakdown.refiled): one figure, two views.
SINK_ROW = {"input": "idle_data_wait", "sync": "idle_sync", "launch": "idle_host_overhead"}


def sink_rows(s: Sinks) -> dict[str, int]:
    """The idle rows of the breakdown as the sinks measured them (the rest of the idle: "other")."""
    return {row: s.by_key[k].ns for k, row in SINK_ROW.items() if k in s.by_key}
