"""``memory``: peak, fragmentation and what was live, from a CUDA memory snapshot or a memory timeline."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

from trainscope.analyzers.snapshot.peak import memory_peak
from trainscope.analyzers.snapshot.summary import snapshot_findings
from trainscope.analyzers.snapshot.summary import snapshot_memory
from trainscope.analyzers.snapshot.timeline_peak import timeline_peak
from trainscope.api.errors import BadInput
from trainscope.api.errors import Progress
from trainscope.api.errors import bad_input
from trainscope.api.errors import silent
from trainscope.api.planning import resolve_device
from trainscope.api.rendered import Rendered
from trainscope.api.report import shown
from trainscope.api.rules import resolve_rules
from trainscope.collectors.errors import TraceError
from trainscope.collectors.formats import is_snapshot
from trainscope.collectors.memory_timeline import load_memory_timeline
from trainscope.collectors.snapshot import load_snapshot
from trainscope.reports.memory import build_memory_document
from trainscope.reports.memory import render_memory_markdown
from trainscope.reports.memory import render_memory_text
from trainscope.reports.oneline import memory_line

if TYPE_CHECKING:
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.snapshot.peak import MemoryPeak
    from trainscope.analyzers.snapshot.summary import DeviceSnapshotMemory
    from trainscope.analyzers.snapshot.timeline_peak import TimelinePeak
    from trainscope.analyzers.trace.verdict import Finding
    from trainscope.traces.memory_snapshot import Snapshot


@dataclass(repr=False)
class MemoryReport(Rendered):
    """Peak, fragmentation and what was live, from a CUDA memory snapshot or a memory timeline.
    ``devices`` (snapshots): per-device ``DeviceSnapshotMemory``; ``peak`` (timelines)."""

    KIND = "memory"  # its kind in the output format table (reports/formats.py)

    path: str
    kind: str  # "cuda_snapshot" | "memory_timeline_raw" | "memory_timeline_coalesced"
    document: dict[str, Any] = field(repr=False)
    devices: list[DeviceSnapshotMemory] | None = field(default=None, repr=False)
    peak: TimelinePeak | None = field(default=None, repr=False)  # memory timelines only
    findings: list[Finding] = field(default_factory=list)
    snapshot: Snapshot | None = field(default=None, repr=False)  # snapshots only

    def to_dict(self) -> dict[str, Any]:
        return self.document

    def peaks(self) -> list[MemoryPeak]:
        """Per device of a snapshot: the peak view the memory app shows (see :func:`memory_peaks`),
        from the snapshot this report already read; empty for a memory timeline."""

        if self.snapshot is None or not self.devices:
            return []
        return [memory_peak(self.snapshot, m) for m in self.devices]

    def to_text(self) -> str:
        return render_memory_text(shown(self.document))

    def to_markdown(self) -> str:
        return render_memory_markdown(shown(self.document))

    def __repr__(self) -> str:
        """One line: the peaks per device and the findings."""

        return memory_line(self.path, self.kind, self.document, self.findings)


def memory(
    path: str | os.PathLike[str],
    *,
    gpu: str | None = None,
    gpu_memory: str | None = None,
    top: int = 10,
    rules: Rules | None = None,
    thresholds: Mapping[str, float] | None = None,
    progress: Progress | None = None,
) -> MemoryReport:
    """Read a CUDA memory snapshot (restricted unpickler: plain data only) or a memory timeline
    and report peak allocated versus reserved memory, what was live at the peak, and capacity
    findings against ``gpu`` / ``gpu_memory``. Raises :class:`BadInput`."""

    rules = resolve_rules(rules, thresholds)
    progress = progress or silent
    dev = None
    if gpu or gpu_memory:
        try:
            dev = resolve_device(gpu, gpu_memory)
        except BadInput as e:
            raise BadInput(f"memory: {str(e).removeprefix('plan: ')}") from None
    capacity = {"name": dev.name, "capacity_bytes": dev.capacity_bytes, "source": dev.source} if dev else None
    path = os.fspath(path)
    with bad_input(path):
        if not os.path.isfile(path):
            raise TraceError(path, "no such file" if not os.path.exists(path) else "not a file")
        progress("reading", None)
        if is_snapshot(path):
            snap = load_snapshot(path)
            progress("analyzing", None)
            devices = snapshot_memory(snap, top=max(0, top), oom_slack_pct=rules.value("memory.oom_slack"))
            found = snapshot_findings(devices, dev.capacity_bytes if dev else None, rules)
            doc = build_memory_document(path, "cuda_snapshot", devices, None, found, capacity, snap.warnings)
            return MemoryReport(path, "cuda_snapshot", doc, devices=devices, findings=found, snapshot=snap)
        tl = load_memory_timeline(path)
        peak = timeline_peak(tl)
        kind = f"memory_timeline_{tl.layout}"
        return MemoryReport(path, kind, build_memory_document(path, kind, None, peak, [], capacity, []), peak=peak)


def memory_peaks(path: str | os.PathLike[str]) -> list[MemoryPeak]:
    """Per device of a CUDA memory snapshot: allocated bytes over the recorded events, the peak and
    every allocation live at it with its full stack (:class:`~trainscope.analyzers.snapshot.peak.MemoryPeak`,
    what ``trainscope memory``'s app shows). Raises :class:`BadInput`."""

    path = os.fspath(path)
    with bad_input(path):
        snap = load_snapshot(path)
        return [memory_peak(snap, m) for m in snapshot_memory(snap, top=0)]
