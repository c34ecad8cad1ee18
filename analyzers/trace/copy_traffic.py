"""Host-device copies as GPU work: per direction and host-memory kind, how many, how many bytes,
their GPU time inside the steps and the bandwidth they reached (bytes over each copy's own
duration). A window dominated by copies is judged on these figures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS
from trainscope.traces.model import Trace


@dataclass(frozen=True)
class CopyFlow:
    direction: str  # COPY_KINDS
    host_memory: str  # "pageable" | "pinned" | "unknown" | "device" (device-to-device)
    count: int
    bytes: int
    gpu_ns: int  # summed copy durations
    union_ns: int  # their union on the GPU

    @property
    def gb_per_s(self) -> float | None:
        return self.bytes / self.gpu_ns if self.gpu_ns else None  # bytes/ns = GB/s


@dataclass(frozen=True)
class CopyTraffic:
    flows: list[CopyFlow]  # largest GPU time first
    ops: int  # kernels + copies + memsets in the steps on this GPU

    @property
    def copies(self) -> int:
        return sum(f.count for f in self.flows)

    def lines(self) -> list[str]:
        out = []
        for f in self.flows[:4]:
            bw = f" at {f.gb_per_s:.1f} GB/s" if f.gb_per_s is not None else ""
            out.append(
                f"{f.direction} {f.host_memory}: {f.count} cop{'y' if f.count == 1 else 'ies'}, "
                f"{f.bytes / 2**20:.1f} MiB, {f.gpu_ns / 1e6:.2f} ms{bw}"
            )
        return out


def copy_traffic(trace: Trace, seg: StepSegmentation, device: int | None) -> CopyTraffic:
    ws, we = seg.starts, seg.ends
    c = trace.copies
    on = iv.contains((ws, we), c.ts) if len(ws) else np.zeros(len(c), bool)
    if device is not None:
        on &= c.device == device
    ops = int(on.sum())
    for t in (trace.kernels, trace.memsets):
        m = iv.contains((ws, we), t.ts) if len(ws) else np.zeros(len(t), bool)
        if device is not None:
            m &= t.device == device
        ops += int(m.sum())
    flows = []
    host_side = np.where(c.kind == COPY_KINDS.index("DtoH"), c.dst, c.src)
    for k in np.unique(c.kind[on]):
        for h in np.unique(host_side[on & (c.kind == k)]):
            m = on & (c.kind == k) & (host_side == h)
            mem = MEMORY_KINDS[int(h)]
            flows.append(
                CopyFlow(
                    COPY_KINDS[int(k)],
                    mem,
                    int(m.sum()),
                    int(c.bytes[m].sum()),
                    int(c.dur[m].sum()),
                    iv.total(iv.union(c.ts[m], c.end[m])),
                )
            )
    flows.sort(key=lambda f: -f.gpu_ns)
    return CopyTraffic(flows, ops)
