"""Peak throughput and bandwidth of known accelerators, each entry with its source.

Peaks are dense (no sparsity). ``tensor_tflops`` is the FP16/BF16 tensor-core (matrix-core)
peak with FP32 accumulation where the vendor distinguishes it: the figure MFU is reported
against, and the target of a mixed-precision projection. ``fp32_tflops`` is the plain FP32
(non-tensor) peak, what fp32 GEMMs without tensor cores can reach.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    key: str
    pattern: str  # regex matched case-insensitively against the trace's device name
    tensor_tflops: float
    fp32_tflops: float
    memory_gbps: float
    source: str


DEVICE_TABLE: tuple[DeviceSpec, ...] = (
    DeviceSpec("H100 SXM", r"H100.*(SXM|HBM3)|H100$", 989.0, 67.0, 3350.0,
               "Machine Learning Systems (mlsysbook.ai), Model Training chapter (989 TFLOP/s, 3.35 TB/s); NVIDIA H100 datasheet (FP32 67 TFLOP/s)"),
    DeviceSpec("H100 PCIe", r"H100.*PCIe", 756.0, 51.0, 2000.0, "NVIDIA H100 datasheet (PCIe)"),
    DeviceSpec("A100", r"A100", 312.0, 19.5, 2039.0,
               "Machine Learning Systems (mlsysbook.ai), Model Training chapter (312 TFLOP/s, 2,039 GB/s); NVIDIA A100 datasheet (FP32 19.5 TFLOP/s)"),
    DeviceSpec("V100", r"V100", 125.0, 15.7, 900.0,
               "Machine Learning Systems (mlsysbook.ai), Model Training chapter (125 TFLOP/s, 900 GB/s); NVIDIA V100 datasheet (SXM2 FP32 15.7 TFLOP/s)"),
    DeviceSpec("RTX 2080 Ti", r"2080 ?Ti", 53.8, 13.4, 616.0,
               "NVIDIA Turing architecture whitepaper, Appendix A (FP16 tensor with FP32 accumulate)"),
    DeviceSpec("RTX 3090", r"3090", 71.0, 35.6, 936.0,
               "NVIDIA Ampere GA102 whitepaper, Appendix A (FP16 tensor with FP32 accumulate)"),
    DeviceSpec("MI300X", r"MI300X", 1307.4, 163.4, 5300.0, "AMD Instinct MI300X datasheet"),
    DeviceSpec("MI250X", r"MI250X", 383.0, 47.9, 3276.8, "AMD Instinct MI250X datasheet"),
    DeviceSpec("MI250", r"MI250(?!X)", 362.1, 45.3, 3276.8, "AMD Instinct MI250 datasheet"),
)


def lookup(device_name: str | None) -> DeviceSpec | None:
    if not device_name:
        return None
    for spec in DEVICE_TABLE:
        if re.search(spec.pattern, device_name, re.I):
            return spec
    return None
