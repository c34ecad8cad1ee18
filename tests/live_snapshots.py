"""Synthetic live snapshots for the live engine's tests (test_live_analyzer.py, and the live windows
of test_findings_registry.py): at most one H100, a host whose main process is one group and whose
DataLoader workers, where there are any, another."""

from __future__ import annotations

from trainscope.traces.samples import GpuSample
from trainscope.traces.samples import HostSample
from trainscope.traces.samples import ProcessGroup
from trainscope.traces.samples import Snapshot
from trainscope.traces.samples import StepSample

GIB = 2**30


def snap(
    t: float,
    util: float | None = None,
    mem_ctrl: float = 5.0,
    mem: tuple[float, float] = (10, 80),
    cpu: float = 20.0,
    iowait: float = 0.0,
    workers: tuple[int, float] | None = None,
    main_cpu: float = 50.0,
    main_rss: int | None = 1,
    host_mem: tuple[int, int] = (1, 2),
    sm: float | None = None,
    tensor: float | None = None,
    dram: float | None = None,
    step: StepSample | None = None,
    dt: float = 1.0,
    events: tuple[str, ...] | None = None,
    power: float | None = None,
    limit: float | None = None,
) -> Snapshot:
    """One sample at ``t``: no GPU where ``util`` is None; ``mem`` the GPU's memory used and total in
    GiB, ``host_mem`` the host's in bytes; ``workers`` (how many, CPU % each)."""
    gpus = (
        ()
        if util is None
        else (
            GpuSample(
                0,
                "H100",
                util,
                mem_ctrl,
                int(mem[0] * GIB),
                int(mem[1] * GIB),
                power_w=power,
                power_limit_w=limit,
                sm_util=sm,
                tensor_util=tensor,
                dram_bw_util=dram,
                clock_events=events,
            ),
        )
    )
    groups = [ProcessGroup("main", 1, main_cpu, main_rss)]
    if workers:
        groups.append(ProcessGroup("workers", workers[0], workers[1] * workers[0], 1))
    return Snapshot(
        t=t,
        dt=dt,
        gpus=gpus,
        host=HostSample(cpu, (), iowait, host_mem[0], host_mem[1], None, tuple(groups)),
        step=step,
        step_mode="on" if step else "off",
    )
