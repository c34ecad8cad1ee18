"""What one live sampling interval holds: immutable snapshots that samplers hand to the analyzer,
the dashboard, the recorder and the exporters.

Every metric a driver, GPU or OS does not provide is ``None`` ("n/a" on screen), never 0. The
snapshot flattens to ``(device, name, value)`` counter rows and back, so a recording loads into the
columnar :class:`~trainscope.traces.model.Counters` table and replays from it losslessly (for the
numeric fields the analyzer reads).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import fields
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from trainscope.traces.model import Trace

HOST_DEVICE = -1  # the device id of host-side counter rows
# Clock-event reasons that mean the GPU is slowed by power or heat (not idle, not a user clock
# setting); a replayed recording keeps only their count, as "throttled".
THROTTLE_REASONS = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake", "throttled"})


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant (NVML). Rates (PCIe) are averaged since the previous sample."""

    index: int
    name: str | None = None
    util_gpu: float | None = None  # % of time a kernel was running
    util_mem: float | None = None  # % of time the memory controller was busy
    mem_used: int | None = None  # bytes
    mem_total: int | None = None  # bytes
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    clock_events: tuple[str, ...] | None = None  # active clock-event (throttle) reasons
    pcie_tx_bps: float | None = None  # bytes/s, from the cumulative non-blocking counters
    pcie_rx_bps: float | None = None
    processes: tuple[GpuProcess, ...] | None = None
    # GPM (Hopper and newer): what the SMs and DRAM were doing, not just "a kernel ran".
    sm_util: float | None = None
    tensor_util: float | None = None
    dram_bw_util: float | None = None
    lost: bool = False

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return 100.0 * self.mem_used / self.mem_total


@dataclass(frozen=True)
class ProcessGroup:
    """A role in the job's process tree: the main (training) process, DataLoader workers, others."""

    role: str  # "main" | "workers" | "other"
    count: int
    cpu_pct: float | None  # summed over the group, 100 = one core
    rss: int | None  # bytes, summed
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class HostSample:
    cpu_pct: float | None = None  # whole machine, 0–100
    per_core: tuple[float, ...] = ()
    iowait_pct: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    disk_read_bps: float | None = None
    groups: tuple[ProcessGroup, ...] = ()

    def group(self, role: str) -> ProcessGroup | None:
        for g in self.groups:
            if g.role == role:
                return g
        return None


# Where in the step, besides the data wait; hook_ns: the step hook's own time in the DataLoader call.
PART_FIELDS = ("fwd_ns", "bwd_ns", "opt_ns", "h2d_ns", "hook_ns")


class _StepTimes:
    """What :class:`StepSample` and :class:`RankSample` derive alike from their step timings."""

    wait_ns: int
    step_ns: int
    fwd_ns: int | None
    bwd_ns: int | None
    opt_ns: int | None

    @property
    def data_wait_pct(self) -> float | None:
        return 100.0 * self.wait_ns / self.step_ns if self.step_ns else None

    @property
    def has_parts(self) -> bool:
        return self.fwd_ns is not None and self.bwd_ns is not None and self.opt_ns is not None


@dataclass(frozen=True)
class StepSample(_StepTimes):
    """Step-exact timings received from the job during the interval (DataLoader ``__next__``), and
    where in the step the rest went (forward, backward, optimizer step, host-to-device copies: host
    wall time summed over the ``steps`` iterations; None from a hook that does not time them)."""

    steps: int  # completed loop iterations
    wait_ns: int  # time spent inside DataLoader __next__
    step_ns: int  # summed iteration time (from one __next__ call to the next)
    max_wait_ns: int = 0
    fwd_ns: int | None = None
    bwd_ns: int | None = None
    opt_ns: int | None = None
    h2d_ns: int | None = None
    hook_ns: int | None = None  # the step hook's own time (its bookkeeping and datagrams), part of the step


@dataclass(frozen=True)
class RankSample(_StepTimes):
    """One rank (or stepping process) of the job during the interval: its own step timings from the
    hook, and its RSS and GPU as sampled (``watch`` of a multi-process job, e.g. torchrun)."""

    rank: str  # RANK of the process, else "pid N"
    pid: int
    steps: int = 0
    wait_ns: int = 0
    step_ns: int = 0
    max_wait_ns: int = 0
    rss: int | None = None
    gpu: int | None = None  # NVML index of the GPU holding this process's memory
    gpu_mem: int | None = None
    gpu_util: float | None = None  # that GPU's utilization
    fwd_ns: int | None = None  # where in its steps: as StepSample's
    bwd_ns: int | None = None
    opt_ns: int | None = None
    h2d_ns: int | None = None
    hook_ns: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything sampled in one interval. ``t`` is seconds since the watch began."""

    t: float
    dt: float  # seconds this sample covers (the weight in time-weighted averages)
    wall: float = 0.0  # Unix time of the sample
    gpus: tuple[GpuSample, ...] = ()
    host: HostSample | None = None
    step: StepSample | None = None
    step_mode: str = "off"  # "on" | "waiting" | "off" | "off: <reason>"
    notes: tuple[str, ...] = ()  # collector problems first seen in this interval (reported once)
    ranks: tuple[RankSample, ...] = ()  # per rank / stepping process, when the job has several

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Snapshot:
        """Rebuild from :meth:`to_dict` output; unknown keys are ignored (newer recordings)."""
        gpus = tuple(
            _build(
                GpuSample,
                g,
                processes=lambda ps: None if ps is None else tuple(_build(GpuProcess, p) for p in ps),
                clock_events=lambda c: None if c is None else tuple(c),
            )
            for g in d.get("gpus") or ()
        )
        h = d.get("host")
        host = (
            None
            if h is None
            else _build(
                HostSample,
                h,
                per_core=lambda c: tuple(c or ()),
                groups=lambda gs: tuple(_build(ProcessGroup, g, pids=lambda p: tuple(p or ())) for g in gs or ()),
            )
        )
        s = d.get("step")
        step = None if s is None else _build(StepSample, s)
        ranks = tuple(_build(RankSample, r) for r in d.get("ranks") or ())
        return cls(
            t=float(d["t"]),
            dt=float(d["dt"]),
            wall=float(d.get("wall", 0.0)),
            gpus=gpus,
            host=host,
            step=step,
            step_mode=str(d.get("step_mode", "off")),
            notes=tuple(d.get("notes") or ()),
            ranks=ranks,
        )


def _build(cls: Any, d: dict[str, Any], **convert: Callable[[Any], Any]) -> Any:
    if not isinstance(d, dict):
        raise ValueError(f"{cls.__name__}: expected an object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    kw = {k: v for k, v in d.items() if k in names}
    for k, fn in convert.items():
        if k in kw:
            kw[k] = fn(kw[k])
    return cls(**kw)


# --- flattening to counter rows (the Trace model's Counters table) ------------------------------

_GPU_COUNTERS = (
    "util_gpu",
    "util_mem",
    "mem_used",
    "mem_total",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "temperature_c",
    "pcie_tx_bps",
    "pcie_rx_bps",
    "sm_util",
    "tensor_util",
    "dram_bw_util",
)
_HOST_COUNTERS = ("cpu_pct", "iowait_pct", "mem_used", "mem_total", "disk_read_bps")
_GROUP_COUNTERS = ("count", "cpu_pct", "rss")
_STEP_COUNTERS = ("steps", "wait_ns", "step_ns", "max_wait_ns", *PART_FIELDS)


def counter_rows(s: Snapshot) -> Iterable[tuple[int, str, float]]:
    """``(device, name, value)`` for every metric present in ``s`` (absent metrics give no row)."""
    yield HOST_DEVICE, "sample.dt", s.dt
    for g in s.gpus:
        for name in _GPU_COUNTERS:
            v = getattr(g, name)
            if v is not None:
                yield g.index, f"gpu.{name}", float(v)
        if g.clock_events is not None:
            yield g.index, "gpu.throttle_reasons", float(len([r for r in g.clock_events if r in THROTTLE_REASONS]))
    if s.host is not None:
        for name in _HOST_COUNTERS:
            v = getattr(s.host, name)
            if v is not None:
                yield HOST_DEVICE, f"host.{name}", float(v)
        for grp in s.host.groups:
            for name in _GROUP_COUNTERS:
                v = getattr(grp, name)
                if v is not None:
                    yield HOST_DEVICE, f"proc.{grp.role}.{name}", float(v)
    if s.step is not None:
        for name in _STEP_COUNTERS:
            v = getattr(s.step, name)
            if v is not None:  # parts: only from a hook that times them
                yield HOST_DEVICE, f"step.{name}", float(v)


def snapshot_from_counters(
    t: float, rows: Iterable[tuple[int, str, float]], names: dict[int, str] | None = None
) -> Snapshot:
    """The inverse of :func:`counter_rows` for one sample time (names and per-core lists are not kept)."""
    gpu: dict[int, dict[str, Any]] = {}
    host: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    step: dict[str, int] = {}
    dt = 0.0
    for device, name, value in rows:
        kind, _, rest = name.partition(".")
        if name == "sample.dt":
            dt = value
        elif kind == "gpu":
            d = gpu.setdefault(device, {"index": device, "name": (names or {}).get(device)})
            if rest == "throttle_reasons":
                d["clock_events"] = ("throttled",) * int(value)
            elif rest in _GPU_COUNTERS:
                d[rest] = int(value) if rest in ("mem_used", "mem_total") else value
        elif kind == "host" and rest in _HOST_COUNTERS:
            host[rest] = int(value) if rest in ("mem_used", "mem_total") else value
        elif kind == "proc":
            role, _, metric = rest.partition(".")
            if metric in _GROUP_COUNTERS:
                groups.setdefault(role, {"role": role, "count": 0, "cpu_pct": None, "rss": None})[metric] = (
                    value if metric == "cpu_pct" else int(value)
                )
        elif kind == "step" and rest in _STEP_COUNTERS:
            step[rest] = int(value)
    hs = None
    if host or groups:
        hs = HostSample(**host, groups=tuple(ProcessGroup(**g) for g in groups.values()))
    st = StepSample(**step) if {"steps", "wait_ns", "step_ns"} <= set(step) else None
    return Snapshot(
        t=t,
        dt=dt,
        gpus=tuple(GpuSample(**gpu[k]) for k in sorted(gpu)),
        host=hs,
        step=st,
        step_mode="on" if st is not None else "off",
    )


__all__ = [
    "GpuProcess",
    "GpuSample",
    "HostSample",
    "ProcessGroup",
    "Snapshot",
    "StepSample",
    "HOST_DEVICE",
    "PART_FIELDS",
    "THROTTLE_REASONS",
    "counter_rows",
    "snapshot_from_counters",
    "trace_snapshots",
]


def trace_snapshots(trace: Trace) -> list[Snapshot]:
    """Rebuild one snapshot per sample time from a trace's Counters table (the inverse of
    flattening snapshots into counter rows, for every field the live analyzer reads)."""
    import numpy as np

    c = trace.counters
    if not len(c):
        return []
    names = {d.id: d.name for d in trace.devices}
    order = np.argsort(c.ts, kind="stable")
    ts, dev, name, val = c.ts[order], c.device[order], c.name[order], c.value[order]
    bounds = np.flatnonzero(np.diff(ts)) + 1
    out = []
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(ts)]):
        rows = ((int(dev[i]), trace.strings[int(name[i])], float(val[i])) for i in range(lo, hi))
        out.append(snapshot_from_counters(float(ts[lo]) / 1e9, rows, names))
    return out
