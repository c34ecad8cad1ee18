"""Kernels of every class the cost model prices, run once inside an NVTX range "measure": recorded
with the PyTorch profiler (shapes) and, in a separate run, under Nsight Compute (hardware counters
per kernel: FP instructions executed, DRAM bytes), so trainscope's FLOPs and bytes from shapes can
be compared with the hardware kernel by kernel.

    python counters.py trace OUT.pt.trace.json.gz     # the Kineto trace with shapes
    python counters.py run                            # the same kernels, for ncu --nvtx-include measure/
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys

import torch
import torch.nn.functional as F

DEV = "cuda"


def tensors():
    g = torch.Generator(device=DEV).manual_seed(0)
    r = lambda *s, dt=torch.float32: torch.randn(*s, device=DEV, generator=g).to(dt)  # noqa: E731
    return {
        "a32": r(2048, 4096),
        "b32": r(4096, 2048),
        "a16": r(4096, 4096, dt=torch.bfloat16),
        "b16": r(4096, 4096, dt=torch.bfloat16),
        "v32": r(8192),
        "m32": r(8192, 8192),
        "m64": r(8192, 4096, dt=torch.float64),
        "x64": r(4096, dt=torch.float64),
        "e": r(64 << 20),
        "e2": r(64 << 20),
        "h": r(32 << 20, dt=torch.bfloat16),
        "sm": r(64, 1024, 1024),
        "ln": r(16384, 4096),
        "lnw": r(4096),
        "lnb": r(4096),
        "img": r(32, 64, 56, 56),
        "w": r(128, 64, 3, 3),
        "q": r(8, 16, 2048, 64, dt=torch.bfloat16),
        "k": r(8, 16, 2048, 64, dt=torch.bfloat16),
        "vv": r(8, 16, 2048, 64, dt=torch.bfloat16),
        "table": r(1_000_000, 128),
        "idx": torch.randint(0, 1_000_000, (262144,), device=DEV, generator=g),
    }


def kernels(t) -> None:
    """One kernel (or a few) per class, in a fixed order."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.mm(t["a32"], t["b32"])  # gemm fp32 (CUDA cores: FFMA)
    torch.mm(t["a16"], t["b16"])  # gemm bf16 (tensor cores)
    torch.mv(t["m32"], t["v32"])  # gemv fp32
    torch.mv(t["m64"], t["x64"])  # gemv fp64
    torch.add(t["e"], t["e2"])  # elementwise binary
    t["e"].mul(2.0)  # elementwise unary
    F.gelu(t["e"])  # elementwise transcendental
    t["h"].float()  # elementwise cast
    t["e"].sum()  # reduction
    torch.softmax(t["sm"], dim=-1)  # softmax
    F.layer_norm(t["ln"], (4096,), t["lnw"], t["lnb"])  # normalization
    F.conv2d(t["img"], t["w"], padding=1)  # convolution fp32
    F.scaled_dot_product_attention(t["q"], t["k"], t["vv"], is_causal=True)  # attention
    F.embedding(t["idx"], t["table"])  # embedding gather
    t["e"].clone()  # copy (device to device)


def main() -> int:
    mode = sys.argv[1]
    t = tensors()
    for _ in range(2):
        kernels(t)
    torch.cuda.synchronize()
    if mode == "run":
        torch.cuda.nvtx.range_push("measure")
        kernels(t)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        return 0
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile
    from torch.profiler import record_function

    with (
        profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, with_flops=True) as prof,
        record_function("ProfilerStep#1"),
    ):
        kernels(t)
        torch.cuda.synchronize()
    raw = sys.argv[2].removesuffix(".gz")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.unlink(raw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
