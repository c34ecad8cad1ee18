"""How to record what an analysis lacks, in the options of the tool that made the trace.

A torch.profiler trace gets torch.profiler options; an Nsight Systems export gets ``nsys`` options —
never the other's (an MPI+CUDA application has no torch.profiler to pass ``with_flops`` to).
"""

from __future__ import annotations

_KINETO = {
    "flops": "record with torch.profiler.profile(with_flops=True)",
    "shapes": "record with torch.profiler.profile(record_shapes=True)",
    "steps": "call prof.step() once per iteration (torch.profiler writes ProfilerStep#N)",
}
_NSYS = {
    "flops": (
        "Nsight Systems records no FLOP counts: for a PyTorch job add operator shapes with "
        "nsys profile --pytorch=autograd-shapes-nvtx, or pass --peak-tflops and measure FLOPs with Nsight Compute"
    ),
    "shapes": "record operator shapes as NVTX ranges: nsys profile --pytorch=autograd-shapes-nvtx (PyTorch jobs)",
    "graphs": "record the kernels inside CUDA graphs: nsys profile --cuda-graph-trace=node",
    "steps": "mark each step with an NVTX range (torch.cuda.nvtx.range_push/pop, or nvtxRangePush/Pop in C/C++)",
}

# Sampled-counter sources (collectors/live_trace.py: a trainscope recording, an nvidia-smi CSV
# log): counters only, no operators or kernels — the advice is to profile a few steps as well.
_SAMPLED_FORMATS = ("trainscope.recording", "nvidia-smi-csv")
_SAMPLED = {
    "flops": (
        "GPU counter samples never hold them: for MFU, profile a few steps with "
        "torch.profiler.profile(with_flops=True) and analyze that trace"
    ),
    "shapes": "GPU counter samples never hold them: profile a few steps with torch.profiler.profile(record_shapes=True)",
}


def how_to_record(fmt: str | None, what: str) -> str:
    """The recording advice for ``what`` ("flops", "shapes", "graphs", "steps") in the format ``fmt``
    (``Trace.format``: "kineto", "nsys-sqlite", …)."""
    if fmt is not None and fmt.startswith("nsys"):
        return _NSYS.get(what, "")
    if fmt in _SAMPLED_FORMATS:  # no recording option adds FLOPs or shapes to sampled counters
        return _SAMPLED.get(what, "")
    return _KINETO.get(what, _NSYS.get(what, ""))
