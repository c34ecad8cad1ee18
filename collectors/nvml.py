"""GPU sampler over NVML (``nvidia-ml-py``, imported as ``pynvml``).

Every metric call is wrapped on its own: a metric the driver or GPU does not support becomes
``None`` ("n/a") and is not asked for again; a permission error is reported once; a lost GPU is
reported once and then shows as lost. Missing NVML (no driver, no GPU) is one note, never an
exception: the monitor runs on without GPU panels.

GPM metrics (Hopper and newer) are rates between two GPM samples, so each device keeps the
previous sample and the metrics appear from the second interval on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import Any

from trainscope.collectors.samples import GpuProcess
from trainscope.collectors.samples import GpuSample

# Clock-event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*).
CLOCK_EVENT_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
# NVML return codes the sampler treats specially (nvml.h).
_NOT_SUPPORTED, _NO_PERMISSION, _GPU_IS_LOST, _FUNCTION_NOT_FOUND = 3, 4, 15, 13
# Field ids of the cumulative PCIe byte counters (nvml.h NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES):
# reading them does not block, unlike nvmlDeviceGetPcieThroughput, which sleeps 20 ms.
_FI_PCIE_TX, _FI_PCIE_RX = 197, 198
# GPM metric ids (nvml.h NVML_GPM_METRIC_*).
GPM_SM_UTIL, GPM_ANY_TENSOR_UTIL, GPM_DRAM_BW_UTIL = 2, 5, 10


@dataclass
class _Device:
    index: int
    handle: Any
    name: str | None = None
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    pcie_prev: tuple[int, int, int] | None = None  # (tx bytes, rx bytes, timestamp µs)
    gpm: bool = False
    gpm_prev: Any = None
    gpm_cur: Any = None


class NvmlSampler:
    """Samples every GPU NVML sees. ``nvml`` injects a module with pynvml's API (tests use a fake)."""

    def __init__(self, nvml: Any = None, gpm: bool = True) -> None:
        self._nvml = nvml
        self._want_gpm = gpm
        self._devices: list[_Device] = []
        self._reported: set[str] = set()
        self._notes: list[str] = []
        self.available = False
        self.problem: str | None = None  # why there are no GPUs, once known

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> bool:
        """Initialize NVML and enumerate devices; False (with ``problem`` set) when there is none."""
        try:
            if self._nvml is None:
                import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information

                self._nvml = pynvml
            self._nvml.nvmlInit()
        except ImportError:
            return self._unavailable("NVML bindings (nvidia-ml-py) are not installed")
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, NoPermission, …
            return self._unavailable(f"NVML is not available ({_describe(e)}): no NVIDIA driver or GPU")
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
        except Exception as e:
            return self._unavailable(f"NVML could not count GPUs ({_describe(e)})")
        for i in range(count):
            try:
                h = self._nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as e:
                self._note(f"gpu{i}:handle", f"GPU {i}: not accessible ({_describe(e)}); skipped")
                continue
            d = _Device(i, h)
            d.name = self._call(d, "name", self._nvml.nvmlDeviceGetName, h)
            if isinstance(d.name, bytes):
                d.name = d.name.decode(errors="replace")
            if self._want_gpm:
                d.gpm = self._gpm_supported(d)
            self._devices.append(d)
        if not self._devices:
            return self._unavailable("NVML found no GPU")
        self.available = True
        return True

    def close(self) -> None:
        if not self.available:
            return
        for d in self._devices:
            for s in (d.gpm_prev, d.gpm_cur):
                if s is not None:
                    try:
                        self._nvml.nvmlGpmSampleFree(s)
                    except Exception:
                        pass
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass
        self.available = False

    def drain_notes(self) -> list[str]:
        """Problems first seen since the last call (each is reported once per run)."""
        out, self._notes = self._notes, []
        return out

    @property
    def device_names(self) -> dict[int, str | None]:
        return {d.index: d.name for d in self._devices}

    # -- sampling -------------------------------------------------------------------------------
    def sample(self) -> tuple[GpuSample, ...]:
        return tuple(self._sample_device(d) for d in self._devices)

    def _sample_device(self, d: _Device) -> GpuSample:
        if d.lost:
            return GpuSample(index=d.index, name=d.name, lost=True)
        n, h = self._nvml, d.handle
        util = self._call(d, "utilization", n.nvmlDeviceGetUtilizationRates, h)
        mem = self._call(d, "memory", n.nvmlDeviceGetMemoryInfo, h)
        power = self._call(d, "power", n.nvmlDeviceGetPowerUsage, h)  # mW
        limit = self._call(d, "power_limit", n.nvmlDeviceGetEnforcedPowerLimit, h)  # mW
        clock = self._call(d, "sm_clock", n.nvmlDeviceGetClockInfo, h, 1)  # NVML_CLOCK_SM
        temp = self._call(d, "temperature", n.nvmlDeviceGetTemperature, h, 0)  # NVML_TEMPERATURE_GPU
        reasons = self._clock_events(d)
        tx, rx = self._pcie(d)
        procs = self._processes(d)
        sm = tensor = dram = None
        if d.gpm and not d.lost:
            sm, tensor, dram = self._gpm(d)
        if d.lost:
            return GpuSample(index=d.index, name=d.name, lost=True)
        return GpuSample(
            index=d.index,
            name=d.name,
            util_gpu=None if util is None else float(util.gpu),
            util_mem=None if util is None else float(util.memory),
            mem_used=None if mem is None else int(mem.used),
            mem_total=None if mem is None else int(mem.total),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=None if limit is None else limit / 1000.0,
            sm_clock_mhz=None if clock is None else float(clock),
            temperature_c=None if temp is None else float(temp),
            clock_events=reasons,
            pcie_tx_bps=tx,
            pcie_rx_bps=rx,
            processes=procs,
            sm_util=sm,
            tensor_util=tensor,
            dram_bw_util=dram,
        )

    def _clock_events(self, d: _Device) -> tuple[str, ...] | None:
        fn = getattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self._nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if fn is None:
            return None
        bits = self._call(d, "clock_events", fn, d.handle)
        if bits is None:
            return None
        return tuple(name for bit, name in CLOCK_EVENT_BITS if int(bits) & bit)

    def _pcie(self, d: _Device) -> tuple[float | None, float | None]:
        values = self._call(d, "pcie", self._nvml.nvmlDeviceGetFieldValues, d.handle, [_FI_PCIE_TX, _FI_PCIE_RX])
        if values is None:
            return None, None
        try:
            tx_v, rx_v = values[0], values[1]
            if tx_v.nvmlReturn != 0 or rx_v.nvmlReturn != 0:
                code = tx_v.nvmlReturn or rx_v.nvmlReturn
                self._metric_failed(d, "pcie", code, f"NVML error {code}")
                return None, None
            cur = (int(tx_v.value.ullVal), int(rx_v.value.ullVal), int(tx_v.timestamp))
        except Exception as e:
            self._metric_failed(d, "pcie", None, _describe(e))
            return None, None
        prev, d.pcie_prev = d.pcie_prev, cur
        if prev is None or cur[2] <= prev[2] or cur[0] < prev[0] or cur[1] < prev[1]:
            return None, None
        secs = (cur[2] - prev[2]) / 1e6
        return (cur[0] - prev[0]) / secs, (cur[1] - prev[1]) / secs

    def _processes(self, d: _Device) -> tuple[GpuProcess, ...] | None:
        procs = self._call(d, "processes", self._nvml.nvmlDeviceGetComputeRunningProcesses, d.handle)
        if procs is None:
            return None
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(int(p.pid), None if used is None else int(used)))
        return tuple(out)

    # -- GPM ------------------------------------------------------------------------------------
    def _gpm_supported(self, d: _Device) -> bool:
        n = self._nvml
        if not hasattr(n, "nvmlGpmQueryDeviceSupport"):
            return False
        support = self._call(d, "gpm", n.nvmlGpmQueryDeviceSupport, d.handle)
        if support is None or not getattr(support, "isSupportedDevice", 0):
            return False
        d.gpm_prev = self._call(d, "gpm", n.nvmlGpmSampleAlloc)
        d.gpm_cur = self._call(d, "gpm", n.nvmlGpmSampleAlloc)
        return d.gpm_prev is not None and d.gpm_cur is not None

    def _gpm(self, d: _Device) -> tuple[float | None, float | None, float | None]:
        n = self._nvml
        if self._call(d, "gpm", n.nvmlGpmSampleGet, d.handle, d.gpm_cur) is None:
            return None, None, None
        ready = getattr(d, "_gpm_primed", False)
        d._gpm_primed = True  # type: ignore[attr-defined]
        if not ready:  # the first sample only primes the pair
            d.gpm_prev, d.gpm_cur = d.gpm_cur, d.gpm_prev
            return None, None, None
        try:
            mg = n.c_nvmlGpmMetricsGet_t()
            mg.version = getattr(n, "NVML_GPM_METRICS_GET_VERSION", 1)
            ids = (GPM_SM_UTIL, GPM_ANY_TENSOR_UTIL, GPM_DRAM_BW_UTIL)
            mg.numMetrics = len(ids)
            mg.sample1, mg.sample2 = d.gpm_prev, d.gpm_cur
            for i, mid in enumerate(ids):
                mg.metrics[i].metricId = mid
        except Exception as e:
            self._metric_failed(d, "gpm", None, _describe(e))
            return None, None, None
        res = self._call(d, "gpm", n.nvmlGpmMetricsGet, mg)
        d.gpm_prev, d.gpm_cur = d.gpm_cur, d.gpm_prev
        if res is None:
            return None, None, None
        vals: list[float | None] = []
        for i in range(3):
            m = res.metrics[i]
            vals.append(float(m.value) if m.nvmlReturn == 0 else None)
        return vals[0], vals[1], vals[2]

    # -- error handling -------------------------------------------------------------------------
    def _call(self, d: _Device, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None when it fails; failures are classified and reported once."""
        if metric in d.unsupported or d.lost:
            return None
        try:
            return fn(*args)
        except Exception as e:
            self._metric_failed(d, metric, getattr(e, "value", None), _describe(e))
            return None

    def _metric_failed(self, d: _Device, metric: str, code: int | None, text: str) -> None:
        if code == _GPU_IS_LOST:
            d.lost = True
            self._note(
                f"gpu{d.index}:lost",
                f"GPU {d.index}: lost (fell off the bus or driver error); its panel shows it as lost from now on",
            )
        elif code == _NO_PERMISSION:
            d.unsupported.add(metric)
            self._note(f"gpu{d.index}:{metric}:perm", f"GPU {d.index}: no permission to read {metric} (n/a)")
        elif code in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND):
            # Not supported by this GPU/driver (or the driver lacks the call): n/a, never asked again.
            d.unsupported.add(metric)
        elif code is None:  # not an NVML error (an old binding lacking the call, a malformed reply)
            d.unsupported.add(metric)
            self._note(f"gpu{d.index}:{metric}:other", f"GPU {d.index}: cannot read {metric} ({text}); n/a")
        else:
            self._note(f"gpu{d.index}:{metric}:{code}", f"GPU {d.index}: reading {metric} failed ({text}); n/a")

    def _note(self, key: str, text: str) -> None:
        if key not in self._reported:
            self._reported.add(key)
            self._notes.append(text)

    def _unavailable(self, why: str) -> bool:
        self.available = False
        self.problem = why
        self._note("nvml", why)
        return False


def _describe(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:
        text = ""
    return text or type(e).__name__


def measure_sample_cost(sampler: NvmlSampler, n: int = 50) -> float:
    """Mean seconds per :meth:`NvmlSampler.sample` call (for the benchmark)."""
    t0 = time.perf_counter()
    for _ in range(n):
        sampler.sample()
    return (time.perf_counter() - t0) / n
