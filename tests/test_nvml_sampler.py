"""The NVML sampler against a scripted pynvml: supported, unsupported, permission-denied, lost-GPU and
no-library cases, and the GPM path. Every failure must end as None ("n/a") or one note, never an
exception that stops the monitor."""

from __future__ import annotations

import pytest

from tests.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND
from tests.fake_pynvml import NVML_ERROR_NO_PERMISSION
from tests.fake_pynvml import Err
from tests.fake_pynvml import FakeNVML
from trainscope.collectors.monitor import Monitor
from trainscope.collectors.nvml import GPM_ANY_TENSOR_UTIL
from trainscope.collectors.nvml import GPM_DRAM_BW_UTIL
from trainscope.collectors.nvml import GPM_SM_UTIL
from trainscope.collectors.nvml import NvmlSampler

GIB = 2**30


def full_device(**over) -> dict:
    d = {
        "name": "NVIDIA H100 80GB HBM3",
        "util": (87, 41),
        "memory": (60 * GIB, 80 * GIB),
        "power_mw": 512_345,
        "power_limit_mw": 700_000,
        "sm_clock": 1980,
        "temperature": 63,
        "clock_events": 0x4 | 0x20,
        "pcie": True,
        "processes": [(4242, 59 * GIB)],
        "gpm_supported": False,
    }
    d.update(over)
    return d


def sampler(devices, **kw) -> tuple[NvmlSampler, FakeNVML]:
    fake = FakeNVML(devices, **kw)
    for i in range(len(devices)):
        # Cumulative PCIe byte counters and their µs timestamps: 0.5 s apart.
        fake.pcie_counters[i] = [
            (1_000, 5_000, 1_000_000),
            (501_000, 1_005_000, 1_500_000),
            (501_000, 1_005_000, 2_000_000),
        ]
    s = NvmlSampler(nvml=fake)
    return s, fake


def test_supported_metrics_are_converted_to_units():
    s, _ = sampler([full_device()])
    assert s.start() and s.available
    g = s.sample()[0]
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert (g.util_gpu, g.util_mem) == (87.0, 41.0)
    assert g.mem_used == 60 * GIB and g.mem_total == 80 * GIB and g.mem_pct == pytest.approx(75.0)
    assert g.power_w == pytest.approx(512.345) and g.power_limit_w == 700.0  # mW → W
    assert g.sm_clock_mhz == 1980 and g.temperature_c == 63
    assert g.clock_events == ("sw_power_cap", "sw_thermal")
    assert g.processes[0].pid == 4242 and g.processes[0].used_bytes == 59 * GIB
    assert g.pcie_tx_bps is None  # a rate needs two readings of the cumulative counters
    g2 = s.sample()[0]
    assert g2.pcie_tx_bps == pytest.approx(500_000 / 0.5) and g2.pcie_rx_bps == pytest.approx(1_000_000 / 0.5)
    g3 = s.sample()[0]
    assert g3.pcie_tx_bps == 0.0
    assert g.sm_util is None and g.tensor_util is None  # no GPM on this device: n/a
    assert s.drain_notes() == []


def test_unsupported_metrics_are_na_silently_and_not_asked_again():
    s, fake = sampler([full_device(power_mw=Err(3), clock_events=Err(3), processes=Err(3))])
    s.start()
    for _ in range(3):
        g = s.sample()[0]
    assert g.power_w is None and g.clock_events is None and g.processes is None
    assert g.util_gpu == 87.0  # the rest still reads
    assert fake.calls["power_mw"] == 1  # not asked again after NOT_SUPPORTED
    assert s.drain_notes() == []


def test_permission_denied_is_reported_once():
    s, fake = sampler([full_device(processes=Err(NVML_ERROR_NO_PERMISSION))])
    s.start()
    notes = []
    for _ in range(4):
        g = s.sample()[0]
        notes += s.drain_notes()
    assert g.processes is None and g.util_gpu == 87.0
    assert notes == ["GPU 0: no permission to read processes (n/a)"]
    assert fake.calls["processes"] == 1


def test_lost_gpu_is_reported_once_and_other_gpus_keep_sampling():
    devices = [full_device(), full_device(name="GPU B")]
    s, fake = sampler(devices)
    s.start()
    assert all(not g.lost for g in s.sample())
    devices[0]["lost"] = True  # falls off the bus mid-run
    notes = []
    for _ in range(3):
        gs = s.sample()
        notes += s.drain_notes()
    assert gs[0].lost and gs[0].util_gpu is None
    assert not gs[1].lost and gs[1].util_gpu == 87.0
    assert len(notes) == 1 and notes[0].startswith("GPU 0: lost")
    calls = fake.calls["util"]
    s.sample()
    assert fake.calls["util"] == calls + 1  # only GPU B is still asked


def test_no_library_is_one_note_and_no_gpus():
    s, _ = sampler([full_device()], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    assert s.start() is False and not s.available
    assert "NVML is not available" in s.problem
    assert s.drain_notes() == [s.problem]
    assert s.sample() == ()


def test_real_pynvml_without_a_driver_does_not_raise():
    s = NvmlSampler()  # the real nvidia-ml-py; this machine has no NVIDIA driver (or it does: both fine)
    ok = s.start()
    assert ok == s.available
    if not ok:
        assert s.problem and s.sample() == ()
    s.close()


# Values of the shape NVML's GPM returns (percent, float); the first interval only primes the pair.
GPM_SERIES = [
    {GPM_SM_UTIL: 93.4, GPM_ANY_TENSOR_UTIL: 81.2, GPM_DRAM_BW_UTIL: 22.7},
    {GPM_SM_UTIL: 35.1, GPM_ANY_TENSOR_UTIL: 0.0, GPM_DRAM_BW_UTIL: 88.9},
    {GPM_SM_UTIL: 50.0},  # DRAM and tensor not supported on this (MIG) slice: n/a
]


def test_gpm_metrics_come_from_consecutive_sample_pairs():
    s, fake = sampler([full_device(gpm_supported=True)])
    fake.gpm_values = list(GPM_SERIES)
    s.start()
    first = s.sample()[0]
    assert (first.sm_util, first.tensor_util, first.dram_bw_util) == (None, None, None)
    got = [s.sample()[0] for _ in range(3)]
    assert (got[0].sm_util, got[0].tensor_util, got[0].dram_bw_util) == (93.4, 81.2, 22.7)
    assert (got[1].sm_util, got[1].tensor_util, got[1].dram_bw_util) == (35.1, 0.0, 88.9)
    assert (got[2].sm_util, got[2].tensor_util, got[2].dram_bw_util) == (50.0, None, None)


def test_gpm_values_drive_the_live_verdict():
    from trainscope.analyzers.live.engine import LiveAnalyzer

    s, fake = sampler([full_device(gpm_supported=True, memory=(10 * GIB, 80 * GIB))])
    fake.gpm_values = [GPM_SERIES[0]] * 8
    s.start()
    a = LiveAnalyzer()
    clock = iter(range(100))
    m = Monitor(1.0, lambda snap: None, gpu=s, clock=lambda: float(next(clock)))
    m.t0 = m._last = 0.0
    for _ in range(8):
        st = a.add(m.sample())
    assert st.verdict.axis == "algorithm" and st.verdict.bottleneck == "algorithm/compute-bound"
    assert st.stats.sm_util == pytest.approx(93.4)


def test_monitor_survives_a_sampler_that_raises():
    class Broken(NvmlSampler):
        def sample(self):
            raise RuntimeError("boom")

    got = []
    s = Broken(nvml=FakeNVML([full_device()]))
    s.start()
    m = Monitor(0.25, got.append, gpu=s)
    m._emit()
    assert got and got[0].notes == ("sampling failed: RuntimeError: boom",)
