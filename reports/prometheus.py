"""The live metrics and verdict in the Prometheus text exposition format (version 0.0.4), for
``watch --prometheus-port N``: every node of a multi-node job exports its own, and an existing
Prometheus/Grafana stack scrapes and aggregates them."""

from __future__ import annotations

from trainscope.analyzers.live.engine import READY
from trainscope.analyzers.live.engine import LiveStatus
from trainscope.traces.samples import Snapshot

_AXES = ("data", "algorithm", "machine", "balanced", "insufficient_evidence")


def _label(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prometheus(st: LiveStatus | None, snap: Snapshot | None, host: str = "") -> str:
    lines: list[str] = []
    seen: set[str] = set()

    def metric(
        name: str, help_: str, value: float | None, labels: dict[str, object] | None = None, kind: str = "gauge"
    ) -> None:
        if value is None:
            return  # n/a: absent, not zero
        if name not in seen:
            seen.add(name)
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
        lab = ",".join(f'{k}="{_label(v)}"' for k, v in (labels or {}).items())
        lines.append(f"{name}{{{lab}}} {float(value):g}" if lab else f"{name} {float(value):g}")

    if snap is not None:
        for g in snap.gpus:
            lab = {"gpu": g.index, "name": g.name or ""}
            metric("trainscope_gpu_lost", "1 if NVML reports the GPU lost", 1.0 if g.lost else 0.0, lab)
            metric("trainscope_gpu_utilization_percent", "NVML: time share a kernel was running", g.util_gpu, lab)
            metric(
                "trainscope_gpu_memory_controller_percent",
                "NVML: time share the memory controller was busy",
                g.util_mem,
                lab,
            )
            metric("trainscope_gpu_memory_used_bytes", "GPU memory used", g.mem_used, lab)
            metric("trainscope_gpu_memory_total_bytes", "GPU memory total", g.mem_total, lab)
            metric("trainscope_gpu_power_watts", "power draw", g.power_w, lab)
            metric("trainscope_gpu_power_limit_watts", "enforced power limit", g.power_limit_w, lab)
            metric("trainscope_gpu_sm_clock_mhz", "SM clock", g.sm_clock_mhz, lab)
            metric("trainscope_gpu_temperature_celsius", "GPU temperature", g.temperature_c, lab)
            metric("trainscope_gpu_pcie_tx_bytes_per_second", "PCIe transmit rate", g.pcie_tx_bps, lab)
            metric("trainscope_gpu_pcie_rx_bytes_per_second", "PCIe receive rate", g.pcie_rx_bps, lab)
            metric("trainscope_gpu_sm_active_percent", "GPM: SM utilization", g.sm_util, lab)
            metric("trainscope_gpu_tensor_active_percent", "GPM: any-tensor utilization", g.tensor_util, lab)
            metric("trainscope_gpu_dram_bandwidth_percent", "GPM: DRAM bandwidth utilization", g.dram_bw_util, lab)
        h = snap.host
        if h is not None:
            metric("trainscope_host_cpu_percent", "host CPU utilization", h.cpu_pct)
            metric("trainscope_host_iowait_percent", "host I/O wait", h.iowait_pct)
            metric("trainscope_host_memory_used_bytes", "host memory used", h.mem_used)
            metric("trainscope_host_disk_read_bytes_per_second", "disk read rate", h.disk_read_bps)
            for grp in h.groups:
                metric("trainscope_job_processes", "processes in the job, by role", grp.count, {"role": grp.role})
                metric(
                    "trainscope_job_cpu_percent",
                    "CPU of the job's processes, by role (100 = one core)",
                    grp.cpu_pct,
                    {"role": grp.role},
                )
                metric(
                    "trainscope_job_rss_bytes",
                    "resident memory of the job's processes, by role",
                    grp.rss,
                    {"role": grp.role},
                )
    if st is not None:
        s = st.stats
        metric(
            "trainscope_data_wait_percent",
            "step-exact share of loop time waiting in DataLoader __next__ (window)",
            s.data_wait_pct,
        )
        metric(
            "trainscope_step_seconds",
            "mean loop iteration time (window)",
            None if s.step_ms is None else s.step_ms / 1000,
        )
        metric("trainscope_ready", "1 once enough samples exist for a verdict", 1.0 if st.state == READY else 0.0)
        for axis in _AXES:
            metric(
                "trainscope_verdict",
                "1 for the current D·A·M verdict axis",
                1.0 if st.state == READY and st.verdict.axis == axis else 0.0,
                {"axis": axis, "bottleneck": (st.verdict.bottleneck or "") if st.verdict.axis == axis else ""},
            )
        metric("trainscope_verdict_confidence", "confidence of the current verdict", st.verdict.confidence)
        for f in st.findings:
            metric("trainscope_finding", "1 for each active finding", 1.0, {"id": f.id, "severity": f.severity})
    return "\n".join(lines) + "\n"
