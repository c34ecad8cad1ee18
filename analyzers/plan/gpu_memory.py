"""Memory capacity of accelerators a training plan is checked against, each with its source.

Capacities are the nominal sizes GPUs are sold by, which are binary gigabytes (an "80 GB" A100
holds 80 GiB; a "32 GB" V100 holds 32 GiB = 34.4 GB). The driver and the CUDA context take a few
hundred MiB of that, which is one reason a plan above ``memory.capacity`` (90 %) is called tight.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class GpuMemory:
    key: str
    name: str
    capacity_bytes: int
    source: str
    aliases: tuple[str, ...] = ()


GPU_MEMORY: tuple[GpuMemory, ...] = (
    GpuMemory("h100-80", "H100 80GB", 80 * GIB, "NVIDIA H100 datasheet (80 GB)", ("h100",)),
    GpuMemory("h200", "H200 141GB", 141 * GIB, "NVIDIA H200 datasheet"),
    GpuMemory("a100-80", "A100 80GB", 80 * GIB, "NVIDIA A100 datasheet", ("a100",)),
    GpuMemory("a100-40", "A100 40GB", 40 * GIB, "NVIDIA A100 datasheet"),
    GpuMemory(
        "v100-32",
        "V100 32GB",
        32 * GIB,
        "Machine Learning Systems (mlsysbook.ai), Model Training chapter, §GPT-2 Optimization Walkthrough (GPT-2 on a 32 GB V100); NVIDIA V100 datasheet",
        ("v100",),
    ),
    GpuMemory("v100-16", "V100 16GB", 16 * GIB, "NVIDIA V100 datasheet"),
    GpuMemory("l4", "L4 24GB", 24 * GIB, "NVIDIA L4 datasheet"),
    GpuMemory("a10g", "A10G 24GB", 24 * GIB, "NVIDIA A10 datasheet", ("a10",)),
    GpuMemory("t4", "T4 16GB", 16 * GIB, "NVIDIA T4 datasheet"),
    GpuMemory("rtx4090", "RTX 4090 24GB", 24 * GIB, "NVIDIA GeForce RTX 4090 specifications"),
    GpuMemory("rtx3090", "RTX 3090 24GB", 24 * GIB, "NVIDIA Ampere GA102 whitepaper"),
    GpuMemory("rtx2080ti", "RTX 2080 Ti 11GB", 11 * GIB, "NVIDIA Turing architecture whitepaper"),
    GpuMemory(
        "laptop-8gb",
        "Laptop GPU 8GB (RTX 4060)",
        8 * GIB,
        "NVIDIA GeForce RTX 4060 Laptop GPU specifications (8 GB GDDR6)",
        ("rtx4060",),
    ),
    GpuMemory("mi300x", "MI300X 192GB", 192 * GIB, "AMD Instinct MI300X datasheet"),
    # PyTorch sees each of an MI250X's two dies (GCDs) as one device with half the memory.
    GpuMemory(
        "mi250x", "MI250X (one GCD) 64GB", 64 * GIB, "AMD Instinct MI250X datasheet (128 GB over two GCDs)", ("mi250",)
    ),
)


def gpu_memory(key: str) -> GpuMemory | None:
    """Look a device up by key or alias (case and punctuation insensitive: ``V100-32``, ``v100_32``)."""
    norm = re.sub(r"[^a-z0-9]", "", key.lower())
    for g in GPU_MEMORY:
        if norm in {re.sub(r"[^a-z0-9]", "", k) for k in (g.key, *g.aliases)}:
            return g
    return None


def custom_gpu(text: str) -> GpuMemory:
    """A device given by size: ``24GiB``, ``24GB`` or a bare number of GiB (how GPUs are labelled)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(gib|gb|g)?\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"expected a memory size such as 24GiB or 24GB, got {text!r}")
    value, unit = float(m.group(1)), m.group(2) or "gib"
    nbytes = int(value * (1e9 if unit == "gb" else GIB))
    label = f"{value:g} {'GB' if unit == 'gb' else 'GiB'}"
    return GpuMemory("custom", f"GPU with {label}", nbytes, "given on the command line")
