"""Peak throughput per precision and memory bandwidth of known accelerators, each with its source.

Every figure is **dense** (no structured sparsity) and in TFLOP/s (TOP/s for INT8); bandwidth in
GB/s (10⁹ bytes). ``peaks`` holds, per precision, the peak of the unit that runs a matrix product
at that precision: tensor cores (NVIDIA) or matrix cores (AMD MFMA) where ``matrix`` lists the
precision, else the vector units. ``vector`` holds the plain (CUDA-core / SIMD) peaks that
elementwise math and GEMMs without tensor cores reach. Precisions: fp64, fp32, tf32, fp16, bf16,
fp8, int8. A precision missing from ``peaks`` has no fast path on that device (no BF16 on a T4).

Figures are the vendors' datasheets and architecture whitepapers, named in ``source``; where a
datasheet prints only the sparse figure, the dense one is half of it (NVIDIA's footnote "with
sparsity"). AMD MI250/MI250X figures are per GCD (half a module): PyTorch sees each of the two dies
as a device, as its 104/110 compute units and 64 GiB show.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from dataclasses import field

from trainscope.traces.model import Device
from trainscope.traces.model import Trace

PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")


@dataclass(frozen=True)
class DeviceSpec:
    key: str
    pattern: str  # regex matched case-insensitively against the trace's device name
    tensor_tflops: float  # dense FP16/BF16 tensor (matrix) peak: what MFU is quoted against
    fp32_tflops: float  # plain FP32 (non-tensor) peak
    memory_gbps: float
    source: str
    peaks: dict[str, float] = field(default_factory=dict)  # precision → dense peak of its fastest unit
    vector: dict[str, float] = field(default_factory=dict)  # precision → peak without tensor/matrix cores
    matrix: frozenset[str] = frozenset()  # precisions with tensor/matrix-core support
    vendor: str = "nvidia"
    # The board's default power limit (W, datasheet "max thermal design power"): what NVML enforces
    # unless an administrator lowers it. A power-cap finding needs a limit; sample maxima are none.
    power_limit_w: float | None = None

    def peak(self, precision: str, matrix_op: bool) -> tuple[float | None, bool]:
        """The compute roof (TFLOP/s) for an operation at ``precision``, and whether it is a
        tensor/matrix-core roof. Matrix products use the tensor cores where the precision has
        them; everything else (and matrix products at a precision without them) the vector units."""
        if matrix_op and precision in self.matrix and precision in self.peaks:
            return self.peaks[precision], True
        v = self.vector.get(precision)
        if v is None and precision in ("fp16", "bf16", "fp8", "int8", "tf32"):
            v = self.vector.get("fp32")  # no native vector path: converted and computed in FP32
        return v, False

    def has_tensor_cores(self, precision: str) -> bool:
        return precision in self.matrix

    @property
    def ridge(self) -> float:
        """FP16/BF16 tensor ridge point, FLOP per byte."""
        return self.tensor_tflops * 1e12 / (self.memory_gbps * 1e9)


def _spec(
    key: str,
    pattern: str,
    bw: float,
    source: str,
    *,
    fp64: float,
    fp32: float,
    tf32: float | None = None,
    fp16: float | None = None,
    bf16: float | None = None,
    fp8: float | None = None,
    int8: float | None = None,
    fp64_matrix: float | None = None,
    fp32_matrix: float | None = None,
    fp16_vector: float | None = None,
    vendor: str = "nvidia",
    power: float | None = None,
) -> DeviceSpec:
    peaks = {"fp64": fp64_matrix or fp64, "fp32": fp32_matrix or fp32}
    matrix = set()
    for p, v in (("tf32", tf32), ("fp16", fp16), ("bf16", bf16), ("fp8", fp8), ("int8", int8)):
        if v is not None:
            peaks[p] = v
            matrix.add(p)
    if fp64_matrix:
        matrix.add("fp64")
    if fp32_matrix:
        matrix.add("fp32")
    vector = {"fp64": fp64, "fp32": fp32}
    if fp16_vector:
        vector["fp16"] = vector["bf16"] = fp16_vector
    tensor = fp16 or bf16 or fp32
    return DeviceSpec(key, pattern, tensor, fp32, bw, source, peaks, vector, frozenset(matrix), vendor, power)


# The boards built on one chip share its compute peaks (their datasheets print the same figures);
# they differ in memory bandwidth and power. H200 is GH100 with HBM3e.
_gh100_sxm = functools.partial(
    _spec,
    fp64=34.0,
    fp64_matrix=67.0,
    fp32=67.0,
    tf32=494.5,
    fp16=989.5,
    bf16=989.5,
    fp8=1979.0,
    int8=1979.0,
    power=700.0,
)
_ga100 = functools.partial(_spec, fp64=9.7, fp64_matrix=19.5, fp32=19.5, tf32=156.0, fp16=312.0, bf16=312.0, int8=624.0)

# Ordered: the first pattern that matches wins (PCIe before the SXM catch-all, A100 80 GB before 40 GB).
DEVICE_TABLE: tuple[DeviceSpec, ...] = (
    _spec(
        "B200",
        r"\bB200\b",
        8000.0,
        "NVIDIA HGX B200 datasheet (per GPU; sparse figures halved)",
        fp64=37.0,
        fp64_matrix=37.0,
        fp32=75.0,
        tf32=1100.0,
        fp16=2250.0,
        bf16=2250.0,
        fp8=4500.0,
        int8=4500.0,
        power=1000.0,
    ),
    _gh100_sxm("H200", r"\bH200\b", 4800.0, "NVIDIA H200 Tensor Core GPU datasheet (SXM; sparse figures halved)"),
    _spec(
        "H100 PCIe",
        r"H100.*PCIe",
        2000.0,
        "NVIDIA H100 Tensor Core GPU datasheet (PCIe; sparse figures halved)",
        fp64=26.0,
        fp64_matrix=51.0,
        fp32=51.0,
        tf32=378.0,
        fp16=756.0,
        bf16=756.0,
        fp8=1513.0,
        int8=1513.0,
        power=350.0,
    ),
    _gh100_sxm("H100 SXM", r"\bH100\b", 3350.0, "NVIDIA H100 Tensor Core GPU datasheet (SXM; sparse figures halved)"),
    _ga100(
        "A100 80GB PCIe",
        r"A100.*80\s?GB.*PCIe|A100.*PCIe.*80\s?GB",
        1935.0,
        "NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe)",
        power=300.0,
    ),
    _ga100("A100 80GB", r"A100.*80\s?GB", 2039.0, "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)", power=400.0),
    _ga100("A100 40GB", r"A100", 1555.0, "NVIDIA A100 Tensor Core GPU datasheet (40GB)", power=400.0),
    _spec(
        "A10",
        r"\bA10G?\b",
        600.0,
        "NVIDIA A10 Tensor Core GPU datasheet (FP64 1/64 of FP32: GA10x whitepaper)",
        fp64=0.49,
        fp32=31.2,
        tf32=62.5,
        fp16=125.0,
        bf16=125.0,
        int8=250.0,
        power=150.0,
    ),
    _spec(
        "L40S",
        r"\bL40S\b",
        864.0,
        "NVIDIA L40S datasheet (sparse figures halved; FP64 1/64 of FP32)",
        fp64=1.43,
        fp32=91.6,
        tf32=183.0,
        fp16=362.0,
        bf16=362.0,
        fp8=733.0,
        int8=733.0,
        power=350.0,
    ),
    _spec(
        "L4",
        r"\bL4\b",
        300.0,
        "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved; FP64 1/64 of FP32)",
        fp64=0.47,
        fp32=30.3,
        tf32=60.0,
        fp16=121.0,
        bf16=121.0,
        fp8=242.5,
        int8=242.5,
        power=72.0,
    ),
    _spec(
        "T4",
        r"\bT4\b",
        320.0,
        "NVIDIA T4 Tensor Core GPU datasheet (FP64 1/32 of FP32: Turing whitepaper)",
        fp64=0.25,
        fp32=8.1,
        fp16=65.0,
        int8=130.0,
        power=70.0,
    ),
    _spec(
        "V100 PCIe",
        r"V100.*PCIe",
        900.0,
        "NVIDIA Tesla V100 datasheet (PCIe)",
        fp64=7.0,
        fp32=14.0,
        fp16=112.0,
        power=250.0,
    ),
    _spec(
        "V100",
        r"V100",
        900.0,
        "NVIDIA Tesla V100 datasheet (SXM2; DGX Station and SXM2 share it)",
        fp64=7.8,
        fp32=15.7,
        fp16=125.0,
        power=300.0,
    ),
    _spec(
        "RTX 2080 Ti",
        r"2080\s?Ti",
        616.0,
        "NVIDIA Turing architecture whitepaper, Appendix A (FP16 tensor with FP32 accumulate)",
        fp64=0.42,
        fp32=13.4,
        fp16=53.8,
        int8=215.2,
        power=250.0,
    ),
    _spec(
        "RTX 3090",
        r"3090",
        936.0,
        "NVIDIA Ampere GA102 whitepaper, Appendix A (tensor with FP32 accumulate)",
        fp64=0.56,
        fp32=35.6,
        tf32=35.6,
        fp16=71.0,
        bf16=71.0,
        int8=284.0,
        power=350.0,
    ),
    _spec(
        "RTX 4090",
        r"4090",
        1008.0,
        "NVIDIA Ada Lovelace architecture whitepaper, Appendix A (tensor with FP32 accumulate)",
        fp64=1.29,
        fp32=82.6,
        tf32=82.6,
        fp16=165.2,
        bf16=165.2,
        fp8=330.3,
        int8=660.6,
        power=450.0,
    ),
    _spec(
        "MI300X",
        r"MI300X",
        5300.0,
        "AMD Instinct MI300X datasheet",
        fp64=81.7,
        fp64_matrix=163.4,
        fp32=163.4,
        fp32_matrix=163.4,
        tf32=653.7,
        fp16=1307.4,
        bf16=1307.4,
        fp8=2614.9,
        int8=2614.9,
        vendor="amd",
    ),
    _spec(
        "MI250X",
        r"MI250X",
        1638.4,
        "AMD Instinct MI250X datasheet (per GCD: half the module's figures)",
        fp64=23.95,
        fp64_matrix=47.85,
        fp32=23.95,
        fp32_matrix=47.85,
        fp16=191.5,
        bf16=191.5,
        int8=191.5,
        vendor="amd",
    ),
    _spec(
        "MI250",
        r"MI250(?!X)",
        1638.4,
        "AMD Instinct MI250 datasheet (per GCD: half the module's figures)",
        fp64=22.65,
        fp64_matrix=45.25,
        fp32=22.65,
        fp32_matrix=45.25,
        fp16=181.05,
        bf16=181.05,
        int8=181.05,
        vendor="amd",
    ),
)
_BY_KEY = {s.key: s for s in DEVICE_TABLE}

# AMD devices often report a blank or generic name ("AMD Radeon Graphics"); their compute-unit count
# (Kineto's ``numSms``) and memory say which part it is.
_AMD_BY_CUS: tuple[tuple[int, float, str], ...] = (
    (304, 150e9, "MI300X"),  # gfx942, 192 GB
    (110, 50e9, "MI250X"),  # gfx90a, one GCD of 64 GB
    (104, 50e9, "MI250"),
)


def default_power_limit_w(device_name: str | None) -> float | None:
    """The board's default power limit from the device table (None: not in the table, or no figure)."""
    spec = lookup(device_name) if device_name else None
    return spec.power_limit_w if spec is not None else None


def lookup(
    device_name: str | None, total_memory: int | None = None, sm_count: int | None = None, vendor: str | None = None
) -> DeviceSpec | None:
    """The table entry for a device, by name (``NVIDIA A100-PG509-200``, ``Tesla V100-DGXS-32GB``,
    ``NVIDIA H100 80GB HBM3``), else, for an AMD device with a blank or generic name, by its
    compute-unit count and memory."""
    name = device_name or ""
    if (
        re.search(r"A100", name, re.I)
        and total_memory
        and total_memory > 60e9
        and not re.search(r"80\s?GB", name, re.I)
    ):
        name += " 80GB"  # A100 names do not always carry the memory size (A100-PG509-200 is a 40 GB part)
    for spec in DEVICE_TABLE:
        if name and re.search(spec.pattern, name, re.I):
            return spec
    if sm_count and (vendor == "amd" or re.search(r"amd|radeon|instinct", name, re.I) or not name.strip()):
        for cus, mem, key in _AMD_BY_CUS:
            if sm_count == cus and (total_memory is None or total_memory >= mem):
                return _BY_KEY[key]
    return None


def lookup_device(device: Device | None) -> DeviceSpec | None:
    """:func:`lookup` for a :class:`~trainscope.traces.model.Device` (or None)."""
    if device is None:
        return None
    return lookup(device.name, device.total_memory, device.sm_count, device.vendor)


def device_for(trace: Trace, device_id: int | None) -> Device | None:
    """The trace's :class:`Device` for ``device_id``; where the trace lists no such id (ROCm traces
    number kernels' devices apart from ``deviceProperties``), its one kind of device, if it has one."""
    dev = trace.device(device_id) if device_id is not None else None
    described = [d for d in trace.devices if d.sm_count is not None or d.total_memory is not None]
    if (
        (dev is None or (dev.sm_count is None and dev.total_memory is None and lookup(dev.name) is None))
        and described
        and len({(d.name, d.sm_count, d.total_memory) for d in described}) == 1
    ):
        return described[0]
    return dev


def with_overrides(
    spec: DeviceSpec | None, peak_tflops: float | None, peak_bandwidth: float | None
) -> DeviceSpec | None:
    """The spec with ``--peak-tflops`` (dense FP16/BF16 tensor peak; other precisions scale with it)
    and ``--peak-bandwidth`` (GB/s) applied; a spec of its own when the device is unknown."""
    if peak_tflops is None and peak_bandwidth is None:
        return spec
    if spec is None:
        if peak_tflops is None or peak_bandwidth is None:
            return None  # half a roofline: no ridge point
        return DeviceSpec(
            "user",
            "",
            peak_tflops,
            peak_tflops,
            peak_bandwidth,
            "--peak-tflops, --peak-bandwidth",
            dict.fromkeys(PRECISIONS, peak_tflops),
            dict.fromkeys(PRECISIONS, peak_tflops),
            frozenset({"tf32", "fp16", "bf16", "fp8", "int8"}),
            "unknown",
        )
    peaks, vector, tensor, src = dict(spec.peaks), dict(spec.vector), spec.tensor_tflops, spec.source
    if peak_tflops is not None:
        scale = peak_tflops / spec.tensor_tflops
        peaks = {p: v * scale for p, v in peaks.items()}
        vector = {p: v * scale for p, v in vector.items()}
        tensor, src = peak_tflops, src + "; peaks scaled to --peak-tflops"
    bw = spec.memory_gbps if peak_bandwidth is None else peak_bandwidth
    if peak_bandwidth is not None:
        src += "; bandwidth from --peak-bandwidth"
    return DeviceSpec(
        spec.key,
        spec.pattern,
        tensor,
        vector.get("fp32", spec.fp32_tflops),
        bw,
        src,
        peaks,
        vector,
        spec.matrix,
        spec.vendor,
    )
