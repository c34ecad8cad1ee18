"""A stand-in for ``pynvml`` (nvidia-ml-py) with scripted devices, for the NVML sampler tests.

It mirrors the parts of pynvml's API the sampler calls, with the same error type (``NVMLError``
carrying ``.value``, the nvml.h return code) and the same structures' field names. Each device is
a dict of metric → value, or → an error code (``Err(code)``) to raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_GPM_METRICS_GET_VERSION = 1


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass(frozen=True)
class Err:
    code: int


class c_nvmlGpmMetricsGet_t:  # noqa: N801 (pynvml's name)
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(10)]


class FakeNVML:
    def __init__(self, devices: list[dict], init_error: int | None = None) -> None:
        self.devices = devices
        self.init_error = init_error
        self.calls: dict[str, int] = {}
        self.gpm_values: list[dict[int, float]] = []  # one dict per nvmlGpmMetricsGet call
        self.c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t
        self.NVML_GPM_METRICS_GET_VERSION = NVML_GPM_METRICS_GET_VERSION
        self.pcie_counters: dict[int, list[tuple[int, int, int]]] = {}

    def _get(self, h: int, key: str):
        self.calls[key] = self.calls.get(key, 0) + 1
        d = self.devices[h]
        if d.get("lost"):
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        v = d.get(key, Err(NVML_ERROR_NOT_SUPPORTED))
        if isinstance(v, Err):
            raise NVMLError(v.code)
        return v

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h):
        return self._get(h, "name")

    def nvmlDeviceGetUtilizationRates(self, h):
        gpu, mem = self._get(h, "util")
        return SimpleNamespace(gpu=gpu, memory=mem)

    def nvmlDeviceGetMemoryInfo(self, h):
        used, total = self._get(h, "memory")
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._get(h, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._get(h, "power_limit_mw")

    def nvmlDeviceGetClockInfo(self, h, kind):
        assert kind == 1  # NVML_CLOCK_SM
        return self._get(h, "sm_clock")

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == 0  # NVML_TEMPERATURE_GPU
        return self._get(h, "temperature")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._get(h, "clock_events")

    def nvmlDeviceGetFieldValues(self, h, ids):
        assert ids == [197, 198]  # PCIe TX/RX byte counters
        self._get(h, "pcie")  # raises if scripted to
        queue = self.pcie_counters[h]
        tx, rx, ts = queue.pop(0) if len(queue) > 1 else queue[0]  # the last reading repeats
        value = lambda v: SimpleNamespace(ullVal=v)  # noqa: E731
        return [
            SimpleNamespace(fieldId=197, nvmlReturn=0, timestamp=ts, value=value(tx)),
            SimpleNamespace(fieldId=198, nvmlReturn=0, timestamp=ts, value=value(rx)),
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self._get(h, "processes")]

    # GPM
    def nvmlGpmQueryDeviceSupport(self, h):
        return SimpleNamespace(isSupportedDevice=int(self._get(h, "gpm_supported")))

    def nvmlGpmSampleAlloc(self):
        return object()

    def nvmlGpmSampleFree(self, s) -> None:
        pass

    def nvmlGpmSampleGet(self, h, s):
        self._get(h, "gpm_supported")
        return s

    def nvmlGpmMetricsGet(self, mg):
        assert mg.version == NVML_GPM_METRICS_GET_VERSION and mg.sample1 is not mg.sample2
        values = self.gpm_values.pop(0)
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            if m.metricId in values:
                m.value, m.nvmlReturn = values[m.metricId], 0
            else:
                m.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        return mg
